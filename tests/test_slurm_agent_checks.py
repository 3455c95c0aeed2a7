"""The agent's guards without a Slurm: strict reads of Slurm's output, comments split in
linear time, plan ids checked before they name a file, control characters kept out of
commands, every accepted change read back, and the exit codes of ``agent slurm``."""

from __future__ import annotations

import copy
import http.server
import json
import os
import random
import shlex
import stat
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from servers import Server

from unicron_plan.client import PlannerClient, ReplyError
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.integrations.agent import (AgentConfig, AgentError, CommandFailed, JobNow, NotApplied, SlurmAgent,
                                             SlurmCli, SlurmReadError, carry_out, check_plan_id)
from unicron_plan.integrations.common import Cost, GpuMap
from unicron_plan.integrations.slurm import (MAX_COMMENT_CHARS, Step, append_reason, check_document, expand,
                                             import_slurm, plan_comment, split_words)

HERE = Path(__file__).parent
REAL = HERE / "fixtures" / "slurm-22.05"
COST = Cost(expected_run_seconds=36000)


def _real() -> tuple[dict, dict]:
    return (json.loads((REAL / "sinfo.json").read_text()), json.loads((REAL / "squeue.json").read_text()))


# --- comments --------------------------------------------------------------------------------

def test_comment_words_are_shlex_words():
    """The linear splitter gives shlex.split's words (or refuses what shlex refuses) on many
    random texts of quotes, backslashes, blanks and '='."""
    rng = random.Random(7)
    alphabet = "ab= '\"\\\t\n$`"
    for _ in range(4000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        try:
            want = shlex.split(text)
        except ValueError:
            want = None
        try:
            got = split_words(text, "Job 1")
        except InvalidInstanceError:
            got = None
        assert got == want, text


def test_long_comments_are_capped_and_read_in_one_pass():
    ok = "unicron-plan: weight=1 " + "x" * (MAX_COMMENT_CHARS - 40) + "=1"
    assert plan_comment(ok, "Job 1")["weight"] == "1"
    with pytest.raises(InvalidInstanceError, match="at most"):
        plan_comment("unicron-plan: weight=1 " + "a=b " * MAX_COMMENT_CHARS, "Job 1")
    with pytest.raises(InvalidInstanceError, match="no closing quotation"):
        plan_comment("unicron-plan: weight=1 'x" + "a" * 50000, "Job 1")


# --- reading Slurm ----------------------------------------------------------------------------

def test_slurm_documents_are_checked():
    nodes, jobs = _real()
    check_document(nodes, "sinfo --json")
    bad = copy.deepcopy(jobs)
    bad["errors"] = [{"error": "Unable to contact slurm controller (connect failure)", "errno": 1007}]
    bad["jobs"] = []
    with pytest.raises(InvalidInstanceError, match="Unable to contact slurm controller"):
        check_document(bad, "squeue --json")
    for meta in ({}, {"plugin": {"type": "openapi/v9.9.9"}}, {"plugin": {"type": "openapi/v0.0.38x"}}):
        doc = dict(jobs, meta=meta)
        with pytest.raises(InvalidInstanceError, match="format version"):
            check_document(doc, "squeue --json")
    check_document(dict(jobs, meta={"plugins": {"data_parser": "data_parser/v0.0.41"}}), "squeue --json")


def _fake_bin(tmp_path: Path, programs: dict[str, str]) -> dict:
    """PATH with fake Slurm programs (shell bodies), for SlurmCli and the CLI."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in programs.items():
        p = bin_dir / name
        p.write_text("#!/bin/sh\n" + body + "\n")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _slurm_programs(tmp_path: Path, squeue_body: str) -> dict:
    sinfo = tmp_path / "sinfo.json"
    sinfo.write_text((REAL / "sinfo.json").read_text())
    return {"scontrol": "echo 'scontrol: error: invalid option --json' >&2; exit 1",
            "sinfo": f"cat {shlex.quote(str(sinfo))}", "squeue": squeue_body}


@pytest.mark.parametrize("body, what", [
    ("echo 'not json'", "malformed JSON"),
    ("echo '{\"meta\": {}, \"jobs\": [], \"jobs\": []}'", "duplicate key"),
    ("echo 'squeue: error: slurm_load_jobs: Unable to contact slurm controller' >&2; exit 1", "exited 1"),
    ("sleep 30", "no answer in 1 s"),
    ("echo '{\"meta\": {\"plugin\": {\"type\": \"openapi/v0.0.38\"}}, \"errors\": [{\"error\": \"down\"}], "
     "\"jobs\": []}'", "Slurm reported 1 error"),
])
def test_a_failed_read_of_slurm_is_an_error(tmp_path, monkeypatch, body, what):
    env = _fake_bin(tmp_path, _slurm_programs(tmp_path, body))
    monkeypatch.setenv("PATH", env["PATH"])
    with pytest.raises(SlurmReadError, match=what):
        SlurmCli(timeout=1).read()


def test_control_characters_never_reach_a_command():
    assert append_reason("gpu\x00fell off\nthe bus", "unicron-plan: failed") == \
        "gpu\\x00fell off\\nthe bus; unicron-plan: failed"
    with pytest.raises(CommandFailed, match="control character"):
        SlurmCli().run(["scontrol", "update", "NodeName=n1", "Reason=a\x00b"])


def test_plan_ids_are_checked_before_they_name_a_file():
    for bad in ("x/../../target/profile.d", "..", "a\x00b", "", "p1/", "-p1", 7, None, "p" * 65):
        with pytest.raises(InvalidInstanceError):
            check_plan_id(bad)
    assert check_plan_id("p17") == "p17"


# --- the cluster as the planner sees it ---------------------------------------------------------

def test_a_planned_job_that_completes_has_left_and_frees_its_node():
    nodes, jobs = _real()
    planned = next(j for j in jobs["jobs"] if j["comment"].startswith("unicron-plan:") and j["job_state"] == "RUNNING")
    before = import_slurm(nodes, jobs, cost=COST, gpu_map=GpuMap())
    planned["job_state"] = "COMPLETING"
    after = import_slurm(nodes, jobs, cost=COST, gpu_map=GpuMap())
    assert str(planned["job_id"]) in {j["id"] for j in before["jobs"]}
    assert str(planned["job_id"]) not in {j["id"] for j in after["jobs"]}
    assert (after.get("event") or {}).get("failed_nodes") == (before.get("event") or {}).get("failed_nodes")
    free = {n["id"]: n["failed_gpus"] for n in after["cluster"]["nodes"]}
    held = expand(planned["nodes"], "", "")
    assert held and all(free[n] == [] for n in held)   # not withheld as another's work


def test_only_slurms_verdicts_fail_a_node():
    nodes, jobs = _real()
    for node in nodes["nodes"]:
        node["state"], node["state_flags"] = "idle", []
    base = import_slurm(nodes, jobs, cost=COST, gpu_map=GpuMap())
    assert "event" not in base
    for state, flags in (("down", []), ("down", ["NOT_RESPONDING"]), ("idle", ["INVALID_REG"]), ("mixed", ["DRAIN"]),
                         ("down", ["POWERED_DOWN"]), ("idle", ["MAINT", "DRAIN"])):
        doc = copy.deepcopy(nodes)
        doc["nodes"][0]["state"], doc["nodes"][0]["state_flags"] = state, flags
        assert import_slurm(doc, jobs, cost=COST, gpu_map=GpuMap())["event"]["failed_nodes"] == ["n1"], (state, flags)
    for state, flags in (("idle", ["COMPLETING"]), ("idle", ["NOT_RESPONDING"]), ("unknown", []),
                         ("idle", ["MAINT"]), ("idle", ["POWER_DOWN"]), ("idle", ["POWERED_DOWN"]),
                         ("idle", ["REBOOT_REQUESTED"])):   # out of use for a while, not failed (withheld)
        doc = copy.deepcopy(nodes)   # transient: a node that missed a ping, slurmctld just restarted
        doc["nodes"][0]["state"], doc["nodes"][0]["state_flags"] = state, flags
        assert "event" not in import_slurm(doc, jobs, cost=COST, gpu_map=GpuMap()), (state, flags)


# --- every accepted change is read back ----------------------------------------------------------

class FakeCli(SlurmCli):
    """A Slurm that accepts every command and changes only what ``effects`` says."""

    def __init__(self, jobs: dict[int, JobNow], effects):
        super().__init__()
        self.jobs, self.effects, self.calls = jobs, effects, []

    def run(self, argv, record=False):
        self.calls.append(argv)
        self.effects(self.jobs, argv)
        return ""

    def job(self, job):
        return copy.deepcopy(self.jobs.get(job, JobNow()))

    def node_state(self, node):
        return "idle"


def test_a_placement_slurm_ignores_is_an_error():
    """An update Slurm accepts and does not carry out (here: the task count kept) is an error."""
    def ignore_num_tasks(jobs, argv):
        if argv[:2] == ["scontrol", "update"] and argv[2] == "JobId=5":
            jobs[5].req_nodes = ["n3"]
    cli = FakeCli({5: JobNow(state="PENDING", num_nodes=2, num_tasks=2, reason="JobHeldAdmin")}, ignore_num_tasks)
    with pytest.raises(NotApplied, match="NumTasks=2"):
        carry_out([Step("place", job=5, nodes=["n3"], tasks=1)], cli, settle_seconds=1)
    assert ["scontrol", "release", "5"] not in cli.calls


def test_a_shrink_slurm_ignores_becomes_requeue_and_place():
    def effects(jobs, argv):
        j = jobs[6]
        if argv[1] == "requeuehold":
            j.state, j.nodes, j.reason = "PENDING", [], "job requeued in held state"
        elif argv[1] == "update" and any(a.startswith("ReqNodeList=") for a in argv):
            j.req_nodes, j.num_nodes, j.num_tasks = ["n1"], 1, 1
        elif argv[1] == "release":
            j.reason = "None"
        # "NodeList=n1" of the running job: ignored
    cli = FakeCli({6: JobNow(state="RUNNING", nodes=["n1", "n2"], num_nodes=2, num_tasks=2)}, effects)
    carry_out([Step("shrink", job=6, nodes=["n1"], tasks=1, cpus=1)], cli, settle_seconds=1)
    assert [c[1] for c in cli.calls] == ["update", "requeuehold", "update", "release"]
    assert cli.calls[2] == ["scontrol", "update", "JobId=6", "NumNodes=1-1", "NumTasks=1", "NumCPUs=1", "ReqNodeList=n1"]


def test_a_start_refused_because_the_job_started_is_not_an_error(monkeypatch):
    """Slurm may start a placed job itself between the read and StartTime=now, which it then
    refuses ("no longer pending"): the job runs and the pass goes on. Refused while the job is
    still pending, the pass fails."""
    import unicron_plan.integrations.agent as agent_mod

    monkeypatch.setattr(agent_mod.time, "sleep", lambda s: None)

    def started_first(jobs, argv):
        if "StartTime=now" in argv:
            if not stay_pending:
                jobs[7].state, jobs[7].nodes = "RUNNING", ["n2"]
            raise CommandFailed(argv, 1, "Job is no longer pending execution for job 7")
    for stay_pending in (False, True):
        cli = FakeCli({7: JobNow(state="PENDING", num_nodes=1, num_tasks=1, req_nodes=["n2"])}, started_first)
        if stay_pending:
            with pytest.raises(CommandFailed, match="no longer pending"):
                carry_out([Step("start", job=7, nodes=["n2"])], cli, settle_seconds=1)
        else:
            carry_out([Step("start", job=7, nodes=["n2"])], cli, settle_seconds=1)
        assert cli.calls == [["scontrol", "update", "JobId=7", "StartTime=now"]]


def test_a_drain_slurm_ignores_is_an_error():
    cli = FakeCli({}, lambda jobs, argv: None)
    with pytest.raises(NotApplied, match="not draining"):
        carry_out([Step("drain", node="n1", reason="r")], cli, settle_seconds=1)


# --- the command line ----------------------------------------------------------------------------

def _agent(args: list[str], env=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "unicron_plan.cli", "agent", "slurm", *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


def _one_line_error(r: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for w in words:
        assert w in lines[0], r.stderr


def test_operational_errors_exit_2_with_one_line(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    state = tmp_path / "state"
    _one_line_error(_agent(["--coordinator", "ftp://x", "--once", "--state-dir", str(state)]), 2, "--coordinator")
    _one_line_error(_agent(["--coordinator", closed, "--once", "--token-file", str(tmp_path / "none"),
                            "--state-dir", str(state)]), 2, "--token-file")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    _one_line_error(_agent(["--coordinator", closed, "--once", "--state-dir", str(a_file)]), 2, "not a directory")
    state.mkdir()
    (state / "journal.json").write_text("{not json")
    _one_line_error(_agent(["--coordinator", closed, "--once", "--state-dir", str(state)]), 2, "journal")
    (state / "journal.json").unlink()
    env = _fake_bin(tmp_path, _slurm_programs(tmp_path, "echo 'not json'"))
    with Server(tmp_path / "coordinator") as srv:  # reachable: the in-band pass reads it before Slurm
        _one_line_error(_agent(["--coordinator", srv.url, "--once", "--state-dir", str(state)], env=env), 2,
                        "reading Slurm failed")
    env = _fake_bin(tmp_path, _slurm_programs(tmp_path, f"cat {shlex.quote(str(REAL / 'squeue.json'))}"))
    _one_line_error(_agent(["--coordinator", closed, "--once", "--state-dir", str(state)], env=env), 2,
                    "--coordinator", "ConnectError")
    _one_line_error(_agent(["--coordinator", closed, "--approve", "x/../../etc", "--state-dir", str(state)]), 2,
                    "not a plan id")
    _one_line_error(_agent(["--coordinator", closed, "--approve", "p3", "--state-dir", str(state)]), 2,
                    "not the pending proposal")


class FakeClient:
    """A coordinator that answers a plan with the id it is given."""

    def __init__(self, plan_id):
        self.plan_id = plan_id

    def state(self):
        return {"revision": 1, "instance": None}

    def put_cluster(self, inst):
        return {"revision": 2}

    def post_event(self, event, idempotency_key=None, dry_run=False):
        return {"plan_id": self.plan_id, "revision": 2, "jobs": []}


def test_propose_refuses_a_plan_id_that_is_a_path(tmp_path):
    nodes, jobs = _real()

    class Cli(SlurmCli):
        def read(self):
            return copy.deepcopy(nodes), copy.deepcopy(jobs)

    agent = SlurmAgent(FakeClient("x/../../target"), AgentConfig(mode="propose", state_dir=tmp_path / "s"),
                       cli=Cli(), log=lambda rec: None)
    with pytest.raises(InvalidInstanceError, match="not a plan id"):
        agent.run_once()
    assert not (tmp_path / "target").exists()
    assert not [p for p in (tmp_path / "s").iterdir() if p.is_dir()]
    assert json.loads((tmp_path / "s" / "journal.json").read_text())["status"] == "posting"
    with pytest.raises(AgentError):
        agent.approve("p1")


def test_a_planned_job_running_without_its_gpus_is_requeued(tmp_path):
    """After a slurmd crash Slurm may restart a job with no GPUs bound (JOB_GRES=(null)): the
    agent requeues it (Slurm binds them at its next start) instead of failing every pass."""
    nodes, jobs = _real()
    planned = next(j for j in jobs["jobs"] if j["comment"].startswith("unicron-plan:") and j["job_state"] == "RUNNING")
    planned["tres_alloc_str"] = "cpu=3,node=3,billing=3,gres/gpu=12"
    planned["gres_detail"] = []

    class Cli(SlurmCli):
        def __init__(self):
            super().__init__()
            self.calls = []

        def read(self):
            return copy.deepcopy(nodes), copy.deepcopy(jobs)

        def run(self, argv, record=False):
            if record and self.on_command:
                self.on_command(argv)
            self.calls.append(argv)
            return ""

    cli = Cli()
    agent = SlurmAgent(FakeClient("p1"), AgentConfig(state_dir=tmp_path / "s"), cli=cli, log=lambda rec: None)
    with pytest.raises(NotApplied, match="without its GPUs bound"):
        agent.run_once()
    assert cli.calls == [["scontrol", "requeue", str(planned["job_id"])]]
    agent.cfg.mode = "propose"    # proposing changes nothing: a failed read
    with pytest.raises(SlurmReadError):
        agent.run_once()
    assert len(cli.calls) == 1
    agent.cfg.mode = "apply"      # a job that asks for part of a node is a wrong submission: never requeued
    jobs["jobs"][jobs["jobs"].index(planned)]["tres_per_node"] = "gres:gpu:h100:4"
    with pytest.raises(SlurmReadError, match="whole nodes"):
        agent.run_once()
    assert len(cli.calls) == 1


@pytest.mark.parametrize("comment,field", [
    ("unicron-plan: weight=1 throughput", "comment"),                       # not KEY=VALUE
    ("unicron-plan: weight=heavy throughput=8:100,16:190", "comment (weight)"),
    ("unicron-plan: weight=1 throughput=8:100 'open", "comment"),          # no closing quotation
    ("unicron-plan: weight=1 throughput=8:100 gpu-types=a100", "tres_per_node"),  # asks for h100 GPUs
])
def test_one_planned_job_with_an_invalid_comment_is_skipped_and_named(tmp_path, comment, field):
    """One planned job with invalid planning fields: the pass goes on with the others, one log line
    names the job and the field; its GPUs stay its own (not planned for another job)."""
    nodes, jobs = _real()
    bad = jobs["jobs"][1]   # job 2, RUNNING on n[4-6]
    bad["comment"] = comment
    with pytest.raises(InvalidInstanceError, match="Job 2") as err:   # the importer alone: an error naming it
        import_slurm(nodes, jobs, cost=COST, gpu_map=GpuMap())
    assert err.value.field.endswith(field)
    uploaded, lines = [], []

    class Client(FakeClient):
        """A coordinator that plans the uploaded cluster's event with the planner itself."""

        def put_cluster(self, inst):
            uploaded.append(inst)
            return super().put_cluster(inst)

        def post_event(self, event, idempotency_key=None, dry_run=False):
            from unicron_plan import api
            from unicron_plan.io import dumps

            plan = json.loads(dumps(api.solve(api.load_instance({**uploaded[-1], "event": event}))))
            return {**plan, "plan_id": self.plan_id, "revision": 2}

        def history(self, since=0):
            return []

    class Cli(SlurmCli):
        def read(self):
            return copy.deepcopy(nodes), copy.deepcopy(jobs)

    agent = SlurmAgent(Client("p1"), AgentConfig(mode="propose", state_dir=tmp_path / "s"), cli=Cli(),
                       log=lines.append)
    for _ in range(2):   # every pass, not only the first
        lines.clear()
        assert agent.run_once()["status"] == "proposed"
        skipped = [rec for rec in lines if "skipped" in rec]
        assert len(skipped) == 1 and skipped[0]["skipped"] == "Job 2" and field in skipped[0]["why"], lines
    inst = uploaded[0]
    assert {j["id"] for j in inst["jobs"]} == {"1"}   # job 3 is held by its owner: left out
    held = {n["id"]: n for n in inst["cluster"]["nodes"]}
    assert all(len(held[n]["failed_gpus"]) == held[n]["gpus"] for n in ("n4", "n5", "n6"))  # still job 2's


# --- the coordinator's malformed replies, --reason -------------------------------------------------------

def test_a_malformed_reply_is_a_reply_error():
    for body in (b'{"entries": [{"revision": 11', b"{}", b'{"entries": [{"revision": "x"}]}'):
        transport = httpx.MockTransport(lambda req, body=body: httpx.Response(
            200, content=body, headers={"content-type": "application/json"}))
        with PlannerClient("http://coordinator", transport=transport) as c:
            with pytest.raises(ReplyError, match="reply to GET /v1/history is not valid"):
                c.history()


class _Foreign(http.server.BaseHTTPRequestHandler):
    """Answers 200 with ``{}`` to everything (another service behind the coordinator's address)."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_POST = do_PUT = do_GET

    def log_message(self, *args):
        pass


def test_agent_exits_2_naming_a_malformed_reply(tmp_path):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Foreign)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        r = _agent(["--coordinator", url, "--once", "--state-dir", str(tmp_path / "state")])
        _one_line_error(r, 2, "--coordinator", "reply to GET /healthz is not valid")
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(timeout=10)


def test_a_reason_with_a_control_character_is_refused_before_anything_is_posted(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    r = _agent(["--coordinator", closed, "--once", "--state-dir", str(tmp_path / "state"), "--reason", "a\x01b"])
    _one_line_error(r, 2, "--reason", "control character")
