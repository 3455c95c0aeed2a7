"""The validator follows docs/format.md's one rule for "changed" and one for "nodes held"."""

import copy

import pytest

from unicron_plan import load_instance, solve, validate_plan
from unicron_plan.schema import Placement

GPU = {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 600.0, "inter_node_gbps": 25.0}


def _mixed(max_changed_jobs):
    """A running h100 job that keeps its nodes and a queued job of weight 0 that stays idle."""
    return {
        "schema_version": "1", "name": "idle-names-another-type",
        "cluster": {"gpu_types": {"h100": GPU, "a100": GPU}, "nodes": [
            {"id": "h0", "gpu_type": "h100", "gpus": 8}, {"id": "a0", "gpu_type": "a100", "gpus": 8}]},
        "jobs": [
            {"id": "run", "weight": 1.0, "throughput": {"gpu_type": "h100", "tflops": {"8": 3000.0}},
             "current": {"gpus": 8, "nodes": ["h0"]}},
            {"id": "queued", "weight": 0.0, "min_gain_fraction": 0.5,
             "throughput": {"gpu_type": "h100", "by_type": {"h100": {"8": 3100.0}, "a100": {"8": 1000.0}}},
             "current": {"gpus": 0, "nodes": []}}],
        "max_changed_jobs": max_changed_jobs,
        "cost": {"expected_run_seconds": 36000.0, "default_transition_seconds": 600.0}}


def _with_type(plan, job_id, gpu_type):
    out = copy.deepcopy(plan)
    next(j for j in out.jobs if j.id == job_id).gpu_type = gpu_type
    return out


def test_an_idle_job_naming_another_gpu_type_is_not_changed():
    inst = load_instance(_mixed(0))
    plan = solve(inst)
    queued = next(j for j in plan.jobs if j.id == "queued")
    assert queued.action == "idle" and queued.gpus == 0
    other = _with_type(plan, "queued", "a100")
    report = validate_plan(inst, other)
    assert report.valid, report.problems  # 0 GPUs is the same on every type: not counted by max_changed_jobs
    assert validate_plan(inst, _with_type(plan, "queued", "v100")).valid is False  # not one of its types


def test_a_job_running_on_another_gpu_type_is_still_changed():
    doc = _mixed(0)
    doc["jobs"][0]["throughput"] = {"gpu_type": "h100", "by_type": {"h100": {"8": 3000.0}, "a100": {"8": 2900.0}}}
    inst = load_instance(doc)
    plan = solve(inst)
    moved = copy.deepcopy(plan)
    run = next(j for j in moved.jobs if j.id == "run")
    run.gpu_type, run.nodes, run.placement = "a100", ["a0"], [Placement(node="a0", gpus=8)]
    problems = " | ".join(validate_plan(inst, moved).problems)
    assert "max_changed_jobs: 1 jobs changed" in problems and "action 'keep', expected 'restart'" in problems


def _horizon_instance():
    """Job ``j`` lists n0 and n1 but its 8 GPUs fill n0: it holds one node. n0 fails."""
    node = lambda i: {"id": f"n{i}", "gpu_type": "a", "gpus": 8}  # noqa: E731
    return {
        "schema_version": "1", "name": "listed-node-not-held",
        "cluster": {"gpu_types": {"a": GPU}, "nodes": [node(0), node(1), node(2), node(3)]},
        "jobs": [{"id": "j", "weight": 1.0, "throughput": {"gpu_type": "a", "tflops": {"8": 1000.0}},
                  "current": {"gpus": 8, "nodes": ["n0", "n1"]}}],
        "event": {"kind": "failure", "failed_nodes": ["n0"], "failed_gpus": []},
        "cost": {"node_mtbf_hours": 1000.0, "default_transition_seconds": 600.0, "horizon": "job"}}


def test_a_listed_node_where_the_job_holds_no_gpu_is_not_held():
    inst = load_instance(_horizon_instance())
    plan = solve(inst)
    j = next(j for j in plan.jobs if j.id == "j")
    in_service = 3  # n1, n2, n3 after the failure
    held = 1  # n0 only: n1 is listed, but the split puts all 8 GPUs on n0
    assert j.action == "restart"
    assert j.transition_penalty == pytest.approx(1000.0 * 600.0 * held / in_service, rel=1e-12)
    assert validate_plan(inst, plan).valid
    # charging the listed nodes (2) instead is refused, the objective adjusted so only the rule differs
    wrong = copy.deepcopy(plan)
    wj = next(x for x in wrong.jobs if x.id == "j")
    extra = 1000.0 * 600.0 * 2 / in_service - wj.transition_penalty
    wj.transition_penalty += extra
    wj.gain = None
    wrong.objective -= extra
    wrong.bound = wrong.objective
    problems = " | ".join(validate_plan(inst, wrong).problems)
    assert "transition_penalty" in problems and "objective" in problems
