"""The compiled max-plus fold and its numpy fallback agree exactly; both are exact on adversarial curves."""

from __future__ import annotations

import numpy as np
import pytest

from test_dp_scale import _brute, _check, _random_options
from unicron_plan import api
from unicron_plan.tools.adversarial import KINDS
from unicron_plan.tools.generate import generate_instance
from unicron_plan.core.problem import build_problem
from unicron_plan.solvers import dp

NATIVE, NATIVE_PASS, NATIVE_PARETO, NATIVE_HULL = dp.NATIVE, dp.NATIVE_PASS, dp.NATIVE_PARETO, dp.NATIVE_HULL
# the envelope code paths: numpy passes, and the compiled monotone chain when built
HULLS = [None] + ([NATIVE_HULL] if NATIVE_HULL is not None else [])
# numpy: no compiled code; fold: only the compiled fold (the passes in Python); pass: everything compiled;
# halves: everything compiled, every pass of two jobs or more as two halves joined (dp._native_halves).
PATHS = ["numpy"] + (["fold", "pass"] if NATIVE is not None else []) + (["halves"] if dp.NATIVE_BACK else [])


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    compiled = request.param in ("pass", "halves")
    monkeypatch.setattr(dp, "NATIVE", None if request.param == "numpy" else NATIVE)
    monkeypatch.setattr(dp, "NATIVE_PASS", NATIVE_PASS if compiled else None)
    monkeypatch.setattr(dp, "NATIVE_PARETO", NATIVE_PARETO if compiled else None)
    monkeypatch.setattr(dp, "NATIVE_HULL", NATIVE_HULL if compiled else None)
    if request.param == "halves":
        monkeypatch.setattr(dp, "SPLIT_MIN_CELLS", 0)
    return request.param


@pytest.mark.skipif(NATIVE_PARETO is None, reason="the compiled pruning was not built (no C compiler at install)")
def test_compiled_dominance_pruning_equals_each_job_alone(monkeypatch):
    from types import SimpleNamespace

    rng = np.random.default_rng(9)
    for _ in range(300):
        jobs = []
        for _ in range(int(rng.integers(1, 12))):
            n = int(rng.integers(1, 40))
            counts = np.unique(np.concatenate([[0], rng.integers(1, 200, size=n - 1)])).astype(np.int64)
            gains = rng.normal(0, 5, size=len(counts)) + counts * rng.uniform(-0.5, 2)
            if rng.random() < 0.4:
                gains = np.round(gains)  # ties
            jobs.append(SimpleNamespace(counts=counts, gains=gains))
        got = dp.pareto_all(jobs)
        assert len(got) == len(jobs)
        for (y, g), j in zip(got, jobs):
            want_y, want_g = dp.pareto_arrays(j.counts, j.gains)
            assert y.tolist() == want_y.tolist() and g.tolist() == want_g.tolist()


@pytest.mark.skipif(NATIVE_PASS is None, reason="the compiled pass was not built (no C compiler at install)")
def test_compiled_pass_equals_the_python_pass(monkeypatch):
    """One attempt (window cuts at a threshold, choices, backtracking) gives the same counts, value and
    widths compiled as in Python, for thresholds below, at and above the optimum, with and without cuts."""
    outcomes = set()
    for opts, cap, lam, red_max, threshold, cut in _attempts(np.random.default_rng(8), 400, jobs=1):
        got = []
        for compiled in (True, False):
            monkeypatch.setattr(dp, "NATIVE_PASS", NATIVE_PASS if compiled else None)
            stats = {}
            found = dp._attempt(opts, red_max, lam, cap, threshold, stats, cut=cut)
            got.append((found, stats.get("max_width"), stats.get("sum_width")))
        assert got[0] == got[1]
        outcomes.add(got[0][0] is None)
    assert outcomes == {True, False}  # both a found plan and a lost path were compared


def _attempts(rng, problems: int, jobs: int):
    """(options, capacity, lam, red_max, threshold, cut) of ``problems`` random problems of at least ``jobs``
    jobs: thresholds below, near and above the optimum, each with and without cuts."""
    for _ in range(problems):
        opts, cap = _random_options(rng)
        if len(opts) < jobs:
            continue
        lam = float(dp.lp_multiplier(opts, cap)) if sum(int(y[-1]) for y, _ in opts) > cap else 0.0
        red_max = [float(np.max(g - lam * y)) for y, g in opts]
        ub = lam * cap + sum(red_max)
        for threshold in (-np.inf, ub - abs(ub) * rng.uniform(0, 0.3) - rng.uniform(0, 5), ub + 1.0):
            for cut in (True, False):
                yield opts, cap, lam, red_max, threshold, cut


@pytest.mark.skipif(NATIVE is None, reason="the compiled fold was not built (no C compiler at install)")
def test_compiled_fold_equals_numpy_fold_bit_for_bit(monkeypatch):
    rng = np.random.default_rng(7)
    for _ in range(300):
        L = int(rng.integers(0, 20))
        V = np.cumsum(rng.normal(1, 3, size=int(rng.integers(1, 60))))
        if rng.random() < 0.3:
            V = np.round(V)  # ties
        U = L + len(V) - 1
        y = np.unique(np.concatenate([[int(rng.integers(0, 3))], rng.integers(0, 40, size=int(rng.integers(0, 9)))]))
        g = np.round(rng.normal(0, 5, size=len(y)), int(rng.integers(0, 3)))
        L2 = L + int(y[0]) + int(rng.integers(0, 3))
        U2 = L2 + int(rng.integers(0, 70))
        want = bool(rng.integers(0, 2))
        monkeypatch.setattr(dp, "NATIVE", NATIVE)
        a, ca = dp._fold(V, L, U, y, g, L2, U2, want)
        monkeypatch.setattr(dp, "NATIVE", None)
        b, cb = dp._fold(V, L, U, y, g, L2, U2, want)
        assert np.array_equal(a, b)
        if want:
            assert ca.dtype == cb.dtype and np.array_equal(ca, cb)


def test_both_paths_equal_brute_force_on_tiny_cases(path):
    rng = np.random.default_rng(99)
    for _ in range(400):
        opts, cap = _random_options(rng)
        counts, value = dp.solve_options(opts, cap)
        _check(opts, cap, counts, value, _brute(opts, cap))


def test_core_optimality_proof_on_near_linear_cases(path):
    """Near-linear tables (the gap to the bound is an integrality artefact): the cores settle them."""
    rng = np.random.default_rng(11)
    by_core = 0
    for _ in range(300):
        m, step = int(rng.integers(2, 5)), int(rng.integers(1, 4))
        cap = int(rng.integers(5, 30))
        opts = []
        for _ in range(m):
            ys = np.arange(0, int(rng.integers(2, 10)) * step + 1, step, dtype=np.int64)
            g = 3.0 * ys + rng.uniform(0, 1e-3, size=len(ys)) * (ys > 0)
            opts.append(dp.pareto_arrays(ys, g))
        stats = {}
        counts, value = dp.solve_options(opts, cap, stats)
        _check(opts, cap, counts, value, _brute(opts, cap))
        by_core += stats.get("bound_met") == "core"
    assert by_core > 0  # the core-optimality proof path is exercised 


@pytest.mark.parametrize("kind", KINDS)
def test_smallest_adversarial_instance_of_each_kind_is_exact(kind, path):
    """The smallest generated instance of each adversarial kind: DP == plain reference DP, plan valid."""
    doc = generate_instance(3, gpus=512, jobs=8, curves=kind)
    inst = api.load_instance(doc)
    problem = build_problem(inst)
    ref = 0.0
    for gtype, cap in problem.capacity.items():
        jobs = problem.jobs_of_type(gtype)
        if jobs:
            ref += dp.solve_type_reference(jobs, cap)[1]
    plan = api.solve(inst, solver="dp")  # validated inside
    assert plan.objective == pytest.approx(ref, rel=1e-12)
    assert plan.status.solution == "optimal" and plan.bound == plan.objective


@pytest.mark.parametrize("hull", HULLS, ids=lambda h: "numpy" if h is None else "compiled")
def test_vectorised_upper_hull_equals_the_sequential_loop(hull, monkeypatch):
    monkeypatch.setattr(dp, "NATIVE_HULL", hull)
    rng = np.random.default_rng(5)
    for _ in range(2000):
        n = int(rng.integers(1, 80))
        y = np.unique(rng.integers(0, 200, size=n))
        g = np.cumsum(rng.integers(1, 20, size=len(y))).astype(float)  # integers: exact ties, collinear runs
        if rng.random() < 0.5:
            g = np.maximum.accumulate(g + rng.normal(0, 3, size=len(g))) + np.arange(len(g)) * 1e-3
        for passes in (0, 1, 8):
            hy, hg, _ = dp._upper_hulls([(y, g)], passes)
            ly, lg = dp._upper_hull_loop(y, g)
            assert hy.tolist() == ly.tolist() and hg.tolist() == lg.tolist()


@pytest.mark.parametrize("hull", HULLS, ids=lambda h: "numpy" if h is None else "compiled")
def test_envelopes_of_all_jobs_at_once_equal_each_job_alone(hull, monkeypatch):
    """_upper_hulls (one call for every job) gives each job's own envelope, in job order."""
    monkeypatch.setattr(dp, "NATIVE_HULL", hull)
    rng = np.random.default_rng(6)
    for _ in range(500):
        options = []
        for _ in range(int(rng.integers(1, 10))):
            y = np.unique(np.concatenate([[0], rng.integers(1, 300, size=int(rng.integers(0, 60)))]))
            g = np.cumsum(rng.integers(1, 20, size=len(y))).astype(float)
            if rng.random() < 0.5:
                g = np.maximum.accumulate(g + rng.normal(0, 3, size=len(g))) + np.arange(len(g)) * 1e-3
            options.append((y.astype(np.int64), g))
        for passes in (0, 1, 8):
            hy, hg, seg = dp._upper_hulls(options, passes)
            for k, (y, g) in enumerate(options):
                ly, lg = dp._upper_hull_loop(y, g)
                assert hy[seg == k].tolist() == ly.tolist() and hg[seg == k].tolist() == lg.tolist()


def test_regression_baseline_covers_every_adversarial_kind():
    import json
    from pathlib import Path

    base = json.loads((Path(__file__).resolve().parent.parent / "benchmarks" / "baseline.json").read_text())
    for kind in KINDS:
        specs = [s for s in base["instances"] if f"curves={kind}" in s or f"adversarial-{kind}-" in s]
        assert len(specs) == 2, kind  # the library instance and the 16,384-GPU generated one
        for s in specs:
            assert base["instances"][s]["solvers"]["dp"]["solution"] == "optimal"


@pytest.mark.skipif(NATIVE_PASS is None, reason="the compiled pass was not built (no C compiler at install)")
def test_compiled_pass_within_the_budget_when_the_estimate_exceeds_it(monkeypatch):
    """The memory estimate bounds the windows before the cuts: with a budget below it but above what
    the cut windows store, the compiled pass still runs; one entry short, the checkpointed Python pass
    runs. Both give the counts and value of the pass with every choice stored."""
    rng = np.random.default_rng(11)
    default = dp.MEMORY_BUDGET_BYTES
    compared = 0
    for _ in range(400):
        opts, cap = _random_options(rng)
        if not opts or sum(int(y[-1]) for y, _ in opts) <= cap:
            continue
        lam = float(dp.lp_multiplier(opts, cap))
        red_max = [float(np.max(g - lam * y)) for y, g in opts]
        threshold = lam * cap + sum(red_max) - rng.uniform(0, 5)
        stats = {}
        found = dp._attempt(opts, red_max, lam, cap, threshold, stats)
        if found is None:
            continue
        stored = stats["sum_width"]
        for budget, checkpointed in ((4 * stored, False), (stored - 1, True)):
            monkeypatch.setattr(dp, "MEMORY_BUDGET_BYTES", budget)
            again = {}
            assert dp._attempt(opts, red_max, lam, cap, threshold, again) == found
            assert again["checkpointed"] is checkpointed
        monkeypatch.setattr(dp, "MEMORY_BUDGET_BYTES", default)
        compared += 1
    assert compared > 50


@pytest.mark.skipif(not dp.NATIVE_BACK, reason="the compiled pass was not built (no C compiler at install)")
def test_two_halves_joined_find_the_one_pass_optimum(monkeypatch):
    """A pass run as two halves joined at the end (dp._native_halves) finds a plan worth what the one
    pass finds (to float rounding: the gains are added in another order), or none where it finds none,
    for thresholds below, near and above the optimum, with and without cuts; its counts are options of
    their jobs, fit the capacity and add up to its value."""
    outcomes, compared = set(), 0
    for opts, cap, lam, red_max, threshold, cut in _attempts(np.random.default_rng(21), 300, jobs=2):
        got = []
        for split in (2**62, 0):
            monkeypatch.setattr(dp, "SPLIT_MIN_CELLS", split)
            stats = {}
            got.append((dp._attempt(opts, red_max, lam, cap, threshold, stats, cut=cut), stats))
        (one, _), (two, stats) = got
        assert (one is None) == (two is None)
        outcomes.add(one is None)
        if two is None:
            continue
        assert stats.get("halves") is True
        counts, value = two
        assert len(counts) == len(opts) and sum(counts) <= cap
        gains = []
        for c, (y, g) in zip(counts, opts):
            assert c in y.tolist()
            gains.append(float(g[y.tolist().index(c)]))
        scale = 1.0 + sum(abs(x) for x in gains)
        assert abs(sum(gains) - value) <= 1e-9 * scale
        assert abs(one[1] - value) <= 1e-9 * scale
        compared += 1
    assert outcomes == {True, False} and compared > 200


def test_narrow_jobs_are_folded_first_and_counts_come_back_in_the_jobs_order():
    """The pass folds the jobs by the spread of their kept counts, narrowest first (dp._pass_order): the
    same states whatever order they are given in, and each job's count returned in its own place."""
    rng = np.random.default_rng(5)
    wide = [dp.pareto_arrays(np.array([0, 1, 100, 150]), np.array([0.0, 3.0, 250.0, 370.0])) for _ in range(6)]
    narrow = [dp.pareto_arrays(np.array([0, 1, 2]), np.array([0.0, 2.0 + rng.random(), 3.5])) for _ in range(6)]
    cap = 500
    runs = []
    for opts in (wide + narrow, narrow + wide):
        lam = float(dp.lp_multiplier(opts, cap))
        red_max = [float(np.max(g - lam * y)) for y, g in opts]
        stats = {}
        found = dp._attempt(opts, red_max, lam, cap, -np.inf, stats, cut=False)
        runs.append((found, stats["sum_width"]))
    (first, w1), (second, w2) = runs
    assert w1 == w2  # the same order of folding
    assert first[0][:6] == second[0][6:] and first[0][6:] == second[0][:6]
    assert abs(first[1] - second[1]) <= 1e-9 * (1 + abs(first[1]))
