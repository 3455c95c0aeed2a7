"""Unit tests of the constraint semantics (unicron_plan/core/constraints.py, docs/solvers.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from unicron_plan import api
from unicron_plan.core.constraints import dp_limitations, hysteresis_threshold
from unicron_plan.core.problem import build_problem

HERE = Path(__file__).resolve().parent.parent / "instances"


def _data(name: str) -> dict:
    return json.loads((HERE / f"{name}.json").read_text())


def test_threshold_is_relative_to_the_stay_term():
    assert hysteresis_threshold(f_x=1000.0, d_run=36000.0, fraction=0.5) == 1.5 * 36_000_000.0
    assert hysteresis_threshold(f_x=0.0, d_run=36000.0, fraction=10.0) == 0.0


@pytest.mark.parametrize("solver", ["dp", "milp", "cpsat"])
def test_queued_job_may_always_resume(solver):
    # G(x) = 0 for a queued job: any fraction of it is 0, so resuming stays allowed.
    data = _data("ip-hysteresis")
    data["jobs"].append({"id": "q", "weight": 1.0, "current": {"gpus": 0, "nodes": []},
                         "throughput": {"gpu_type": "a800", "tflops": {"8": 500.0}},
                         "min_gain_fraction": 10.0})
    plan = api.solve(data, solver=solver)
    by_id = {j.id: j for j in plan.jobs}
    assert by_id["q"].gpus == 8 and by_id["q"].action == "resume"
    assert by_id["a"].gpus == 8 and by_id["a"].action == "keep"


@pytest.mark.parametrize("solver", ["dp", "milp", "cpsat"])
def test_hit_jobs_are_exempt_from_hysteresis(solver):
    data = _data("tiny-one-job-two-nodes")  # the job is hit and must shrink 16 -> 8
    data["jobs"][0]["min_gain_fraction"] = 100.0
    plan = api.solve(data, solver=solver)
    assert plan.jobs[0].gpus == 8
    assert math.isclose(plan.objective, data["reference"]["objective"])


def test_hysteresis_just_below_the_threshold_blocks_and_above_allows():
    data = _data("ip-hysteresis")  # growing: 67.8e6 vs stay 36e6, ratio 1.8833...
    ratio = (1900 * 36000 - 1000 * 600) / (1000 * 36000) - 1
    data["jobs"][0]["min_gain_fraction"] = ratio * (1 - 1e-6)
    assert api.solve(data, solver="dp").jobs[0].gpus == 16
    data["jobs"][0]["min_gain_fraction"] = ratio * (1 + 1e-6)
    assert api.solve(data, solver="dp").jobs[0].gpus == 8


def test_pinned_removes_suspension_and_dp_handles_a_nonzero_first_count():
    problem = build_problem(api.load_instance(HERE / "ip-pinned.json"))
    a = problem.jobs[0]
    assert a.counts.tolist() == [8]
    assert not dp_limitations(problem)  # pinned and hysteresis stay in the DP
    plan = api.solve(HERE / "ip-pinned.json", solver="dp")
    assert [(p.node, p.gpus) for p in plan.jobs[0].placement] == [("n0", 8)]


def test_tp_filters_counts():
    data = _data("tiny-one-job-two-nodes")
    data["event"] = None
    data["jobs"][0]["throughput"]["tflops"] = {"4": 500.0, "6": 700.0, "8": 1100.0, "16": 2150.0}
    data["jobs"][0]["tp"] = 4
    problem = build_problem(api.load_instance(data))
    assert problem.jobs[0].counts.tolist() == [0, 4, 8, 16]


def test_trivial_limits_do_not_force_an_ip_backend():
    data = _data("tiny-one-job-two-nodes")
    data["jobs"][0]["max_nodes"] = 2   # only n0 is left after the event
    data["jobs"][0]["same_rack"] = True  # one rack
    data["max_changed_jobs"] = 1       # one job
    problem = build_problem(api.load_instance(data))
    assert dp_limitations(problem) == []
    assert api.solve(data, solver="auto").solver.options["backend"] == "dp"


def test_unhit_job_keeping_its_count_pays_for_a_move_under_node_level_constraints():
    # a (max_nodes 2) wants a whole node: one of b and c moves beside the other, a change
    # that pays its transition (500 * 600); the other keeps its split for free.
    plan = api.solve(HERE / "ip-max-nodes.json", solver="milp")
    by_id = {j.id: j for j in plan.jobs}
    actions = sorted(by_id[j].action for j in ("b", "c"))
    assert actions == ["keep", "restart"]
    mover = next(by_id[j] for j in ("b", "c") if by_id[j].action == "restart")
    assert mover.transition_penalty == 500 * 600
    assert [(p.node, p.gpus) for p in by_id["a"].placement] == [("n1", 8), (mover.id == "b" and "n2" or "n3", 8)]


def test_cpsat_reports_its_scaling_error():
    plan = api.solve(HERE / "ip-tp-packing.json", solver="cpsat")
    opts = plan.solver.options
    assert opts["scale"] > 0 and math.log2(opts["scale"]) == int(math.log2(opts["scale"]))
    assert 0 <= opts["max_rounding_error"] <= len(plan.jobs) / (2 * opts["scale"])


@pytest.mark.parametrize("solver", ["milp", "milp-cbc", "cpsat", "auto"])
def test_degenerate_instances(solver):
    data = _data("tiny-one-job-two-nodes")
    data.pop("reference")
    empty = dict(data, jobs=[])
    assert api.solve(empty, solver=solver).objective == 0.0
    # A queued job whose only count cannot be packed (tp 8, 64 GPUs) and a churn limit of 0.
    data["jobs"][0].update(throughput={"gpu_type": "a800", "tflops": {"64": 1.0}},
                           current={"gpus": 0, "nodes": []}, tp=8)
    data["max_changed_jobs"] = 0
    plan = api.solve(data, solver=solver)
    assert plan.objective == 0.0 and plan.jobs[0].action == "idle"
