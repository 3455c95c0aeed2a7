"""The optimised DP is exact: vs brute force on thousands of tiny cases, vs the plain DP on medium ones."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from randgen import random_instance
from unicron_plan import api
from unicron_plan.tools.generate import generate_instance
from unicron_plan.core.problem import build_problem
from unicron_plan.solvers import brute, dp

ROOT = Path(__file__).resolve().parent.parent


def _random_options(rng: np.random.Generator):
    m = int(rng.integers(1, 6))
    cap = int(rng.integers(0, 40))
    opts = []
    for _ in range(m):
        ys = np.array([0] + sorted(set(rng.integers(1, 45, size=int(rng.integers(0, 8))).tolist())), dtype=np.int64)
        ys = ys[ys <= cap]
        g = rng.normal(0, 5, size=len(ys)) + ys * rng.uniform(0, 3)
        if rng.random() < 0.4:  # integer gains: many exact ties
            g = np.round(g)
        opts.append(dp.pareto_arrays(ys, g))
    return opts, cap


def _brute(opts, cap):
    best = -math.inf
    for combo in itertools.product(*[range(len(y)) for y, _ in opts]):
        if sum(int(opts[i][0][k]) for i, k in enumerate(combo)) <= cap:
            best = max(best, sum(float(opts[i][1][k]) for i, k in enumerate(combo)))
    return best


def _check(opts, cap, counts, value, expected):
    assert sum(counts) <= cap
    allowed = [dict(zip(y.tolist(), g.tolist())) for y, g in opts]
    assert all(c in a for c, a in zip(counts, allowed))
    assert value == pytest.approx(expected, rel=1e-12, abs=1e-9)
    assert sum(a[c] for c, a in zip(counts, allowed)) == pytest.approx(expected, rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("checkpointed", [False, True])
def test_solve_options_equals_brute_force_on_thousands_of_tiny_cases(monkeypatch, checkpointed):
    if checkpointed:  # force the checkpointed backtracking
        monkeypatch.setattr(dp, "MEMORY_BUDGET_BYTES", 0)
    rng = np.random.default_rng(20240101 + checkpointed)
    ran = 0
    for _ in range(1500):
        opts, cap = _random_options(rng)
        stats = {}
        counts, value = dp.solve_options(opts, cap, stats)
        _check(opts, cap, counts, value, _brute(opts, cap))
        if "checkpointed" in stats:  # a DP pass ran (no early exit, bound not met by greedy/core)
            assert stats["checkpointed"] is checkpointed
            ran += 1
    assert ran > 300


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_dp_plan_equals_brute_force_on_random_instances(seed):
    rng = np.random.default_rng(seed)
    inst = api.load_instance(random_instance(rng, max_nodes=5, max_jobs=4, gpu_types=int(rng.integers(1, 3)),
                                             mtbf=bool(rng.integers(0, 2))))
    plan = api.solve(inst, solver="dp")  # validated inside
    expected = brute.solve(build_problem(inst)).objective
    assert plan.objective == pytest.approx(expected, rel=1e-12, abs=1e-6)
    assert plan.status.solution == "optimal"


@pytest.mark.parametrize("seed", range(12))
def test_dp_equals_reference_dp_on_medium_generated_instances(seed):
    rng = np.random.default_rng(seed)
    gpus = int(rng.choice([256, 512, 1024, 2048]))
    inst = api.load_instance(generate_instance(seed, gpus=gpus, jobs=int(rng.integers(4, 24)),
                                               demand=float(rng.uniform(0.6, 2.0)),
                                               failed_nodes=int(rng.integers(0, 3))))
    problem = build_problem(inst)
    for gtype, cap in problem.capacity.items():
        jobs = problem.jobs_of_type(gtype)
        fast, v_fast = dp.solve_type(jobs, cap)
        ref, v_ref = dp.solve_type_reference(jobs, cap)
        assert v_fast == pytest.approx(v_ref, rel=1e-12)
        assert sum(fast.values()) <= cap
        assert sum(j.gain_of(fast[j.id]) for j in jobs) == pytest.approx(v_ref, rel=1e-12)


def test_early_exit_when_every_best_count_fits():
    opts = [dp.pareto_arrays(np.array([0, 2, 4]), np.array([0.0, 5.0, 7.0])),
            dp.pareto_arrays(np.array([0, 3]), np.array([-1.0, 4.0]))]
    stats = {}
    counts, value = dp.solve_options(opts, 10, stats)
    assert stats["early_exit"] and counts == [4, 3] and value == 11.0


def test_pruning_keeps_few_options_on_a_jagged_instance():
    inst = api.load_instance(generate_instance(3, gpus=4096, jobs=32))
    problem = build_problem(inst)
    stats = {}
    dp.solve_type(problem.jobs, problem.capacity["a800"], stats)
    assert stats["kept"] < stats["options"] / 2  # the bound prunes most Pareto counts
    assert stats["max_width"] < problem.capacity["a800"]


def _scan_pick(candidates, free, need, racks, state, mine):
    """The placement preference as a scan over every free node (the pre-optimisation code)."""
    def whole(nid):
        return free[nid] == state.nodes[nid].healthy_after

    def key(nid):
        fits = free[nid] >= need
        return (nid not in mine, state.nodes[nid].rack not in racks, not (whole(nid) and free[nid] <= need),
                not fits, free[nid] if fits else -free[nid])
    return min(candidates, key=key)


def test_bucketed_placement_picks_like_the_full_scan(monkeypatch):
    from unicron_plan.plan import placement

    rng = np.random.default_rng(7)
    original = placement._FreePool.pick
    calls = 0

    def checked(self, gpu_type, need, racks, own):
        nonlocal calls
        got = original(self, gpu_type, need, racks, own)
        cands = [nid for nid, n in self.state.nodes.items() if n.gpu_type == gpu_type and self.free[nid] > 0]
        assert got == _scan_pick(cands, self.free, need, racks, self.state, own)
        calls += 1
        return got

    monkeypatch.setattr(placement._FreePool, "pick", checked)
    for _ in range(400):
        d = random_instance(rng, max_nodes=8, max_jobs=5, gpu_types=int(rng.integers(1, 3)))
        api.solve(d)
    assert calls > 100


# --------------------------------------------------------------------- scale (slow)

@pytest.mark.slow
def test_16384_gpus_128_jobs_solves_to_the_reference():
    """The committed 16,384-GPU instance (its time, 0.3 s as the target: benchmarks/suite_timings.py)."""
    inst = api.load_instance(ROOT / "instances" / "jagged-16384-128jobs.json")
    raw = dp.solve(build_problem(inst))
    assert raw.objective == pytest.approx(inst.reference.objective, rel=1e-12)


@pytest.mark.slow
def test_131072_gpus_1024_jobs_within_4_gib(tmp_path):
    """Peak memory of a whole process (its time, 10 s as the target: benchmarks/suite_timings.py)."""
    code = (
        "import resource\n"
        "from unicron_plan import api\n"
        "from unicron_plan.tools.generate import generate_instance\n"
        "from unicron_plan.core.problem import build_problem\n"
        "from unicron_plan.solvers import dp\n"
        "inst = api.load_instance(generate_instance(2, gpus=131072, jobs=1024))\n"
        "raw = dp.solve(build_problem(inst))\n"
        "plan = api.solve(inst)\n"
        "print(raw.objective, plan.objective, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    obj, plan_obj, rss_kib = float(out[0]), float(out[1]), int(out[2])
    assert rss_kib * 1024 <= 4 * 2**30
    assert plan_obj == pytest.approx(obj, rel=1e-12)


def test_checkpointed_backtracking_equals_stored_choices_on_a_generated_instance(monkeypatch):
    problem = build_problem(api.load_instance(generate_instance(8, gpus=4096, jobs=48, demand=1.6)))
    cap = problem.capacity["a800"]
    stored, v1 = dp.solve_type(problem.jobs, cap)
    monkeypatch.setattr(dp, "MEMORY_BUDGET_BYTES", 0)
    stats = {}
    checkpointed, v2 = dp.solve_type(problem.jobs, cap, stats)
    assert stats["checkpointed"] and stats["block"] == 6
    assert v1 == v2 and stored == checkpointed


@pytest.mark.slow
@pytest.mark.parametrize("gpus,jobs", [(32768, 256), (65536, 512)])
def test_dp_equals_reference_dp_at_scale(gpus, jobs):
    problem = build_problem(api.load_instance(generate_instance(3, gpus=gpus, jobs=jobs)))
    cap = problem.capacity["a800"]
    fast, v_fast = dp.solve_type(problem.jobs, cap)
    _, v_ref = dp.solve_type_reference(problem.jobs, cap)
    assert v_fast == pytest.approx(v_ref, rel=1e-12)
    assert sum(fast.values()) <= cap


def test_runs_of_whole_nodes_place_exactly_like_one_pick_per_node(monkeypatch):
    """FreePool.whole_run takes the nodes the next picks would return: same placement with and without."""
    from unicron_plan.plan import placement
    from unicron_plan.tools.generate import generate_instance as gen

    rng = np.random.default_rng(11)
    docs = [random_instance(rng, max_nodes=10, max_jobs=6, gpu_types=int(rng.integers(1, 3))) for _ in range(300)]
    docs += [gen(s, gpus=int(g), jobs=int(k)) for s, (g, k) in enumerate([(512, 8), (2048, 32), (4096, 24)] * 4)]
    runs = 0
    original = placement._FreePool.whole_run

    def counted(self, *a):
        nonlocal runs
        out = original(self, *a)
        runs += len(out)
        return out

    monkeypatch.setattr(placement._FreePool, "whole_run", counted)
    for d in docs:
        problem = build_problem(api.load_instance(d))
        counts = dp.solve(problem).counts
        monkeypatch.setattr(placement, "RUNS", True)
        with_runs = placement.place(problem, counts)
        monkeypatch.setattr(placement, "RUNS", False)
        assert placement.place(problem, counts) == with_runs
    assert runs > 100  # runs were taken, and checked
