"""Linear stretches (equal values per GPU): the DP's packing rule (rule 5 of solvers/dp.py)
proves its plans without a DP pass, and agrees with a plain DP on many random instances."""

from __future__ import annotations

import math

import numpy as np

from unicron_plan.solvers import dp
from unicron_plan.tools.adversarial import linear_stretch_options


def _plain(options, capacity: int) -> float:
    """The textbook DP over 0..capacity (no bound, no pruning)."""
    V = np.zeros(capacity + 1)
    for y, g in options:
        new = np.full(capacity + 1, -np.inf)
        for c, v in zip(y.tolist(), g.tolist()):
            if c <= capacity:
                np.maximum(new[c:], V[: capacity + 1 - c] + v, out=new[c:])
        V = new
    return float(V.max())


def _linear_options(rng: np.random.Generator):
    """A job on multiples of tp, worth ``slope`` per GPU (few slopes, so many jobs tie), queued or
    running (then every count but its current one pays a transition)."""
    tp = int(rng.choice([1, 2, 3, 4, 8]))
    top = tp * int(rng.integers(1, 12))
    y = np.arange(0, top + 1, tp, dtype=np.int64)
    slope = float(rng.choice([100.0, 100.0, 100.0, 150.0, 70.0]))
    g = slope * y
    if rng.random() < 0.4:  # running at x: every other count pays a transition
        x = int(rng.choice(y[1:]))
        g = np.where(y == x, g, g - float(rng.choice([5.0, 50.0, 400.0])))
        g[0] = -float(rng.choice([0.0, 30.0]))  # suspending may cost too
    return dp.pareto_arrays(y, g)


def _instance(rng):
    options = [_linear_options(rng) for _ in range(int(rng.integers(2, 9)))]
    total = sum(int(y[-1]) for y, _ in options)
    capacity = int(rng.integers(max(total // 4, 1), max(total, 2)))
    return options, capacity


def test_dp_agrees_with_a_plain_dp_on_linear_stretches_and_the_packing_rule_decides_many():
    decided = 0
    for seed in range(600):
        rng = np.random.default_rng(seed)
        options, capacity = _instance(rng)
        stats: dict = {}
        counts, value = dp.solve_options(options, capacity, stats)
        truth = _plain(options, capacity)
        assert math.isclose(value, truth, rel_tol=1e-12, abs_tol=1e-6), (seed, value, truth, stats)
        assert sum(counts) <= capacity
        got = sum(float(g[np.flatnonzero(y == c)[0]]) for (y, g), c in zip(options, counts))
        assert math.isclose(got, value, rel_tol=1e-12, abs_tol=1e-6), seed
        decided += stats.get("bound_met") == "packing"
    assert decided >= 30, decided  # the rule runs on a good share of them


def test_packing_rule_proves_a_full_packing_the_greedy_plan_misses():
    """Large instances of jobs on multiples of 3, 8 and 12 GPUs at one slope, half of them running
    (every other count pays a transition): where the greedy plan falls short of the bound, the
    packing proves the optimum (checked against the plain DP) without any DP pass."""
    decided = 0
    for seed in range(6):
        options = linear_stretch_options(np.random.default_rng(seed), 40, most_groups=12)  # benchmarks/linear_stretch.py's family
        capacity = sum(int(y[-1]) for y, _ in options) * 3 // 4 + 1
        stats: dict = {}
        counts, value = dp.solve_options(options, capacity, stats)
        assert math.isclose(value, _plain(options, capacity), rel_tol=1e-12), seed
        if stats.get("bound_met") == "packing":
            decided += 1
            assert "kept" not in stats  # no DP pass ran
    assert decided >= 1


def _packing_by_sets(y, deficit, off, capacity: int, rounding: float):
    """Rule 5's fullest zero-deficit plan by sets of reachable totals over 0..capacity: (top, the
    counts read back as the DP reads them: for each job from the last, its smallest zero-deficit count
    whose rest is reachable before it), or None."""
    m = len(off) - 1
    zero = deficit <= rounding / (m + 1)
    ys = [[int(v) for v, z in zip(y[off[j]:off[j + 1]], zero[off[j]:off[j + 1]]) if z] for j in range(m)]
    if not all(ys) or max(map(len, ys)) < 2:
        return None
    reach = [{0}]
    for counts in ys:
        reach.append({t + c for t in reach[-1] for c in counts if t + c <= capacity})
        if not reach[-1]:
            return None
    total = top = max(reach[-1])
    picks = [0] * m
    for j in range(m - 1, -1, -1):
        picks[j] = next(c for c in ys[j] if total - c in reach[j])
        total -= picks[j]
    return top, picks


def test_the_packing_rule_reads_the_fullest_zero_deficit_plan_back_as_sets_of_totals_do():
    """_packing (bitsets over the GPUs above every job's smallest zero-deficit count) against sets of
    totals over 0..capacity on random options where many jobs have one zero-deficit count and some
    several, capacities below and above every job's smallest: the same plan, and its total."""
    rng = np.random.default_rng(11)
    compared = 0
    for _ in range(400):
        m = int(rng.integers(1, 12))
        ys, gs = [], []
        for _ in range(m):
            step = int(rng.choice([1, 2, 3, 8]))
            y = np.arange(int(rng.integers(0, 4)), int(rng.integers(4, 40)), step, dtype=np.int64)
            ys.append(y)
            gs.append(np.zeros(len(y)))
        off = np.zeros(m + 1, dtype=np.int64)
        np.cumsum([len(y) for y in ys], out=off[1:])
        y = np.concatenate(ys)
        # zero deficits: a run of counts per job (one count for most jobs), positive elsewhere
        deficit = rng.uniform(1.0, 50.0, size=len(y))
        for j in range(m):
            n = off[j + 1] - off[j]
            first = int(rng.integers(0, n))
            last = first + (int(rng.integers(0, n - first)) if rng.random() < 0.4 else 0)
            deficit[off[j] + first:off[j] + last + 1] = 0.0
        lam = float(rng.uniform(0.5, 3.0))
        g = np.concatenate(gs) + lam * y - deficit
        capacity = int(rng.integers(0, int(sum(int(v[-1]) for v in ys)) + 2))
        flat = dp._Flat(y, g, off, deficit)
        ub, rounding = lam * capacity, 1e-9
        got = dp._packing(flat, lam, capacity, ub, rounding, None)
        want = _packing_by_sets(y, deficit, off, capacity, rounding)
        if want is None:
            assert got is None
            continue
        counts, value, _ = got
        assert counts == want[1] and sum(counts) == want[0]
        compared += 1
    assert compared > 100
