"""The agent that closes the loop between Slurm and the planning coordinator
(``unicron-plan serve``): read the cluster, tell the coordinator what changed (as
events), carry the plan out (or propose it), check that Slurm reached it, post the apply.

One pass (:meth:`SlurmAgent.run_once`):

1. finish a plan a previous pass left half carried out, or one an operator approved (the
   journal says so);
2. read Slurm (``scontrol show nodes --json``, or ``sinfo --json`` before 23.02;
   ``squeue --json``) strictly: a non-zero exit, a timeout, output that is not JSON (or too
   deep, or with duplicate keys), an ``errors`` array or an unknown format version is a failed
   read, and the pass stops there (nothing uploaded, nothing applied);
3. compare with the coordinator's ``/v1/state``: a node Slurm itself calls out of service
   (DOWN, DRAIN, NOT_RESPONDING...) -> ``failure``, such a node back -> ``repair``, planned jobs
   gone -> ``job_exit``, new pending planned jobs -> ``POST /v1/jobs`` + ``job_arrival``.
   GPUs that jobs the planner does not manage hold are not free, never failed. Anything else
   that differs (a job Slurm moved, requeued or started by itself, unmanaged work that started
   or ended) is drift: reported, and the cluster is uploaded again (``PUT /v1/cluster``) with
   its failures as one event, so the plan is made from what Slurm shows;
4. ``propose``: write the plan and its script under ``--state-dir`` and stop (an operator
   approves it with ``--approve PLAN_ID`` or ``POST /v1/plans/ID/apply``; the next pass
   carries it out); ``apply``: carry out the export's guarded steps, reading every change
   back (a command Slurm accepts and ignores is an error), wait until every planned job runs
   on its planned nodes (or is held), and post the apply. A plan Slurm does not reach within
   the pass is re-planned once from what Slurm shows, in the same pass.

Restart safety: every event is written to the journal with its ``Idempotency-Key``
before it is posted (a repost answers the same plan), the plan before the first
command, and ``applied`` after the coordinator confirmed. Every step checks Slurm
before acting, so a restarted agent finishes a half-carried plan and never
requeues a job twice; an apply the coordinator already has (409 with its state equal
to the plan) is recorded as done.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from unicron_plan.errors import InvalidInstanceError, UnicronError
from unicron_plan.integrations.common import Cost, GpuMap
from unicron_plan.integrations.slurm import (COMMENT_PREFIX, HOLDING, RESERVATION_PREFIX, START_PAUSE, StalePlan, Step,
                                             UnboundGpus, append_reason, check_document, compress, export_slurm,
                                             expand, import_slurm, parse_jobs, parse_nodes, render_script)
from unicron_plan.text import one_line

#: A plan id as the coordinator makes them (``p17``), checked before it names a directory.
PLAN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


class AgentError(UnicronError):
    """An operational failure of a pass (Slurm or the coordinator unreachable or answering an
    error, a command that failed or was ignored, an unreadable journal): exit code 2."""


class SlurmReadError(AgentError):
    """Reading Slurm failed: nothing is uploaded and nothing applied in that pass."""


class CommandFailed(AgentError):
    """A Slurm command exited non-zero, timed out or could not run."""

    def __init__(self, argv: list[str], code: int, stderr: str):
        self.argv, self.code, self.stderr = argv, code, stderr.strip()
        super().__init__(one_line(f"{shlex.join(argv)} exited {code}: {self.stderr[:300]}"))


class NotApplied(AgentError):
    """Slurm accepted a command (exit 0) and did not carry it out."""


def check_plan_id(value: Any, where: str = "plan_id") -> str:
    """A plan id fit to name a file: letters, digits, '_' and '-' (no separator, '..' or NUL)."""
    if not isinstance(value, str) or not PLAN_ID.fullmatch(value):
        raise InvalidInstanceError(where, f"{one_line(str(value), 80)!r} is not a plan id (letters, digits, "
                                          "'_', '-'; at most 64)")
    return value


@dataclass
class JobNow:
    """One job as ``squeue`` shows it now."""

    state: str = ""              # "" when Slurm no longer knows the job
    nodes: list[str] = field(default_factory=list)
    num_nodes: int = 0
    num_tasks: int = 0
    req_nodes: list[str] = field(default_factory=list)
    reason: str = ""

    @property
    def held(self) -> bool:
        return self.state == "PENDING" and (self.reason.startswith("JobHeld") or "held state" in self.reason)


class SlurmCli:
    """The Slurm commands the agent runs: argument vectors, never a shell, each bounded by
    ``timeout`` seconds."""

    def __init__(self, on_command: Optional[Callable[[list[str]], None]] = None, timeout: float = 30.0):
        self.on_command = on_command
        self.timeout = timeout

    def run(self, argv: list[str], record: bool = False) -> str:
        if not all(a.isprintable() for a in argv):
            raise CommandFailed([one_line(a, 80) for a in argv], -1, "refused: an argument holds a control character")
        if record and self.on_command:
            self.on_command(argv)
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False,
                               errors="replace")
        except subprocess.TimeoutExpired:
            raise CommandFailed(argv, -1, f"no answer in {self.timeout:g} s") from None
        except OSError as exc:
            raise CommandFailed(argv, -1, str(exc)) from None
        if r.returncode != 0:
            raise CommandFailed(argv, r.returncode, r.stderr or r.stdout)
        return r.stdout

    def _document(self, argv: list[str]) -> dict:
        from unicron_plan.io import parse_json

        try:
            out = self.run(argv)
        except CommandFailed as exc:
            raise SlurmReadError(f"reading Slurm failed: {exc}") from None
        source = shlex.join(argv)
        try:
            doc = parse_json(out, source=source)
            check_document(doc, source)
        except InvalidInstanceError as exc:
            raise SlurmReadError(f"reading Slurm failed: {exc}") from None
        return doc

    def read(self) -> tuple[dict, dict]:
        """(nodes, jobs) documents with whatever the installed Slurm supports, read strictly
        (:class:`SlurmReadError` on any failure)."""
        try:
            nodes = self._document(["scontrol", "show", "nodes", "--json"])
        except SlurmReadError as exc:
            if "json" not in str(exc).lower():
                raise
            nodes = self._document(["sinfo", "--json"])  # Slurm 22.05: no scontrol --json
        return nodes, self._document(["squeue", "--json"])

    def job(self, job: int) -> JobNow:
        """The job now; ``JobNow()`` (state "") when Slurm no longer knows it."""
        try:
            out = self.run(["squeue", "-h", "-j", str(job), "-O",
                            "State:|,NumNodes:|,NumTasks:|,ReqNodes:|,NodeList:|,Reason:|"]).strip()
        except CommandFailed as exc:
            if "invalid job id" in exc.stderr.lower():
                return JobNow()
            raise
        if not out:
            return JobNow()
        parts = out.split("|")
        if len(parts) < 6:
            raise SlurmReadError(f"reading Slurm failed: squeue -j {job}: {one_line(out, 120)!r}")
        state, num_nodes, num_tasks, req, nodes, reason = (p.strip() for p in parts[:6])
        obj = f"Job {job}"
        return JobNow(state=state, nodes=expand(nodes, obj, "nodes") if state != "PENDING" else [],
                      num_nodes=int(num_nodes) if num_nodes.isdigit() else 0,
                      num_tasks=int(num_tasks) if num_tasks.isdigit() else 0,
                      req_nodes=expand("" if req in ("", "(null)") else req, obj, "required nodes"), reason=reason)

    def node_state(self, node: str) -> str:
        return self.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"]).strip().lower()


def _settle(cli: SlurmCli, job: int, deadline: float) -> JobNow:
    """The job once it is no longer completing (its previous run's processes gone)."""
    while True:
        now = cli.job(job)
        if now.state != "COMPLETING":
            return now
        if time.monotonic() > deadline:
            raise NotApplied(f"job {job} still COMPLETING: its processes did not end (KillWait)")
        time.sleep(0.25)


def _requeue(cli: SlurmCli, job: int, deadline: float) -> None:
    """Requeue a running job held and wait until it is pending (checked)."""
    cli.run(["scontrol", "requeuehold", str(job)], record=True)
    now = _settle(cli, job, deadline)
    if now.state not in ("PENDING", ""):
        raise NotApplied(f"scontrol requeuehold {job}: the job is {now.state}, not pending")


def _place(cli: SlurmCli, st: Step, deadline: float) -> None:
    """Give a pending job its new nodes (NumNodes, NumTasks, ReqNodeList), read it back, release.
    (Slurm shows a requeued job's node count of its last run, so the count is checked only when
    the job runs, by the verification of the plan.)"""
    now = _settle(cli, st.job, deadline)
    if now.state != "PENDING":
        raise NotApplied(f"job {st.job} is {now.state or 'gone'}, not pending: it cannot be placed")
    update, release = st.commands()
    cli.run(update, record=True)
    after = cli.job(st.job)
    if set(after.req_nodes) != set(st.nodes) or (st.tasks and after.num_tasks != st.tasks):
        raise NotApplied(f"{shlex.join(update)} exited 0 but Slurm shows NumNodes={after.num_nodes} "
                         f"NumTasks={after.num_tasks} ReqNodeList={','.join(after.req_nodes) or '(null)'}")
    if after.held:
        cli.run(release, record=True)


def carry_out(steps: list[Step], cli: SlurmCli, settle_seconds: float = 120.0) -> None:
    """Run the export's steps, each only when Slurm is not there yet (the same guards as the
    exported script), and read every change back: a command Slurm accepted and did not carry
    out raises :class:`NotApplied` (a shrink Slurm ignores falls back to requeue and place). A
    failed step releases the jobs this call requeued for a move and raises; the next pass (or
    the re-plan of this one) starts from what Slurm shows."""
    moved: list[int] = []
    deadline = time.monotonic() + settle_seconds
    paused = False
    try:
        for st in steps:
            if st.kind == "drain":
                if "drain" not in cli.node_state(st.node):
                    argv = st.commands()[0]
                    if st.ours:   # no nodes file: the node's reason now, ours added
                        now = cli.run(["sinfo", "-h", "-N", "-n", st.node, "-o", "%E"]).strip()
                        argv[-1] = "Reason=" + append_reason("" if now == "none" else now, st.ours)
                    cli.run(argv, record=True)
                    if "drain" not in cli.node_state(st.node):
                        raise NotApplied(f"{shlex.join(argv)} exited 0 but node {st.node} is not draining")
                continue
            now = cli.job(st.job)
            there = now.state == "RUNNING" and set(now.nodes) == set(st.nodes)
            if st.kind == "hold":
                if now.state == "PENDING" and not now.held:
                    cli.run(st.commands()[0], record=True)
                    after = cli.job(st.job)
                    if after.state == "PENDING" and not after.held:
                        raise NotApplied(f"scontrol hold {st.job} exited 0 but the job is not held")
            elif st.kind == "shrink":
                if not there:
                    cli.run(st.commands()[0], record=True)
                    after = cli.job(st.job)
                    if not (after.state == "RUNNING" and set(after.nodes) == set(st.nodes)):
                        # Slurm ignored the shrink (or took the job elsewhere): requeue with the new shape
                        _requeue(cli, st.job, deadline)
                        moved.append(st.job)
                        _place(cli, Step("place", job=st.job, nodes=st.nodes, tasks=st.tasks, cpus=st.cpus), deadline)
            elif st.kind == "suspend":
                if now.state in ("RUNNING", "SUSPENDED"):
                    _requeue(cli, st.job, deadline)
                elif now.state == "PENDING" and not now.held:
                    cli.run(["scontrol", "hold", str(st.job)], record=True)
            elif st.kind == "requeue":
                if not there and now.state in ("RUNNING", "SUSPENDED"):
                    _requeue(cli, st.job, deadline)
                    moved.append(st.job)
            elif st.kind == "place" and not there:
                _place(cli, st, deadline)
            elif st.kind == "start":
                if not paused:
                    time.sleep(START_PAUSE)
                    paused = True
                if cli.job(st.job).state == "PENDING":
                    try:
                        cli.run(st.commands()[0], record=True)
                    except CommandFailed:
                        # Slurm may start the job itself between the read and the update; the
                        # verification that follows checks where it runs
                        if cli.job(st.job).state == "PENDING":
                            raise
    except AgentError:
        for j in moved:
            try:
                if cli.job(j).held:
                    cli.run(["scontrol", "release", str(j)], record=True)
            except AgentError:
                pass
        raise


def differences(plan: dict, nodes_doc: dict, jobs_doc: dict) -> list[str]:
    """What of the plan Slurm does not show (empty: the cluster reached the plan): every
    job the plan runs is RUNNING exactly on its planned nodes, every job it keeps at 0 holds
    no node, every node it drains is drained."""
    jobs = {str(j.job_id): j for j, _ in parse_jobs(jobs_doc)}
    nodes = {n.name: n for n, _ in parse_nodes(nodes_doc)}
    out = []
    for pj in plan["jobs"]:
        j = jobs.get(pj["id"])
        if j is None:
            if pj["gpus"]:
                out.append(f"job {pj['id']}: not in squeue")
            continue
        state = "RUNNING" if "RUNNING" in j.flags else sorted(j.flags)[0] if j.flags else "?"
        now = set(expand(j.nodes, f"Job {pj['id']}", "nodes")) if j.flags & HOLDING else set()
        if pj["gpus"] and (state != "RUNNING" or now != set(pj["nodes"])):
            why = f" ({j.state_reason})" if state == "PENDING" and j.state_reason not in ("", "None") else ""
            out.append(f"job {pj['id']}: {state}{why} on {sorted(now)}, plan {sorted(pj['nodes'])}")
        elif not pj["gpus"] and now:
            out.append(f"job {pj['id']}: {state} on {sorted(now)}, plan 0 GPUs")
    for n in plan.get("drained_nodes") or []:
        if n in nodes and not nodes[n].flags & {"DRAIN", "DRAINED", "DRAINING"}:
            out.append(f"node {n}: not drained")
    return out


class Journal:
    """A small JSON file, replaced atomically (write, fsync, rename)."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict:
        from unicron_plan.io import parse_json

        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise AgentError(f"journal {self.path}: cannot read: {exc.strerror or exc}") from None
        try:
            data = parse_json(text, source=str(self.path))
        except InvalidInstanceError as exc:
            raise AgentError(f"journal unreadable ({exc}); move it away to start afresh") from None
        if not isinstance(data, dict):
            raise AgentError(f"journal {self.path}: not a JSON object; move it away to start afresh")
        return data

    def save(self, data: dict) -> None:
        from unicron_plan.io import write_atomic

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomic(self.path, json.dumps(data), mode=0o600, durable=True)
        except OSError as exc:
            raise AgentError(f"journal {self.path}: cannot write: {exc.strerror or exc}") from None


@dataclass
class AgentConfig:
    mode: str = "apply"                     # apply | propose
    state_dir: Path = Path("unicron-agent")
    cost: Cost = field(default_factory=lambda: Cost(expected_run_seconds=36000.0))
    gpu_map: GpuMap = field(default_factory=GpuMap)
    rack_feature: Optional[str] = "rack"
    reason: str = "unicron-plan: failed"
    verify_seconds: float = 60.0            # longest wait for Slurm to reach a plan (bounded by pass_seconds)
    pass_seconds: Optional[float] = None    # longest pass (the loop's --interval); None: no bound but verify's
    reserve: bool = True                    # protect the nodes of a move with a Slurm reservation


def _full(inst: dict) -> set[str]:
    """Nodes with none of their GPUs available to planned jobs (failed, or held by other work)."""
    out = {n["id"] for n in inst["cluster"]["nodes"] if len(n.get("failed_gpus") or []) >= n["gpus"]}
    ev = inst.get("event") or {}
    if ev.get("kind") == "failure":
        out |= set(ev.get("failed_nodes") or [])
    return out


def _verdicts(inst: dict) -> set[str]:
    """Nodes of an imported instance that Slurm itself calls out of service."""
    ev = inst.get("event") or {}
    return set(ev.get("failed_nodes") or []) if ev.get("kind") == "failure" else set()


def _base(inst: dict) -> dict:
    return {k: v for k, v in inst.items() if k != "event"}


def _dict(reply: Any) -> dict:
    """A client reply (a pydantic model, or a dict from an older client) as JSON data."""
    return reply.model_dump(mode="json", exclude_none=True) if hasattr(reply, "model_dump") else reply


def _plan_body(plan: dict) -> dict:
    return {k: v for k, v in plan.items() if k not in ("plan_id", "revision")}


def events_between(coord: Optional[dict], inst: dict, failed: Optional[set[str]] = None,
                   isolated: frozenset[str] | set[str] = frozenset()) -> tuple[list[dict], list[str]]:
    """Events that carry the coordinator's view (``coord``) to Slurm's (``inst``), or drift
    (then the cluster is uploaded). A node fails only by Slurm's verdict; GPUs held by work the
    planner does not manage are compared as they are (a change is drift, never a failure).
    ``failed``: the nodes the coordinator has as failed (None: every node it has with all GPUs
    out); a node held whole by other work that is free again is drift, not a repair. ``isolated``:
    nodes the coordinator took out on its own (an in-band SEV1 incident) that Slurm may still show
    healthy: neither a repair nor drift."""
    if coord is None:
        return [], []
    drift: list[str] = []
    c_nodes = {n["id"]: n for n in coord["cluster"]["nodes"]}
    s_nodes = {n["id"]: n for n in inst["cluster"]["nodes"]}
    if set(c_nodes) != set(s_nodes):
        return [], [f"nodes differ: {sorted(set(c_nodes) ^ set(s_nodes))[:10]}"]
    c_full, s_verdict = _full(coord), _verdicts(inst)
    s_full = _full(inst)
    for nid in set(c_nodes) - c_full - s_verdict:
        if sorted(c_nodes[nid].get("failed_gpus") or []) != sorted(s_nodes[nid].get("failed_gpus") or []):
            drift.append(f"node {nid}: GPUs held outside the plan changed")
    back = c_full - s_full - set(isolated)
    freed = back - failed if failed is not None else set()
    if freed:
        drift.append(f"nodes {sorted(freed)}: GPUs held outside the plan are free again")
    repaired = sorted(n for n in back - freed if not s_nodes[n].get("failed_gpus"))
    if len(repaired) != len(back - freed):
        drift.append("a returned node has GPUs held outside the plan")
    c_jobs = {j["id"]: j for j in coord["jobs"]}
    s_jobs = {j["id"]: j for j in inst["jobs"]}
    exits = sorted(set(c_jobs) - set(s_jobs))
    arrivals = sorted(set(s_jobs) - set(c_jobs))
    for jid in arrivals:
        if s_jobs[jid]["current"]["gpus"]:
            drift.append(f"job {jid}: runs on {s_jobs[jid]['current']['nodes']} but the coordinator has no such job")
    for jid in set(c_jobs) & set(s_jobs):
        c_cur, s_cur = c_jobs[jid]["current"], s_jobs[jid]["current"]
        if c_cur["gpus"] != s_cur["gpus"] or sorted(c_cur["nodes"]) != sorted(s_cur["nodes"]):  # a set
            drift.append(f"job {jid}: Slurm shows {s_jobs[jid]['current']}, the coordinator "
                         f"{c_jobs[jid]['current']}")
    if drift:
        return [], drift
    events: list[dict] = []
    if exits:
        events.append({"kind": "job_exit", "jobs": exits})
    if arrivals:
        events.append({"kind": "job_arrival", "jobs": arrivals, "_jobs": [s_jobs[j] for j in arrivals]})
    if repaired:
        events.append({"kind": "repair", "repaired_nodes": repaired})
    new_failed = sorted(s_verdict - c_full)
    if new_failed:
        events.append({"kind": "failure", "failed_nodes": new_failed, "failed_gpus": []})
    return events, []


def with_isolated(inst: dict, isolated: frozenset[str] | set[str]) -> Optional[dict]:
    """The event of imported instance ``inst`` with the nodes in ``isolated`` failed as well (those of
    its nodes that have GPUs to lose, as the importer counts a failed node), or None when there is none."""
    event = inst.get("event")
    if event is not None and event.get("kind") != "failure":
        return event
    named = set((event or {}).get("failed_nodes") or [])
    extra = {n["id"] for n in inst["cluster"]["nodes"]
             if n["id"] in isolated and len(n.get("failed_gpus") or []) < n["gpus"]} - named
    if not extra:
        return event
    nodes = [n["id"] for n in inst["cluster"]["nodes"] if n["id"] in named | extra]  # in cluster order
    gpus = [g for g in (event or {}).get("failed_gpus") or [] if g["node"] not in extra]
    return {"kind": "failure", "failed_nodes": nodes, "failed_gpus": gpus}


#: A Slurm user name as the reservation's Users= list takes it.
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


class SlurmAgent:
    """One agent: a Slurm CLI, a coordinator client, a journal under ``cfg.state_dir``."""

    def __init__(self, client, cfg: AgentConfig, cli: Optional[SlurmCli] = None,
                 log: Callable[[dict], None] = lambda rec: print(json.dumps(rec), file=sys.stderr, flush=True)):
        self.client, self.cfg, self.log = client, cfg, log
        if cfg.state_dir.exists() and not cfg.state_dir.is_dir():
            raise AgentError(f"--state-dir {cfg.state_dir}: not a directory")
        self.journal = Journal(cfg.state_dir / "journal.json")
        #: The nodes the coordinator has as failed (Slurm's verdicts it was told), apart from the
        #: journal so that every journal state keeps it.
        self.failed = Journal(cfg.state_dir / "failed.json")
        self.cli = cli or SlurmCli()
        self.cli.on_command = self._record
        #: Planned jobs with invalid planning fields seen in this pass (each logged once a pass).
        self._skipped: set[str] = set()

    # -- journal ---------------------------------------------------------------------------------
    def _record(self, argv: list[str]) -> None:
        j = self.journal.load()
        j.setdefault("commands", []).append(argv)
        self.journal.save(j)
        self.log({"command": argv})

    def _carry(self, plan: dict, **extra) -> dict:
        j = {"status": "carrying", "plan": plan, "commands": [], **extra}
        self.journal.save(j)
        return j

    # -- approval --------------------------------------------------------------------------------
    def approve(self, plan_id: str) -> dict:
        """Record an operator's approval of the pending proposal: the next pass carries it out."""
        check_plan_id(plan_id)
        j = self.journal.load()
        if j.get("status") != "proposed" or j.get("plan_id") != plan_id:
            now = j.get("plan_id") if j.get("status") == "proposed" else None
            raise AgentError(f"plan {plan_id} is not the pending proposal"
                             + (f" (that is {now})" if now else " (there is none)"))
        plan = j.get("plan") or _dict(self.client.get_plan(plan_id))
        self._carry(plan, approved=True)
        self.log({"approved": plan_id})
        return {"status": "approved", "plan_id": plan_id}

    def _approved_on_coordinator(self, j: dict) -> Optional[dict]:
        """The proposed plan, when the coordinator has an apply of it (``POST /v1/plans/ID/apply``)."""
        plan = j.get("plan") or {}
        since = int(plan.get("revision") or 0)
        for entry in self.client.history(since=since):
            e = _dict(entry)
            if e.get("type") == "apply" and (e.get("body") or {}).get("plan_id") == j.get("plan_id"):
                return plan
        return None

    # -- one pass --------------------------------------------------------------------------------
    def run_once(self) -> dict:
        start = time.monotonic()
        self._skipped = set()
        j = self.journal.load()
        if j.get("status") == "posting":      # killed between journaling an event and its answer
            plan = _dict(self.client.post_event(j["event"], idempotency_key=j["key"]))
            self._note_failed(j["event"])
            j = self._carry(plan)
        if j.get("status") == "proposed" and j.get("plan_id"):
            plan = self._approved_on_coordinator(j)
            if plan is not None:
                self.log({"approved": j["plan_id"], "by": "coordinator"})
                j = self._carry(plan, approved=True)
        if j.get("status") == "carrying":
            return self._finish(j, start)
        nodes_doc, jobs_doc = self._read_settled(start)
        state = _dict(self.client.state())
        inst = self._import(nodes_doc, jobs_doc, state.get("instance"))
        known = self.failed.load()
        isolated = self._isolated(state.get("instance"))
        events, drift = events_between(state.get("instance"), inst,
                                       set(known["nodes"]) if isinstance(known.get("nodes"), list) else None,
                                       isolated)
        if drift:
            self.log({"drift": drift})
        if state.get("instance") is None or drift:
            self._upload(inst)
            events = [inst["event"]] if inst.get("event") else []
        plan = None
        for ev in events:
            plan = self._post(ev)
        if plan is None and j.get("status") == "proposed":
            return {"status": "proposed", "plan_id": j["plan_id"], "drift": drift}
        if plan is None and (state.get("instance") or {}).get("event") and not drift:
            if self._incident_under_way(state.get("instance")):
                # an in-band incident's failure recorded after this pass read the history: its plan is
                # carried out by the next pass (a re-plan now would be made from Slurm's view alone)
                return {"status": "awaiting-plan", "drift": drift}
            # the coordinator's last plan was never carried out (given up, or made elsewhere)
            self.log({"replan": "the coordinator's pending plan was not carried out"})
            plan = self._replan(isolated)
        if plan is None:
            return {"status": "in-sync", "drift": drift}
        if self.cfg.mode == "propose":
            return self._propose(plan, nodes_doc, jobs_doc, drift)
        result = self._finish(self.journal.load(), start)
        result["drift"] = drift + result.get("drift", [])
        return result

    def _isolated(self, coord: Optional[dict]) -> set[str]:
        """Nodes the coordinator took out on its own, not by Slurm's verdict (none here; the in-band
        agent has them): :func:`events_between` neither repairs them nor calls them drift, and a
        re-plan from Slurm's view fails them again."""
        return set()

    def _incident_under_way(self, coord: Optional[dict]) -> bool:
        """The coordinator's pending failure comes from an in-band incident whose plan the in-band pass
        has not taken up yet (none here; the in-band agent has them): not re-planned by this pass."""
        return False

    def _read_settled(self, start: float) -> tuple[dict, dict]:
        """Slurm's documents once no planned job is COMPLETING (ending, or being requeued by Slurm
        after a node failure: which one shows only when it is done), for at most the pass's budget
        (then a completing planned job counts as gone, and comes back as an arrival if requeued)."""
        deadline = time.monotonic() + self._budget(start)
        while True:
            nodes_doc, jobs_doc = self.cli.read()
            ending = [j.job_id for j, _ in parse_jobs(jobs_doc)
                      if "COMPLETING" in j.flags and j.comment.strip().startswith(COMMENT_PREFIX)]
            if not ending or time.monotonic() > deadline:
                return nodes_doc, jobs_doc
            time.sleep(0.5)

    def _import(self, nodes_doc: dict, jobs_doc: dict, coord: Optional[dict]) -> dict:
        """Slurm's cluster as an instance. The coordinator's jobs that its plan keeps idle
        (``coord``, its instance) are held by this agent (``scontrol hold``, ``requeuehold``), so
        their holds are the planner's own: they stay planned; any other hold is the owner's or an
        administrator's, and that job is left out (one line each)."""
        own = {j["id"] for j in (coord or {}).get("jobs", []) if not j["current"]["gpus"]}
        warnings: list[str] = []
        try:
            # a planned job with invalid planning fields: one line naming it, the others planned
            return import_slurm(nodes_doc, jobs_doc, cost=self.cfg.cost, gpu_map=self.cfg.gpu_map,
                                rack_feature=self.cfg.rack_feature, on_bad_job=self._skip, warnings=warnings,
                                own_holds=own)
        except UnboundGpus as exc:
            if exc.asked and self.cfg.mode == "apply":   # it runs without its GPUs: restarted, Slurm binds them
                self.cli.run(["scontrol", "requeue", str(exc.job_id)], record=True)
                raise NotApplied(f"job {exc.job_id} ran without its GPUs bound ({exc.message}): requeued, "
                                 "the next pass plans it") from None
            raise SlurmReadError(f"Slurm's cluster is not a valid instance: {exc}") from None
        except InvalidInstanceError as exc:
            raise SlurmReadError(f"Slurm's cluster is not a valid instance: {exc}") from None
        finally:
            for line in warnings:
                self.log({"warning": line})

    def _skip(self, obj: str, exc: Exception) -> None:
        if obj not in self._skipped:
            self._skipped.add(obj)
            self.log({"skipped": obj, "why": str(exc)})

    def _propose(self, plan: dict, nodes_doc: dict, jobs_doc: dict, drift: list[str]) -> dict:
        pid = check_plan_id(plan.get("plan_id"), "coordinator plan_id")
        try:
            steps = export_slurm(_plan_object(plan), jobs_doc, nodes_doc, reason=self.cfg.reason,
                                 gpu_map=self.cfg.gpu_map, by_agent=True)
        except StalePlan as exc:
            return self._stale(pid, exc)
        from unicron_plan.io import write_atomic

        out = self.cfg.state_dir / f"proposal-{pid}"
        out.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(out / "plan.json", json.dumps(plan, indent=1))
        write_atomic(out / "apply.sh", render_script(steps))
        self.journal.save({"status": "proposed", "plan_id": pid, "plan": plan})
        self.log({"proposed": pid, "commands": [a for s in steps for a in s.commands()],
                  "approve": f"unicron-plan agent slurm --approve {pid} (or POST /v1/plans/{pid}/apply)"})
        return {"status": "proposed", "plan_id": pid, "dir": str(out), "drift": drift}

    def _note_failed(self, event: dict) -> None:
        known = self.failed.load()
        if isinstance(known.get("nodes"), list):
            nodes = set(known["nodes"]) | set(event.get("failed_nodes") or [])
            self.failed.save({"nodes": sorted(nodes - set(event.get("repaired_nodes") or []))})

    def _upload(self, inst: dict) -> None:
        """``PUT /v1/cluster`` of what Slurm shows (its failures follow as an event)."""
        self.client.put_cluster(_base(inst))
        self.failed.save({"nodes": []})

    def _post(self, event: dict) -> dict:
        if event.get("kind") == "job_arrival" and "_jobs" in event:
            for job in event.pop("_jobs"):
                self.client.add_job(job)
        key = hashlib.sha256(json.dumps([event, time.time_ns()], sort_keys=True).encode()).hexdigest()[:32]
        self.journal.save({"status": "posting", "event": event, "key": key})
        plan = _dict(self.client.post_event(event, idempotency_key=key))
        check_plan_id(plan.get("plan_id"), "coordinator plan_id")
        self._note_failed(event)
        self._carry(plan)
        self.log({"event": event, "plan_id": plan["plan_id"]})
        return plan

    def _replan(self, isolated: frozenset[str] | set[str] = frozenset()) -> Optional[dict]:
        """After a plan Slurm did not reach: upload what Slurm shows and plan from it (its failures and
        the nodes in ``isolated``, which the coordinator took out on its own and Slurm may still show in
        service; else the planned jobs left pending as arrivals). None when there is nothing to plan."""
        nodes_doc, jobs_doc = self._read_settled(time.monotonic())
        inst = self._import(nodes_doc, jobs_doc, _dict(self.client.state()).get("instance"))
        self._upload(inst)
        event = with_isolated(inst, isolated)
        if event:
            return self._post(event)
        pending = sorted(jb["id"] for jb in inst["jobs"] if not jb["current"]["gpus"])
        if pending:
            return self._post({"kind": "job_arrival", "jobs": pending})
        return None

    def _budget(self, start: float) -> float:
        """Seconds this pass may still wait on Slurm."""
        left = self.cfg.verify_seconds
        if self.cfg.pass_seconds is not None:
            left = min(left, self.cfg.pass_seconds - (time.monotonic() - start))
        return max(left, 1.0)

    def _finish(self, j: dict, start: float, replan: bool = True) -> dict:
        """Carry out the journaled plan from where Slurm is, verify, post the apply; a plan Slurm
        does not reach is re-planned once from what Slurm shows."""
        plan = j["plan"]
        pid = check_plan_id(plan.get("plan_id"), "journal plan_id")
        nodes_doc, jobs_doc = self.cli.read()
        try:
            steps = export_slurm(_plan_object(plan), jobs_doc, nodes_doc, reason=self.cfg.reason,
                                 gpu_map=self.cfg.gpu_map, by_agent=True)
        except StalePlan as exc:
            return self._stale(pid, exc)
        resv = self._reserve(pid, steps, jobs_doc, self._budget(start))
        diff: list[str] = []
        try:
            carry_out(steps, self.cli, settle_seconds=self._budget(start))
            deadline = time.monotonic() + self._budget(start)
            while True:
                nodes_doc, jobs_doc = self.cli.read()
                diff = differences(plan, nodes_doc, jobs_doc)
                if not diff or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        except (NotApplied, CommandFailed) as exc:
            diff = [str(exc)]
        finally:
            if resv:
                self._unreserve(resv, steps)
        if diff:
            self.log({"drift": diff, "plan_id": pid})
            commands = self.journal.load().get("commands", [])
            self.journal.save({"status": "drift", "plan_id": pid})
            if replan:
                self.log({"replan": pid})
                if self._replan(self._isolated(_dict(self.client.state()).get("instance"))) is not None:
                    result = self._finish(self.journal.load(), start, replan=False)
                    result["drift"] = diff + result.get("drift", [])
                    result["commands"] = commands + result.get("commands", [])
                    return result
            return {"status": "not-reached", "plan_id": pid, "drift": diff, "commands": commands}
        from unicron_plan.client import PlannerError

        try:
            self.client.apply(pid)
        except PlannerError as exc:
            if exc.status != 409 or not self._coordinator_has(plan):
                raise
        commands = self.journal.load().get("commands", [])
        self.journal.save({"status": "applied", "plan_id": pid, "commands": commands})
        self.log({"applied": pid})
        return {"status": "applied", "plan_id": pid, "commands": commands}

    def _stale(self, pid: str, exc: StalePlan) -> dict:
        """A plan Slurm no longer matches: nothing is done this pass; the journal says drift, so
        the next pass uploads what Slurm shows and plans afresh."""
        diff = [str(exc)]
        self.log({"drift": diff, "plan_id": pid})
        self.journal.save({"status": "drift", "plan_id": pid})
        return {"status": "not-reached", "plan_id": pid, "drift": diff, "commands": []}

    # -- reservations ----------------------------------------------------------------------------
    def _reserve(self, pid: str, steps: list[Step], jobs_doc: dict, seconds: float) -> Optional[str]:
        """A reservation on the nodes the plan moves jobs to, for those jobs alone (IGNORE_JOBS:
        the nodes may still be freeing), so that no pending job the planner does not manage takes
        them during the move. It ends by itself after the pass's budget; None when nothing moves
        or Slurm refuses (the move then goes on unprotected, as before)."""
        name = f"{RESERVATION_PREFIX}{pid}"
        self._drop_stale_reservations(keep=name)
        places = [st for st in steps if st.kind == "place"]
        if not self.cfg.reserve or not places:
            return None
        users = {str(j.user_name) for j, _ in parse_jobs(jobs_doc) if j.job_id in {st.job for st in places}}
        users = sorted(u for u in users if _USER.fullmatch(u))
        nodes = sorted({n for st in places for n in st.nodes})
        if not users or not nodes:
            return None
        minutes = int(seconds // 60) + 2
        spec = [f"Duration={minutes}", f"Nodes={compress(nodes)}", f"Users={','.join(users)}"]
        if name in self._reservations():   # made by a pass that was killed: brought up to date
            argv = ["scontrol", "update", f"ReservationName={name}", *spec]
        else:
            argv = ["scontrol", "create", "reservation", f"ReservationName={name}", "StartTime=now", *spec,
                    "Flags=IGNORE_JOBS"]
        try:
            self.cli.run(argv, record=True)
        except CommandFailed as exc:
            self.log({"warning": f"no reservation for the move: {exc}"})
            return None
        for st in places:
            st.reservation = name
        return name

    def _reservations(self) -> set[str]:
        """The names of the agent's reservations (RESERVATION_PREFIX) Slurm has now."""
        out = self.cli.run(["scontrol", "-o", "show", "reservation"])
        names = {m.group(1) for m in re.finditer(r"(?m)^ReservationName=(\S+)", out)}
        return {n for n in names if n.startswith(RESERVATION_PREFIX)}

    def _drop_stale_reservations(self, keep: str) -> None:
        """Delete the reservations of earlier plans (a pass killed before it removed its own)."""
        for name in sorted(self._reservations() - {keep}):
            self._end_reservation(name)

    def _unreserve(self, name: str, steps: list[Step]) -> None:
        """Take the moved jobs out of the reservation (they keep running) and delete it."""
        for st in steps:
            if st.kind == "place":
                try:
                    self.cli.run(["scontrol", "update", f"JobId={st.job}", "Reservation="], record=True)
                except CommandFailed:
                    pass   # a job that ended meanwhile
        self._end_reservation(name)

    def _end_reservation(self, name: str) -> None:
        """End the reservation now (jobs in it keep running) and delete it."""
        try:
            self.cli.run(["scontrol", "update", f"ReservationName={name}", "Duration=0"], record=True)
            self.cli.run(["scontrol", "delete", f"ReservationName={name}"], record=True)
        except CommandFailed as exc:
            self.log({"warning": f"reservation {name} not deleted (it has ended): {exc}"})

    def _coordinator_has(self, plan: dict) -> bool:
        """The coordinator's applied jobs are the plan's (an apply posted before a restart)."""
        inst = _dict(self.client.state()).get("instance") or {}
        now = {j["id"]: (j["current"]["gpus"], set(j["current"]["nodes"])) for j in inst.get("jobs", [])}
        return all(now.get(p["id"]) == (p["gpus"], set(p["nodes"])) for p in plan["jobs"])

    def run_forever(self, interval: float) -> None:
        """A pass every ``interval`` seconds; a failed pass is one line and the next starts afresh."""
        while True:
            t0 = time.monotonic()
            try:
                self.log({"pass": self.run_once()})
            except (AgentError, InvalidInstanceError) as exc:
                self.log({"error": one_line(str(exc))})
            except Exception as exc:  # noqa: BLE001 - a client error or a bug: reported, the loop goes on
                self.log({"error": one_line(f"{type(exc).__name__}: {exc}")})
            time.sleep(max(0.0, interval - (time.monotonic() - t0)))


def _plan_object(plan: dict) -> Any:
    from unicron_plan.api import load_plan

    return load_plan(_plan_body(plan))
