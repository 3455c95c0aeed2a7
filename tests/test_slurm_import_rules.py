"""What the Slurm import plans and what it leaves alone: pending jobs waiting for something other
than nodes, job arrays and heterogeneous jobs, nodes out of use for a while (power saving, reboot,
maintenance), nodes in another team's reservation or in no partition of the planned jobs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from unicron_plan import api
from unicron_plan.integrations.agent import AgentConfig, SlurmAgent
from unicron_plan.integrations.common import Cost, GpuMap
from unicron_plan.integrations.slurm import export_slurm, import_slurm

REAL = Path(__file__).parent / "fixtures" / "slurm-22.05"   # n1-n6 run planned jobs 1, 2; n7 drained; n8 idle
COST = Cost(expected_run_seconds=36000)
HEAVY = "unicron-plan: weight=5 throughput=8:100,16:190,24:280,32:360,40:440,48:520"


def _real() -> tuple[dict, dict]:
    return (json.loads((REAL / "sinfo.json").read_text()), json.loads((REAL / "squeue.json").read_text()))


def _job(jobs: dict, job_id: int) -> dict:
    return next(j for j in jobs["jobs"] if j["job_id"] == job_id)


def _node(nodes: dict, name: str) -> dict:
    return next(n for n in nodes["nodes"] if n["name"] == name)


def _import(nodes, jobs, **kw) -> tuple[dict, list[str]]:
    warnings: list[str] = []
    inst = import_slurm(nodes, jobs, cost=COST, gpu_map=GpuMap(), rack_feature="rack", warnings=warnings, **kw)
    return inst, warnings


def _commands(inst: dict, jobs: dict, nodes: dict) -> list[list[str]]:
    plan = api.solve(inst)
    return [c for st in export_slurm(plan, jobs, nodes) for c in st.commands()]


def _pending(reason: str, restart_cnt: int = 0, description: str = "") -> tuple[dict, dict]:
    """The testbed capture with job 3 a heavy planned job, pending for ``reason``."""
    nodes, jobs = _real()
    j3 = _job(jobs, 3)
    j3.update(state_reason=reason, restart_cnt=restart_cnt, state_description=description, comment=HEAVY,
              priority=0 if reason.startswith("JobHeld") else 4294901700)
    return nodes, jobs


# --- pending jobs ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("reason", ["Dependency", "BeginTime", "JobHeldUser", "JobHeldAdmin", "Reservation",
                                    "PartitionNodeLimit", "QOSMaxGRESPerUser", "AssocGrpGRES", "Licenses",
                                    "DependencyNeverSatisfied", "BadConstraints"])
def test_a_job_pending_for_other_than_nodes_is_left_out_and_untouched(reason):
    """Placing it would requeue running jobs for a job that cannot start (a dependency on a job just
    held deadlocks the nodes) or override its owner's hold or --begin: it is left out, named."""
    nodes, jobs = _pending(reason)
    inst, warnings = _import(nodes, jobs)
    assert "3" not in {j["id"] for j in inst["jobs"]}
    assert [w for w in warnings if w.startswith("Job 3:") and reason in w], warnings
    commands = _commands(inst, jobs, nodes)
    assert not [c for c in commands if any(a in ("3", "JobId=3") for a in c)], commands
    without = {**jobs, "jobs": [j for j in jobs["jobs"] if j["job_id"] != 3]}
    assert commands == _commands(_import(nodes, without)[0], without, nodes)   # as if it were not there


@pytest.mark.parametrize("reason,restart_cnt", [("Resources", 0), ("Priority", 0), ("None", 0),
                                                ("ReqNodeNotAvail", 0), ("NodeDown", 0), ("BeginTime", 1),
                                                ("BadConstraints", 1)])
def test_a_job_waiting_for_nodes_or_its_turn_is_planned(reason, restart_cnt):
    """BeginTime after a requeue (restart_cnt > 0) is Slurm's requeue delay, and BadConstraints after one a
    move whose nodes are gone (placed again): planned."""
    nodes, jobs = _pending(reason, restart_cnt)
    inst, warnings = _import(nodes, jobs)
    assert {j["id"]: j for j in inst["jobs"]}["3"]["current"] == {"gpus": 0, "nodes": []}
    assert not warnings


def test_the_planners_own_holds_stay_planned():
    """A job requeued held (the export's suspension) is the planner's hold; a plain hold is the
    planner's only when the caller names it (the agent: the jobs its coordinator keeps idle)."""
    nodes, jobs = _pending("JobHeldUser", 1, "job requeued in held state")
    assert "3" in {j["id"] for j in _import(nodes, jobs)[0]["jobs"]}
    nodes, jobs = _pending("JobHeldAdmin")
    assert "3" not in {j["id"] for j in _import(nodes, jobs)[0]["jobs"]}
    assert "3" in {j["id"] for j in _import(nodes, jobs, own_holds={"3"})[0]["jobs"]}


def test_the_agent_keeps_the_jobs_it_held_planned(tmp_path):
    nodes, jobs = _pending("JobHeldAdmin")
    lines: list[dict] = []
    agent = SlurmAgent(None, AgentConfig(mode="propose", state_dir=tmp_path / "s"), log=lines.append)
    coord = {"jobs": [{"id": "3", "current": {"gpus": 0, "nodes": []}}]}
    assert "3" in {j["id"] for j in agent._import(nodes, jobs, coord)["jobs"]}
    assert not lines
    assert "3" not in {j["id"] for j in agent._import(nodes, jobs, None)["jobs"]}   # not its hold
    assert [rec for rec in lines if "Job 3" in rec.get("warning", "")], lines


def test_a_held_job_on_newer_versions_reads_hold():
    nodes, jobs = _pending("JobHeldUser")
    j3 = _job(jobs, 3)
    j3.update(hold=True, priority={"set": True, "infinite": False, "number": 0},
              restart_cnt={"set": True, "infinite": False, "number": 0})
    assert "3" not in {j["id"] for j in _import(nodes, jobs)[0]["jobs"]}


# --- job arrays and heterogeneous jobs --------------------------------------------------------------------

@pytest.mark.parametrize("fields", [{"array_job_id": 1, "array_task_id": 0, "array_task_string": "0"},
                                    {"array_job_id": 7, "array_task_id": 1, "array_task_string": "1"},
                                    {"array_job_id": {"set": True, "infinite": False, "number": 1},
                                     "array_task_id": {"set": True, "infinite": False, "number": 0}},
                                    {"het_job_id": 1, "het_job_offset": 0, "het_job_id_set": "1-2"},
                                    {"het_job_id": {"set": True, "infinite": False, "number": 1}}])
def test_array_tasks_and_het_components_are_not_planned_and_keep_their_gpus(fields):
    """``scontrol requeuehold 1`` would act on every task of array 1 (or every component of het
    job 1): such a job is work the planner does not manage, its GPUs withheld."""
    nodes, jobs = _real()
    _job(jobs, 1).update(fields)
    inst, warnings = _import(nodes, jobs)
    assert "1" not in {j["id"] for j in inst["jobs"]}
    held = {n["id"]: n["failed_gpus"] for n in inst["cluster"]["nodes"]}
    assert all(held[n] == list(range(8)) for n in ("n1", "n2", "n3"))
    assert [w for w in warnings if w.startswith("Job 1:") and ("array" in w or "heterogeneous" in w)], warnings
    commands = _commands(inst, jobs, nodes)
    assert not [c for c in commands if any(a in ("1", "JobId=1") for a in c)], commands


def test_a_pending_array_record_is_not_planned():
    """One pending record stands for many tasks (array_task_string 0-7): not one job."""
    nodes, jobs = _pending("Resources")
    _job(jobs, 3).update(array_job_id=3, array_task_id=None, array_task_string="0-7")
    inst, warnings = _import(nodes, jobs)
    assert "3" not in {j["id"] for j in inst["jobs"]}
    assert [w for w in warnings if w.startswith("Job 3:") and "array" in w], warnings


# --- nodes out of use for a while, reservations, partitions -------------------------------------------------

@pytest.mark.parametrize("flags", [["POWERED_DOWN"], ["POWER_DOWN"], ["POWERING_DOWN"], ["MAINT"],
                                   ["MAINTENANCE", "RESERVED"], ["REBOOT_REQUESTED"], ["REBOOT_ISSUED"]])
def test_a_node_out_of_use_for_a_while_is_withheld_never_drained(flags):
    nodes, jobs = _real()
    _node(nodes, "n8")["state_flags"] = flags
    inst, warnings = _import(nodes, jobs)
    assert inst["event"]["failed_nodes"] == ["n7"]                  # only Slurm's failure verdict
    assert {n["id"]: n["failed_gpus"] for n in inst["cluster"]["nodes"]}["n8"] == list(range(8))
    assert [w for w in warnings if w.startswith("Node n8:")], warnings
    plan = api.solve(inst)
    assert plan.drained_nodes == ["n7"] and not [pj for pj in plan.jobs if "n8" in pj.nodes]


def test_a_node_of_a_planned_job_is_not_withheld_and_a_failed_one_stays_failed():
    nodes, jobs = _real()
    _node(nodes, "n1")["state_flags"] = ["REBOOT_REQUESTED"]   # job 1 runs there: kept, not drained
    _node(nodes, "n8").update(state="down", state_flags=["POWERED_DOWN"])   # failed to power up
    inst, _ = _import(nodes, jobs)
    assert {j["id"]: j for j in inst["jobs"]}["1"]["current"]["nodes"] == ["n1", "n2", "n3"]
    assert sorted(inst["event"]["failed_nodes"]) == ["n7", "n8"]


def test_a_node_in_another_reservation_is_withheld():
    nodes, jobs = _real()
    _node(nodes, "n8")["state_flags"] = ["RESERVED"]
    inst, warnings = _import(nodes, jobs)
    assert {n["id"]: n["failed_gpus"] for n in inst["cluster"]["nodes"]}["n8"] == list(range(8))
    assert [w for w in warnings if w.startswith("Node n8:") and "reservation" in w], warnings


def test_a_named_reservation_is_offered_only_to_its_jobs():
    """scontrol show nodes names a node's reservation: a planned job in it may use the node."""
    nodes, jobs = _real()
    _node(nodes, "n8").update(state_flags=["RESERVED"], reservation="team-b")
    assert _import(nodes, jobs)[0]["cluster"]["nodes"][-1]["failed_gpus"] == list(range(8))
    _job(jobs, 1)["resv_name"] = "team-b"
    assert _import(nodes, jobs)[0]["cluster"]["nodes"][-1]["failed_gpus"] == []


def test_a_node_in_no_partition_of_the_planned_jobs_is_withheld():
    nodes, jobs = _real()
    _node(nodes, "n8")["partitions"] = ["other"]
    inst, warnings = _import(nodes, jobs)
    assert {n["id"]: n["failed_gpus"] for n in inst["cluster"]["nodes"]}["n8"] == list(range(8))
    assert [w for w in warnings if w.startswith("Node n8:") and "partition" in w], warnings
    _job(jobs, 2)["partition"] = "gpu,other"   # a planned job may run there: offered
    assert {n["id"]: n["failed_gpus"] for n in _import(nodes, jobs)[0]["cluster"]["nodes"]}["n8"] == []


def test_cli_prints_the_warnings(tmp_path):
    from typer.testing import CliRunner

    from unicron_plan.cli import app

    nodes, jobs = _pending("Dependency")
    (tmp_path / "n.json").write_text(json.dumps(nodes))
    (tmp_path / "j.json").write_text(json.dumps(copy.deepcopy(jobs)))
    r = CliRunner().invoke(app, ["import", "slurm", "--nodes", str(tmp_path / "n.json"), "--jobs",
                                 str(tmp_path / "j.json"), "--expected-run-seconds", "36000",
                                 "--out", str(tmp_path / "i.json")])
    assert r.exit_code == 0, r.output
    assert "warning: Job 3: left out, pending, waiting for Dependency" in r.output
