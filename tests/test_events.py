"""Event kinds repair, job_arrival and job_exit: solve and validate agree; bad input exits 2 naming the field."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from randgen import random_instance
from unicron_plan import api
from unicron_plan.cli import app
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.solvers.brute import solve as brute_solve
from unicron_plan.core.problem import build_problem

GPU = {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 1600.0, "inter_node_gbps": 200.0}


def two_jobs(event: dict | None, failed_n1=(0, 1, 2, 3, 4, 5, 6, 7), b_gpus=0) -> dict:
    """Two 8-GPU nodes; n1 was down (all GPUs failed) before the event; job a runs on n0."""
    return {
        "schema_version": "1", "name": "ev",
        "cluster": {"gpu_types": {"a800": dict(GPU)}, "nodes": [
            {"id": "n0", "gpu_type": "a800", "gpus": 8},
            {"id": "n1", "gpu_type": "a800", "gpus": 8, "failed_gpus": list(failed_n1)}]},
        "jobs": [
            {"id": "a", "weight": 1.0, "throughput": {"gpu_type": "a800", "tflops": {"8": 1000.0, "16": 1900.0}},
             "current": {"gpus": 8, "nodes": ["n0"]}, "transition_seconds": 600.0},
            {"id": "b", "weight": 1.0, "throughput": {"gpu_type": "a800", "tflops": {"4": 450.0, "8": 880.0}},
             "current": {"gpus": b_gpus, "nodes": ["n0"] if b_gpus else []}}],
        "event": event,
        "cost": {"expected_run_seconds": 36000.0, "default_transition_seconds": 300.0},
    }


def test_repair_lets_a_job_grow_and_hits_nobody():
    inst = two_jobs({"kind": "repair", "repaired_nodes": ["n1"]})
    plan = api.solve(inst)
    assert plan.capacity == {"a800": 16}
    by = {j.id: j for j in plan.jobs}
    # a at 16: 1900*36000 - 1000*600 = 67.8e6; a 8 + b 8: (1000+880)*36000 = 67.68e6
    assert by["a"].gpus == 16 and by["a"].action == "grow" and by["a"].hit is False
    assert plan.objective == pytest.approx(1900 * 36000 - 1000 * 600)
    assert api.validate_plan(inst, plan).valid


def test_repair_of_single_gpus_counts_only_those():
    inst = two_jobs({"kind": "repair", "repaired_gpus": [{"node": "n1", "gpu": 0}, {"node": "n1", "gpu": 5}]},
                    failed_n1=(0, 1, 2, 3, 4, 5))
    plan = api.solve(inst)
    assert plan.capacity == {"a800": 8 + 2 + 2}
    assert api.validate_plan(inst, plan).valid


def test_job_arrival_resumes_the_new_job():
    inst = two_jobs({"kind": "job_arrival", "jobs": ["b"]}, failed_n1=())
    inst["jobs"][1]["throughput"]["tflops"]["8"] = 950.0  # a 8 + b 8 beats a 16 now
    plan = api.solve(inst)
    by = {j.id: j for j in plan.jobs}
    assert by["b"].action == "resume" and by["b"].gpus == 8 and by["a"].action == "keep"
    assert api.validate_plan(inst, plan).valid


def test_job_exit_frees_gpus_and_charges_nothing():
    inst = two_jobs({"kind": "job_exit", "jobs": ["b"]}, failed_n1=(), b_gpus=0)
    inst["jobs"][0]["current"] = {"gpus": 8, "nodes": ["n0"]}
    inst["jobs"][1]["current"] = {"gpus": 8, "nodes": ["n1"]}
    plan = api.solve(inst)
    by = {j.id: j for j in plan.jobs}
    assert by["b"].gpus == 0 and by["b"].transition_penalty == 0.0 and by["b"].gain == 0.0
    assert by["b"].action == "suspend"
    assert by["a"].gpus == 16  # b's node is free now
    assert plan.objective == pytest.approx(1900 * 36000 - 1000 * 600)
    assert api.validate_plan(inst, plan).valid


def test_validator_rejects_a_plan_that_keeps_an_exiting_job():
    inst = two_jobs(None, failed_n1=())
    inst["jobs"][1]["current"] = {"gpus": 8, "nodes": ["n1"]}
    plan = api.solve(inst)  # no event: b keeps its 8 GPUs
    inst["event"] = {"kind": "job_exit", "jobs": ["b"]}
    report = api.validate_plan(inst, plan)
    assert not report.valid
    assert any("job_exit" in p for p in report.problems)


@pytest.mark.parametrize("seed", range(40))
def test_random_events_solve_validate_and_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, max_nodes=3, max_jobs=3)
    kind = ["repair", "job_arrival", "job_exit"][seed % 3]
    inst = copy.deepcopy(inst)
    broken = [n for n in inst["cluster"]["nodes"] if n["failed_gpus"]]
    idle = [j["id"] for j in inst["jobs"] if j["current"]["gpus"] == 0]
    if kind == "repair" and not broken or kind == "job_arrival" and not idle:
        kind = "job_exit"  # nothing to repair / nobody idle: exercise the exit instead
    if kind == "repair":
        inst["event"] = {"kind": "repair", "repaired_nodes": [broken[0]["id"]]}
    elif kind == "job_arrival":
        inst["event"] = {"kind": "job_arrival", "jobs": idle}
    else:
        inst["event"] = {"kind": "job_exit", "jobs": [inst["jobs"][0]["id"]]}
    plan = api.solve(inst)
    report = api.validate_plan(inst, plan)
    assert report.valid, report.problems
    brute = brute_solve(build_problem(api.load_instance(inst)))
    assert plan.objective == pytest.approx(brute.objective, rel=1e-9, abs=1e-6)
    if kind == "job_exit":
        assert next(j for j in plan.jobs if j.id == inst["jobs"][0]["id"]).gpus == 0


BAD = [
    ({"kind": "teleport"}, "event.kind"),
    ({"kind": "repair"}, "event.repaired_nodes"),
    ({"kind": "repair", "repaired_nodes": ["zz"]}, "event.repaired_nodes[0]"),
    ({"kind": "repair", "repaired_nodes": ["n0"]}, "event.repaired_nodes[0]"),  # n0 has no failed GPU
    ({"kind": "repair", "repaired_gpus": [{"node": "n1", "gpu": 9}]}, "event.repaired_gpus[0].gpu"),
    ({"kind": "repair", "repaired_nodes": ["n1"], "failed_nodes": []}, "event.failed_nodes"),
    ({"kind": "job_arrival", "jobs": ["a"]}, "event.jobs[0]"),  # a holds 8 GPUs
    ({"kind": "job_arrival", "jobs": []}, "event.jobs"),
    ({"kind": "job_exit", "jobs": ["a", "a"]}, "event.jobs[1]"),
    ({"kind": "job_exit", "jobs": ["nope"]}, "event.jobs[0]"),
    ({"kind": "job_exit"}, "event.jobs"),
]


@pytest.mark.parametrize("event,field", BAD)
def test_bad_event_raises_naming_the_field(event, field):
    with pytest.raises(InvalidInstanceError) as exc:
        api.solve(two_jobs(event, failed_n1=(1, 2)))
    assert exc.value.field == field


@pytest.mark.parametrize("event,field", BAD[:4] + BAD[6:7])
def test_bad_event_exits_2_on_the_command_line(tmp_path, event, field):
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(two_jobs(event, failed_n1=(1, 2))))
    result = CliRunner().invoke(app, ["solve", str(path)])
    assert result.exit_code == 2
    assert field in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_event_kinds_appear_in_the_json_schema():
    from unicron_plan.schema import Instance

    text = json.dumps(Instance.model_json_schema())
    for kind in ("RepairEvent", "JobArrivalEvent", "JobExitEvent", "repaired_nodes"):
        assert kind in text


@pytest.mark.parametrize("name", ["tiny-repair-grow", "tiny-job-exit"])
def test_library_event_instances_reach_their_recorded_optimum(name):
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "instances" / f"{name}.json"
    inst = api.load_instance(path)
    plan = api.solve(inst)
    assert plan.objective == pytest.approx(inst.reference.objective, rel=1e-12)
    assert api.validate_plan(inst, plan).valid


def test_exiting_jobs_do_not_count_against_max_changed_jobs():
    """A leaving job is never 'changed' (FORMAT terms: charged nothing), so with
    max_changed_jobs = 1 the remaining job may still grow onto the freed node."""
    import json

    from conftest import ROOT
    from unicron_plan import solve, validate_plan

    d = json.loads((ROOT / "instances" / "tiny-job-exit.json").read_text())
    d.pop("reference", None)
    d["max_changed_jobs"] = 1
    for solver in ("auto", "milp", "cpsat"):
        plan = solve(d, solver=solver)
        assert validate_plan(d, plan).valid
        assert {j.id: j.gpus for j in plan.jobs} == {"a": 16, "b": 0}, solver
    d["max_changed_jobs"] = 0
    assert {j.id: j.gpus for j in solve(d, solver="milp").jobs} == {"a": 8, "b": 0}
