"""In-band detection in the coordinator: signals in, incidents out (docs/detection.md).

A :class:`Detector` keeps, per rank, its heartbeats (steps and running average iteration
time) and, per job and node, the incidents open now. It turns reports into incidents:

- an error report is classified by :data:`unicron_plan.faults.signals.CLASSES` (kind ->
  severity -> action); a SEV3 of a job that had one within ``repeat_window`` escalates to SEV2
  (a repeat: the earlier one's incident is over and this is not another rank's copy of it);
- a rank that has stepped ``min_steps`` times and then stays silent for ``hang_factor`` times
  its expected gap (the larger of its running average iteration time and its running
  average gap between heartbeats; at least ``min_hang_seconds``) is hung; the ranks of one job
  found hung in one check are one incident;
- silence is measured only while the coordinator could hear: when the monitor's check comes more
  than ``check_interval`` later than scheduled (the coordinator itself was paused or starved),
  every silence clock is moved on by that delay before anyone is judged;
- reports that arrive while an incident of the same job (or, for SEV1, node) is open, within
  ``incident_window`` and not more severe, are duplicates: counted, not recorded again. A job's
  incident closes early when one of its ranks has sent ``min_steps`` heartbeats since (it trains again).
  A SEV3 from a rank of the job that has not reported its last SEV3 occurrence, within
  ``incident_window`` of it, is the same fault seen by another rank: a duplicate too, never a repeat.

Each incident is handed to ``act(record) -> dict`` (the coordinator records it in its
history as type ``signal`` and carries out SEV1: the node's failure event, so a plan
follows); restart and reattempt are carried out by the agent reading the history.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from unicron_plan.faults.signals import ACTION_OF, CLASSES

#: Severities from the most to the least severe.
_RANK = {"SEV1": 0, "SEV2": 1, "SEV3": 2}
#: The kinds classified SEV3 (reattempt), whose repeats escalate.
_SEV3_KINDS = frozenset(kind for kind, cls in CLASSES.items() if cls.severity == "SEV3")


@dataclass
class DetectorSettings:
    """The detection thresholds (docs/detection.md gives their sources)."""

    hang_factor: float = 3.0          # Unicron: about 3x the running average iteration time
    min_steps: int = 3                # ASSUMPTION: a few steps before a rank's average means something
    min_hang_seconds: float = 2.0     # ASSUMPTION: no hang is called on less (network and scheduling jitter)
    incident_window: float = 60.0     # ASSUMPTION: reports within a minute of an incident are its duplicates
    repeat_window: float = 300.0      # ASSUMPTION: a SEV3 of a job again within 5 minutes escalates to SEV2
    check_interval: float = 0.25      # how often silent ranks are looked for (a check later by more: a stall)
    max_ranks: int = 1_000_000        # most ranks tracked at once (bounded memory)


@dataclass
class _Rank:
    job: str
    node: str | None
    steps: int = 0
    beats: int = 0
    mean_iteration: float = 0.0
    mean_gap: float = 0.0
    last: float = 0.0


@dataclass
class _Incident:
    opened: float
    severity: str
    revision: int | None
    duplicates: int = 0
    keys: list = field(default_factory=list)


class Detector:
    """Heartbeats, hangs and incidents of one coordinator (thread-safe)."""

    def __init__(self, act: Callable[[dict], dict], jobs_on: Callable[[str], list[str]],
                 settings: DetectorSettings | None = None, clock: Callable[[], float] = time.monotonic,
                 count: Callable[[str, str], None] = lambda kind, outcome: None, monitor: bool = True):
        self.act, self.jobs_on, self.clock, self.count, self.monitor = act, jobs_on, clock, count, monitor
        self.settings = settings or DetectorSettings()
        self.lock = threading.Lock()
        self.ranks: dict[tuple[str, int], _Rank] = {}
        self.nodes: dict[str, _Rank] = {}  # node heartbeats (`watch-node --heartbeat`): node health
        self.open: dict[tuple[str, str], _Incident] = {}  # ("job"|"node", id) -> incident
        self.sev3: dict[str, tuple[float, set[int]]] = {}  # job -> (time, ranks) of its last SEV3 occurrence
        self._due: float | None = None  # when the monitor's next check is due (None: no monitor running)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ reports
    def receive(self, signals: list) -> list[dict]:
        """Take a request's signals (schema ``Signal`` objects); answer the incidents they opened."""
        opened = []
        for sig in signals:
            if sig.kind == "heartbeat":
                self._beat(sig)
                self.count("heartbeat", "progress")
            elif sig.kind == "closed":
                with self.lock:
                    if sig.job is None:
                        self.nodes.pop(sig.node, None)
                    else:
                        self.ranks.pop((sig.job, sig.rank), None)
                self.count("closed", "progress")
            else:
                rec = self._error(sig)
                if rec is not None:
                    opened.append(rec)
        if self.ranks or self.nodes:
            self.start()
        return opened

    def _beat(self, sig) -> None:
        now = self.clock()
        with self.lock:
            self._catch_up(now)  # a beat delivered late after a stall counts, the stall does not
            table, key = (self.ranks, (sig.job, sig.rank)) if sig.job is not None else (self.nodes, sig.node)
            r = table.get(key)
            if r is None:
                if len(self.ranks) + len(self.nodes) >= self.settings.max_ranks:
                    return
                r = table[key] = _Rank(sig.job, sig.node, last=now)
            steps = max(0, (sig.step or 0) - r.steps)
            if steps and sig.iteration_seconds is not None:
                total = r.steps * r.mean_iteration + steps * sig.iteration_seconds
                r.mean_iteration = total / (r.steps + steps)
            if r.beats:
                r.mean_gap += (now - r.last - r.mean_gap) / min(r.beats, 20)  # running mean of the last ~20
            r.steps, r.beats, r.last, r.node = max(r.steps, sig.step or 0), r.beats + 1, now, sig.node or r.node
            inc = self.open.get(("job", sig.job)) if sig.job is not None else None
            if inc is not None and r.beats >= self.settings.min_steps:  # the job trains again: the incident is over
                for k in inc.keys:
                    if self.open.get(k) is inc and k[0] == "job":
                        del self.open[k]

    def _error(self, sig) -> dict | None:
        cls = CLASSES[sig.kind]
        rec = {"job": sig.job, "rank": sig.rank, "node": sig.node, "kind": sig.kind, "severity": cls.severity,
               "action": cls.action, "detection": cls.detection, "evidence": sig.evidence,
               "source": sig.source or "report"}
        for key in ("step", "exit_code", "signal"):
            if getattr(sig, key) is not None:
                rec[key] = getattr(sig, key)
        return self._incident(rec)

    # ------------------------------------------------------------------ hangs
    def _silent(self, r: _Rank, now: float, share: float = 1.0) -> bool:
        """``r`` has stepped enough and is silent for ``share`` of its hang threshold."""
        s = self.settings
        if r.steps < s.min_steps or r.beats < 2:
            return False
        return now - r.last > share * max(s.hang_factor * max(r.mean_iteration, r.mean_gap), s.min_hang_seconds)

    def check(self) -> list[dict]:
        """Look for silent nodes and hung ranks now: one ``lost_connection`` per node, one hang per job.
        A job's hang waits while one of its nodes is silent for half its threshold (the node's verdict
        comes first: a dead node is SEV1, not a restart)."""
        s, now = self.settings, self.clock()
        hung: dict[str, list[tuple[int, _Rank]]] = {}
        with self.lock:
            self._prune(now)
            lost = sorted(n for n, r in self.nodes.items() if self._silent(r, now))
            suspect = {n for n, r in self.nodes.items() if self._silent(r, now, 0.5)}
            for (job, rank), r in self.ranks.items():
                if self._silent(r, now):
                    hung.setdefault(job, []).append((rank, r))
            for node in lost:
                del self.nodes[node]  # until it beats again
            hung = {j: rs for j, rs in hung.items() if not suspect & {r.node for _, r in rs}}
        out = []
        for node in lost:
            cls = CLASSES["lost_connection"]
            got = self._incident({"job": None, "rank": 0, "node": node, "kind": "lost_connection",
                                  "severity": cls.severity, "action": cls.action, "detection": cls.detection,
                                  "source": "heartbeat", "evidence": f"node {node}: no heartbeat for the "
                                                                    f"threshold (x{s.hang_factor:g} its gap)"})
            if got is not None:
                out.append(got)
        for job, ranks in hung.items():
            ranks.sort(key=lambda x: x[0])
            first, r = ranks[0]
            silent = now - min(x[1].last for x in ranks)
            cls = CLASSES["task_hang"]
            rec = {"job": job, "rank": first, "node": r.node, "kind": "task_hang", "severity": cls.severity,
                   "action": cls.action, "detection": cls.detection, "source": "heartbeat",
                   "ranks": [k for k, _ in ranks][:1000], "nodes": sorted({x[1].node for x in ranks if x[1].node}),
                   "evidence": f"{len(ranks)} rank(s) silent for {silent:.1f} s; expected a step every "
                               f"{max(r.mean_iteration, r.mean_gap):.3f} s (x{s.hang_factor:g})",
                   "step": r.steps}
            got = self._incident(rec)
            if got is not None:
                out.append(got)
        return out

    def start(self) -> None:
        """The background thread that calls :meth:`check` every ``check_interval`` seconds (the monitor;
        none when the detector was made with ``monitor=False``: the caller checks)."""
        if self._thread is None and self.monitor:
            self._thread = threading.Thread(target=self._loop, name="hang-check", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        interval = self.settings.check_interval
        while True:
            with self.lock:
                self._due = self.clock() + interval
            if self._stop.wait(interval):
                return
            try:
                with self.lock:
                    self._catch_up(self.clock())
                self.check()
            except Exception:  # noqa: BLE001 - a failed check (e.g. a closing store) must not end the thread
                pass

    def _catch_up(self, now: float) -> None:
        """Silence counts only while the coordinator could hear (caller holds the lock). A monitor check
        more than one interval later than scheduled means the coordinator itself was stopped (a paused
        VM or process, swapping, CPU starvation): no heartbeat could be heard meanwhile, so every
        silence clock moves on by the delay before anyone is judged silent. Whichever comes first after
        the stall does this: the late check, or a heartbeat (which then counts, the stall not in its gap)."""
        if self._due is None or now - self._due <= self.settings.check_interval:
            return
        stall, self._due = now - self._due, now
        for r in (*self.ranks.values(), *self.nodes.values()):
            r.last = min(r.last + stall, now)

    def close(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------ incidents
    def _incident(self, rec: dict) -> dict | None:
        """Open an incident for ``rec`` (escalate, dedupe, act), or count it as a duplicate (None)."""
        s, now = self.settings, self.clock()
        job, node = rec["job"], rec["node"]
        with self.lock:
            last = self.sev3.get(job) if rec["severity"] == "SEV3" and job is not None else None
            current = last is not None and now - last[0] <= s.incident_window  # its last SEV3 occurrence
            copy = False
            if last is not None and self._open_for(job, node, "SEV3", now) is None:
                if current and rec["rank"] not in last[1]:
                    copy = True  # another rank's report of the same fault: one occurrence, not a repeat
                elif now - last[0] <= s.repeat_window:  # the fault again after its incident: the reattempt failed
                    rec.update(severity="SEV2", action=ACTION_OF["SEV2"], escalated_from="SEV3")
            found = self._open_for(job, node, rec["severity"], now)
            if found is not None or copy:
                if current and len(last[1]) < 4096:  # the ranks that reported it (bounded memory)
                    last[1].add(rec["rank"])
                if found is not None:
                    found.duplicates += 1
                    self._forget(job)
                self.count(rec["kind"], "duplicate")
                return None
            jobs = [job] if job is not None else []
            if node is not None and (rec["severity"] == "SEV1" or job is None):
                jobs = sorted(set(jobs) | set(self.jobs_on(node)))
            keys = [("job", j) for j in jobs] + ([("node", node)] if rec["severity"] == "SEV1" and node else [])
            inc = _Incident(now, rec["severity"], None, keys=keys)
            if rec["kind"] in _SEV3_KINDS and job is not None:
                self.sev3[job] = (now, {rec["rank"]})
            for k in keys:
                self.open[k] = inc
            for j in jobs:
                self._forget(j)
            if job is None:
                rec["jobs"] = jobs
        self.count(rec["kind"], "incident")
        answer = self.act(rec)
        inc.revision = answer.get("revision")
        return answer

    def _prune(self, now: float) -> None:
        """Drop incidents past their window and SEV3 times past theirs (bounded memory; caller holds the lock)."""
        s = self.settings
        for key in [k for k, inc in self.open.items() if now - inc.opened > s.incident_window]:
            del self.open[key]
        for job in [j for j, (at, _) in self.sev3.items() if now - at > s.repeat_window]:
            del self.sev3[job]

    def _forget(self, job) -> None:
        """Drop the heartbeats of ``job``'s ranks: after an incident they start afresh (a restart is no hang)."""
        for key in [k for k in self.ranks if k[0] == job]:
            del self.ranks[key]

    def _open_for(self, job, node, severity: str, now: float) -> _Incident | None:
        """An open incident that covers a report of ``severity`` for ``job``/``node`` (caller holds the lock)."""
        for key in (("job", job), ("node", node)):
            inc = self.open.get(key)
            if inc is None:
                continue
            if now - inc.opened > self.settings.incident_window:
                for k in inc.keys:
                    if self.open.get(k) is inc:
                        del self.open[k]
                continue
            if _RANK[inc.severity] <= _RANK[severity]:
                return inc
        return None


def signal_metrics(registry) -> Callable[[str, str], None]:
    """A counter of signals by kind and outcome (incident, duplicate, progress) in ``registry``."""
    from prometheus_client import Counter

    counter = Counter("unicron_signals", "In-band signals received, by kind and outcome.", ["kind", "outcome"],
                      registry=registry)
    return lambda kind, outcome: counter.labels(kind=kind, outcome=outcome).inc()


def record_body(rec: dict) -> dict[str, Any]:
    """The history body of an incident: the fields always present first, then the rest."""
    head = {k: rec.get(k) for k in ("job", "rank", "node", "kind", "severity", "action", "evidence")}
    return {**head, **{k: v for k, v in rec.items() if k not in head}}


class SignalDesk:
    """The coordinator's side of in-band detection: parses ``POST /v1/signals`` and ``POST /v1/actions``,
    runs a :class:`Detector`, records incidents (history type ``signal``) and what was done about them
    (type ``action``), and turns SEV1 into the node's failure event."""

    def __init__(self, coordinator, settings: DetectorSettings | None = None):
        self.coord = coordinator
        self.detector = Detector(self._act, self._jobs_on, settings, count=signal_metrics(coordinator.metrics.registry))

    def post_signals(self, data: Any) -> dict:
        from unicron_plan.io import parse_model
        from unicron_plan.schema.signal import SignalsBody

        body = parse_model(SignalsBody, data)
        return {"received": len(body.signals), "incidents": self.detector.receive(body.signals)}

    def post_action(self, data: Any) -> dict:
        """Record what was done about an incident (the agent's restart: its commands and outcome)."""
        from unicron_plan.errors import InvalidInstanceError
        from unicron_plan.io import parse_model
        from unicron_plan.schema.signal import ActionBody

        body = parse_model(ActionBody, data)
        incident = self.coord.store.get(body.signal, "signal")
        if incident is None:
            raise InvalidInstanceError("signal", f"no signal entry at revision {body.signal}")
        reply = {"revision": self.coord.record_entry("action", body.model_dump(mode="json", exclude_none=True))}
        if body.outcome == "failed" and body.action == "restart" and body.failed_nodes:
            # the action failed for its nodes: escalate to SEV1, their failure (Unicron: a failed action escalates)
            reply["incidents"] = [self._act({**incident, "node": node, "severity": "SEV1", "action": "reconfigure",
                                             "escalated_from": incident["severity"], "source": "action",
                                             "evidence": f"restart failed: {body.detail}"[:4096]})
                                  for node in sorted(set(body.failed_nodes))[:100]]
        return reply

    def close(self) -> None:
        self.detector.close()

    def _jobs_on(self, node: str) -> list[str]:
        base = self.coord.state.base
        return [] if base is None else [j.id for j in base.jobs if node in j.current.nodes]

    def _act(self, rec: dict) -> dict:
        """Record an incident; for SEV1 of a node then post the node's failure event (its plan is the next
        ``plan`` entry; when none can be made, an ``action`` entry with outcome failed says why)."""
        from datetime import datetime, timezone

        from unicron_plan.errors import UnicronError

        body = record_body({k: v for k, v in rec.items() if k not in ("detected_at", "outcome")})
        body["detected_at"] = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        rev = self.coord.record_entry("signal", body)
        answer = {"revision": rev, **{k: body[k] for k in ("job", "node", "kind", "severity", "action")}}
        if body["action"] == "reconfigure":
            node = body["node"]
            try:
                if node is None:
                    raise UnicronError("no node named: nothing to isolate")
                reply = self.coord.post_event({"kind": "failure", "failed_nodes": [node], "failed_gpus": []})
                answer["plan_id"] = reply["plan_id"]
            except UnicronError as exc:
                self.coord.record_entry("action", {"signal": rev, "action": "reconfigure", "outcome": "failed",
                                                   "detail": f"no plan: {exc}"[:4096]})
                answer["outcome"] = f"no plan: {exc}"
        return answer
