"""Queued kinds (every job at 0 GPUs; steps that do not divide the capacity; equal values per GPU;
near-linear noise): the DP's reachable-capacity bound and skipped passes keep it exact."""

import math

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from unicron_plan import api
from unicron_plan.core.problem import build_problem
from unicron_plan.solvers import brute, dp
from unicron_plan.tools.adversarial import QUEUED
from unicron_plan.tools.generate import generate_instance


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(QUEUED), seed=st.integers(0, 10**6), nodes=st.integers(8, 40),
       jobs=st.integers(2, 6), failed=st.integers(1, 3))
def test_queued_kinds_match_the_plain_dp(kind, seed, nodes, jobs, failed):
    doc = generate_instance(seed, gpus=8 * nodes, jobs=jobs, nodes_per_rack=8, curves=kind, failed_nodes=failed)
    assert all(j["current"]["gpus"] == 0 for j in doc["jobs"])
    problem = build_problem(api.load_instance(doc))
    fast = dp.solve(problem)
    ref = sum(dp.solve_type_reference(problem.jobs_of_type(t), cap)[1] for t, cap in problem.capacity.items()
              if problem.jobs_of_type(t))
    assert _same(fast.objective, ref) and fast.bound == fast.objective


@settings(max_examples=200, deadline=None)
@given(step=st.integers(2, 7), cap=st.integers(1, 60), n=st.integers(1, 4), seed=st.integers(0, 10**6),
       linear=st.booleans())
def test_a_common_step_bounds_the_capacity_and_the_dp_stays_exact(step, cap, n, seed, linear):
    rng = np.random.default_rng(seed)
    options = []
    for _ in range(n):
        ks = np.unique(rng.integers(1, 8, size=4))
        y = np.concatenate([[0], step * ks]).astype(np.int64)
        g = np.concatenate([[0.0], 10.0 * y[1:] if linear else np.cumsum(rng.uniform(1, 9, size=len(ks)))])
        options.append(dp.pareto_arrays(y, g))
    every = np.concatenate([y for y, _ in options])
    common = int(np.gcd.reduce(every))  # a multiple of step
    assert common % step == 0 and dp.reachable_capacity(every, cap) == cap // common * common
    counts, value = dp.solve_options(options, cap)
    best = max((sum(float(g[k]) for (y, g), k in zip(options, pick)), pick)
               for pick in np.ndindex(*[len(y) for y, _ in options])
               if sum(int(y[k]) for (y, _), k in zip(options, pick)) <= cap)
    assert _same(value, best[0]) and sum(counts) <= cap


def test_queued_steps_are_proven_by_the_reachable_bound_without_a_fold():
    doc = generate_instance(1, gpus=2048, jobs=32, curves="queued-linear-step", failed_nodes=2)
    problem = build_problem(api.load_instance(doc))
    (gpu_type, cap), = problem.capacity.items()
    assert cap % 3 != 0
    stats: dict = {}
    dp.solve_type(problem.jobs_of_type(gpu_type), cap, stats)
    assert stats["reachable"] == cap // 3 * 3 and stats["bound_met"] == "greedy"


def test_tiny_queued_instance_matches_brute_force():
    doc = generate_instance(2, gpus=48, jobs=3, nodes_per_rack=2, curves="queued-linear-step", failed_nodes=1)
    problem = build_problem(api.load_instance(doc))
    assert _same(dp.solve(problem).objective, brute.solve(problem).objective)


def _plain_dp(options, cap: int) -> float:
    """max sum g_i(y_i) s.t. sum y_i <= cap, one GPU per state (the reference)."""
    best = np.zeros(cap + 1)
    for y, g in options:
        new = np.full(cap + 1, -np.inf)
        for c, v in zip(y.tolist(), g.tolist()):
            if c <= cap:
                new[c:] = np.maximum(new[c:], best[: cap + 1 - c] + v)
        best = new
    return float(best.max())


@settings(max_examples=80, deadline=None)
@given(step=st.sampled_from([2, 3, 4, 8, 16]), cap=st.integers(8, 600), n=st.integers(2, 10),
       seed=st.integers(0, 10**6), prune=st.booleans())
def test_whole_node_counts_are_folded_on_node_units_and_match_the_plain_dp(step, cap, n, seed, prune):
    rng = np.random.default_rng(seed)
    options = []
    for _ in range(n):
        ks = np.unique(rng.integers(1, max(2, 2 * cap // (step * n)) + 1, size=6))
        y = np.concatenate([[0], step * ks]).astype(np.int64)
        g = np.concatenate([[0.0], np.cumsum(rng.uniform(0.5, 9, size=len(ks)))])  # jagged per GPU
        options.append(dp.pareto_arrays(y, g))
    stats: dict = {}
    counts, value = dp.solve_options(options, cap, stats, prune=prune)
    assert _same(value, _plain_dp(options, cap))
    assert _same(dp.solve_options(options, cap, prune=prune, cores=False)[1], value)  # without the core passes
    assert sum(counts) <= cap and all(c % step == 0 for c in counts)
    assert _same(value, sum(float(g[list(y).index(c)]) for (y, g), c in zip(options, counts)))
    if not stats["early_exit"]:
        common = int(np.gcd.reduce(np.concatenate([y for y, _ in options])))
        assert stats["count_step"] == common
        if "max_width" in stats:  # the states of a pass are node units, not GPUs
            assert stats["max_width"] <= cap // common + 1


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(0, 4096), max_size=300), step=st.integers(1, 16))
def test_count_step_is_the_gcd_of_every_count(counts, step):
    ys = np.asarray(counts, dtype=np.int64) * step
    assert dp.count_step(ys) == (int(np.gcd.reduce(ys)) if len(ys) else 0)


@settings(max_examples=80, deadline=None)
@given(step=st.sampled_from([1, 2, 8]), cap=st.integers(8, 400), n=st.integers(2, 10), seed=st.integers(0, 10**6),
       extra=st.floats(0.0, 1.0))
def test_a_hull_hint_holding_every_vertex_changes_nothing(step, cap, n, seed, extra):
    """Told a mask holding every vertex of every envelope (the exact vertices, plus any other options),
    the DP returns the same plan and value as without it, and its envelopes are the same."""
    rng = np.random.default_rng(seed)
    options = []
    for _ in range(n):
        ks = np.unique(rng.integers(1, max(2, 2 * cap // (step * n)) + 1, size=8))
        y = np.concatenate([[0], step * ks]).astype(np.int64)
        g = np.concatenate([[0.0], np.cumsum(rng.uniform(0.5, 9, size=len(ks)))])
        options.append(dp.pareto_arrays(y, g))
    joined = dp._join(options)
    hint = dp.envelope_mask(joined) | (rng.uniform(size=len(joined.y)) < extra)
    plain = dp._upper_hulls(options, joined=joined)
    hinted = dp._upper_hulls(options, joined=joined, hint=hint)
    assert all(np.array_equal(a, b) for a, b in zip(plain, hinted))
    assert dp.solve_options(options, cap, cores=False, hull_hint=hint) == dp.solve_options(options, cap, cores=False)
