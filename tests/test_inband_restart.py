"""The in-band agent's restarts in place against a Slurm kept in memory (each command changes the job
as Slurm would) and a coordinator that hands out history entries: job ids, propose, failures after the
requeue, restarts resumed, queued incidents of one job."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from servers import Server
from test_inband_agent import _documents

import unicron_plan.integrations.restart as restart_mod
from unicron_plan.client import PlannerClient, PlannerError
from unicron_plan.integrations.agent import AgentConfig, CommandFailed, JobNow, SlurmCli
from unicron_plan.integrations.restart import InBandAgent, act_on_signals, restart_in_place
from unicron_plan.integrations.slurm import expand


@pytest.fixture(autouse=True)
def _quick(monkeypatch):
    monkeypatch.setattr(restart_mod, "START_PAUSE", 0.0)
    monkeypatch.setattr(restart_mod, "SETTLE_SECONDS", 0.5)


class Slurm(SlurmCli):
    """Jobs in memory: requeuehold makes a job pending held (one more restart), an update with
    ReqNodeList pins it, release runs it on its pinned nodes. ``fail(argv)``: the stderr of a command
    that fails, or None. Every command that changes something is in ``calls``."""

    def __init__(self, jobs: dict[int, JobNow], restarts: dict[int, int] | None = None, fail=None):
        super().__init__()
        self.jobs = jobs
        self.restarts = {j: 0 for j in jobs} if restarts is None else restarts
        self.fail = fail or (lambda argv: None)
        self.calls: list[list[str]] = []
        self.nodes_doc, self.jobs_doc = _documents()

    def read(self):
        return copy.deepcopy(self.nodes_doc), copy.deepcopy(self.jobs_doc)

    def job(self, job):
        return copy.deepcopy(self.jobs.get(job, JobNow()))

    def run(self, argv, record=False):
        if record and self.on_command:
            self.on_command(argv)
        if argv[:3] == ["scontrol", "show", "job"]:
            if self.restarts is None:
                raise CommandFailed(argv, 1, "slurm_load_jobs error: Socket timed out")
            return f"JobId={argv[3]} Restarts={self.restarts.get(int(argv[3]), 0)}\n"
        if argv[0] == "sinfo":
            return "mixed\n"
        self.calls.append(list(argv))
        err = self.fail(argv)
        if err:
            raise CommandFailed(argv, 1, err)
        jid = int(argv[2].removeprefix("JobId="))
        j = self.jobs[jid]
        if argv[1] == "requeuehold":
            j.state, j.nodes, j.reason = "PENDING", [], "JobHeldUser"
            self.restarts[jid] += 1
        elif argv[1] == "update" and argv[-1].startswith("ReqNodeList="):
            j.req_nodes = expand(argv[-1].split("=", 1)[1], "job", "nodes")
        elif argv[1] == "release":
            j.state, j.nodes, j.reason = "RUNNING", list(j.req_nodes), "None"
        return ""


def _running(*nodes: str) -> JobNow:
    return JobNow(state="RUNNING", nodes=list(nodes), num_nodes=len(nodes), reason="None")


class Coordinator:
    """History entries as given; ``post_action`` fails (HTTP 500) ``fail_actions`` times first."""

    def __init__(self, entries: list[SimpleNamespace], fail_actions: int = 0):
        self.entries, self.fail_actions, self.actions = entries, fail_actions, []

    def health(self):
        return SimpleNamespace(revision=0, history_revision=0)

    def history(self, since=0, limit=None):
        return [e for e in self.entries if e.revision > since][:limit]

    def post_action(self, action):
        if self.fail_actions:
            self.fail_actions -= 1
            raise PlannerError(500, "internal error")
        self.actions.append(copy.deepcopy(action))
        return SimpleNamespace(revision=len(self.entries))


def _restart(revision: int, job) -> SimpleNamespace:
    return SimpleNamespace(revision=revision, type="signal", at="2026-01-01T00:00:00+00:00",
                           body={"action": "restart", "job": job, "kind": "cuda_error", "severity": "SEV2"})


def _state_dir(tmp_path: Path, since: int = 0) -> Path:
    d = tmp_path / "agent"
    d.mkdir()
    (d / "signals.json").write_text(json.dumps({"since": since}))
    return d


def _signals(d: Path) -> dict:
    return json.loads((d / "signals.json").read_text())


def _requeues(slurm: Slurm) -> list[str]:
    return [c[2] for c in slurm.calls if c[1] == "requeuehold"]


# --- job ids ------------------------------------------------------------------------------------

def test_a_job_id_is_ascii_digits_and_a_bad_one_never_stops_the_pass(tmp_path):
    """'²' passes str.isdigit (int() refuses it) and '١' reads as 1: both are skipped and logged, the
    pass goes on to the next incident and past them."""
    slurm = Slurm({1: _running("n1"), 3: _running("n3")})
    coord = Coordinator([_restart(1, "²"), _restart(2, "١"), _restart(3, "3"), _restart(4, "1 ")])
    d, logged = _state_dir(tmp_path), []
    assert act_on_signals(coord, slurm, d, verify_seconds=1, log=logged.append) is None
    assert _requeues(slurm) == ["3"] and [a["job"] for a in coord.actions] == ["3"]
    assert [r["signal"] for r in logged if "not a Slurm job id" in r.get("skipped", "")] == [1, 2, 4]
    assert _signals(d)["since"] == 4


# --- propose ------------------------------------------------------------------------------------

def _inband(tmp_path, mode: str, slurm: Slurm):
    srv = Server(tmp_path / "state")
    srv.__enter__()
    client = PlannerClient(srv.url)
    agent = InBandAgent(client, AgentConfig(mode=mode, state_dir=tmp_path / "agent", verify_seconds=1,
                                            reserve=False), cli=slurm, log=lambda rec: None)
    assert agent.run_once()["status"] == "in-sync"   # uploads what Slurm shows
    client.post_signals([{"job": "1", "rank": 0, "node": "n2", "kind": "cuda_error",
                          "evidence": "RuntimeError: CUDA error: an illegal memory access was encountered"}])
    return srv, client, agent


def test_propose_mode_lists_a_restart_and_runs_nothing(tmp_path):
    slurm = Slurm({1: _running("n1", "n2")})
    srv, client, agent = _inband(tmp_path, "propose", slurm)
    try:
        result = agent.run_once()
        assert slurm.calls == [] and slurm.jobs[1].state == "RUNNING"
        [proposed] = result["restarts"]
        assert proposed["outcome"] == "proposed" and proposed["job"] == "1"
        assert proposed["commands"][0] == ["scontrol", "requeuehold", "1"]
        assert ["scontrol", "release", "1"] in proposed["commands"] and "commands" not in result
        assert not [e for e in client.history() if e.type == "action"]   # nothing posted either
    finally:
        srv.__exit__(None, None, None)


def test_apply_mode_lists_the_restarts_commands_in_the_result(tmp_path):
    slurm = Slurm({1: _running("n1", "n2")})
    srv, client, agent = _inband(tmp_path, "apply", slurm)
    try:
        result = agent.run_once()
        assert result["restarts"][0]["outcome"] == "done"
        assert result["commands"][:len(slurm.calls)] == slurm.calls and slurm.calls[0][1] == "requeuehold"
    finally:
        srv.__exit__(None, None, None)


# --- a restart that fails after its requeue -------------------------------------------------------

def test_a_restart_that_fails_after_the_requeue_releases_the_job(tmp_path):
    down = "scontrol: error: Unable to contact slurm controller (connect failure)"
    slurm = Slurm({4: _running("n7")}, fail=lambda argv: down if argv[1] == "update" else None)
    coord, d = Coordinator([_restart(1, "4")]), _state_dir(tmp_path)
    act_on_signals(coord, slurm, d, verify_seconds=1)
    [action] = coord.actions
    assert action["outcome"] == "failed" and "released" in action["detail"]
    assert slurm.calls[-1] == ["scontrol", "release", "4"] and not slurm.job(4).held


def test_a_job_that_cannot_be_released_now_is_released_by_the_next_pass(tmp_path):
    down = "scontrol: error: Unable to contact slurm controller (connect failure)"
    outage = {"on": True}
    slurm = Slurm({4: _running("n7")},
                  fail=lambda argv: down if outage["on"] and argv[1] in ("update", "release") else None)
    coord, d = Coordinator([_restart(1, "4")]), _state_dir(tmp_path)
    with pytest.raises(CommandFailed, match="release 4"):
        act_on_signals(coord, slurm, d, verify_seconds=1)
    assert slurm.job(4).held and _signals(d)["doing"]["job"] == "4" and not coord.actions
    outage["on"] = False
    act_on_signals(coord, slurm, d, verify_seconds=1)
    assert slurm.job(4).state == "RUNNING" and slurm.job(4).nodes == ["n7"]
    assert _requeues(slurm) == ["4"]                        # the requeue not repeated
    assert [a["outcome"] for a in coord.actions] == ["done"] and "doing" not in _signals(d)


# --- a restart resumed ------------------------------------------------------------------------------

def test_a_resumed_restart_of_a_job_running_again_is_done(tmp_path):
    """The attempt cut short restarted the job (Restarts= went up) and it runs again: done, no command,
    no failed nodes (a node shown not responding would otherwise be escalated)."""
    slurm = Slurm({2: _running("n4", "n5", "n6")}, restarts={2: 1})
    slurm.run = (lambda run: lambda argv, record=False: "mixed*\n" if argv[0] == "sinfo" else run(argv, record))(
        slurm.run)
    result = restart_in_place(slurm, 2, 1.0, before=0, nodes=["n4", "n5", "n6"])
    assert result["outcome"] == "done" and not result.get("failed_nodes") and slurm.calls == []


def test_a_resumed_restart_never_requeues_a_running_job_whose_count_it_cannot_read(tmp_path):
    slurm = Slurm({2: _running("n4")})
    slurm.restarts = None
    result = restart_in_place(slurm, 2, 1.0, before=0, nodes=["n4"])
    assert result["outcome"] == "failed" and not result.get("failed_nodes") and slurm.calls == []


def test_a_restart_whose_outcome_was_not_posted_is_reported_done(tmp_path):
    slurm = Slurm({2: _running("n4", "n5", "n6")})
    coord, d = Coordinator([_restart(1, "2")], fail_actions=1), _state_dir(tmp_path)
    with pytest.raises(PlannerError):
        act_on_signals(coord, slurm, d, verify_seconds=1)
    assert _signals(d)["doing"]["before"] == 0 and slurm.job(2).state == "RUNNING"
    act_on_signals(coord, slurm, d, verify_seconds=1)
    [action] = coord.actions
    assert action["outcome"] == "done" and not action.get("failed_nodes")
    assert _requeues(slurm) == ["2"]


# --- queued incidents of one job -----------------------------------------------------------------------

def test_queued_incidents_of_a_job_restart_it_once(tmp_path):
    slurm = Slurm({1: _running("n1", "n2"), 5: _running("n5")})
    coord = Coordinator([_restart(1, "1"), _restart(2, "1"), _restart(3, "5"), _restart(4, "1")])
    d = _state_dir(tmp_path)
    act_on_signals(coord, slurm, d, verify_seconds=1)
    assert _requeues(slurm) == ["1", "5"]
    assert [(a["signal"], a["outcome"]) for a in coord.actions] == [(k, "done") for k in (1, 2, 3, 4)]
    covered = [a["detail"] for a in coord.actions if a["signal"] in (2, 4)]
    assert covered == ["covered by the restart for signal 1 (done)"] * 2
    assert _signals(d)["since"] == 4 and _signals(d)["covered"] == {}
    coord.entries.append(_restart(5, "1"))   # recorded after that restart: a new incident
    act_on_signals(coord, slurm, d, verify_seconds=1)
    assert _requeues(slurm) == ["1", "5", "1"]


def test_a_covered_incident_stays_covered_when_its_post_fails(tmp_path):
    slurm = Slurm({1: _running("n1")})
    coord, d = Coordinator([_restart(1, "1"), _restart(2, "1")]), _state_dir(tmp_path)
    real = coord.post_action
    calls = {"n": 0}

    def second_fails(action):
        calls["n"] += 1
        if calls["n"] == 2:
            raise PlannerError(500, "internal error")
        return real(action)
    coord.post_action = second_fails
    with pytest.raises(PlannerError):
        act_on_signals(coord, slurm, d, verify_seconds=1)
    act_on_signals(coord, slurm, d, verify_seconds=1)
    assert _requeues(slurm) == ["1"]
    assert [a["signal"] for a in coord.actions] == [1, 2] and "covered" in coord.actions[1]["detail"]
