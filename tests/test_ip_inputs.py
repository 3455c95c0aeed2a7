"""Schema, bad input and infeasibility of the issue-3 constraint fields, through the CLI and the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unicron_plan import api
from unicron_plan.cli import app
from unicron_plan.errors import InfeasibleError, InvalidInstanceError, SolverUnavailableError

HERE = Path(__file__).resolve().parent.parent / "instances"
runner = CliRunner()


def _data(name: str) -> dict:
    return json.loads((HERE / f"{name}.json").read_text())


def _cli_solve(tmp_path, data, *args):
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(data))
    return runner.invoke(app, ["solve", str(path), *args])


def test_schema_documents_the_new_fields():
    result = runner.invoke(app, ["schema", "instance"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    job = schema["$defs"]["Job"]["properties"]
    for name in ("tp", "pinned", "max_nodes", "same_rack", "min_gain_fraction"):
        assert "description" in job[name], name
    assert "description" in schema["properties"]["max_changed_jobs"]


@pytest.mark.parametrize("field, value, path", [
    ("tp", 0, "jobs[0].tp"),
    ("tp", 2.5, "jobs[0].tp"),
    ("max_nodes", 0, "jobs[0].max_nodes"),
    ("min_gain_fraction", -0.1, "jobs[0].min_gain_fraction"),
    ("pinned", "yes", "jobs[0].pinned"),
    ("same_rack", 1, "jobs[0].same_rack"),
])
def test_bad_job_field_exits_2_naming_it(tmp_path, field, value, path):
    data = _data("tiny-one-job-two-nodes")
    data["jobs"][0][field] = value
    result = _cli_solve(tmp_path, data)
    assert result.exit_code == 2
    assert path in result.stderr and "Traceback" not in result.stderr


def test_negative_max_changed_jobs_exits_2(tmp_path):
    data = _data("tiny-one-job-two-nodes")
    data["max_changed_jobs"] = -1
    result = _cli_solve(tmp_path, data)
    assert result.exit_code == 2 and "max_changed_jobs" in result.stderr


@pytest.mark.parametrize("field, value, message", [
    ("tp", 3, "not a multiple of the job's tp 3"),           # 16 GPUs, tp 3
    ("tp", 16, "whole tp groups of 16"),                     # 16 GPUs over two nodes of 8
    ("max_nodes", 1, "exceed the job's max_nodes 1"),        # currently on two nodes
])
def test_current_allocation_must_respect_the_job_constraints(field, value, message):
    data = _data("tiny-one-job-two-nodes")
    data["jobs"][0][field] = value
    with pytest.raises(InvalidInstanceError, match=message) as exc:
        api.load_instance(data)
    assert exc.value.field.startswith("jobs[0].current")


def test_same_rack_violated_by_current_allocation():
    data = _data("tiny-one-job-two-nodes")
    data["cluster"]["nodes"][1]["rack"] = "r1"
    data["jobs"][0]["same_rack"] = True
    with pytest.raises(InvalidInstanceError, match="span several racks"):
        api.load_instance(data)


def test_pinned_job_on_a_drained_node_is_infeasible(tmp_path):
    data = _data("tiny-one-job-two-nodes")  # n1 fails and the job holds GPUs on n1
    data["jobs"][0]["pinned"] = True
    for solver in ("dp", "milp", "cpsat", "auto"):
        with pytest.raises(InfeasibleError, match="pinned"):
            api.solve(data, solver=solver)
    result = _cli_solve(tmp_path, data, "--solver", "milp")
    assert result.exit_code == 1 and "pinned" in result.stderr


def test_more_hit_jobs_than_max_changed_jobs_is_infeasible():
    data = _data("ip-max-changed-jobs")
    data["max_changed_jobs"] = 0  # job a is hit, so at least one job changes
    with pytest.raises(InfeasibleError, match="max_changed_jobs"):
        api.solve(data, solver="milp")


def test_dp_refuses_node_level_constraints_and_says_what_to_use(tmp_path):
    result = _cli_solve(tmp_path, _data("ip-tp-packing"), "--solver", "dp")
    assert result.exit_code == 2
    assert "tp 4" in result.stderr and "auto" in result.stderr
    with pytest.raises(SolverUnavailableError, match="max_changed_jobs"):
        api.solve(_data("ip-max-changed-jobs"), solver="dp")


@pytest.mark.parametrize("solver", ["milp", "milp-cbc", "cpsat", "auto"])
def test_cli_solve_prints_a_plan_that_validates(tmp_path, solver):
    result = _cli_solve(tmp_path, _data("ip-max-nodes"), "--solver", solver, "--threads", "1",
                        "--time-limit", "30")
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)  # stdout is pure JSON (HiGHS's banner is kept off it)
    assert plan["status"] == {"termination": "optimal", "solution": "optimal"}
    assert plan["objective"] == pytest.approx(_data("ip-max-nodes")["reference"]["objective"])
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(result.stdout)
    check = runner.invoke(app, ["validate", str(tmp_path / "inst.json"), str(plan_path)])
    assert check.exit_code == 0, check.stderr


def test_solvers_command_lists_the_ip_backends():
    result = runner.invoke(app, ["solvers"])
    assert result.exit_code == 0
    for name in ("milp", "milp-cbc", "cpsat", "auto"):
        assert name in result.stdout
