"""Every phase of a solve respects the deadline: a phase reached after it does no work (model
building, model copies, imports, files for external solvers, solver runs), the answer is still at
least the keep-or-suspend plan with a valid bound, and whole `solve` processes per backend end
close to the limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from randgen_ip import large_instance
from unicron_plan import api
from unicron_plan.core.problem import build_problem
from unicron_plan.solvers import DeadlineReached, SolverOptions, ipmodel
from unicron_plan.tools.mixedgen import large_mixed


def _constrained(racks: int = 2, jobs: int = 16, seed: int = 0) -> dict:
    return large_instance(np.random.default_rng(seed), racks=racks, nodes_per_rack=32, jobs=jobs)


def _mixed(gpus: int = 512, seed: int = 0) -> dict:
    inst = large_mixed(seed, gpus, 2, 16)
    running = [j for j in inst["jobs"] if j["current"]["gpus"]]
    running[-1]["min_gain_fraction"] = 0.05
    return inst


def _floor(inst) -> float:
    problem = build_problem(api.load_instance(inst))
    counts, placement = ipmodel.keep_or_suspend(problem)
    return problem.objective(counts, placement)


def _passed() -> SolverOptions:
    return SolverOptions(time_limit_seconds=1.0, threads=1, deadline=time.perf_counter() - 1.0)


def _never(*_args, **_kwargs):
    raise AssertionError("called after the deadline")


@pytest.fixture(scope="module")
def problem():
    return build_problem(api.load_instance(_constrained()))


# --- each phase checks the deadline ----------------------------------------------------------

def test_model_building_stops_at_the_deadline(problem):
    past = time.perf_counter() - 1.0
    with pytest.raises(DeadlineReached):
        ipmodel.build(problem, deadline=past)
    counts, _ = ipmodel.keep_or_suspend(problem)
    with pytest.raises(DeadlineReached):
        ipmodel.build_placement(problem, counts, deadline=past)


def test_highs_model_copy_stops_at_the_deadline(problem):
    from unicron_plan.solvers import milp

    model = ipmodel.build(problem)
    with pytest.raises(DeadlineReached):
        milp.highs_lp(model, deadline=time.perf_counter() - 1.0)
    assert milp.highs_lp(model)[0].num_col_ == len(model.names)  # without a deadline it is built


def test_cpsat_model_copy_stops_at_the_deadline(problem):
    from unicron_plan.solvers import cpsat

    model = ipmodel.build(problem)
    with pytest.raises(DeadlineReached):
        cpsat.build_cp(model, 1.0, deadline=time.perf_counter() - 1.0)


def test_mixed_model_building_stops_at_the_deadline():
    from unicron_plan.solvers import mixed_ip

    with pytest.raises(DeadlineReached):
        mixed_ip.build(build_problem(api.load_instance(_mixed())), deadline=time.perf_counter() - 1.0)


def test_no_highs_run_after_the_deadline(problem, monkeypatch):
    from unicron_plan.solvers import milp

    monkeypatch.setattr(milp, "_highs", _never)
    raw = milp.solve(problem, _passed())
    assert raw.options["fallback"] == "keep-or-suspend" and raw.termination == "time_limit"
    model = ipmodel.build(problem)  # built, but the deadline passed before the copy
    result, values = milp.run(model, _passed(), "highs")
    assert values is None and result["highs_status"].startswith("not started")


def test_no_cbc_model_file_when_the_time_left_does_not_cover_writing_it(problem, monkeypatch, tmp_path):
    """Writing the MPS file cannot be interrupted: it is skipped when its estimate (scaled by the
    slowdown) outlasts the time left, and CBC is never spawned."""
    from unicron_plan.solvers import milp

    marker = tmp_path / "ran"
    cbc = tmp_path / "cbc"
    cbc.write_text(f"#!/bin/sh\ntouch {marker}\n")
    cbc.chmod(0o755)
    monkeypatch.setattr(milp, "_cbc_path", lambda: str(cbc))
    model = ipmodel.build(problem)
    estimate = milp.mps_cpu_seconds(model)
    assert 0 < estimate < 1.0
    # As if the machine ran 100 s of wall time per second of CPU: the estimate outlasts the 30 s.
    slow = SolverOptions(time_limit_seconds=30.0, threads=1, slowdown=30.0 / estimate + 1.0)
    monkeypatch.setattr(ipmodel, "extract_cpu_seconds", lambda m: 0.0)
    result, values = milp.run(model, slow, "cbc")
    assert values is None and result["cbc_status"] == "not started: too little time left to write the model"
    assert not marker.exists()


def test_or_tools_is_not_loaded_when_the_time_left_does_not_cover_it(problem, monkeypatch):
    from unicron_plan.solvers import cpsat

    monkeypatch.delitem(sys.modules, "ortools.sat.python.cp_model", raising=False)
    model = ipmodel.build(problem)
    opts = SolverOptions(time_limit_seconds=1.0, threads=1, slowdown=1e6)
    result, values, info = cpsat.run(model, opts)
    assert values is None and info["cpsat_status"] == "not started: too little time left to load OR-Tools"
    assert "ortools.sat.python.cp_model" not in sys.modules


def test_cpsat_and_auto_do_not_run_a_solver_after_the_deadline(problem, monkeypatch):
    from unicron_plan.solvers import auto, cpsat

    monkeypatch.setattr(cpsat, "build_cp", _never)
    monkeypatch.setattr(cpsat, "place_constrained", _never)
    floor = _floor(_constrained())
    for solve in (cpsat.solve, auto.solve):
        raw = solve(problem, _passed())
        assert raw.objective >= floor - 1e-9 * abs(floor) and raw.bound >= raw.objective


@pytest.mark.parametrize("backend", ["highs", "cbc", "cpsat"])
def test_mixed_ip_after_the_deadline_returns_keep_or_suspend(backend):
    from unicron_plan.solvers import mixed_ip

    inst = _mixed()
    problem = build_problem(api.load_instance(inst))
    raw = mixed_ip.solve(problem, _passed(), backend)
    counts, _ = ipmodel.keep_or_suspend(problem)
    assert raw.options["fallback"] == "keep-or-suspend" and raw.termination == "time_limit"
    assert raw.objective == pytest.approx(problem.objective(counts)) and raw.bound >= raw.objective


def test_engine_reserve_and_affordability_scale_with_the_slowdown():
    opts = SolverOptions(time_limit_seconds=10.0, slowdown=4.0)
    assert opts.affords(1.0) and not opts.affords(3.0)  # 4 s and 12 s of wall time against 10 s
    engine = opts.for_engine(0.5)
    assert opts.deadline - engine.deadline == pytest.approx(2.0)  # 0.5 s of CPU at 4x
    assert opts.deadline - opts.for_engine().deadline == pytest.approx(0.25)  # at least the fixed reserve
    assert engine.slowdown == 4.0


def test_post_solve_reserve_grows_with_size_and_slowdown_and_leaves_the_solver_half(problem):
    small = build_problem(api.load_instance(_constrained(racks=1, jobs=4)))
    assert api.post_solve_reserve(small, 1.0, 60) < api.post_solve_reserve(problem, 1.0, 60) \
        < api.post_solve_reserve(problem, 4.0, 60)
    assert api.post_solve_reserve(problem, 8.0, 0.01) == 0.005


@pytest.mark.parametrize("solver", ["dp", "milp", "milp-cbc", "cpsat", "auto"])
def test_a_limit_that_passed_before_the_call_still_gives_a_valid_plan(solver):
    """`started` long ago: every phase after reading finds the deadline passed; the plan is placed,
    validated and at least keep-or-suspend, with its bound, and each phase's end is recorded."""
    inst = _constrained(racks=1, jobs=8, seed=3)
    if solver == "dp":
        for j in inst["jobs"]:
            j.pop("tp", None), j.pop("max_nodes", None)
        inst.pop("max_changed_jobs")
    timings: dict = {}
    plan = api.solve(inst, solver=solver, time_limit_seconds=0.5, threads=1,
                     started=time.perf_counter() - 5.0, timings=timings)
    assert list(timings) == ["read", "build", "reserve", "solve", "place", "validate"]
    assert timings["read"] >= 5.0 and timings["reserve"] <= 0.25
    assert plan.status.termination == "time_limit" or plan.status.solution == "optimal"
    floor = _floor(inst)
    assert plan.bound >= plan.objective >= floor - 1e-9 * abs(floor)
    assert api.validate_plan(inst, plan).valid


def test_process_start_is_before_any_of_our_code():
    out = subprocess.run([sys.executable, "-c", "import time; t = time.perf_counter(); "
                          "from unicron_plan.solvers import process_started as p; print(t - p())"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert float(out.stdout) > 0.0  # the interpreter's start-up, counted (how long it took is not asserted)


# --- whole processes, every backend and mixed-fleet route --------------------------------------

def _cli_solve(path, solver: str, limit: float) -> tuple[dict, dict]:
    r = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "solve", str(path), "--solver", solver,
                        "--time-limit", str(limit), "--threads", "1", "--timings", "--quiet"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), json.loads(r.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("route", ["dp", "milp", "milp-cbc", "cpsat", "auto",
                                   "mixed:dp", "mixed:milp", "mixed:milp-cbc", "mixed:cpsat", "mixed:auto"])
def test_whole_solve_process_ends_near_the_limit(tmp_path, route):
    """2,048 GPUs with constraints (tp, max_nodes, hysteresis, churn; mixed: hysteresis) under
    --time-limit 1: the process's phases end in order and the plan is valid, at least keep-or-suspend
    (how soon after the deadline it exits is measured by benchmarks/deadline.py, not asserted)."""
    solver = route.split(":")[-1]
    if route.startswith("mixed:"):
        inst = _mixed(2048, seed=1)
    else:
        inst = _constrained(racks=8, jobs=32, seed=1)
        if solver == "dp":
            for j in inst["jobs"]:
                j.pop("tp", None), j.pop("max_nodes", None)
            inst.pop("max_changed_jobs")
    path = tmp_path / "i.json"
    path.write_text(json.dumps(inst))
    limit = 1.0
    plan, phases = _cli_solve(path, solver, limit)
    ends = [phases[k] for k in ("import", "read", "build", "solve", "place", "validate", "write")]
    assert ends == sorted(ends)
    # How soon after the deadline it ended is a measurement (benchmarks/deadline.py), not asserted here:
    # the default suite runs on loaded machines.
    floor = _floor(inst)
    assert plan["bound"] >= plan["objective"] >= floor - 1e-9 * abs(floor)
    assert api.validate_plan(inst, plan).valid
