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
