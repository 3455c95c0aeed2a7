"""A time limit is wall time from the call, for every solver: a stop returns the best plan held,
as feasible, with a valid upper bound and the gap."""

import json
import subprocess
import sys
import time

import pytest

from unicron_plan import api
from unicron_plan.solvers import SolverOptions


def _linear_on_threes(jobs=12, nodes=10):
    """Linear curves on multiples of 3 (and a poor count 2, so that every capacity is reachable)
    with capacity 79: every count has a reduced cost of about 0, so the greedy plan stays below
    the Lagrangian bound and the DP must fold."""
    return {
        "schema_version": "1", "name": "linear-threes",
        "cluster": {"gpu_types": {"a": {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 1600.0,
                                        "inter_node_gbps": 200.0}},
                    "nodes": [{"id": f"n{i}", "gpu_type": "a", "gpus": 8, "failed_gpus": [0] if i == 0 else []}
                              for i in range(nodes)]},
        "jobs": [{"id": f"j{k}", "weight": 1.0,
                  "throughput": {"gpu_type": "a",
                                 "tflops": {"2": 1.0} | {str(3 * c): 30.0 * c * (1 + 1e-3 * k)
                                                         for c in range(1, 21)}},
                  "current": {"gpus": 0, "nodes": []}} for k in range(jobs)],
        "cost": {"expected_run_seconds": 3600.0, "default_transition_seconds": 60.0},
    }


def test_options_deadline_counts_from_creation():
    assert 0 < SolverOptions(time_limit_seconds=30).remaining() <= 30
    assert not SolverOptions(time_limit_seconds=30).expired()
    opt = SolverOptions(time_limit_seconds=0.05)
    time.sleep(0.06)
    assert opt.expired() and opt.remaining() == 0.0
    assert SolverOptions().remaining() is None and not SolverOptions().expired()


def test_dp_stopped_by_the_limit_returns_a_valid_feasible_plan_with_its_bound():
    inst = _linear_on_threes()
    exact = api.solve(inst, solver="dp")
    assert exact.status.solution == "optimal" and exact.gap == 0
    stopped = api.solve(inst, solver="dp", time_limit_seconds=1e-9)  # passed before the first fold
    assert stopped.status.termination == "time_limit" and stopped.status.solution == "feasible"
    assert stopped.objective <= exact.objective <= stopped.bound * (1 + 1e-12)
    assert stopped.objective < stopped.bound
    assert stopped.gap == pytest.approx((stopped.bound - stopped.objective) / abs(stopped.bound))
    assert api.validate_plan(inst, stopped).valid


def test_dp_with_time_to_spare_is_still_exact():
    inst = _linear_on_threes()
    assert api.solve(inst, solver="dp", time_limit_seconds=60).objective == api.solve(inst, solver="dp").objective


@pytest.mark.parametrize("solver", ["milp", "cpsat"])
def test_ip_backends_answer_under_a_tiny_limit(solver):
    inst = _linear_on_threes()
    plan = api.solve(inst, solver=solver, time_limit_seconds=1e-9)
    assert plan.bound >= plan.objective
    assert api.validate_plan(inst, plan).valid
    if plan.status.solution != "optimal":
        assert plan.status.termination == "time_limit" and plan.gap >= 0


def test_cli_limit_and_its_default(tmp_path):
    path = tmp_path / "i.json"
    path.write_text(json.dumps(_linear_on_threes()))
    cmd = [sys.executable, "-m", "unicron_plan.cli", "solve", str(path)]
    r = subprocess.run(cmd + ["--time-limit", "0.001"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["status"] == {"termination": "time_limit", "solution": "feasible"}
    assert plan["bound"] > plan["objective"] and plan["gap"] > 0
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert json.loads(r.stdout)["status"]["solution"] == "optimal"
    r = subprocess.run(cmd + ["--time-limit", "-1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "solve", "--help"], capture_output=True,
                       text=True, timeout=60, env={"COLUMNS": "200", "PATH": ""})
    assert "60.0" in r.stdout


def _constrained(racks: int, seed: int = 0, jobs: int = 64):
    """A generated instance with tp, max_nodes, hysteresis and a churn limit (tests/randgen_ip.py)."""
    import numpy as np
    from randgen_ip import large_instance

    return large_instance(np.random.default_rng(seed), racks=racks, nodes_per_rack=32, jobs=jobs)


def _keep_or_suspend_value(inst) -> float:
    from unicron_plan.core.problem import build_problem
    from unicron_plan.solvers import ipmodel

    problem = build_problem(api.load_instance(inst))
    counts, placement = ipmodel.keep_or_suspend(problem)
    return problem.objective(counts, placement)


def _check_deadline(inst, solver, limit, floor):
    """The plan under ``limit``: valid, at least ``floor`` (how soon it comes back is measured by
    benchmarks/deadline.py, never asserted: tests run on loaded machines)."""
    plan = api.solve(inst, solver=solver, time_limit_seconds=limit, threads=1)
    assert plan.bound >= plan.objective >= floor - 1e-9 * abs(floor)
    assert api.validate_plan(inst, plan).valid
    return plan


@pytest.mark.parametrize("solver", ["milp", "milp-cbc", "cpsat", "auto"])
def test_every_ip_backend_returns_by_the_deadline_with_at_least_keep_or_suspend(solver):
    inst = _constrained(racks=2, jobs=16)  # 512 GPUs
    floor = _keep_or_suspend_value(inst)
    api.solve(inst, solver=solver, time_limit_seconds=0.05, threads=1)  # imports, not the limit, first
    _check_deadline(inst, solver, 0.2, floor)
    plan = _check_deadline(inst, solver, 1e-6, floor)  # passed while building: no solver starts
    assert plan.status.termination == "time_limit" and plan.solver.options.get("fallback") == "keep-or-suspend"


def test_cbc_is_killed_at_the_deadline(monkeypatch, tmp_path):
    """CBC ignores -sec during its initial LP: a CBC that never stops is killed at the deadline."""
    from unicron_plan.solvers import milp

    stuck = tmp_path / "cbc"
    stuck.write_text("#!/bin/sh\nexec sleep 30\n")
    stuck.chmod(0o755)
    monkeypatch.setattr(milp, "_cbc_path", lambda: str(stuck))
    inst = _constrained(racks=2, jobs=16)
    plan = _check_deadline(inst, "milp-cbc", 0.5, _keep_or_suspend_value(inst))
    assert plan.solver.options["cbc_status"] == "killed at the deadline"
    assert plan.solver.options["fallback"] == "keep-or-suspend"


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["dp", "milp", "cpsat", "milp-cbc", "auto"])
@pytest.mark.parametrize("limit", [0.2, 1.0, 5.0])
def test_limit_holds_at_8192_gpus(solver, limit):
    from unicron_plan.tools.generate import generate_instance

    if solver == "dp":
        inst = generate_instance(seed=3, gpus=8192, jobs=64, curves="queued-near-linear")
        floor = 0.0
    else:
        inst = _constrained(racks=32)  # 8,192 GPUs
        floor = _keep_or_suspend_value(inst)
    _check_deadline(inst, solver, limit, floor)
