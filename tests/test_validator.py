"""The validator accepts solver plans and rejects corrupted ones, each for the right reason."""

import copy

import pytest

from unicron_plan import load_instance, solve, validate_plan
from unicron_plan.schema import Placement

from conftest import ROOT


@pytest.fixture
def shared():
    inst = load_instance(ROOT / "instances" / "small-shared-node-failure.json")
    return inst, solve(inst)


def _problems(inst, plan):
    report = validate_plan(inst, plan)
    assert not report.valid
    return " | ".join(report.problems)


def test_solver_plan_is_valid(shared):
    inst, plan = shared
    assert validate_plan(inst, plan).valid


def test_rejects_over_capacity(shared):
    inst, plan = shared
    bad = copy.deepcopy(plan)
    j = next(j for j in bad.jobs if j.id == "j3")
    j.gpus, j.placement, j.nodes = 24, [Placement(node="n0", gpus=8), Placement(node="n2", gpus=8),
                                        Placement(node="n3", gpus=8)], ["n0", "n2", "n3"]
    assert "not a count" in _problems(inst, bad)


def test_rejects_over_node_and_type_capacity(shared):
    inst, plan = shared
    bad = copy.deepcopy(plan)
    j1 = next(j for j in bad.jobs if j.id == "j1")
    j1.gpus, j1.placement, j1.nodes = 12, [Placement(node="n0", gpus=12)], ["n0"]
    msg = _problems(inst, bad)
    assert "placed on 8 healthy" in msg and "capacity" in msg


def test_rejects_count_not_in_table(shared):
    inst, plan = shared
    bad = copy.deepcopy(plan)
    j = next(j for j in bad.jobs if j.id == "j3")
    j.gpus = 15
    j.placement = [Placement(node="n2", gpus=8), Placement(node="n3", gpus=7)]
    assert "not a count of its throughput table" in _problems(inst, bad)


def test_rejects_wrong_objective(shared):
    inst, plan = shared
    bad = copy.deepcopy(plan)
    bad.objective += 1.0
    bad.bound += 1.0
    assert "objective" in _problems(inst, bad)


def test_rejects_missing_job(shared):
    inst, plan = shared
    bad = copy.deepcopy(plan)
    bad.jobs = bad.jobs[1:]
    assert "missing from the plan" in _problems(inst, bad)


def test_rejects_job_on_failed_node(shared):
    inst, plan = shared
    bad = copy.deepcopy(plan)
    j = next(j for j in bad.jobs if j.gpus > 0 and j.placement[0].gpus >= 1)
    p = j.placement[0]
    j.placement[0] = Placement(node="n1", gpus=p.gpus)
    j.nodes = [pl.node for pl in j.placement]
    assert "failed or drained" in _problems(inst, bad)


def test_rejects_wrong_action_and_penalty(shared):
    inst, plan = shared
    bad = copy.deepcopy(plan)
    j3 = next(j for j in bad.jobs if j.id == "j3")
    j3.action = "grow"
    j3.transition_penalty = 5.0
    msg = _problems(inst, bad)
    assert "action" in msg and "transition_penalty" in msg


def test_rejects_optimal_claim_with_lower_bound(shared):
    inst, plan = shared
    bad = copy.deepcopy(plan)
    bad.bound = bad.objective - 1000.0
    assert "bound" in _problems(inst, bad)


def test_rejects_unknown_and_duplicate_jobs(shared):
    inst, plan = shared
    bad = copy.deepcopy(plan)
    extra = copy.deepcopy(bad.jobs[0])
    bad.jobs.append(extra)
    ghost = copy.deepcopy(bad.jobs[0])
    ghost.id = "ghost"
    bad.jobs.append(ghost)
    msg = _problems(inst, bad)
    assert "appears twice" in msg and "not a job of the instance" in msg
