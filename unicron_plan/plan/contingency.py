"""Contingency plans: the optimal plan for the failure of every single node (or rack), ahead of time.

A node failure changes (a) one GPU type's capacity, (b) which jobs are hit
(their gain vectors lose the "unchanged" option) and, with
``cost.node_mtbf_hours``, (c) D_run through the number of nodes in service.
Failures are grouped by (D_run, hit jobs, capacities) and each group is solved
once. Per D_run and GPU type, prefix tables P_k (DP over the type's jobs
0..k-1) and suffix tables S_k (jobs k..m-1) over capacities 0..C are built
once; a group hitting jobs a..b (in type order) folds the span a..b with the
hit jobs' new gains onto P_a, and meets S_{b+1} at the failure's capacity C':

    opt = max_c  (P_a (+) span)[c] + S_{b+1}[C' - c]          (O(C) per group)

so a group costs O(C x the span's options) instead of a full re-solve. The
tables are built on Lagrangian cores (:func:`_cores`): options that no
group's optimum can use, by the bound gap of every group, are dropped first.
The tests check every plan against a full re-solve of the failed instance.

Output (``DIR/contingency.json``, canonical JSON): the base instance's name and
fingerprint, ``failures`` mapping each failure key (``node:ID`` or
``rack:ID``) to its failed nodes, objective and plan id, and ``plans`` mapping
plan ids to the optimal counts per job (identical count vectors are stored
once). Placement is deterministic and fast, so it is redone when a plan is
used: :func:`lookup` (``unicron-plan solve --contingency DIR``) turns the
counts into a placed plan that :func:`unicron_plan.api.solve` validates.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unicron_plan.core import cost
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.schema import Instance

INDEX_FILE = "contingency.json"


def fingerprint(instance: Instance) -> str:
    """sha256 of the instance without its name, event and reference: what a plan depends on."""
    import json

    data = instance.model_dump(mode="json", exclude_none=True)
    for key in ("name", "event", "reference"):
        data.pop(key, None)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)  # C encoder: fast
    return hashlib.sha256(text.encode()).hexdigest()


def failure_key(failed_nodes: list[str], instance: Instance) -> str | None:
    """The contingency key of a set of failed nodes: ``node:ID``, ``rack:ID``, or None."""
    nodes = sorted(set(failed_nodes))
    if len(nodes) == 1:
        return f"node:{nodes[0]}"
    racks = defaultdict(list)
    for n in instance.cluster.nodes:
        if n.rack is not None:
            racks[n.rack].append(n.id)
    for rack, members in racks.items():
        if sorted(members) == nodes:
            return f"rack:{rack}"
    return None


def candidate_failures(instance: Instance, racks: bool = False) -> list[tuple[str, list[str]]]:
    """(key, failed nodes) for every single node, and every rack when ``racks``."""
    out = [(f"node:{n.id}", [n.id]) for n in instance.cluster.nodes]
    if racks:
        members = defaultdict(list)
        for n in instance.cluster.nodes:
            if n.rack is not None:
                members[n.rack].append(n.id)
        out += [(f"rack:{r}", ids) for r, ids in members.items()]
    return out


def _fold_full(V: np.ndarray, y: np.ndarray, g: np.ndarray, cap: int):
    """Max-plus fold of one job onto V (at-most semantics, plateau beyond its end), up to cap.

    The DP's windowed fold (compiled when built) over the whole range 0..min(cap, len(V) - 1 + y[-1]).
    """
    from unicron_plan.solvers.dp import _fold

    n_old = len(V) - 1
    n_new = min(cap, n_old + int(y[-1]))
    return _fold(V[: n_new + 1], 0, min(n_old, n_new), y, g, 0, n_new, True)


def _at(V: np.ndarray, c: int) -> float:
    return float(V[min(c, len(V) - 1)])


@dataclass
class _TypeTables:
    """Prefix and suffix DP tables of one GPU type at one D_run."""

    jobs: list  # JobTerms of this type, in order
    opts: list  # Pareto (counts, gains) per job, not hit
    prefix: list  # prefix[k]: values over jobs 0..k-1
    prefix_choice: list  # prefix_choice[k]: job k-1's option index, for prefix[k]
    suffix: list  # suffix[k]: values over jobs k..m-1
    suffix_choice: list  # suffix_choice[k]: job k's option index, for suffix[k]


def _tables(jobs, opts, cap: int) -> _TypeTables:
    m = len(jobs)
    prefix, prefix_choice = [np.zeros(1)], [None]
    for k in range(m):
        V, ch = _fold_full(prefix[-1], *opts[k], cap)
        prefix.append(V)
        prefix_choice.append(ch)
    suffix, suffix_choice = [None] * (m + 1), [None] * (m + 1)
    suffix[m] = np.zeros(1)
    for k in range(m - 1, -1, -1):
        suffix[k], suffix_choice[k] = _fold_full(suffix[k + 1], *opts[k], cap)
    return _TypeTables(jobs, opts, prefix, prefix_choice, suffix, suffix_choice)


def _back_prefix(t: _TypeTables, k: int, c: int, out: dict) -> None:
    """Counts of jobs 0..k-1 from prefix[k] at capacity c."""
    for i in range(k, 0, -1):
        c = min(c, len(t.prefix[i]) - 1)
        y = int(t.opts[i - 1][0][t.prefix_choice[i][c]])
        out[t.jobs[i - 1].id] = y
        c -= y


def _back_suffix(t: _TypeTables, k: int, c: int, out: dict) -> None:
    """Counts of jobs k..m-1 from suffix[k] at capacity c."""
    for i in range(k, len(t.jobs)):
        c = min(c, len(t.suffix[i]) - 1)
        y = int(t.opts[i][0][t.suffix_choice[i][c]])
        out[t.jobs[i].id] = y
        c -= y


def _solve_group(t: _TypeTables, hit_idx: list[int], cap: int, hit_opts: dict) -> tuple[float, dict]:
    """Optimum of one GPU type when jobs ``hit_idx`` (type order) are hit and capacity is ``cap``."""
    out: dict[str, int] = {}
    m = len(t.jobs)
    if not hit_idx:
        value = _at(t.prefix[m], cap)
        _back_prefix(t, m, cap, out)
        return value, out
    a, b = min(hit_idx), max(hit_idx)
    V = t.prefix[a][: cap + 1]
    span = []
    for i in range(a, b + 1):
        y, g = hit_opts[i] if i in hit_opts else t.opts[i]
        V, ch = _fold_full(V, y, g, cap)
        span.append((V, ch, y))
    S = t.suffix[b + 1]
    c = np.arange(cap + 1)
    total = V[np.minimum(c, len(V) - 1)] + S[np.minimum(cap - c, len(S) - 1)]
    best = int(np.argmax(total))
    value = float(total[best])
    _back_suffix(t, b + 1, cap - best, out)
    cc = best
    for off in range(len(span) - 1, -1, -1):
        Vi, ch, y = span[off]
        cc = min(cc, len(Vi) - 1)
        yk = int(y[ch[cc]])
        out[t.jobs[a + off].id] = yk
        cc -= yk
    _back_prefix(t, a, cc, out)
    return value, out


def _cores(opts: list, work: list, capacity: int) -> tuple[list, list]:
    """Each job's options that can be in an optimal plan of any group of ``work``, and ``work`` with
    each group's hit options cut the same way.

    With one multiplier lam >= 0 (the LP's at full capacity), a group's optimum is at most
    UB = lam C' + sum_i max_y (G_i(y) - lam y), and a count's slack max_y (G_i - lam y) - (G_i(y) - lam y)
    summed over a plan is at most UB - value. So with LB a feasible plan's value, every optimal plan of
    the group uses only counts of slack <= UB - LB. LB: the no-failure optimum with the hit jobs' gains,
    shrinking the one job that loses least to fit the group's capacity. A group with no such plan keeps
    every option (no cut).
    """
    from unicron_plan.solvers.dp import REL_TOL, lp_multiplier, solve_options

    if not opts or not work:
        return opts, work
    lam = lp_multiplier(opts, capacity)
    red = [g - lam * y for y, g in opts]
    h = np.array([float(r.max()) for r in red])
    base, _ = solve_options(opts, capacity)
    at = [int(np.searchsorted(y, c)) for (y, _), c in zip(opts, base)]
    scale = lam * capacity + sum(float(np.abs(g).max()) for _, g in opts) + 1.0
    tol = REL_TOL * scale
    gaps, cut_work = [], []
    for key, hit_idx, cap, hit_opts in work:
        counts = list(base)
        values = [float(g[k]) for (_, g), k in zip(opts, at)]
        ub = lam * cap + float(h.sum())
        lb = 0.0
        for i, (y, g) in hit_opts.items():
            k = int(np.searchsorted(y, base[i], side="right")) - 1  # best hit option within the base count
            if k < 0:
                lb = -np.inf
            else:
                counts[i], values[i] = int(y[k]), float(g[k])
            ub += float((g - lam * y).max()) - h[i]
        lb += max(_shrunk_value(opts, hit_opts, counts, values, cap),
                  _refilled_value(base, values, hit_opts, cap))
        gap = ub - lb + tol
        gaps.append(gap)
        cut = {i: _within(y, g, lam, gap) for i, (y, g) in hit_opts.items()}
        cut_work.append((key, hit_idx, cap, cut))
    widest = max(gaps)
    if not np.isfinite(widest):
        return opts, work
    return [_within(y, g, lam, widest) for y, g in opts], cut_work


def _within(y: np.ndarray, g: np.ndarray, lam: float, gap: float) -> tuple[np.ndarray, np.ndarray]:
    """The options whose slack (max of G - lam y, less their own) is at most ``gap``."""
    r = g - lam * y
    keep = (float(r.max()) - r) <= gap
    return y[keep], g[keep]


def _refilled_value(base: list, values: list, hit_opts: dict, cap: int) -> float:
    """Value of the base counts with the hit jobs re-chosen one by one in the GPUs the others leave
    (-inf when the others alone exceed ``cap``)."""
    counts = list(base)
    values = list(values)
    for i in hit_opts:
        counts[i], values[i] = 0, 0.0
    free = cap - sum(counts)
    if free < 0:
        return -np.inf
    for i, (y, g) in hit_opts.items():
        k = int(np.searchsorted(y, free, side="right")) - 1
        if k < 0:
            return -np.inf
        free -= int(y[k])
        values[i] = float(g[k])
    return float(sum(values))


def _shrunk_value(opts, hit_opts, counts: list, values: list, cap: int) -> float:
    """Value of ``counts`` (with ``values``) made to fit ``cap`` by shrinking the one job that loses least;
    -inf when no single job can absorb the excess."""
    excess = sum(counts) - cap
    total = float(sum(values))
    if excess <= 0:
        return total
    best_loss = np.inf
    for i, (y, g) in enumerate(opts):
        y, g = hit_opts.get(i, (y, g))
        k = int(np.searchsorted(y, counts[i] - excess, side="right")) - 1
        if k >= 0:
            best_loss = min(best_loss, values[i] - float(g[k]))
    return total - best_loss


def build_contingency(instance: Instance, racks: bool = False, progress: bool = False) -> dict:
    """Optimal counts for every single-node (and, with ``racks``, rack) failure of ``instance``.

    The instance's own event, if any, is ignored: contingencies are planned
    from the state before any failure. Returns the JSON-ready index.
    """
    from unicron_plan.solvers.dp import pareto_arrays
    from unicron_plan.core.problem import build_problem

    start = time.perf_counter()
    base = instance.model_copy(update={"event": None})
    problem = build_problem(base)
    if problem.alternatives:
        return _mixed_contingency(base, racks, start)
    state = problem.state
    in_service = state.nodes_in_service()
    node_of = state.nodes
    jobs_on: dict[str, list[str]] = defaultdict(list)
    for j in base.jobs:
        for n in j.current.nodes:
            jobs_on[n].append(j.id)
    by_type: dict[str, list] = defaultdict(list)
    for j in problem.jobs:
        by_type[j.gpu_type].append(j)
    pos = {j.id: (j.gpu_type, k) for t, js in by_type.items() for k, j in enumerate(js)}

    # Group the failures by what the optimum depends on.
    groups: dict[tuple, list[tuple[str, list[str]]]] = defaultdict(list)
    for key, failed in candidate_failures(base, racks):
        lost = defaultdict(int)
        out_of_service = 0
        for n in failed:
            h = node_of[n]
            if not h.drained:
                lost[h.gpu_type] += h.healthy_after
                out_of_service += h.healthy_after > 0
        d_run = cost.d_run_seconds(base, in_service - out_of_service)
        hit = frozenset(jid for n in failed for jid in jobs_on.get(n, ()))
        caps = tuple(sorted((t, problem.capacity[t] - lost.get(t, 0)) for t in problem.capacity))
        groups[(d_run, hit, caps)].append((key, failed))

    failures, plans, plan_ids = {}, {}, {}
    keys_sorted = sorted(groups, key=lambda g: (g[0], sorted(g[1]), g[2]))
    by_d_run: dict[float, list] = defaultdict(list)
    for key in keys_sorted:
        by_d_run[key[0]].append(key)
    bar = _progress(progress, len(keys_sorted))
    kept = total = 0
    for d_run, keys in by_d_run.items():
        # Per GPU type: every group's hit jobs with their gains after the hit, then the Lagrangian
        # cores of the options over all groups, then the prefix/suffix tables on the cores.
        answers: dict[tuple, tuple[float, dict]] = {k: (0.0, {}) for k in keys}
        for t, js in by_type.items():
            opts = [pareto_arrays(j.counts, np.asarray(
                cost.gain(j.f, j.counts, j.x, j.f_x, False, d_run, j.d_trans), dtype=float)) for j in js]
            work = []  # (group key, hit indices, capacity, hit options)
            for key in keys:
                cap = dict(key[2])[t]
                hit_idx = sorted(pos[jid][1] for jid in key[1] if pos[jid][0] == t)
                hit_opts = {i: pareto_arrays(js[i].counts, np.asarray(
                    cost.gain(js[i].f, js[i].counts, js[i].x, js[i].f_x, True, d_run, js[i].d_trans), dtype=float))
                    for i in hit_idx}
                work.append((key, hit_idx, cap, hit_opts))
            cores, work = _cores(opts, work, problem.capacity[t])
            kept += sum(len(y) for y, _ in cores)
            total += sum(len(y) for y, _ in opts)
            tt = _tables(js, cores, problem.capacity[t])
            for key, hit_idx, cap, hit_opts in work:
                v, part = _solve_group(tt, hit_idx, cap, hit_opts)
                value, counts = answers[key]
                answers[key] = (value + v, {**counts, **part})
        for key in keys:
            value, counts = answers[key]
            vector = tuple(counts[j.id] for j in problem.jobs)
            if vector not in plan_ids:
                plan_ids[vector] = f"p{len(plan_ids):05d}"
                plans[plan_ids[vector]] = {"counts": {j.id: counts[j.id] for j in problem.jobs}}
            for fkey, failed in groups[key]:
                failures[fkey] = {"failed_nodes": sorted(failed), "objective": value, "plan": plan_ids[vector]}
            bar.advance()
    bar.close()
    return {
        "schema_version": "1", "kind": "contingency", "instance": base.name,
        "fingerprint": fingerprint(base), "racks": racks,
        "failures": failures, "plans": plans,
        "stats": {"failures": len(failures), "groups": len(groups), "plans": len(plans),
                  "d_run_values": len(by_d_run), "options": total, "options_in_cores": kept,
                  "wall_seconds": time.perf_counter() - start},
    }


def _mixed_contingency(base: Instance, racks: bool, start: float) -> dict:
    """Mixed fleets: every failure solved exactly over GPU types and counts
    (:func:`unicron_plan.solvers.mixed.solve_types`); a stored plan also lists the jobs that
    change type (``types``). A failure that leaves no feasible plan gets no entry."""
    from unicron_plan.core.problem import build_problem, prepare
    from unicron_plan.errors import InfeasibleError
    from unicron_plan.schema.instance import Event
    from unicron_plan.solvers.mixed import solve_types

    prepared = prepare(base)
    failures, plans, plan_ids = {}, {}, {}
    for key, failed in candidate_failures(base, racks):
        problem = build_problem(base.model_copy(update={"event": Event(kind="failure", failed_nodes=list(failed))}),
                                prepared)
        try:
            counts, types, value, _, _, _ = solve_types(problem)
        except InfeasibleError:
            continue
        moved = {j.id: types[j.id] for j in problem.jobs if types[j.id] != j.gpu_type}
        vector = (tuple(counts[j.id] for j in problem.jobs), tuple(sorted(moved.items())))
        if vector not in plan_ids:
            plan_ids[vector] = f"p{len(plan_ids):05d}"
            plans[plan_ids[vector]] = {"counts": {j.id: counts[j.id] for j in problem.jobs},
                                       **({"types": moved} if moved else {})}
        failures[key] = {"failed_nodes": sorted(failed), "objective": value, "plan": plan_ids[vector]}
    return {
        "schema_version": "1", "kind": "contingency", "instance": base.name,
        "fingerprint": fingerprint(base), "racks": racks, "failures": failures, "plans": plans,
        "stats": {"failures": len(failures), "plans": len(plans), "mixed_types": True,
                  "wall_seconds": time.perf_counter() - start},
    }


class _progress:
    """A rich progress bar on stderr when asked for (rich is imported only then)."""

    def __init__(self, enabled: bool, total: int):
        self.p = None
        if enabled:
            from rich.progress import Progress

            self.p = Progress(transient=True)
            self.p.start()
            self.task = self.p.add_task("contingency groups", total=total)

    def advance(self) -> None:
        if self.p:
            self.p.advance(self.task)

    def close(self) -> None:
        if self.p:
            self.p.stop()


def write_contingency(index: dict, out_dir: str | Path) -> Path:
    """Write the index atomically as canonical JSON to ``out_dir/contingency.json``."""
    from unicron_plan.io import dumps, write_atomic

    path = Path(out_dir) / INDEX_FILE
    write_atomic(path, dumps(index))
    return path


def read_contingency(source: str | Path) -> dict:
    """Read a contingency index from a directory (or the index file itself)."""
    from unicron_plan.io import read_json

    p = Path(source)
    data = read_json(p / INDEX_FILE if p.is_dir() else p)
    if not isinstance(data, dict) or data.get("kind") != "contingency":
        raise InvalidInstanceError(str(p), "not a contingency index (kind != 'contingency')")
    return check_index(data, str(p))


def check_index(data, source: str = "contingency") -> dict:
    """``data`` checked against the index schema (schema.contingency); bad input names the field."""
    from unicron_plan.io import parse_model
    from unicron_plan.schema.contingency import ContingencyIndex

    parse_model(ContingencyIndex, data, prefix=source)
    return data


def lookup(instance: Instance, index: dict,
           instance_fingerprint: str | None = None) -> tuple[str, dict[str, int], float] | None:
    """(key, counts, objective) of the precomputed plan for the instance's event, or None.

    Matches only a failure event of whole nodes on the same cluster and jobs
    (same fingerprint; ``instance_fingerprint`` is the instance's when the caller
    already computed it).
    """
    ev = instance.event
    if ev is None or ev.kind != "failure" or ev.failed_gpus or not ev.failed_nodes:
        return None
    key = failure_key(ev.failed_nodes, instance)
    entry = index.get("failures", {}).get(key) if key else None
    if entry is None:
        return None
    if index.get("fingerprint") != (instance_fingerprint or fingerprint(instance)):
        return None
    return key, dict(index["plans"][entry["plan"]]["counts"]), float(entry["objective"])
