"""The validator accepts solver plans and rejects corrupted ones, each for the right reason."""

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unicron_plan import load_instance, solve, validate_plan
from unicron_plan.schema import Placement

from conftest import ROOT


@pytest.fixture
def shared():
    inst = load_instance(ROOT / "instances" / "small-shared-node-failure.json")
    return inst, solve(inst)


_INST = load_instance(ROOT / "instances" / "small-shared-node-failure.json")
_SHARED = (_INST, solve(_INST))


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


def test_rejects_two_jobs_overfilling_a_node_they_share(shared):
    inst, plan = shared
    bad = copy.deepcopy(plan)
    j2 = next(j for j in bad.jobs if j.id == "j2")  # j1 and j2 share n0 (4 + 4 of 8)
    j2.placement = [Placement(node="n0", gpus=4), Placement(node="n2", gpus=4)]
    j2.nodes = ["n0", "n2"]
    j2.gpus = 8
    assert "node 'n2': 12 GPUs placed on 8 healthy GPUs" in _problems(inst, bad)


def test_rejects_unknown_node_repeated_node_and_huge_share_without_raising(shared):
    inst, plan = shared
    bad = copy.deepcopy(plan)
    j3 = next(j for j in bad.jobs if j.id == "j3")
    j3.placement = [Placement(node="n2", gpus=8), Placement(node="n2", gpus=8), Placement(node="ghost", gpus=1)]
    j1 = next(j for j in bad.jobs if j.id == "j1")
    j1.placement, j1.nodes = [Placement(node="n0", gpus=2**70)], ["n0"]
    msg = _problems(inst, bad)
    assert "node 'n2' appears twice" in msg and "unknown node 'ghost'" in msg
    assert f"node 'n2': 16 GPUs placed on 8" in msg and f"node 'n0': {2**70 + 4} GPUs placed on 8" in msg


def test_rejects_a_node_of_another_gpu_type():
    gpu = {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 1600.0, "inter_node_gbps": 200.0}
    inst = load_instance({
        "schema_version": "1", "name": "two-types",
        "cost": {"default_transition_seconds": 60.0, "expected_run_seconds": 3600.0},
        "cluster": {"gpu_types": {"a800": gpu, "h800": gpu}, "nodes": [
            {"id": "a0", "gpu_type": "a800", "gpus": 8}, {"id": "h0", "gpu_type": "h800", "gpus": 8}]},
        "jobs": [{"id": "j", "weight": 1.0, "throughput": {"gpu_type": "a800", "tflops": {"4": 400.0, "8": 700.0}},
                  "current": {"gpus": 8, "nodes": ["a0"]}}]})
    plan = solve(inst)
    bad = copy.deepcopy(plan)
    bad.jobs[0].placement, bad.jobs[0].nodes = [Placement(node="h0", gpus=8)], ["h0"]
    assert "node 'h0' has GPU type 'h800'" in _problems(inst, bad)


def test_rejects_the_same_faults_on_the_state_of_a_prepared_cluster(shared):
    """The service validates on a state derived from a prepared cluster (healthy nodes shared)."""
    from unicron_plan.core.problem import build_problem, prepare
    from unicron_plan.plan.validate import validate_plan as check

    inst, plan = shared
    problem = build_problem(inst, prepare(inst))
    assert problem.state.touched is not None  # the shared-healthy path is the one checked
    assert check(inst, plan, derived=problem.derived()).valid
    bad = copy.deepcopy(plan)
    j2 = next(j for j in bad.jobs if j.id == "j2")
    j2.placement, j2.nodes, j2.gpus = [Placement(node="n1", gpus=4), Placement(node="n0", gpus=4)], ["n0", "n1"], 8
    j1 = next(j for j in bad.jobs if j.id == "j1")
    j1.placement, j1.nodes, j1.gpus = [Placement(node="n0", gpus=8)], ["n0"], 8
    msg = " | ".join(check(inst, bad, derived=problem.derived()).problems)
    assert "node 'n1' is failed or drained" in msg and "node 'n0': 12 GPUs placed on 8" in msg


def test_rejects_wrong_gain_hit_and_gap(shared):
    inst, plan = shared
    assert any(j.hit for j in plan.jobs) and any(not j.hit for j in plan.jobs)
    bad = copy.deepcopy(plan)
    bad.jobs[0].gain = bad.jobs[0].gain + 1000.0
    assert f"job {bad.jobs[0].id!r}: gain" in _problems(inst, bad)
    for k in range(len(plan.jobs)):
        bad = copy.deepcopy(plan)
        bad.jobs[k].hit = not bad.jobs[k].hit
        assert f"job {bad.jobs[k].id!r}: hit" in _problems(inst, bad)
    bad = copy.deepcopy(plan)
    bad.gap = 0.25
    assert "gap: 0.25" in _problems(inst, bad)
    # a time-limited plan: a bound above the objective with its true gap is accepted, a wrong gap is not
    loose = copy.deepcopy(plan)
    loose.status.termination, loose.status.solution = "time_limit", "feasible"
    loose.bound = plan.objective * 1.5
    loose.gap = (loose.bound - loose.objective) / loose.bound
    assert validate_plan(inst, loose).valid
    loose.gap = 0.0
    assert "gap" in _problems(inst, loose)


def test_omitted_gain_hit_and_gap_are_not_required(shared):
    inst, plan = shared
    bare = copy.deepcopy(plan)
    bare.gap = None
    for j in bare.jobs:
        j.hit = j.gain = None
    assert validate_plan(inst, bare).valid


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_single_wrong_gain_hit_or_gap_is_rejected(data):
    inst, plan = _SHARED
    bad = copy.deepcopy(plan)
    field = data.draw(st.sampled_from(["gain", "hit", "gap"]))
    if field == "gap":
        bad.gap = data.draw(st.floats(min_value=1e-6, max_value=10.0))
    else:
        k = data.draw(st.integers(0, len(bad.jobs) - 1))
        if field == "hit":
            bad.jobs[k].hit = not bad.jobs[k].hit
        else:
            delta = data.draw(st.floats(min_value=1e-4, max_value=1e3)) * max(abs(bad.jobs[k].gain), 1.0)
            bad.jobs[k].gain += delta if data.draw(st.booleans()) else -delta
    assert not validate_plan(inst, bad).valid


def test_rejects_drained_nodes_other_than_the_events(shared):
    # an export drains the plan's drained_nodes: they must be exactly the event's (healthy nodes added,
    # a drained node left out, one listed twice are each refused); the order is free
    inst, plan = shared
    assert plan.drained_nodes, "the instance's event drains a node"
    healthy = next(n.id for n in inst.cluster.nodes if n.id not in plan.drained_nodes)
    for listed, says in [([*plan.drained_nodes, healthy], "the event does not drain"),
                         (plan.drained_nodes[1:], "the event drains are not listed"),
                         ([*plan.drained_nodes, plan.drained_nodes[0]], "listed twice")]:
        bad = copy.deepcopy(plan)
        bad.drained_nodes = listed
        assert says in _problems(inst, bad), listed
    fine = copy.deepcopy(plan)
    fine.drained_nodes = list(reversed(plan.drained_nodes))
    assert validate_plan(inst, fine).valid


def test_rejects_capacity_other_than_the_events(shared):
    inst, plan = shared
    bad = copy.deepcopy(plan)
    bad.capacity = {t: c + 8 for t, c in plan.capacity.items()}
    assert "capacity:" in _problems(inst, bad)
