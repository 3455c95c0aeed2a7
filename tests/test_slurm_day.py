"""A day of an operator's Slurm on the real testbed (scripts/slurm-testbed): each case starts
from a clean cluster, stages one everyday situation, runs the agent as an operator would, and
ends with the same checks: every planned job RUNNING exactly on its planned nodes (or held
where the plan suspends it), no healthy node drained, no job held or in BadConstraints left,
the operator's reason kept, the coordinator's /v1/state equal to Slurm.

Not in the default run (marker ``slurm_day``): ``pytest -m slurm_day tests/test_slurm_day.py``
with a testbed up; .ci/run runs it. The testbed runs Slurm's default KillWait (30 s) and
SlurmdTimeout=30 (the crash case (b) waits for it). Each case prints its fault-to-healed time."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from servers import Server
from slurmbed import (TESTBED, THROUGHPUT, coordinator_view, job_states, node_of, node_states, ours, plan_of,
                      require_testbed, reset, sbatch, sh, slurm_view, submit, views_agree, wait_running,
                      wait_until)

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_day]

REASON = "gpu-xid-79"


@pytest.fixture(scope="module")
def slurm_env():
    env = require_testbed()
    yield env
    from slurmbed import cancel_ours

    cancel_ours()


@pytest.fixture
def day(slurm_env, tmp_path):
    """A clean cluster, a coordinator, an agent; (srv, agent) and the coordinator stopped after."""
    from slurmbed import agent

    reset()
    srv = Server(tmp_path / "coord").start()
    try:
        yield srv, agent(srv.url, tmp_path / "agent")
    finally:
        srv.stop()


def _two_jobs(nodes=3):
    a, b = submit(nodes, 2), submit(nodes, 1)
    wait_running([a, b])
    return a, b


def _down(node: str, reason: str = REASON) -> float:
    sh("scontrol", "update", f"NodeName={node}", "State=DOWN", f"Reason={reason}")
    return time.monotonic()


def _reasons() -> dict[str, str]:
    return dict(line.split(" ", 1) for line in sh("sinfo", "-h", "-N", "-o", "%N %E").splitlines())


def _our_jobs() -> dict[str, tuple[str, str]]:
    """The tests' jobs Slurm knows: id -> (state, reason)."""
    mine = {str(j) for j in ours()}
    out = {}
    for line in sh("squeue", "-h", "-o", "%i|%T|%r").splitlines():
        jid, state, reason = line.split("|", 2)
        if jid in mine:
            out[jid] = (state, reason)
    return out


def healed(srv, plan_id: str | None, faulted: set[str] = frozenset(), token: str | None = None,
           reason: str = REASON) -> None:
    """The checks every case ends with."""
    from unicron_plan.integrations.agent import SlurmCli, differences

    if plan_id is None:   # the last plan the coordinator has applied
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        hist = httpx.get(srv.url + "/v1/history", timeout=30, headers=headers).json()["entries"]
        applied = [e["body"]["plan_id"] for e in hist if e["type"] == "apply"]
        plan_id = applied[-1] if applied else None
    if plan_id is not None:
        plan = plan_of(srv.url, plan_id, token)
        assert differences(plan, *SlurmCli().read()) == []
        suspended = {pj["id"] for pj in plan["jobs"] if not pj["gpus"]}
    else:
        suspended = set()
    states = node_states()
    drained = {n for n, s in states.items() if "drain" in s or "down" in s or "fail" in s}
    assert drained <= set(faulted), f"healthy nodes drained: {sorted(drained - set(faulted))}"
    for jid, (state, why) in _our_jobs().items():
        assert "BadConstraints" not in why, (jid, state, why)
        if jid not in suspended:
            assert not why.startswith("JobHeld") and "held state" not in why, (jid, state, why)
    reasons = _reasons()
    for n in faulted:
        if n in drained:
            assert reasons[n].startswith(reason), (n, reasons[n])   # the operator's (or Slurm's) reason kept
    assert views_agree(srv.url, token), (coordinator_view(srv.url, token), slurm_view())


def _pass_until(agent, want: tuple = ("applied",), seconds: float = 120, interval: float = 1) -> dict:
    """Agent passes, one every ``interval`` s, until one ends with a status in ``want`` (Slurm may
    take a while to show a change: a resumed node registers again), for at most ``seconds``."""
    last: dict = {}

    def once():
        last["r"] = agent.run_once()
        return last["r"] if last["r"]["status"] in want else None

    return wait_until(once, seconds, lambda: f"no {want!r} within {seconds} s: {last.get('r')}", interval)


def _healed_after(case: str, t0: float, srv, agent, faulted: set[str] = frozenset(),
                  want: tuple = ("applied",), **checks) -> dict:
    """Agent passes until one ends with a status in ``want``; the time since ``t0`` printed (a
    measurement, not a check), then :func:`healed`. Returns the last pass's result."""
    result = _pass_until(agent, want)
    _report(case, time.monotonic() - t0, result)
    healed(srv, result.get("plan_id"), faulted, **checks)
    return result


def _report(case: str, seconds: float, result: dict) -> None:
    cmds = [" ".join(c) for c in result.get("commands", [])]
    print(f"CASE {case}: healed in {seconds:.1f} s; commands: {json.dumps(cmds)}", flush=True)


def _until_commands(journal: Path, th: threading.Thread) -> None:
    """Until the pass running in ``th`` has journaled a command (or ended), for at most 60 s."""
    def started() -> bool:
        try:
            return bool(json.loads(journal.read_text()).get("commands")) or not th.is_alive()
        except (OSError, ValueError):
            return not th.is_alive()

    wait_until(started, 60, "the pass journaled no command within 60 s", 0.05)


# --- (a) a node DOWN ---------------------------------------------------------------------------

def test_a_node_down(day):
    srv, agent = day
    a, b = _two_jobs()
    assert agent.run_once()["status"] == "in-sync"
    node = node_of(a)
    _healed_after("a", _down(node), srv, agent, {node})


# --- (b) kill -9 of a slurmd ---------------------------------------------------------------------

def _slurmd_pid(node: str) -> int:
    return int((TESTBED / "run" / f"slurmd-{node}.pid").read_text())


def _start_slurmd(node: str) -> None:
    sh("slurmd", "-f", str(TESTBED / "etc" / "slurm.conf"), "-N", node)


def test_b_slurmd_killed(day):
    """A real crash: Slurm calls the node NOT_RESPONDING (then DOWN) after SlurmdTimeout=30 s
    and requeues the job on it; the agent heals from that verdict. The restarted slurmd
    brings the node back (ReturnToService=1) and the plan grows back onto it."""
    srv, agent = day
    a, b = _two_jobs()
    assert agent.run_once()["status"] == "in-sync"
    node = node_of(a)
    t0 = time.monotonic()
    os.kill(_slurmd_pid(node), signal.SIGKILL)
    try:   # Slurm's reason, kept
        _healed_after("b", t0, srv, agent, {node}, reason="Not responding")
    finally:
        _start_slurmd(node)
    wait_until(lambda: "not_responding" not in sh("sinfo", "-h", "-N", "-n", node, "-o", "%T")
               and not node_states()[node].startswith("down"), 120, node_states, 1)
    if "drain" in node_states()[node]:   # our drain: the operator resumes the node
        sh("scontrol", "update", f"NodeName={node}", "State=RESUME")
    result = _pass_until(agent)
    healed(srv, result["plan_id"])
    _, jobs = _gres_bound()
    assert jobs, "planned jobs run with their GPUs bound"


def _gres_bound():
    """Every running planned job has gres/gpu in its allocation (JOB_GRES, TRES)."""
    out = {}
    for jid in ours():
        text = sh("scontrol", "show", "job", "-d", str(jid))
        if "JobState=RUNNING" in text and "unicron-plan:" in text:
            assert "gres/gpu=" in text and "JOB_GRES=(null)" not in text, text
            out[jid] = True
    return None, out


# --- (c) two nodes in two jobs, and a second failure during an apply -------------------------------

def test_c_two_failures_and_one_during_apply(day):
    srv, agent = day
    a, b = _two_jobs()
    assert agent.run_once()["status"] == "in-sync"
    na, nb = node_of(a), node_of(b)
    t0 = _down(na)
    _down(nb)
    result = _pass_until(agent)
    healed(srv, result["plan_id"], {na, nb})
    # the second failure arrives while the agent carries the next plan out
    third = node_of(a)
    fourth = next(n for n in sorted(node_states()) if n not in (na, nb, third) and
                  n in {f"n{i}" for i in range(1, 9)} and node_states()[n] in ("allocated", "mixed"))
    _down(third)
    journal = agent.journal.path
    done: dict = {}
    th = threading.Thread(target=lambda: done.setdefault("r", agent.run_once()))
    th.start()
    _until_commands(journal, th)
    _down(fourth)
    th.join(300)
    # the pass under way may have seen both
    _healed_after("c", t0, srv, agent, {na, nb, third, fourth}, ("applied", "in-sync"))


# --- (d) the node returns and the plan grows back -------------------------------------------------

def test_d_node_returns_plan_grows_back(day):
    srv, agent = day
    a, b = _two_jobs(4)
    assert agent.run_once()["status"] == "in-sync"
    node = node_of(a)
    _down(node)
    result = _pass_until(agent)
    healed(srv, result["plan_id"], {node})
    t0 = time.monotonic()
    sh("scontrol", "update", f"NodeName={node}", "State=RESUME")
    result = _healed_after("d", t0, srv, agent)
    plan = plan_of(srv.url, result["plan_id"])
    assert any(node in pj["nodes"] for pj in plan["jobs"])


# --- (e) an unplanned job pending for the freed nodes during a move ---------------------------------

def test_e_unplanned_job_pending_during_a_move(day):
    """All eight H100 nodes run planned jobs; an unplanned whole-node H100 job waits. A node of
    the heavier job fails: whatever the plan moves, the waiting job takes none of its nodes
    (the move runs in a reservation)."""
    srv, agent = day
    a, b = submit(4, 2), submit(4, 1)
    wait_running([a, b])
    u = sbatch("-N", "1", "--gres=gpu:h100:8", "--comment", "evaluation", "--wrap", "sleep 3600")
    time.sleep(1)
    assert _our_jobs()[str(u)][0] == "PENDING"
    assert agent.run_once()["status"] == "in-sync"
    node = node_of(a)
    result = _healed_after("e", _down(node), srv, agent, {node})
    plan = plan_of(srv.url, result["plan_id"])
    planned_nodes = {n for pj in plan["jobs"] for n in pj["nodes"]}
    u_nodes = set(sh("squeue", "-h", "-j", str(u), "-o", "%N").split())
    assert not (planned_nodes & u_nodes)


# --- (f) an unplanned job on a whole healthy node ------------------------------------------------------

def test_f_unplanned_job_on_a_whole_node(day):
    srv, agent = day
    a, b = _two_jobs()
    assert agent.run_once()["status"] == "in-sync"
    before = slurm_view()
    free = sorted(n for n, s in node_states().items() if s == "idle" and int(n[1:]) <= 8)[0]
    u = sbatch("-N", "1", "-w", free, "--gres=gpu:h100:8", "--comment", "evaluation", "--wrap", "sleep 3600")
    wait_running([u])
    result = agent.run_once()
    assert result["status"] in ("in-sync", "applied"), result
    assert slurm_view()[0] == before[0]                            # no planned job restarted or moved
    healed(srv, result.get("plan_id"))
    sh("scancel", str(u))
    time.sleep(1)
    result = agent.run_once()
    assert slurm_view()[0] == before[0]
    healed(srv, result.get("plan_id"))
    hist = __import__("httpx").get(srv.url + "/v1/history", timeout=30).json()["entries"]
    assert not [e for e in hist if e["type"] == "event" and e["body"].get("kind") == "failure"], hist


# --- (g) a user's scancel of a planned job, and a new planned job -------------------------------------

def test_g_scancel_and_a_new_planned_job(day):
    srv, agent = day
    a, b = _two_jobs()
    assert agent.run_once()["status"] == "in-sync"
    t0 = time.monotonic()
    sh("scancel", str(b))
    result = agent.run_once()          # b may still be COMPLETING: an exit, never a failure
    assert not [n for n, s in node_states().items() if "drain" in s]
    c = submit(2, 3)
    _healed_after("g", t0, srv, agent)
    assert str(c) in slurm_view()[0] and slurm_view()[0][str(c)][0] > 0
    hist = __import__("httpx").get(srv.url + "/v1/history", timeout=30).json()["entries"]
    assert not [e for e in hist if e["type"] == "event" and e["body"].get("kind") == "failure"], hist


# --- (h) the agent killed at random points -------------------------------------------------------------

def test_h_agent_killed_at_random_points(day, tmp_path, slurm_env):
    """Ten rounds: a node fails (or returns), the agent process is killed with SIGKILL after a
    random delay, a new one finishes; no job is requeued twice, the cluster equals the plan."""
    srv, _ = day
    a, b = _two_jobs()
    state = tmp_path / "agent"
    cmd = [sys.executable, "-m", "unicron_plan.cli", "agent", "slurm", "--coordinator", srv.url, "--once",
           "--state-dir", str(state), "--verify-seconds", "60"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=slurm_env, timeout=300)
    assert r.returncode == 0, r.stderr
    rng = random.Random(33)
    down: list[str] = []
    for k in range(10):
        if down and (k % 2 or len(down) > 1):
            node = down.pop()
            sh("scontrol", "update", f"NodeName={node}", "State=RESUME")
        else:
            running = [j for j in (a, b) if job_states().get(str(j)) == "RUNNING"]   # one may be suspended
            node = node_of(rng.choice(running))
            _down(node)
            down.append(node)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=slurm_env)
        try:
            proc.wait(rng.uniform(0.2, 6.0))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for _ in range(3):
            r = subprocess.run(cmd, capture_output=True, text=True, env=slurm_env, timeout=300)
            if r.returncode == 0 and json.loads(r.stdout)["status"] in ("applied", "in-sync"):
                break
        assert r.returncode == 0, (k, r.stderr[-2000:])
        result = json.loads(r.stdout)
        requeues = [c[2] for c in result.get("commands", []) if c[1] == "requeuehold"]
        assert len(requeues) == len(set(requeues)), result
        print(f"round {k}: node {node}, {result['status']}", flush=True)
        healed(srv, result.get("plan_id"), set(down))


# --- (i) slurmctld stopped and restarted mid-pass -------------------------------------------------------

def _stop_ctld() -> None:
    pid = int((TESTBED / "run" / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, 60, "slurmctld did not stop", 0.2)


def _start_ctld() -> None:
    sh("slurmctld", "-f", str(TESTBED / "etc" / "slurm.conf"))
    wait_until(lambda: subprocess.run(["scontrol", "ping"], capture_output=True).returncode == 0, 60,
               "slurmctld did not answer scontrol ping")


def test_i_slurmctld_stopped_and_restarted(day):
    from unicron_plan.integrations.agent import AgentError

    srv, agent = day
    a, b = _two_jobs()
    assert agent.run_once()["status"] == "in-sync"
    rev = agent.client.state().revision
    node = node_of(a)
    t0 = _down(node)
    _stop_ctld()
    try:
        with pytest.raises(AgentError, match="reading Slurm failed"):
            agent.run_once()
        assert agent.client.state().revision == rev          # nothing uploaded, nothing posted
    finally:
        _start_ctld()
    # stopped again in the middle of the pass that carries the plan out, then back
    journal = agent.journal.path
    errors: list = []
    th = threading.Thread(target=lambda: _catch(errors, agent.run_once))
    th.start()
    _until_commands(journal, th)
    _stop_ctld()
    time.sleep(3)
    _start_ctld()
    th.join(300)
    # the interrupted pass may have finished
    _healed_after("i", t0, srv, agent, {node}, ("applied", "in-sync"))


def _catch(errors: list, fn) -> None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - recorded for the test
        errors.append(exc)


# --- (j) coordinator down and a wrong token -------------------------------------------------------------

def test_j_coordinator_down_and_wrong_token(slurm_env, tmp_path):
    reset()
    a, b = _two_jobs()
    srv = Server(tmp_path / "coord", token="right-token").start()
    try:
        (tmp_path / "right").write_text("right-token\n")
        (tmp_path / "wrong").write_text("wrong-token\n")
        base = [sys.executable, "-m", "unicron_plan.cli", "agent", "slurm", "--coordinator", srv.url, "--once",
                "--state-dir", str(tmp_path / "agent")]
        r = subprocess.run(base + ["--token-file", str(tmp_path / "right")], capture_output=True, text=True,
                           env=slurm_env, timeout=300)
        assert r.returncode == 0, r.stderr
        node = node_of(a)
        t0 = _down(node)
        before = sh("squeue", "-h", "-o", "%i %T %N")
        r = subprocess.run(base + ["--token-file", str(tmp_path / "wrong")], capture_output=True, text=True,
                           env=slurm_env, timeout=300)
        assert r.returncode == 2 and "401" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        srv.stop()
        r = subprocess.run(base + ["--token-file", str(tmp_path / "right")], capture_output=True, text=True,
                           env=slurm_env, timeout=300)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "drain" not in node_states()[node]            # nothing was changed without the coordinator
        srv.start()   # on another port
        base[base.index("--coordinator") + 1] = srv.url
        r = subprocess.run(base + ["--token-file", str(tmp_path / "right")], capture_output=True, text=True,
                           env=slurm_env, timeout=300)
        assert r.returncode == 0, r.stderr
        result = json.loads(r.stdout)
        assert result["status"] == "applied", result
        _report("j", time.monotonic() - t0, result)
        healed(srv, result["plan_id"], {node}, token="right-token")
        assert before   # Slurm showed the jobs while the coordinator was away
    finally:
        srv.stop()


# --- (k) propose, then approve ---------------------------------------------------------------------

@pytest.mark.parametrize("how", ["cli", "console"])
def test_k_propose_then_approve(day, how):
    import httpx

    srv, agent = day
    a, b = _two_jobs()
    assert agent.run_once()["status"] == "in-sync"
    node = node_of(a)
    t0 = _down(node)
    time.sleep(2)
    agent.cfg.mode = "propose"
    result = agent.run_once()
    assert result["status"] == "proposed", result
    pid = result["plan_id"]
    assert "drain" not in node_states()[node]                 # nothing changed yet
    assert agent.run_once()["status"] == "proposed"           # still waiting for the operator
    if how == "cli":
        assert agent.approve(pid) == {"status": "approved", "plan_id": pid}
    else:
        assert httpx.post(f"{srv.url}/v1/plans/{pid}/apply", timeout=30).status_code == 200
    agent.cfg.mode = "apply"
    result = agent.run_once()
    assert result["status"] == "applied" and result["plan_id"] == pid, result
    _report(f"k ({how})", time.monotonic() - t0, result)
    healed(srv, pid, {node})


# --- (l) other job shapes ----------------------------------------------------------------------------

def test_l_job_shapes(day):
    """--ntasks-per-node, -n with --gpus-per-task: each shrinks and moves when a node fails."""
    srv, agent = day
    comment = f"unicron-plan: weight=2 throughput={THROUGHPUT}"
    a = sbatch("-N", "3", "--ntasks-per-node=1", "--gres=gpu:h100:8", "--comment", comment, "--wrap", "sleep 3600")
    b = sbatch("-N", "2", "-n", "16", "--gpus-per-task=1", "--comment",
               f"unicron-plan: weight=1 gpu-type=h100 throughput={THROUGHPUT}", "--wrap", "sleep 3600")
    wait_running([a, b])
    assert agent.run_once()["status"] == "in-sync"
    node = node_of(a)
    _healed_after("l", _down(node), srv, agent, {node})
    sh("scontrol", "update", f"NodeName={node}", "State=RESUME")   # and back: the shapes grow again
    result = _pass_until(agent)
    healed(srv, result["plan_id"])
