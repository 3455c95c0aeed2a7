"""Exact DP over pairs of counts: the plan now and the plan after a known return of capacity.

Each job i picks (y_i, z_i): y_i now (sum within ``capacity``), z_i after the return (sum within
``capacity_after``), worth ``S_i(y)`` when z = y and ``P_i(y) + Q_i(z)`` otherwise
(:func:`unicron_plan.core.cost.lookahead_terms`). Allowing z = y in the second form as well is
exact: such a pair is then valued P(y) + Q(y) = S(y) - q F(y) d_job <= S(y) (q, F, d_job >= 0,
as :func:`~unicron_plan.core.cost.lookahead_terms` makes them), so the maximum never takes it over the first. With that, a job's
moving options are separable in y and z, and one fold of a job costs 3 |counts| passes over the table
of pairs of capacities (the same y shifts both axes, then P along the first, Q along the second),
not |counts|^2: O(jobs x |counts| x (C / g) x (C' / g)) time and O(jobs x (C / g) x (C' / g))
memory (g: the counts' common step), so it is used where that table is small (:func:`pair_cells`).
"""

from __future__ import annotations

import math
from functools import reduce

import numpy as np

NEG = -np.inf


def pair_cells(counts: list[np.ndarray], capacity: int, capacity_after: int) -> int:
    """Cells of the table of pairs of capacities, in units of the counts' common step."""
    g = _step(counts, capacity, capacity_after)
    return (capacity // g + 1) * (capacity_after // g + 1)


def _step(counts, capacity, capacity_after) -> int:
    nz = [int(c) for y in counts for c in y.tolist() if c]
    return reduce(math.gcd, nz, 0) or 1


def _shift_max(out: np.ndarray, src: np.ndarray, du: int, dv: int, add: float) -> None:
    """out[u, v] = max(out[u, v], src[u - du, v - dv] + add) where both exist."""
    U, V = out.shape
    if du >= U or dv >= V or add == NEG:
        return
    np.maximum(out[du:, dv:], src[:U - du, :V - dv] + add, out=out[du:, dv:])


def solve_pairs(jobs: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], capacity: int,
                capacity_after: int) -> tuple[float, list[int], list[int]]:
    """(best value, y per job, z per job) of max sum_i G_i(y_i, z_i) with sum y <= capacity and
    sum z <= capacity_after; ``jobs``: per job (counts ascending, S, P, Q at the counts). Raises
    ValueError when no pair of plans fits (a job that may not take 0 GPUs and does not fit)."""
    g = _step([c for c, *_ in jobs], capacity, capacity_after)
    U, V = capacity // g + 1, capacity_after // g + 1
    table = np.zeros((U, V))  # at-most semantics: the best within (u, v)
    tables = [table]
    for counts, stay, move, again in jobs:
        units = (np.asarray(counts) // g).tolist()
        new = np.full((U, V), NEG)
        for k, c in enumerate(units):  # z = y
            _shift_max(new, table, c, c, float(stay[k]))
        part = np.full((U, V), NEG)  # P along the first axis, then Q along the second
        for k, c in enumerate(units):
            _shift_max(part, table, c, 0, float(move[k]))
        for k, c in enumerate(units):
            _shift_max(new, part, 0, c, float(again[k]))
        table = new
        tables.append(table)
    best = float(table[U - 1, V - 1])
    if best == NEG:
        raise ValueError("no pair of plans fits the capacities")
    ys, zs = [0] * len(jobs), [0] * len(jobs)
    u, v = U - 1, V - 1
    for i in range(len(jobs) - 1, -1, -1):  # walk back: the option that gave each table its value
        counts, stay, move, again = jobs[i]
        units = (np.asarray(counts) // g).tolist()
        prev, want = tables[i], tables[i + 1][u, v]
        found = None
        for a, cy in enumerate(units):
            if cy > u:
                break
            if cy <= v and prev[u - cy, v - cy] + stay[a] == want:
                found = (a, a)
                break
            for b, cz in enumerate(units):
                if cz > v:
                    break
                if prev[u - cy, v - cz] + move[a] + again[b] == want:
                    found = (a, b)
                    break
            if found:
                break
        assert found is not None, "the walk back found no option (the tables are inconsistent)"
        a, b = found
        ys[i], zs[i] = int(counts[a]), int(counts[b])
        u, v = u - units[a], v - units[b]
    return best, ys, zs
