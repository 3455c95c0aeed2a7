"""The Slurm export of a plan the cluster no longer matches: refused before anything is written
(one line naming the plan's field and what changed), and a script that fails never leaves a job
it held or requeue-held held."""

from __future__ import annotations

import copy
import subprocess
import sys

import hostlist
import pytest

from test_slurm_formats import COST, _real, _run_with_fakes
from unicron_plan import api
from unicron_plan.integrations.common import GpuMap
from unicron_plan.integrations.slurm import STALE, StalePlan, export_slurm, import_slurm, render_script

THROUGHPUT = "8:100,16:190,24:280,32:360,40:440,48:520,56:600,64:680"


def _node(name, state="idle", flags=(), partitions=("gpu",), **extra):
    n = copy.deepcopy(_real()[0]["nodes"][0])
    n.update(name=name, state=state, state_flags=list(flags), gres="gpu:h100:8", features="rack1",
             active_features="rack1", reason="", partitions=list(partitions))
    n.update(extra)
    return n


def _job(jid, nodes, state="RUNNING", weight=1, comment=None, **extra):
    j = copy.deepcopy(_real()[1]["jobs"][0])
    count = len(hostlist.expand_hostlist(nodes))
    j.update(job_id=jid, nodes=nodes, job_state=state, state_reason="None", node_count=count, tasks=count,
             tres_per_node="gres:gpu:h100:8", tres_alloc_str=f"cpu={count},node={count},gres/gpu={8 * count}",
             gres_detail=["gpu:h100:8(IDX:0-7)"] * count, partition="gpu", resv_name="",
             comment=comment if comment is not None else f"unicron-plan: weight={weight} throughput={THROUGHPUT}")
    j.update(extra)
    return j


def _docs(nodes, jobs):
    n, j = _real()
    n["nodes"], j["jobs"] = nodes, jobs
    return n, j


def _cluster():
    """n1 failed under job 1 (n1-n3), job 2 on n4-n6, n7 and n8 idle: the plan grows job 1 onto
    n2-n8 and suspends job 2, and drains n1."""
    nodes = [_node("n1", "down")] + [_node(f"n{i}", "mixed") for i in range(2, 7)] + [_node("n7"), _node("n8")]
    jobs = [_job(1, "n[1-3]", weight=2), _job(2, "n[4-6]")]
    return nodes, jobs


def _plan(nodes, jobs):
    plan = api.solve(import_slurm(*_docs(nodes, jobs), cost=COST, gpu_map=GpuMap(), rack_feature="rack"))
    by_id = {pj.id: pj for pj in plan.jobs}
    assert plan.drained_nodes == ["n1"]
    assert by_id["1"].action == "grow" and sorted(p.node for p in by_id["1"].placement) == [f"n{i}" for i in
                                                                                           range(2, 9)]
    assert by_id["2"].action == "suspend"
    return plan


def _refused(plan, nodes, jobs, match):
    with pytest.raises(StalePlan, match=match) as err:
        export_slurm(plan, *reversed(_docs(nodes, jobs)))
    assert str(err.value).endswith(STALE)


def test_the_plan_made_from_the_same_documents_is_exported():
    nodes, jobs = _cluster()
    steps = export_slurm(_plan(nodes, jobs), *reversed(_docs(nodes, jobs)))
    assert [s.kind for s in steps] == ["drain", "requeue", "suspend", "place", "start"]


def test_a_placement_on_a_node_now_down_is_refused():
    nodes, jobs = _cluster()
    plan = _plan(nodes, jobs)
    nodes[7] = _node("n8", "down")
    _refused(plan, nodes, jobs, r"jobs\[0\]\.placement\[6\]\.node: node n8 is now DOWN")
    nodes[7] = _node("n8", "idle", ["DRAIN"])
    _refused(plan, nodes, jobs, "node n8 is now DRAIN")


def test_a_placement_on_nodes_now_held_by_other_work_is_refused():
    nodes, jobs = _cluster()
    plan = _plan(nodes, jobs)
    now = jobs + [_job(9, "n[7-8]", comment="evaluation")]
    _refused(plan, nodes, now, "node n7 is held by job 9, which the plan does not manage")


@pytest.mark.parametrize("state", ["COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"])
def test_a_change_of_a_job_that_has_ended_is_refused(state):
    nodes, jobs = _cluster()
    plan = _plan(nodes, jobs)
    now = [_job(1, "n[1-3]", weight=2, state=state), jobs[1]]
    _refused(plan, nodes, now, rf"jobs\[\d\]\.action: the plan changes job 1 \(grow\), which has ended \({state}\)")
    # a suspension of a job that has ended is what a plan after its exit asks: nothing to refuse
    now = [_job(1, "n[1-3]", weight=2), _job(2, "n[4-6]", state=state)]
    assert [pj.action for pj in plan.jobs if pj.id == "2"] == ["suspend"]
    export_slurm(plan, *reversed(_docs(nodes, now)))


@pytest.mark.parametrize("state", ["COMPLETING", "SPECIAL_EXIT", "STOPPED"])
def test_a_change_of_a_job_neither_running_nor_pending_is_refused(state):
    nodes, jobs = _cluster()
    plan = _plan(nodes, jobs)
    now = [_job(1, "n[1-3]", weight=2, state=state), jobs[1]]
    _refused(plan, nodes, now, rf"job 1 \(grow\), which is no longer running or pending \({state}\)")


def test_a_change_of_a_job_no_longer_in_squeue_is_refused():
    nodes, jobs = _cluster()
    plan = _plan(nodes, jobs)
    _refused(plan, nodes, jobs[1:], r"jobs\[\d\]\.id: job '1' is not in the jobs file")


def test_a_drain_of_a_node_in_service_again_is_refused_unless_kept():
    nodes, jobs = _cluster()
    plan = _plan(nodes, jobs)
    nodes[0] = _node("n1", "idle")
    _refused(plan, nodes, jobs, r"drained_nodes\[0\]: node n1 is in service again \(IDLE\)")
    # the agent's coordinator takes nodes out on in-band verdicts Slurm does not see: kept
    steps = export_slurm(plan, *reversed(_docs(nodes, jobs)), by_agent=True)
    assert steps[0].kind == "drain" and steps[0].node == "n1"


def test_a_placement_outside_the_job_partition_or_in_another_reservation_is_refused():
    nodes, jobs = _cluster()
    plan = _plan(nodes, jobs)
    other = copy.deepcopy(nodes)
    other[6] = _node("n7", partitions=["other"])
    _refused(plan, other, jobs, "node n7 is in partition other, not in job 1's gpu")
    reserved = copy.deepcopy(nodes)
    reserved[7] = _node("n8", flags=["RESERVED"])             # 22.05: the flag, no name
    _refused(plan, reserved, jobs, r"node n8 is in reservation \(RESERVED\), which job 1 does not use")
    named = copy.deepcopy(nodes)
    named[7] = _node("n8", reservation="team-b")              # 23.02 and later: its name
    _refused(plan, named, jobs, "node n8 is in reservation team-b, which job 1 does not use")
    # the job's own reservation, and the agent's around a move, are not another team's
    own = [_job(1, "n[1-3]", weight=2, resv_name="team-b"), jobs[1]]
    assert export_slurm(plan, *reversed(_docs(named, own)))
    named[7] = _node("n8", reservation="unicron-p17")
    assert export_slurm(plan, *reversed(_docs(named, jobs)))


def test_the_cli_refuses_a_stale_plan_with_exit_2_and_writes_nothing(tmp_path):
    import json

    nodes, jobs = _cluster()
    plan = _plan(nodes, jobs)
    nodes[7] = _node("n8", "down")
    n, j = _docs(nodes, jobs)
    (tmp_path / "plan.json").write_text(plan.model_dump_json())
    (tmp_path / "nodes.json").write_text(json.dumps(n))
    (tmp_path / "jobs.json").write_text(json.dumps(j))
    r = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "export", "slurm", "plan.json", "--jobs",
                        "jobs.json", "--nodes", "nodes.json", "--out", "apply.sh"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: plan jobs[0].placement[6].node: node n8 is now DOWN; {STALE}"]
    assert not (tmp_path / "apply.sh").exists() and not r.stdout


FAIL_AFTER_HOLDS = """#!/usr/bin/env python3
import json, os, sys
tool = os.path.basename(sys.argv[0])
with open(os.environ["ARGV_LOG"], "a") as f:
    f.write(json.dumps([tool] + sys.argv[1:]) + "\\n")
if tool == "squeue":
    job = sys.argv[sys.argv.index("-j") + 1]
    print({"2": "RUNNING n[4-6]", "3": "PENDING "}.get(job, "RUNNING n[1-3]"))
if tool == "scontrol" and sys.argv[1:2] == ["update"] and "JobId=1" in sys.argv:
    sys.exit(1)
"""


def test_a_failed_script_releases_every_job_it_held(tmp_path, monkeypatch):
    """Job 3 pending (the plan keeps it idle: held), job 2 suspended (requeue-held), job 1's
    placement fails: the script releases 3, 2 and 1 before it exits 1."""
    import test_slurm_formats

    nodes, jobs = _cluster()
    plan = _plan(nodes, jobs)
    steps = export_slurm(plan, *reversed(_docs(nodes, jobs)))
    from unicron_plan.integrations.slurm import Step

    steps.insert(1, Step("hold", job=3))
    monkeypatch.setattr(test_slurm_formats, "FAKE", FAIL_AFTER_HOLDS)
    calls = _run_with_fakes(render_script(steps), tmp_path, exit_code=1)
    assert ["scontrol", "hold", "3"] in calls and ["scontrol", "requeuehold", "2"] in calls
    released = {c[2] for c in calls if c[1] == "release"}
    assert {"1", "2", "3"} <= released
    last_hold = max(i for i, c in enumerate(calls) if c[1] in ("hold", "requeuehold"))
    assert calls[-len(released):] == [["scontrol", "release", j] for j in ("3", "1", "2")]
    assert last_hold < len(calls) - len(released)


@pytest.mark.parametrize("mode", ["apply", "propose"])
def test_the_agent_does_nothing_with_a_plan_slurm_no_longer_matches(tmp_path, mode):
    """The agent's plan (journaled, or just posted) is exported on what Slurm shows now: a stale one
    runs no command and writes no script; the journal says drift, so the next pass plans afresh."""
    import json

    from unicron_plan.integrations.agent import AgentConfig, SlurmAgent, SlurmCli

    nodes, jobs = _cluster()
    plan = json.loads(_plan(nodes, jobs).model_dump_json())
    plan.update(plan_id="p1", revision=2)
    nodes[7] = _node("n8", "down")

    class Cli(SlurmCli):
        def __init__(self):
            super().__init__()
            self.calls = []

        def read(self):
            return _docs(copy.deepcopy(nodes), copy.deepcopy(jobs))

        def run(self, argv, record=False):
            self.calls.append(argv)
            return ""

    class Client:
        def state(self):
            return {"revision": 2, "instance": None}

        def put_cluster(self, inst):
            return {"revision": 3}

        def post_event(self, event, idempotency_key=None, dry_run=False):
            return plan

    cli, logs = Cli(), []
    agent = SlurmAgent(Client(), AgentConfig(mode=mode, state_dir=tmp_path / "s"), cli=cli, log=logs.append)
    if mode == "apply":
        agent.journal.save({"status": "carrying", "plan": plan, "commands": []})
    result = agent.run_once()
    assert result["status"] == "not-reached" and "node n8 is now DOWN" in result["drift"][0], result
    assert cli.calls == []
    assert json.loads((tmp_path / "s" / "journal.json").read_text()) == {"status": "drift", "plan_id": "p1"}
    assert not list((tmp_path / "s").glob("proposal-*"))
