"""Contract tests: every library instance solves to its recorded optimum and validates."""

import math

import pytest

from conftest import library_instances
from unicron_plan import load_instance, solve, validate_plan


@pytest.mark.parametrize("path", library_instances(), ids=lambda p: p.stem)
def test_library_instance_reaches_recorded_optimum(path):
    inst = load_instance(path)
    assert inst.reference is not None, "library instances record their optimum"
    plan = solve(inst, solver="auto")  # dp where it is exact; every backend: tests/test_ip_contract.py
    assert math.isclose(plan.objective, inst.reference.objective, rel_tol=1e-9, abs_tol=1e-6)
    assert plan.status.termination == "optimal" and plan.status.solution == "optimal"
    report = validate_plan(inst, plan)
    assert report.valid, report.problems
    assert {j.id for j in plan.jobs} == {j.id for j in inst.jobs}


def test_library_has_tiny_to_2048_gpus():
    sizes = [sum(n.gpus for n in load_instance(p).cluster.nodes) for p in library_instances()]
    assert len(sizes) >= 12 and min(sizes) <= 8 and max(sizes) >= 2048


def test_worked_example_of_the_format(tiny_instance):
    plan = solve(tiny_instance)
    assert plan.objective == 1100.0 * 36000 - 2150.0 * 420
    (job,) = plan.jobs
    assert (job.action, job.gpus, job.nodes, job.transition_penalty) == ("shrink", 8, ["n0"], 903000.0)
    assert [(p.node, p.gpus) for p in job.placement] == [("n0", 8)]


def test_model_derived_instance_reports_layouts():
    from conftest import ROOT

    inst = load_instance(ROOT / "instances" / "model-derived-128-a800.json")
    plan = solve(inst)
    running = [j for j in plan.jobs if j.gpus > 0]
    assert running
    for j in running:
        lay = j.parallelism
        assert lay["tp"] * lay["pp"] * lay["dp"] == j.gpus
    assert all(j.parallelism is None for j in plan.jobs if j.gpus == 0)
