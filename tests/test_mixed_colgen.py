"""The mixed-fleet solver's column generation, repair and local search (unicron_plan/solvers/mixed.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unicron_plan import load_instance, solve, validate_plan
from unicron_plan.core.problem import build_problem
from unicron_plan.solvers import mixed
from unicron_plan.tools.mixedgen import KINDS, kind_args, large_mixed

#: 16,384 GPUs x 4 types x 128 jobs, near-linear curves: the subgradient alone left a gap of 1e-5 at a
#: 5 s limit (31 nodes), still open at 10 s; HiGHS proves its optimum in about 10 s
NEAR_LINEAR_OPEN = (19, 16384, 4, 128)


def _root(problem):
    """A search with its root prepared as :meth:`mixed._Search.run` prepares it: (search, live, pi, ub)."""
    model = mixed._Model(problem)
    search = mixed._Search(model, None)
    root = np.ones(len(model.pair_job), dtype=bool)
    mu = model.multipliers(root)
    r, m_i, ub = model.reduced(mu, root)
    live = [[p for p in pairs if root[p]] for pairs in model.pairs_of]
    pi = np.where(search.eq, m_i, np.maximum(m_i - search.z, 0.0))
    return search, live, pi, ub


def test_near_linear_instance_the_subgradient_left_open_is_proven(monkeypatch):
    seed, gpus, types, jobs = NEAR_LINEAR_OPEN
    inst = load_instance(large_mixed(seed, gpus, types, jobs, curves="near-linear"))
    problem = build_problem(inst)
    _, _, value, bound, stopped, stats = mixed.solve_types(problem)  # bounded by its node and step limits
    assert not stopped and bound == value
    # without column generation (the subgradient alone) the same search leaves a gap after 5 nodes
    with monkeypatch.context() as m:
        m.setattr(mixed, "COLGEN_STEPS", 0)
        m.setattr(mixed, "CHILD_STEPS", 40)
        m.setattr(mixed, "MAX_NODES", 5)
        m.setattr(mixed, "IP_VARIABLES", 0)  # nor the root's integer program
        search = mixed._Search(mixed._Model(problem), None)
        search.run()
    assert search.best[2] <= value + search.tol
    assert search.open_bound > search.best[2] + search.tol
    plan = solve(inst)
    assert plan.status.solution == "optimal" and validate_plan(inst, plan).valid
    assert math.isclose(plan.objective, value, rel_tol=1e-12)


@pytest.mark.slow
def test_near_linear_instance_agrees_with_highs():
    seed, gpus, types, jobs = NEAR_LINEAR_OPEN
    inst = load_instance(large_mixed(seed, gpus, types, jobs, curves="near-linear"))
    plan = solve(inst)
    ref = solve(inst, solver="milp", time_limit_seconds=300)
    assert ref.status.solution == "optimal" and plan.status.solution == "optimal"
    assert math.isclose(ref.objective, plan.objective, rel_tol=1e-9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(KINDS), jobs=st.integers(4, 8),
       gpus=st.sampled_from([256, 512, 1024]))
def test_column_generation_bound_and_repaired_plans_around_the_optimum(seed, kind, jobs, gpus):
    """At the root, every bound column generation returns is at least the optimum (HiGHS on the IP),
    every plan it tries (master repaired, local search) is at most the optimum, and the search ends at it."""
    inst = load_instance(large_mixed(seed, gpus, 4, jobs, counts_per_job=6, **kind_args(kind)))
    problem = build_problem(inst)
    ref = solve(inst, solver="milp")
    assert ref.status.solution == "optimal"
    opt = ref.objective
    search, live, pi, ub = _root(problem)
    tol = 1e-9 * max(abs(opt), 1.0)
    bound, _, _ = search._colgen(np.ones(len(search.model.pair_job), dtype=bool), live, pi, ub, 12)
    assert bound >= opt - tol
    if search.best is not None:
        assert search.best[2] <= opt + tol
    _, _, value, proven, stopped, _ = mixed.solve_types(problem)
    assert not stopped and math.isclose(value, opt, rel_tol=1e-9, abs_tol=1e-6) and proven == value


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(KINDS), jobs=st.integers(4, 8))
def test_local_search_never_loses_value(seed, kind, jobs):
    """From every job on the last type it may use, moving jobs between types only raises the plan's
    value, and never above the optimum."""
    inst = load_instance(large_mixed(seed, 512, 4, jobs, counts_per_job=6, **kind_args(kind)))
    problem = build_problem(inst)
    model = mixed._Model(problem)
    search = mixed._Search(model, None)
    live = [list(p) for p in model.pairs_of]
    start = [p[-1] for p in model.pairs_of]
    got = model.solve_assignment(start, None)
    search._improve(start, live, list(range(model.m)))
    opt = solve(inst, solver="milp").objective
    tol = 1e-9 * max(abs(opt), 1.0)
    if got is None:
        return
    assert search.best is not None and search.best[2] >= got[1] - tol
    assert search.best[2] <= opt + tol


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(KINDS))
def test_kept_type_plans_change_nothing_but_the_work(seed, kind):
    """The search keeps each type's exact DP of the plans it tries: with and without that store it
    returns the same plan, value and bound, and with it runs fewer DPs."""
    problem = build_problem(load_instance(large_mixed(seed, 2048, 4, 24, counts_per_job=6, **kind_args(kind))))
    calls = []
    real = mixed.dp.solve_options

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mixed.dp, "solve_options", counted)
        kept = mixed.solve_types(problem)
        with_store = len(calls)
        patch.setattr(mixed, "DP_CACHE", 0)
        calls.clear()
        fresh = mixed.solve_types(problem)
    assert kept[:5] == fresh[:5]
    assert with_store <= len(calls)


def _slot_plan_values(model, search, counts, chosen):
    """Brute force over every way to deal the plan's slots (type, count) to distinct jobs allowed on the
    slot's type (a slot may stay empty): the largest value of such a deal, a job in a slot worth its gain
    at its largest count that fits, a job without one worth its gain suspended."""
    import itertools

    slots = [(int(model.pair_type[p]), y) for p, y in zip(chosen, counts) if y > 0]
    gain = {}  # (job, slot) -> gain
    for i, pairs in enumerate(model.pairs_of):
        for k, (t, size) in enumerate(slots):
            for p in pairs:
                y, g = model.options[p]
                if int(model.pair_type[p]) == t and y[0] <= size:
                    gain[i, k] = float(g[y <= size][-1])
    best = -math.inf
    for deal in itertools.product(range(-1, model.m), repeat=len(slots)):
        holders = [i for i in deal if i >= 0]
        if len(set(holders)) < len(holders) or any(i >= 0 and (i, k) not in gain for k, i in enumerate(deal)):
            continue
        value = sum(gain[i, k] for k, i in enumerate(deal) if i >= 0)
        value += sum(float(search.z[i]) for i in range(model.m) if i not in holders)
        best = max(best, value)
    return best


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(KINDS), jobs=st.integers(3, 5))
def test_slot_reassignment_deals_the_slots_at_their_best(seed, kind, jobs):
    """Rule 9: from a plan (every job on the last type it may use), dealing its slots out again and
    re-solving each type gives a plan worth at least the best deal of those slots (brute force over
    every deal), at least the plan itself, and never more than the optimum."""
    inst = load_instance(large_mixed(seed, 256, 3, jobs, counts_per_job=4, **kind_args(kind)))
    problem = build_problem(inst)
    model = mixed._Model(problem)
    search = mixed._Search(model, None)
    search.live = [list(p) for p in model.pairs_of]
    start = [p[-1] for p in model.pairs_of]
    got = model.solve_assignment(start, None)
    if got is None or search.eq.any():  # a job that may not suspend keeps its type: no such guarantee
        return
    counts, value = got[0], got[1]
    dealt = model.solve_assignment(search._slot_assignment(counts, start), None)
    tol = 1e-9 * max(abs(value), 1.0)
    assert dealt is not None
    assert dealt[1] >= _slot_plan_values(model, search, counts, start) - tol
    assert dealt[1] >= value - tol
    assert dealt[1] <= solve(inst, solver="milp").objective + tol


def test_slot_reassignment_finds_the_optimum_of_a_swap():
    """Two types, two jobs each worth more on the other type than on its own: dealing the two slots out
    again swaps them (one round, no dual step)."""
    doc = large_mixed(3, 256, 2, 2, counts_per_job=4, curves="jagged")
    problem = build_problem(load_instance(doc))
    model = mixed._Model(problem)
    search = mixed._Search(model, None)
    search.live = [list(p) for p in model.pairs_of]
    opt = mixed.solve_types(problem)[2]
    for start in ([p[0] for p in model.pairs_of], [p[-1] for p in model.pairs_of]):
        got = model.solve_assignment(start, None)
        if got is None:
            continue
        dealt = model.solve_assignment(search._slot_assignment(got[0], start), None)
        assert dealt[1] >= got[1] - search.tol
        assert dealt[1] <= opt + search.tol


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(KINDS), jobs=st.integers(3, 6))
def test_strong_branching_bounds_every_child(seed, kind, jobs):
    """Rule 10: the bound strong branching gives each child (the job on one of its types only) is at
    least the child's optimum, found by brute force over every choice of types with the job on it."""
    import itertools

    problem = build_problem(load_instance(large_mixed(seed, 512, 3, jobs, counts_per_job=5, **kind_args(kind))))
    search, live, pi, ub = _root(problem)
    model = search.model
    undecided = [i for i, ps in enumerate(live) if len(ps) > 1]
    if not undecided:
        return
    mixed.STRONG_CANDIDATES, saved = len(undecided), mixed.STRONG_CANDIDATES
    try:
        i, bounds = search._strong_branch(live, pi, ub, undecided, lambda k: k, np.ones(model.m))
    finally:
        mixed.STRONG_CANDIDATES = saved
    assert set(bounds) == set(live[i])
    for p, bound in bounds.items():
        best = -math.inf
        for chosen in itertools.product(*[[p] if k == i else live[k] for k in range(model.m)]):
            got = model.solve_assignment(list(chosen), None)
            if got is not None:
                best = max(best, got[1])
        assert bound >= best - search.tol, (p, bound, best)
