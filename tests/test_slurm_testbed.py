"""End to end on the real Slurm testbed (scripts/slurm-testbed up): planned jobs run, a node
goes DOWN, the agent's pass carries the plan out, every planned job runs on the plan's nodes,
the coordinator's state equals Slurm; the node returns and the plan grows back; an agent
killed between two commands and restarted reaches the same end state.

Skipped when no testbed answers; under CI=true a missing testbed is a failure."""

from __future__ import annotations

import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servers import Server
from slurmbed import (coordinator_view as _coordinator_view, node_of as _node_of, node_states as _node_states,
                      plan_of as srv_plan, require_testbed, reset as _reset, sbatch, sh as _sh,
                      slurm_view as _slurm_view, submit as _submit, wait_running as _wait_running, wait_until)

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def slurm_env():
    yield require_testbed()


def _agent(url: str, state_dir: Path):
    from slurmbed import agent

    return agent(url, state_dir)


def _scenario(tmp_path: Path):
    """Two planned 3-node jobs (weights 2 and 1) and an unplanned 4-GPU job; the coordinator
    knows the cluster. Returns (server, agent, jobs)."""
    _reset()
    a, b = _submit(3, 2), _submit(3, 1)
    u = _submit(1, 0, planned=False, gpus=4)
    _wait_running([a, b, u])
    srv = Server(tmp_path / "coord").start()
    try:
        agent = _agent(srv.url, tmp_path / "agent")
        first = agent.run_once()
        assert first["status"] == "in-sync", first
        assert _coordinator_view(srv.url) == _slurm_view()
    except BaseException:
        srv.stop()
        raise
    return srv, agent, (a, b, u)


def _fail_a_node(srv, agent, job: int) -> tuple[float, dict, str, dict, dict, set]:
    """Set the node of ``job`` DOWN and run one agent pass: (seconds from DOWN to the pass's end,
    its result, the node, the applied plan, Slurm's jobs, Slurm's failed nodes), with the cluster
    checked against the plan and the coordinator, and the operator's drain reason kept."""
    down = _node_of(job)
    t0 = time.monotonic()
    _sh("scontrol", "update", f"NodeName={down}", "State=DOWN", "Reason=gpu-xid-79")
    result = agent.run_once()
    elapsed = time.monotonic() - t0
    assert result["status"] == "applied", result
    plan = srv_plan(srv.url, result["plan_id"])
    jobs, failed = _slurm_view()
    for pj in plan["jobs"]:
        assert jobs[pj["id"]] == (pj["gpus"], set(pj["nodes"])), (pj, jobs)
    assert down in failed and down in plan["drained_nodes"]
    coord = _coordinator_view(srv.url)
    assert coord == (jobs, failed), (coord, jobs, failed, result)
    reason = _sh("sinfo", "-h", "-N", "-n", down, "-o", "%E").strip()
    assert reason.startswith("gpu-xid-79") and "unicron-plan" in reason  # the operator's reason kept
    return elapsed, result, down, plan, jobs, failed


def _fail_and_recover(tmp_path: Path) -> tuple[float, dict, str]:
    srv, agent, (a, b, u) = _scenario(tmp_path)
    try:
        elapsed, result, down, _, _, _ = _fail_a_node(srv, agent, a)
        return elapsed, result, down
    finally:
        srv.stop()


def test_failure_plan_commands_cluster_equals_plan_then_grow_back(slurm_env, tmp_path):
    srv, agent, (a, b, u) = _scenario(tmp_path)
    try:
        elapsed, _, down, plan, jobs, failed = _fail_a_node(srv, agent, a)   # every planned job RUNNING
        busy_u = set(_sh("squeue", "-h", "-j", str(u), "-o", "%N").split())
        assert all(not (set(pj["nodes"]) & busy_u) for pj in plan["jobs"])   # no planned node to another job
        assert agent.run_once()["status"] == "in-sync"   # a second pass changes nothing

        # the node returns (the operator resumes it): the plan grows back onto it
        _sh("scontrol", "update", f"NodeName={down}", "State=RESUME")
        wait_until(lambda: _node_states()[down] in ("idle", "mixed", "allocated"), 60,   # responding, no DOWN or DRAIN
                   lambda: f"node {down} not back in service: {_node_states()}")
        grown = agent.run_once()
        assert grown["status"] == "applied", grown
        plan = srv_plan(srv.url, grown["plan_id"])
        jobs, failed = _slurm_view()
        assert down not in failed
        assert sum(g for g, _ in jobs.values()) == 56  # the planned jobs fill the seven nodes the unplanned job leaves whole
        assert any(down in pj["nodes"] for pj in plan["jobs"])
        assert _coordinator_view(srv.url) == (jobs, failed)
    finally:
        srv.stop()


def test_agent_killed_mid_plan_finishes_it(slurm_env, tmp_path):
    """kill -9 right after the agent's first Slurm command; a new agent process finishes the
    plan from the journal and no job is requeued twice."""
    srv, agent, (a, b, u) = _scenario(tmp_path)
    try:
        down = _node_of(a)
        _sh("scontrol", "update", f"NodeName={down}", "State=DOWN", "Reason=gpu-xid-79")
        cmd = [sys.executable, "-m", "unicron_plan.cli", "agent", "slurm", "--coordinator", srv.url, "--once",
               "--state-dir", str(tmp_path / "agent")]
        journal = tmp_path / "agent" / "journal.json"
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=slurm_env)
        deadline = time.monotonic() + 60
        killed_after = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                j = json.loads(journal.read_text())
            except (OSError, ValueError):
                j = {}
            if j.get("commands"):
                os.kill(proc.pid, signal.SIGKILL)
                killed_after = list(j["commands"])
                break
            time.sleep(0.02)
        proc.wait(30)
        assert killed_after, "the agent was killed after its first command"
        r = subprocess.run(cmd, capture_output=True, text=True, env=slurm_env, timeout=180)
        assert r.returncode == 0, r.stderr
        result = json.loads(r.stdout)
        assert result["status"] == "applied", result
        commands = result["commands"]
        requeues = [c[2] for c in commands if c[1] == "requeuehold"]
        assert len(requeues) == len(set(requeues)), commands
        plan = srv_plan(srv.url, result["plan_id"])
        jobs, failed = _slurm_view()
        for pj in plan["jobs"]:
            assert jobs[pj["id"]] == (pj["gpus"], set(pj["nodes"])), (pj, jobs)
        assert _coordinator_view(srv.url) == (jobs, failed)
    finally:
        srv.stop()


@pytest.mark.slow
def test_time_from_node_down_to_planned_jobs_running(slurm_env, tmp_path):
    """Median of 5: node DOWN -> the agent's pass returns with every planned job RUNNING on
    its planned nodes (a measurement, printed for docs/integrations.md; each round checks the
    cluster against the plan)."""
    times = []
    for k in range(5):
        elapsed, result, down = _fail_and_recover(tmp_path / f"r{k}")
        times.append(elapsed)
        print(f"round {k}: {elapsed:.2f} s, node {down}, commands {json.dumps(result['commands'])}")
    print(f"median {statistics.median(times):.2f} s of {[round(t, 2) for t in times]}")


def test_a_planned_job_with_an_invalid_comment_is_skipped_and_the_others_planned(slurm_env, tmp_path):
    """A planned job whose comment is invalid (weight=heavy) among two good ones: every pass logs one
    line naming it and goes on; a node of a good job fails, the pass carries the plan out for the
    others, and the bad job keeps running on its node, which no planned job is given."""
    from unicron_plan.client import PlannerClient
    from unicron_plan.integrations.agent import AgentConfig, SlurmAgent

    _reset()
    a, b = _submit(3, 2), _submit(3, 1)
    bad = sbatch("-N", "1", "--gres=gpu:h100:8", "--comment", "unicron-plan: weight=heavy throughput=8:100",
                 "--wrap", "sleep 3600")
    _wait_running([a, b, bad])
    bad_node = _node_of(bad)
    srv = Server(tmp_path / "coord").start()
    lines: list[dict] = []
    try:
        agent = SlurmAgent(PlannerClient(srv.url), AgentConfig(state_dir=tmp_path / "agent", verify_seconds=60),
                           log=lines.append)
        for step in ("in-sync", "applied"):
            if step == "applied":
                _sh("scontrol", "update", f"NodeName={_node_of(a)}", "State=DOWN", "Reason=gpu-xid-79")
            lines.clear()
            result = agent.run_once()
            assert result["status"] == step, (result, lines)
            skipped = [rec for rec in lines if "skipped" in rec]
            assert len(skipped) == 1 and skipped[0]["skipped"] == f"Job {bad}", lines
            assert "comment (weight)" in skipped[0]["why"], skipped
        plan = srv_plan(srv.url, result["plan_id"])
        assert {pj["id"] for pj in plan["jobs"]} == {str(a), str(b)}
        jobs, _ = _slurm_view(on_bad_job=lambda obj, exc: None)
        for pj in plan["jobs"]:
            assert jobs[pj["id"]] == (pj["gpus"], set(pj["nodes"])), (pj, jobs)
            assert bad_node not in pj["nodes"]
        assert _node_of(bad) == bad_node   # the skipped job is left alone
    finally:
        srv.stop()


def test_propose_mode_writes_the_plan_and_changes_nothing(slurm_env, tmp_path):
    srv, agent, (a, b, u) = _scenario(tmp_path)
    try:
        down = _node_of(a)
        _sh("scontrol", "update", f"NodeName={down}", "State=DOWN", "Reason=gpu-xid-79")
        time.sleep(2)  # Slurm's own reaction (the job on the node requeued) first
        before = _sh("squeue", "-h", "-o", "%i %T %N")
        agent.cfg.mode = "propose"
        result = agent.run_once()
        assert result["status"] == "proposed", result
        out = Path(result["dir"])
        assert json.loads((out / "plan.json").read_text())["plan_id"] == result["plan_id"]
        assert (out / "apply.sh").read_text().startswith("#!/bin/sh\n")
        assert _sh("squeue", "-h", "-o", "%i %T %N") == before
        assert "drain" not in _node_states()[down]          # nothing was changed
    finally:
        srv.stop()


def test_exported_script_carries_the_plan_out_and_is_harmless_twice(slurm_env, tmp_path):
    """import -> solve -> export as a script -> sh on the real testbed: the cluster equals the
    plan; the same script run again changes nothing (its steps are guarded)."""
    from unicron_plan import api
    from unicron_plan.integrations.agent import SlurmCli, differences
    from unicron_plan.integrations.common import Cost, GpuMap
    from unicron_plan.integrations.slurm import export_slurm, import_slurm, render_script

    _reset()
    a, b = _submit(3, 2), _submit(3, 1)
    _wait_running([a, b])
    down = _node_of(a)
    _sh("scontrol", "update", f"NodeName={down}", "State=DOWN", "Reason=gpu-xid-79")
    nodes_doc, jobs_doc = SlurmCli().read()
    plan = api.solve(import_slurm(nodes_doc, jobs_doc, cost=Cost(expected_run_seconds=36000), gpu_map=GpuMap()))
    script = tmp_path / "apply.sh"
    script.write_text(render_script(export_slurm(plan, jobs_doc, nodes_doc)))
    r = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=slurm_env, timeout=300)
    assert r.returncode == 0, r.stderr
    plan_doc = json.loads(plan.model_dump_json())
    deadline = time.monotonic() + 60
    while differences(plan_doc, *SlurmCli().read()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert differences(plan_doc, *SlurmCli().read()) == []
    log = tmp_path / "argv.log"
    wrapper = tmp_path / "bin"
    wrapper.mkdir()
    real = subprocess.run(["sh", "-c", "command -v scontrol"], capture_output=True, text=True).stdout.strip()
    (wrapper / "scontrol").write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(log))}\nexec {shlex.quote(real)} "$@"\n')
    (wrapper / "scontrol").chmod(0o755)
    env = {**slurm_env, "PATH": f"{wrapper}:{slurm_env['PATH']}"}
    r = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not log.exists() or log.read_text() == "", log.read_text()   # nothing to do the second time
    assert differences(plan_doc, *SlurmCli().read()) == []


#: A job that may run on H100 or A100 nodes: untyped GPUs, a matching-OR constraint on the node
#: features naming the types (Slurm never mixes them), the types and a table per type in its comment.
MIXED = ("unicron-plan: weight=1 gpu-types=h100,a100 throughput.h100=8:100,16:195 "
         "throughput.a100=8:35,16:68,24:100,32:130")


def _types_of(nodes: set) -> set:
    out = _sh("sinfo", "-h", "-N", "-o", "%N %G")
    gres = dict(line.split() for line in out.splitlines())
    return {gres[n].split(":")[1] for n in nodes}


def test_failure_on_an_h100_node_moves_a_job_to_idle_a100_nodes(slurm_env, tmp_path):
    """Mixed fleet (n1-n8 H100, n9-n12 A100): a job allowed both types runs on one H100 node, an
    H100-only job of weight 2 on the seven others. The H100 node fails: taking an H100 node from
    the heavier job is not worth it, four idle A100 nodes are (130 > 100 TFLOP/s, one restart), so
    the plan moves the job to A100 (its gpu_type), the agent carries it out with its node list
    alone, and Slurm runs it on the four A100 nodes; the H100-only job stays where it is."""
    if _types_of({"n1", "n12"}) != {"h100", "a100"}:
        pytest.fail("the testbed has no A100 nodes (n9-n12): remove its state directory and run "
                    "scripts/slurm-testbed up again")
    _reset()
    heavy = _submit(7, 2)
    _wait_running([heavy])
    free = ({f"n{i}" for i in range(1, 9)} - set(_slurm_view()[0][str(heavy)][1])).pop()
    mixed = sbatch("-N", "1", "-w", free, "--gres=gpu:8", "--constraint=[h100|a100]", "--comment", MIXED,
                   "--wrap", "sleep 3600")
    _wait_running([mixed])
    srv = Server(tmp_path / "coord").start()
    try:
        agent = _agent(srv.url, tmp_path / "agent")
        assert agent.run_once()["status"] == "in-sync"
        before = _slurm_view()[0]
        assert before[str(mixed)] == (8, {free})
        elapsed, result, down, plan, jobs, failed = _fail_a_node(srv, agent, mixed)
        entry = {pj["id"]: pj for pj in plan["jobs"]}
        assert entry[str(mixed)]["gpu_type"] == "a100" and entry[str(mixed)]["gpus"] == 32, entry
        assert plan["status"]["termination"] == "optimal"
        assert jobs[str(mixed)] == (32, {"n9", "n10", "n11", "n12"})
        assert _types_of(jobs[str(mixed)][1]) == {"a100"}
        assert jobs[str(heavy)] == before[str(heavy)]                      # the H100-only job keeps its nodes
        assert entry[str(heavy)]["gpu_type"] == "h100" and entry[str(heavy)]["action"] == "keep"
        place = [c for c in result["commands"] if c[:3] == ["scontrol", "update", f"JobId={mixed}"]
                 and any(a.startswith("ReqNodeList=") for a in c)]
        assert place == [["scontrol", "update", f"JobId={mixed}", "NumNodes=4-4", "NumTasks=4", "NumCPUs=4", "Reservation=unicron-" + result["plan_id"], "ReqNodeList=n[9-12]"]], result
        state = __import__("httpx").get(srv.url + "/v1/state", timeout=30).json()["instance"]
        coord_job = next(j for j in state["jobs"] if j["id"] == str(mixed))
        assert coord_job["throughput"]["gpu_type"] == "a100"             # the coordinator knows its new type
        assert agent.run_once()["status"] == "in-sync"                   # and Slurm agrees with it
    finally:
        srv.stop()
