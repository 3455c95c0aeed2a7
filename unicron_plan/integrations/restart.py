"""The Slurm agent's in-band actions (docs/detection.md): what the coordinator's ``signal`` entries ask.

:func:`act_on_signals` reads the history after the last entry it handled (kept in
``signals.json`` in the agent's state directory, written before and after each action so a
restarted agent neither skips nor repeats one) and, per incident:

- ``restart`` (SEV2): :func:`restart_in_place` requeues the job (held), pins it to the nodes it
  ran on, releases it and verifies that it runs there again; the outcome, the commands and
  any node found not responding are posted back (``POST /v1/actions``); a failed restart
  with unresponsive nodes is escalated by the coordinator to SEV1; a job is restarted at most
  once for the incidents read together, and never left held by a restart that failed; with
  ``--mode propose`` the restart is only listed, never run;
- ``reconfigure`` (SEV1): the coordinator has recorded the node's failure and its plan;
  the plan id is returned for the agent to carry out like any plan;
- ``reattempt`` (SEV3): the process retries by itself; nothing to do.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Callable, Optional

from unicron_plan.integrations.agent import CommandFailed, NotApplied, SlurmAgent, SlurmCli, SlurmReadError, _dict
from unicron_plan.integrations.slurm import START_PAUSE, compress

#: Longest a requeued job may stay COMPLETING before the restart is given up.
SETTLE_SECONDS = 60.0
_RESTARTS = re.compile(r"\bRestarts=(\d+)")


def _job_state(cli: SlurmCli, job: int) -> tuple[str, list[str]]:
    """(state, nodes) of ``job`` now; ("", []) when Slurm no longer knows it or cannot be read."""
    try:
        now = cli.job(job)
    except (CommandFailed, SlurmReadError):
        return "", []
    return now.state, now.nodes


def _restarts(cli: SlurmCli, job: int) -> int:
    """How often Slurm has requeued ``job`` (``Restarts=`` of ``scontrol show job``), -1 if unknown."""
    try:
        m = _RESTARTS.search(cli.run(["scontrol", "show", "job", str(job)]))
    except CommandFailed:
        return -1
    return int(m.group(1)) if m else -1


def _unresponsive(cli: SlurmCli, nodes: list[str]) -> list[str]:
    """The nodes among ``nodes`` that Slurm marks down or not responding (a ``*`` after the state)."""
    out = []
    for node in nodes:
        try:
            state = cli.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"]).strip().lower()
        except CommandFailed:
            continue
        if state.endswith("*") or state.startswith(("down", "fail")):
            out.append(node)
    return out


def _undo(cli: SlurmCli, job: int) -> str:
    """After a restart that failed past its requeue: release the job if it is held, so that it runs
    where Slurm puts it (never left held). Raises (:class:`CommandFailed`, :class:`SlurmReadError`,
    :class:`NotApplied`) when that cannot be done now: the restart stays recorded as under way and
    the next pass takes it up again."""
    now = cli.job(job)
    if now.held:
        cli.run(["scontrol", "release", str(job)], record=True)
        return f"; job {job} released"
    if now.state == "COMPLETING":
        raise NotApplied(f"job {job} still COMPLETING after a failed restart: it is released by the next pass")
    return ""


def restart_in_place(cli: SlurmCli, job: int, verify_seconds: float = 60.0, before: int | None = None,
                     nodes: list[str] | None = None) -> dict:
    """Requeue ``job`` and start it again on the nodes it ran on; verified. ``before``/``nodes``: the
    restart count and nodes recorded when a previous attempt was cut short (the requeue is then not
    repeated if it happened, and a job already running again is a restart done). A failure after the
    requeue releases the job (:func:`_undo`). Returns ``{"outcome": "done"|"failed", "detail",
    "failed_nodes"}``."""
    state, now_nodes = _job_state(cli, job)
    nodes = nodes or now_nodes
    if not nodes:
        return {"outcome": "failed", "detail": f"job {job} is {state or 'unknown to Slurm'}: no nodes to restart on"}
    hl = compress(nodes)
    requeue_hold, place, *start = restart_commands(job, nodes)

    def failed(detail: str) -> dict:
        return {"outcome": "failed", "detail": detail + _undo(cli, job), "failed_nodes": _unresponsive(cli, nodes)}

    requeue = before is None
    if before is not None:   # resumed: what Slurm shows now decides (read strictly: never a guess)
        now = cli.job(job)
        if not now.state:
            return {"outcome": "failed", "detail": f"job {job} is unknown to Slurm"}
        restarts = _restarts(cli, job)
        if now.state == "RUNNING" and restarts > before:   # the attempt cut short restarted it
            return {"outcome": "done", "detail": f"job {job} runs again on {compress(now.nodes) or hl}"}
        if now.state == "RUNNING" and restarts < 0:   # running, whether restarted or not: left alone
            return {"outcome": "failed", "detail": f"job {job} runs on {compress(now.nodes) or hl}; its restart "
                                                   "count could not be read, so it is not requeued again"}
        requeue = 0 <= restarts <= before
    if requeue and state in ("RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", ""):
        try:
            cli.run(requeue_hold, record=True)
        except CommandFailed as exc:
            return failed(str(exc))
    deadline = time.monotonic() + SETTLE_SECONDS
    while _job_state(cli, job)[0] in ("COMPLETING", "RUNNING"):
        if time.monotonic() > deadline:
            return failed(f"job {job} still completing after {SETTLE_SECONDS:g} s")
        time.sleep(0.25)
    try:
        cli.run(place, record=True)
        # started within the second its previous run's credential was revoked, slurmd refuses the job
        # and Slurm ends it ("Job credential revoked"): the same pause as a placed job's (Step "start")
        time.sleep(START_PAUSE)
        for argv in start:
            cli.run(argv, record=True)
    except CommandFailed as exc:
        return failed(str(exc))
    deadline = time.monotonic() + verify_seconds
    while True:
        state, now_nodes = _job_state(cli, job)
        if state == "RUNNING" and set(now_nodes) == set(nodes):
            return {"outcome": "done", "detail": f"job {job} runs again on {hl}"}
        if time.monotonic() > deadline:
            return {"outcome": "failed", "detail": f"job {job} is {state or 'gone'}, not running on {hl} after "
                                                   f"{verify_seconds:g} s", "failed_nodes": _unresponsive(cli, nodes)}
        time.sleep(0.25)


def restart_commands(job: int, nodes: list[str]) -> list[list[str]]:
    """The commands of a restart in place of ``job`` on ``nodes``, in order: requeued held, pinned to its
    nodes, started now and released (what :func:`restart_in_place` runs and ``--mode propose`` lists)."""
    n, hl = len(nodes), compress(nodes)
    return [["scontrol", "requeuehold", str(job)],
            ["scontrol", "update", f"JobId={job}", f"NumNodes={n}-{n}", f"ReqNodeList={hl}"],
            ["scontrol", "update", f"JobId={job}", "StartTime=now"], ["scontrol", "release", str(job)]]


class SignalJournal:
    """``signals.json``: the last history revision handled and the restart under way (if any)."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def save(self, data: dict) -> None:
        from unicron_plan.io import write_atomic

        write_atomic(self.path, json.dumps(data))


#: A Slurm job id: ASCII digits only (``str.isdigit`` also takes '²', which ``int`` refuses, and '١',
#: which ``int`` reads as 1).
JOB_ID = re.compile(r"[0-9]{1,10}")


def _covered(j: dict) -> dict:
    """``covered`` of ``signals.json``: job -> [signal, upto, outcome] of its last restart, which covers
    that job's restart incidents recorded up to revision ``upto`` (read before the restart ran)."""
    known = j.get("covered")
    if not isinstance(known, dict):
        return {}
    return {k: v for k, v in known.items() if isinstance(v, list) and len(v) == 3 and isinstance(v[1], int)}


def act_on_signals(client, cli: SlurmCli, state_dir: Path, verify_seconds: float = 60.0,
                   log: Callable[[dict], None] = lambda rec: None, propose: bool = False,
                   report: Optional[list] = None) -> Optional[str]:
    """Carry out the restarts the coordinator's new ``signal`` entries ask for; the id of the newest plan
    of a SEV1 incident (for the agent to carry out), or None. The first call starts at the present.
    A job is restarted at most once for the incidents read together: the later ones, recorded before
    that restart, are posted as covered by it. ``propose``: a restart is only listed (outcome
    ``proposed``, the commands it would run), nothing is run or posted. ``report``: every restart's
    action is appended to it."""
    journal = SignalJournal(Path(state_dir) / "signals.json")
    j = journal.load()
    if "since" not in j:   # after the newest entry: incidents recorded before the agent are not acted on
        health = client.health()
        j = {"since": max(health.revision, health.history_revision)}
        journal.save(j)
    report = [] if report is None else report
    covered = _covered(j)

    def posted(action: dict) -> None:
        """A restart's action not run by :func:`_restart`: logged, posted and kept for the pass's result."""
        log({"restart": action})
        client.post_action(action)
        report.append(action)

    doing = j.get("doing")
    if doing and propose:   # left by a pass in --mode apply: finished by the next such pass
        log({"signal": doing.get("signal") if isinstance(doing, dict) else None,
             "pending": "a restart cut short; a pass in --mode apply finishes it"})
    elif doing:  # an agent stopped in the middle of a restart: finish it (the requeue is not repeated)
        if isinstance(doing, dict) and JOB_ID.fullmatch(str(doing.get("job"))):
            action = _restart(client, cli, doing, verify_seconds, log)
            report.append(action)
            if isinstance(doing.get("upto"), int):
                covered[doing["job"]] = [doing.get("signal"), doing["upto"], action["outcome"]]
        else:
            log({"skipped": f"restart under way {str(doing)[:120]!r}: not one"})
        j.pop("doing")
        j["covered"] = covered
        journal.save(j)
    plan_id = None
    awaiting = None  # (revision, at) of a SEV1 incident whose plan is not recorded yet
    proposed: set[str] = set()
    entries = client.history(since=j["since"], limit=1000)
    upto = entries[-1].revision if entries else j["since"]
    for entry in entries:
        body = entry.body
        if awaiting is not None:
            if entry.type == "plan" and isinstance(body.get("plan_id"), str):
                plan_id, awaiting = body["plan_id"], None
            elif entry.type == "action" and body.get("signal") == awaiting[0]:
                awaiting = None  # no plan could be made for it
        if entry.type == "signal":
            if body.get("action") == "restart":
                jobs = [body["job"]] if body.get("job") else body.get("jobs") or []
                for job in jobs if isinstance(jobs, list) else [jobs]:
                    if not JOB_ID.fullmatch(str(job)):
                        log({"signal": entry.revision, "skipped": f"job {str(job)[:40]!r} is not a Slurm job id"})
                        continue
                    job = str(job)
                    if propose:
                        if job not in proposed:
                            proposed.add(job)
                            nodes = _job_state(cli, int(job))[1]
                            action = {"signal": entry.revision, "action": "restart", "job": job, "outcome": "proposed",
                                      "commands": restart_commands(int(job), nodes) if nodes else [],
                                      "detail": f"job {job} " + (f"on {compress(nodes)}" if nodes else "runs nowhere")}
                            log({"restart": action})
                            report.append(action)
                        continue
                    if job in covered and entry.revision <= covered[job][1]:
                        first, _, outcome = covered[job]
                        if entry.revision == first:   # the restart itself (resumed above): posted
                            continue
                        action = {"signal": entry.revision, "action": "restart", "job": job, "commands": [],
                                  "outcome": "done" if outcome == "done" else "failed",
                                  "detail": f"covered by the restart for signal {first} ({outcome})"}
                        posted(action)
                        continue
                    state, nodes = _job_state(cli, int(job))
                    before = _restarts(cli, int(job))
                    if before < 0 and nodes:   # without it a resumed restart could not tell whether it requeued
                        action = {"signal": entry.revision, "action": "restart", "job": job, "commands": [],
                                  "outcome": "failed", "detail": f"job {job}: Slurm's restart count could not "
                                                                 "be read (scontrol show job): not restarted"}
                        posted(action)
                        continue
                    doing = {"signal": entry.revision, "job": job, "nodes": nodes, "before": before, "upto": upto}
                    j["doing"] = doing
                    journal.save(j)
                    action = _restart(client, cli, doing, verify_seconds, log)
                    report.append(action)
                    covered[job] = [entry.revision, upto, action["outcome"]]
                    j.pop("doing")
                    j["covered"] = covered
                    journal.save(j)
            elif body.get("action") == "reconfigure":
                awaiting = (entry.revision, entry.at)
        if awaiting is None:
            j["since"] = entry.revision
            j["covered"] = covered = {k: v for k, v in covered.items() if v[1] > entry.revision}
            journal.save(j)
    if awaiting is not None and _age(awaiting[1]) < AWAIT_PLAN_SECONDS:
        return AWAITING  # the coordinator is making the plan: the next pass takes it
    return plan_id


#: How far back (history entries before the last one handled) a pending failure is matched to its incident.
RECENT_ENTRIES = 200
#: Longest the agent waits for the plan of a SEV1 incident to be recorded after the incident.
AWAIT_PLAN_SECONDS = 30.0
AWAITING = "awaiting"


def _age(at: str) -> float:
    from datetime import datetime, timezone

    try:
        return (datetime.now(timezone.utc) - datetime.fromisoformat(at.replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return float("inf")


def sev1_incidents(client, since: int) -> list:
    """The ``signal`` entries of SEV1 incidents on a node recorded after ``since``: the coordinator takes
    their nodes out although Slurm may show them healthy (no repair is inferred for them)."""
    return [e for e in client.history(since=since, limit=1000)
            if e.type == "signal" and e.body.get("action") == "reconfigure" and e.body.get("node")]


def _restart(client, cli: SlurmCli, doing: dict, verify_seconds: float, log) -> dict:
    commands: list[list[str]] = []
    previous = cli.on_command

    def keep(argv):
        commands.append(list(argv))
        if previous:
            previous(argv)

    cli.on_command = keep
    try:
        result = restart_in_place(cli, int(doing["job"]), verify_seconds, doing.get("before"), doing.get("nodes"))
    finally:
        cli.on_command = previous
    action = {"signal": doing["signal"], "action": "restart", "job": doing["job"], "commands": commands, **result}
    log({"restart": action})
    client.post_action(action)
    return action


class InBandAgent(SlurmAgent):
    """The Slurm agent that also acts on in-band incidents, before each of its passes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        #: The restarts of the pass under way (their actions), for its result.
        self._restart_actions: list[dict] = []

    def run_once(self) -> dict:
        self._restart_actions = []
        if self.journal.load().get("status") not in ("posting", "carrying"):  # a plan under way goes first
            done = self.signals_pass()
            if done is not None:
                return self._with_restarts(done)
        return self._with_restarts(super().run_once())

    def _with_restarts(self, result: dict) -> dict:
        """The pass's result with its restarts (``restarts``) and the commands they ran first in ``commands``."""
        if self._restart_actions:
            result["restarts"] = self._restart_actions
            ran = [c for a in self._restart_actions if a["outcome"] != "proposed" for c in a["commands"]]
            if ran:
                result["commands"] = ran + result.get("commands", [])
        return result

    def _pending_incidents(self, coord: Optional[dict], back: int) -> list:
        """The SEV1 incidents, recorded after ``back`` entries before the last one the in-band pass
        handled, whose node is in the coordinator's pending failure."""
        pending = set(((coord or {}).get("event") or {}).get("failed_nodes") or [])
        if not pending:
            return []
        since = SignalJournal(Path(self.cfg.state_dir) / "signals.json").load().get("since", 0)
        return [e for e in sev1_incidents(self.client, max(0, since - back)) if e.body["node"] in pending]

    def _isolated(self, coord: Optional[dict]) -> set[str]:
        """Nodes the coordinator isolated for an in-band SEV1 (its pending failure) although Slurm may still
        show them healthy: not a repair, not drift (the history is read after the state was)."""
        return {e.body["node"] for e in self._pending_incidents(coord, RECENT_ENTRIES)}

    def _incident_under_way(self, coord: Optional[dict]) -> bool:
        """A node of the coordinator's pending failure is that of a SEV1 incident the in-band pass has
        not handled yet (recorded after it read the history, less than AWAIT_PLAN_SECONDS ago): the
        next pass carries out the incident's own plan. Re-planned now, from Slurm's view, the node
        would be in service again (Slurm still shows it healthy)."""
        return any(_age(e.at) < AWAIT_PLAN_SECONDS for e in self._pending_incidents(coord, 0))

    def signals_pass(self) -> Optional[dict]:
        """Restarts carried out; a SEV1 incident's plan, when it is the coordinator's latest, carried
        out like the agent's own (journal ``carrying``), with its result."""
        plan_id = act_on_signals(self.client, self.cli, self.cfg.state_dir, self.cfg.verify_seconds, self.log,
                                 propose=self.cfg.mode != "apply", report=self._restart_actions)
        if plan_id == AWAITING:
            return {"status": "awaiting-plan"}
        if plan_id is None or self.cfg.mode != "apply":
            return None
        plan = _dict(self.client.get_plan(plan_id))
        if plan["revision"] != self.client.health().revision:
            self.log({"signal_plan": plan_id, "skipped": "the state moved on since the plan"})
            return None
        self.journal.save({"status": "carrying", "plan": plan, "attempts": 0, "commands": []})
        return self._finish(self.journal.load(), time.monotonic())
