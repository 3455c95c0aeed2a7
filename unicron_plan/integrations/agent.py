"""The agent that closes the loop between Slurm and the planning coordinator
(``unicron-plan serve``): read the cluster, tell the coordinator what changed (as
events), carry the plan out (or propose it), check that Slurm reached it, post the apply.

One pass (:meth:`SlurmAgent.run_once`):

1. finish a plan a previous pass left half carried out (the journal says so);
2. read Slurm (``scontrol show nodes --json``, or ``sinfo --json`` before 23.02;
   ``squeue --json``) into an instance: Slurm's own reaction (a requeued job, a shrunk
   ``--no-kill`` job) is part of what is read, so the plan starts from it;
3. compare with the coordinator's ``/v1/state``: nodes that failed -> ``failure``,
   nodes that returned -> ``repair``, planned jobs gone -> ``job_exit``, new pending
   planned jobs -> ``POST /v1/jobs`` + ``job_arrival``; anything else that differs (a job
   Slurm moved, requeued or started by itself) is drift: it is reported and the cluster is
   uploaded again (``PUT /v1/cluster``) with its failures as one event, so the plan is made
   from what Slurm shows;
4. ``propose``: write the plan and its script and stop; ``apply``: carry out the export's
   guarded steps, wait until every planned job runs on its planned nodes (or is held), and
   post the apply.

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
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from unicron_plan.integrations.common import Cost, GpuMap
from unicron_plan.integrations.slurm import (HOLDING, START_PAUSE, Step, append_reason, export_slurm, expand, import_slurm, parse_jobs,
                                             parse_nodes, render_script)


class CommandFailed(Exception):
    """A Slurm command exited non-zero (or could not run)."""

    def __init__(self, argv: list[str], code: int, stderr: str):
        self.argv, self.code, self.stderr = argv, code, stderr.strip()
        super().__init__(f"{' '.join(argv)} exited {code}: {self.stderr[:300]}")


class SlurmCli:
    """The Slurm commands the agent runs: argument vectors, never a shell."""

    def __init__(self, on_command: Optional[Callable[[list[str]], None]] = None, timeout: float = 60.0):
        self.on_command = on_command
        self.timeout = timeout

    def run(self, argv: list[str], record: bool = False) -> str:
        if record and self.on_command:
            self.on_command(argv)
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CommandFailed(argv, -1, str(exc)) from None
        if r.returncode != 0:
            raise CommandFailed(argv, r.returncode, r.stderr or r.stdout)
        return r.stdout

    def read(self) -> tuple[dict, dict]:
        """(nodes, jobs) documents with whatever the installed Slurm supports."""
        try:
            nodes = json.loads(self.run(["scontrol", "show", "nodes", "--json"]))
        except CommandFailed as exc:
            if "json" not in exc.stderr.lower():
                raise
            nodes = json.loads(self.run(["sinfo", "--json"]))  # Slurm 22.05: no scontrol --json
        jobs = json.loads(self.run(["squeue", "--json"]))
        return nodes, jobs

    def job_state(self, job: int) -> tuple[str, list[str]]:
        """(state, nodes) of a job now; ("", []) when Slurm no longer knows it."""
        try:
            out = self.run(["squeue", "-h", "-j", str(job), "-o", "%T %N"]).strip()
        except CommandFailed:
            return "", []
        state, _, nodes = out.partition(" ")
        return state, expand(nodes.strip(), f"Job {job}", "nodes")

    def held(self, job: int) -> bool:
        try:
            reason = self.run(["squeue", "-h", "-j", str(job), "-o", "%r"]).strip()
            return reason.startswith("JobHeld") or "held state" in reason   # "job requeued in held state"
        except CommandFailed:
            return False

    def node_state(self, node: str) -> str:
        return self.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"]).strip().lower()


def carry_out(steps: list[Step], cli: SlurmCli, settle_seconds: float = 120.0) -> None:
    """Run the export's steps, each only when Slurm is not there yet (the same guards as the
    exported script). A failed command releases the jobs this call requeued for a move and
    raises :class:`CommandFailed`; the next pass finishes the plan."""
    moved: list[int] = []
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
                continue
            state, nodes = cli.job_state(st.job)
            there = state == "RUNNING" and set(nodes) == set(st.nodes)
            if st.kind == "hold":
                if state == "PENDING" and not cli.held(st.job):
                    cli.run(st.commands()[0], record=True)
            elif st.kind == "shrink":
                if not there:
                    cli.run(st.commands()[0], record=True)
            elif st.kind == "suspend":
                if state in ("RUNNING", "SUSPENDED"):
                    cli.run(st.commands()[0], record=True)
                elif state == "PENDING" and not cli.held(st.job):
                    cli.run(["scontrol", "hold", str(st.job)], record=True)
            elif st.kind == "requeue":
                if not there and state in ("RUNNING", "SUSPENDED"):
                    cli.run(st.commands()[0], record=True)
                    moved.append(st.job)
            elif st.kind == "place" and not there:
                deadline = time.monotonic() + settle_seconds
                while cli.job_state(st.job)[0] == "COMPLETING":
                    if time.monotonic() > deadline:
                        raise CommandFailed(["squeue", "-j", str(st.job)], 1, "still completing")
                    time.sleep(0.25)
                for argv in st.commands():
                    cli.run(argv, record=True)
            elif st.kind == "start":
                if not paused:
                    time.sleep(START_PAUSE)
                    paused = True
                if cli.job_state(st.job)[0] == "PENDING":
                    cli.run(st.commands()[0], record=True)
    except CommandFailed:
        for j in moved:
            try:
                cli.run(["scontrol", "release", str(j)], record=True)
            except CommandFailed:
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
            out.append(f"job {pj['id']}: not in squeue")
            continue
        state = "RUNNING" if "RUNNING" in j.flags else sorted(j.flags)[0] if j.flags else "?"
        now = set(expand(j.nodes, f"Job {pj['id']}", "nodes")) if j.flags & HOLDING else set()
        if pj["gpus"] and (state != "RUNNING" or now != set(pj["nodes"])):
            out.append(f"job {pj['id']}: {state} on {sorted(now)}, plan {sorted(pj['nodes'])}")
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
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}

    def save(self, data: dict) -> None:
        from unicron_plan.io import write_atomic

        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(self.path, json.dumps(data), mode=0o600, durable=True)


@dataclass
class AgentConfig:
    mode: str = "apply"                     # apply | propose
    state_dir: Path = Path("unicron-agent")
    cost: Cost = field(default_factory=lambda: Cost(expected_run_seconds=36000.0))
    gpu_map: GpuMap = field(default_factory=GpuMap)
    rack_feature: Optional[str] = "rack"
    reason: str = "unicron-plan: failed"
    verify_seconds: float = 60.0
    max_attempts: int = 3                   # passes that try to finish one plan before it is given up as drift


def _failed_whole(inst: dict) -> set[str]:
    out = {n["id"] for n in inst["cluster"]["nodes"] if len(n.get("failed_gpus") or []) >= n["gpus"]}
    ev = inst.get("event") or {}
    if ev.get("kind") == "failure":
        out |= set(ev.get("failed_nodes") or [])
    return out


def _base(inst: dict) -> dict:
    return {k: v for k, v in inst.items() if k != "event"}


def _dict(reply: Any) -> dict:
    """A client reply (a pydantic model, or a dict from an older client) as JSON data."""
    return reply.model_dump(mode="json", exclude_none=True) if hasattr(reply, "model_dump") else reply


def _plan_body(plan: dict) -> dict:
    return {k: v for k, v in plan.items() if k not in ("plan_id", "revision")}


class SlurmAgent:
    """One agent: a Slurm CLI, a coordinator client, a journal under ``cfg.state_dir``."""

    def __init__(self, client, cfg: AgentConfig, cli: Optional[SlurmCli] = None,
                 log: Callable[[dict], None] = lambda rec: print(json.dumps(rec), file=sys.stderr, flush=True)):
        self.client, self.cfg, self.log = client, cfg, log
        self.journal = Journal(cfg.state_dir / "journal.json")
        self.cli = cli or SlurmCli()
        self.cli.on_command = self._record

    # -- journal ---------------------------------------------------------------------------------
    def _record(self, argv: list[str]) -> None:
        j = self.journal.load()
        j.setdefault("commands", []).append(argv)
        self.journal.save(j)
        self.log({"command": argv})

    # -- one pass --------------------------------------------------------------------------------
    def run_once(self) -> dict:
        j = self.journal.load()
        if j.get("status") == "posting":      # killed between journaling an event and its answer
            plan = _dict(self.client.post_event(j["event"], idempotency_key=j["key"]))
            self.journal.save({"status": "carrying", "plan": plan, "attempts": 0, "commands": []})
            j = self.journal.load()
        if j.get("status") == "carrying":
            return self._finish(j)
        nodes_doc, jobs_doc = self.cli.read()
        inst = import_slurm(nodes_doc, jobs_doc, cost=self.cfg.cost, gpu_map=self.cfg.gpu_map,
                            rack_feature=self.cfg.rack_feature)
        state = _dict(self.client.state())
        events, drift = self._events(state.get("instance"), inst)
        if drift:
            self.log({"drift": drift})
        if state.get("instance") is None or drift:
            self.client.put_cluster(_base(inst))
            events = [inst["event"]] if inst.get("event") else []
        plan = None
        for ev in events:
            plan = self._post(ev)
        if plan is None:
            pending = (state.get("instance") or {}).get("event")
            return {"status": "pending-plan" if pending else "in-sync", "drift": drift}
        if self.cfg.mode == "propose":
            steps = export_slurm(_plan_object(plan), jobs_doc, nodes_doc, reason=self.cfg.reason,
                                 gpu_map=self.cfg.gpu_map)
            out = self.cfg.state_dir / f"proposal-{plan['plan_id']}"
            out.mkdir(parents=True, exist_ok=True, mode=0o700)
            from unicron_plan.io import write_atomic

            write_atomic(out / "plan.json", json.dumps(plan, indent=1))
            write_atomic(out / "apply.sh", render_script(steps))
            self.journal.save({"status": "proposed", "plan_id": plan["plan_id"]})
            self.log({"proposed": plan["plan_id"], "commands": [a for s in steps for a in s.commands()]})
            return {"status": "proposed", "plan_id": plan["plan_id"], "dir": str(out), "drift": drift}
        result = self._finish(self.journal.load())
        result["drift"] = drift + result.get("drift", [])
        return result

    def _post(self, event: dict) -> dict:
        if event.get("kind") == "job_arrival":
            for job in event.pop("_jobs"):
                self.client.add_job(job)
        key = hashlib.sha256(json.dumps([event, time.time_ns()], sort_keys=True).encode()).hexdigest()[:32]
        self.journal.save({"status": "posting", "event": event, "key": key})
        plan = _dict(self.client.post_event(event, idempotency_key=key))
        self.journal.save({"status": "carrying", "plan": plan, "attempts": 0, "commands": []})
        self.log({"event": event, "plan_id": plan["plan_id"]})
        return plan

    def _events(self, coord: Optional[dict], inst: dict) -> tuple[list[dict], list[str]]:
        """Events that carry the coordinator's view to Slurm's, or drift (then: upload)."""
        if coord is None:
            return [], []
        drift: list[str] = []
        c_nodes = {n["id"]: n for n in coord["cluster"]["nodes"]}
        s_nodes = {n["id"]: n for n in inst["cluster"]["nodes"]}
        if set(c_nodes) != set(s_nodes):
            return [], [f"nodes differ: {sorted(set(c_nodes) ^ set(s_nodes))[:10]}"]
        c_failed, s_failed = _failed_whole(coord), _failed_whole(inst)
        for nid in set(c_nodes) - c_failed - s_failed:
            if sorted(c_nodes[nid].get("failed_gpus") or []) != sorted(s_nodes[nid].get("failed_gpus") or []):
                drift.append(f"node {nid}: GPUs held outside the plan changed")
        repaired = sorted(n for n in c_failed - s_failed if not s_nodes[n].get("failed_gpus"))
        if len(repaired) != len(c_failed - s_failed):
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
        new_failed = sorted(s_failed - c_failed)
        if new_failed:
            events.append({"kind": "failure", "failed_nodes": new_failed, "failed_gpus": []})
        return events, []

    def _finish(self, j: dict) -> dict:
        """Carry out the journaled plan from where Slurm is, verify, post the apply."""
        plan = j["plan"]
        j["attempts"] = j.get("attempts", 0) + 1
        self.journal.save(j)
        if j["attempts"] > self.cfg.max_attempts:
            self.journal.save({"status": "drift", "plan_id": plan["plan_id"]})
            msg = f"plan {plan['plan_id']} not reached after {self.cfg.max_attempts} passes: given up"
            self.log({"drift": [msg]})
            return {"status": "drift", "plan_id": plan["plan_id"], "drift": [msg]}
        nodes_doc, jobs_doc = self.cli.read()
        steps = export_slurm(_plan_object(plan), jobs_doc, nodes_doc, reason=self.cfg.reason,
                                 gpu_map=self.cfg.gpu_map)
        carry_out(steps, self.cli)
        deadline = time.monotonic() + self.cfg.verify_seconds
        while True:
            nodes_doc, jobs_doc = self.cli.read()
            diff = differences(plan, nodes_doc, jobs_doc)
            if not diff or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if diff:
            self.log({"drift": diff, "plan_id": plan["plan_id"]})
            return {"status": "not-reached", "plan_id": plan["plan_id"], "drift": diff,
                    "commands": self.journal.load().get("commands", [])}
        from unicron_plan.client import PlannerError

        try:
            self.client.apply(plan["plan_id"])
        except PlannerError as exc:
            if exc.status != 409 or not self._coordinator_has(plan):
                raise
        commands = self.journal.load().get("commands", [])
        self.journal.save({"status": "applied", "plan_id": plan["plan_id"], "commands": commands})
        self.log({"applied": plan["plan_id"]})
        return {"status": "applied", "plan_id": plan["plan_id"], "commands": commands}

    def _coordinator_has(self, plan: dict) -> bool:
        """The coordinator's applied jobs are the plan's (an apply posted before a restart)."""
        inst = _dict(self.client.state()).get("instance") or {}
        now = {j["id"]: (j["current"]["gpus"], set(j["current"]["nodes"])) for j in inst.get("jobs", [])}
        return all(now.get(p["id"]) == (p["gpus"], set(p["nodes"])) for p in plan["jobs"])

    def run_forever(self, interval: float) -> None:
        while True:
            try:
                self.log({"pass": self.run_once()})
            except Exception as exc:  # a pass that fails is reported; the next one starts afresh
                self.log({"error": f"{type(exc).__name__}: {exc}"})
            time.sleep(interval)


def _plan_object(plan: dict) -> Any:
    from unicron_plan.api import load_plan

    return load_plan(_plan_body(plan))
