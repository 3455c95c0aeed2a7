"""The stay rule: an unhit job that keeps its count on another per-node split is moved, a change
that pays its transition (docs/format.md). Validator, solvers and placement agree on it."""

from __future__ import annotations

import copy
import math

import pytest

from unicron_plan import api

# docs/solvers.md's example: nodes of 8 GPUs; A holds 4 on n0, C 4 on n1; B (max_nodes 1)
# held 8 on n2, which fails. B gets 8 on one node only if A moves onto n1 beside C.
EXAMPLE = {
    "schema_version": "1", "name": "stay-rule",
    "cluster": {"gpu_types": {"a800": {"peak_tflops": 312.0, "memory_gib": 80.0,
                                       "intra_node_gbps": 1600.0, "inter_node_gbps": 200.0}},
                "nodes": [{"id": f"n{k}", "gpu_type": "a800", "gpus": 8, "failed_gpus": [], "rack": "r0"}
                          for k in range(3)]},
    "jobs": [
        {"id": "a", "weight": 1.0, "throughput": {"gpu_type": "a800", "tflops": {"4": 500.0}},
         "current": {"gpus": 4, "nodes": ["n0"]}},
        {"id": "b", "weight": 1.0, "max_nodes": 1,
         "throughput": {"gpu_type": "a800", "tflops": {"8": 2000.0}},
         "current": {"gpus": 8, "nodes": ["n2"]}},
        {"id": "c", "weight": 1.0, "throughput": {"gpu_type": "a800", "tflops": {"4": 500.0}},
         "current": {"gpus": 4, "nodes": ["n1"]}},
    ],
    "event": {"kind": "failure", "failed_nodes": ["n2"], "failed_gpus": []},
    "cost": {"expected_run_seconds": 36000.0, "default_transition_seconds": 600.0},
}
D_RUN, D_TRANS = 36000.0, 600.0
# a moved (charged), b on n0 (hit, charged), c kept.
MOVE_VALUE = (500 * D_RUN - 500 * D_TRANS) + (2000 * D_RUN - 2000 * D_TRANS) + 500 * D_RUN


def _hand_plan(charge_the_move: bool) -> dict:
    pen_a = 500 * D_TRANS if charge_the_move else 0.0
    jobs = [
        {"id": "a", "previous_gpus": 4, "gpus": 4, "action": "restart", "nodes": ["n1"],
         "placement": [{"node": "n1", "gpus": 4}], "waf_tflops": 500.0, "transition_penalty": pen_a},
        {"id": "b", "previous_gpus": 8, "gpus": 8, "action": "restart", "nodes": ["n0"],
         "placement": [{"node": "n0", "gpus": 8}], "waf_tflops": 2000.0,
         "transition_penalty": 2000 * D_TRANS},
        {"id": "c", "previous_gpus": 4, "gpus": 4, "action": "keep", "nodes": ["n1"],
         "placement": [{"node": "n1", "gpus": 4}], "waf_tflops": 500.0, "transition_penalty": 0.0},
    ]
    objective = 3000 * D_RUN - pen_a - 2000 * D_TRANS
    return {"schema_version": "1", "instance": "stay-rule",
            "status": {"termination": "optimal", "solution": "feasible"},
            "objective": objective, "bound": objective, "d_run_seconds": D_RUN,
            "waf_tflops": 3000.0, "jobs": jobs, "solver": {"name": "hand", "wall_seconds": 0.0}}


def test_uncharged_move_is_invalid():
    report = api.validate_plan(EXAMPLE, _hand_plan(charge_the_move=False))
    assert not report.valid
    assert any("job 'a'" in p and "transition_penalty" in p for p in report.problems), report.problems


def test_charged_move_is_valid_and_solvers_find_it():
    report = api.validate_plan(EXAMPLE, _hand_plan(charge_the_move=True))
    assert report.valid, report.problems
    assert math.isclose(report.objective, MOVE_VALUE)
    for solver in ("milp", "milp-cbc", "cpsat", "auto"):
        plan = api.solve(EXAMPLE, solver=solver)
        assert plan.status.solution == "optimal"
        assert math.isclose(plan.objective, MOVE_VALUE, rel_tol=1e-9), (solver, plan.objective)
        movers = [j for j in plan.jobs if j.id in ("a", "c") and j.action == "restart"]
        assert len(movers) == 1 and movers[0].transition_penalty == pytest.approx(500 * D_TRANS), plan.jobs


def test_unpaid_keep_on_another_split_is_a_restart_not_a_keep():
    plan = _hand_plan(charge_the_move=True)
    plan["jobs"][0]["action"] = "keep"
    report = api.validate_plan(EXAMPLE, plan)
    assert any("action 'keep', expected 'restart'" in p for p in report.problems), report.problems


def test_move_not_worth_its_transition_is_not_taken():
    inst = copy.deepcopy(EXAMPLE)
    # b (hit: charged its own transition) earns 5 x (36,000 - 600) = 177,000, less than the 300,000
    # that moving a or c beside the other would cost: nobody moves and b waits. (At 10 TFLOP/s b
    # earns 354,000, and moving a or c are two equal optima.)
    inst["jobs"][1]["throughput"]["tflops"] = {"8": 5.0}
    for solver in ("milp", "cpsat", "auto"):
        plan = api.solve(inst, solver=solver)
        assert plan.status.solution == "optimal" and math.isclose(plan.objective, 2 * 500 * D_RUN - 5 * D_TRANS), (solver, plan)  # b pays its stop
        kept = {j.id: (j.action, j.nodes) for j in plan.jobs if j.id in ("a", "c")}
        assert kept == {"a": ("keep", ["n0"]), "c": ("keep", ["n1"])}, (solver, kept)


def test_pinned_job_never_moves():
    inst = copy.deepcopy(EXAMPLE)
    inst["jobs"][0]["pinned"] = True
    inst["jobs"][2]["pinned"] = True
    plan = api.solve(inst, solver="milp")
    for j in plan.jobs:
        if j.id != "b":
            assert j.action == "keep", j
    assert plan.objective < MOVE_VALUE
