"""Discrete-event replay of one policy over one run's events, with per-phase accounting.

Each job holds an allocation (GPUs per node) and a list of *blocks*: time
intervals in which it produces nothing, labelled with a phase (``detection``:
hung until the error is noticed, never cut by another error's reaction; ``transition``: restart or reconfiguration;
``recompute``: redoing work lost since the last checkpoint). Outside blocks a
job produces F = weight x TFLOP/s of its count (``cost.waf``), unless it is
stopped waiting for a repair. A new block cuts any later part of older ones
(the newer event takes over), except a detection block still running.

Accounting is against the policy's healthy rate: the job's F at time 0
(``base``). Per job and interval, base x blocked time goes to the block's
phase and (base - F) x running time to ``sub_healthy``; so, exactly,
``weighted_tflop = sum(base) * T - sum(losses)``.
"""

from __future__ import annotations

import gc
import heapq
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from unicron_plan.core import cost
from unicron_plan.schema.scenario import Scenario
from unicron_plan.simulate import mixed
from unicron_plan.simulate.trace import SimEvent

PHASES = ("detection", "queue", "transition", "recompute", "sub_healthy")


def _running_sum(start: float, terms: np.ndarray) -> float:
    """``start`` plus ``terms`` added one by one in order (as a Python loop adds them)."""
    if not len(terms):
        return start
    return float(np.add.accumulate(np.concatenate(([start], terms)))[-1])


class _Watched(set):
    """A job's ``waiting`` set: any change in place tells the job (its rate may change)."""

    __slots__ = ("_tell",)

    def __init__(self, items=(), tell: Optional[Callable[[], None]] = None):
        super().__init__(items)
        self._tell = tell


def _telling(method):
    def wrapped(self, *args):
        out = method(self, *args)
        if self._tell is not None:
            self._tell()
        return out

    wrapped.__name__ = method.__name__
    return wrapped


for _name in ("add", "discard", "remove", "pop", "clear", "update", "difference_update", "intersection_update",
              "symmetric_difference_update", "__ior__", "__iand__", "__isub__", "__ixor__"):
    setattr(_Watched, _name, _telling(getattr(set, _name)))
del _name


_WATCHED = frozenset(("alloc", "nominal", "slow", "waiting", "blocks", "table"))  # what the accounting reads


@dataclass
class JobRun:
    """A job's state during the run.

    Setting ``alloc``, ``nominal``, ``slow``, ``waiting`` or ``blocks`` (or changing ``waiting`` in
    place) tells the engine, which re-derives only those jobs' rates between events.
    """

    index: int
    id: str
    gpu_type: str
    weight: float
    table: dict[int, float]
    d_trans: float
    alloc: dict[str, int]
    base: float = 0.0
    blocks: list = field(default_factory=list)  # [start, end, phase], sorted, disjoint
    waiting: set = field(default_factory=set)  # nodes it is stopped for (megatron)
    run_start: float = 0.0  # when its current run began (checkpoint clock)
    last_restart: float = -1.0  # start of its latest restart or reconfiguration
    pending_lost: float = 0.0
    # Degraded run (bamboo's absorbed failure): F at ``nominal`` GPUs x ``slow`` on the GPUs held.
    nominal: Optional[int] = None
    slow: float = 1.0
    _f: Optional[dict] = field(default=None, repr=False)
    _counted: tuple = field(default=(None, 0), repr=False)  # (the alloc dict counted, its sum)
    # Mixed fleets: the table on every GPU type the job may run on (None: bound to ``gpu_type``).
    tables: Optional[dict] = None
    _hook = None  # the engine's callback, given the job's index when a watched field changes
    _alloc_hook = None  # the engine's callback, given the job's index when ``alloc`` is replaced

    def __setattr__(self, name, value):
        if name in _WATCHED:
            if name == "waiting" and type(value) is not _Watched:
                value = _Watched(value, self._touched)
            object.__setattr__(self, name, value)
            self._touched()
            if name == "alloc" and self._alloc_hook is not None:
                self._alloc_hook(self.index)
        else:
            object.__setattr__(self, name, value)

    def _touched(self) -> None:
        hook = self._hook
        if hook is not None:
            hook(self.index)

    @property
    def count(self) -> int:
        """GPUs held (``alloc`` is always replaced by a new dict, never changed in place)."""
        alloc = self.alloc
        if self._counted[0] is not alloc:
            self._counted = (alloc, sum(alloc.values()))
        return self._counted[1]

    def f(self, count: Optional[int] = None) -> float:
        """F at ``count`` (default: the current rate: at the current count, or degraded)."""
        if count is None and self.nominal is not None:
            return self.f(self.nominal) * self.slow
        c = self.count if count is None else count
        if c == 0:
            return 0.0
        if self._f is None:  # F of every count, made once (asked at every interval of the run)
            self._f = {n: float(cost.waf(self.weight, t)) for n, t in self.table.items()}
        return self._f[c]

    def switch_type(self, gpu_type: str) -> None:
        """Run on ``gpu_type`` from now on (one of ``tables``): its table becomes the job's."""
        self.gpu_type, self.table, self._f = gpu_type, self.tables[gpu_type], None


class Engine:
    """Replays ``events`` for ``policy``; :meth:`run` returns the policy's result dict."""

    def __init__(self, scenario: Scenario, events: list[SimEvent], policy, mtbf_hours: float,
                 record: bool = False, progress: Optional[Callable[[], None]] = None,
                 checks: bool = False):
        self.scenario = scenario
        self.events = events
        self.policy = policy
        self.mtbf_hours = mtbf_hours
        self.horizon = scenario.duration_hours * 3600.0
        self.nodes = {n.id: n for n in scenario.cluster.nodes}
        self.node_rank = {n.id: k for k, n in enumerate(scenario.cluster.nodes)}
        default_trans = scenario.cost.default_transition_seconds or 0.0
        # Each policy runs at its own failure-free speed: the scenario's tables are Megatron-LM's.
        factor = policy.healthy_factor()
        self.jobs = [JobRun(k, j.id, j.throughput.gpu_type, j.weight,
                            {c: v * factor for c, v in j.throughput.table_view().items()},
                            j.transition_seconds if j.transition_seconds is not None else default_trans, {})
                     for k, j in enumerate(scenario.jobs)]
        # Mixed fleets (simulate/mixed.py): per-type tables, type changes and GPU-hours per type.
        self.gpu_seconds = mixed.attach_type_tables(self.jobs, scenario, factor)
        self.type_changes = 0
        self.down: set[str] = set()  # SEV1 nodes whose failure is detected and not yet repaired
        self.pending: dict[str, float] = {}  # node -> time its SEV1 failure will be detected
        self.t = 0.0
        self.output = 0.0
        self.loss = {p: 0.0 for p in PHASES}
        self.reconfigurations = 0
        self.plans = 0
        self.changes: dict[str, int] | None = None  # planner policies: jobs per reason over all re-plans
        self.failures = 0
        self.repairs = 0
        self.record = record
        self.series: list[tuple[float, float, float]] = []
        self.progress = progress
        self._heap: list = []
        self._seq = 0
        self.checks = checks  # invariants after every event (tests); see check_invariants
        # Accounting state per job, in job order: the rate it produces at outside blocks (0 while
        # stopped), its healthy rate, its output; the jobs whose rate may have changed since the
        # last interval (JobRun tells), and those with blocks.
        m = len(self.jobs)
        self._rate = np.zeros(m)
        self._base = np.zeros(m)
        self.job_output = np.zeros(m)  # weighted TFLOP produced per job
        self._touched: set[int] = set(range(m))
        self._blocked: set[int] = set()
        # The jobs holding GPUs on each node (a superset: nodes of an alloc with 0 GPUs too), brought up
        # to date in jobs_on from the allocs replaced since (an alloc is replaced, never changed in place).
        self._holding: dict[str, set[int]] = {}
        self._indexed: list[dict[str, int]] = [{} for _ in self.jobs]  # the alloc each job is indexed by
        self._replaced: set[int] = set(range(m))
        # Every job whose alloc was replaced, in the order of the replacements (every job first): a reader
        # keeps its position in this list and visits only the jobs after it (see replaced_since).
        self.alloc_log: list[int] = list(range(m))
        self.attach_jobs()

    def attach_jobs(self) -> None:
        """Point every job's callbacks at this engine's sets (after a copy of the engine too: a bound
        method of a set is copied as the original's)."""
        for j in self.jobs:
            object.__setattr__(j, "_hook", self._touched.add)
            object.__setattr__(j, "_alloc_hook", self._alloc_replaced)

    def _alloc_replaced(self, k: int) -> None:
        self._replaced.add(k)
        self.alloc_log.append(k)

    def replaced_since(self, mark: tuple | None) -> tuple[list[int] | None, tuple]:
        """(the jobs whose alloc was replaced since ``mark``, ascending, or None: any job may have been;
        the mark of now). ``mark``: what an earlier call returned, None the first time. A mark holds this
        engine's log, so a mark from another engine gives None; a copy of the engine (a fork) copies its
        log, and the mark of a policy copied with it refers to the copy."""
        log = self.alloc_log
        now = (log, len(log))
        if mark is None or mark[0] is not log:
            return None, now
        return sorted(set(log[mark[1]:])), now

    # --- helpers for policies ---
    def push(self, time: float, kind: str, payload=None) -> None:
        """Schedule an internal event."""
        self._seq += 1
        heapq.heappush(self._heap, (time, 1, self._seq, kind, payload))

    def block(self, job: JobRun, start: float, seconds: float, phase: str) -> float:
        """Block ``job`` for ``seconds`` from ``start`` (cutting later parts of older blocks); returns the end.

        A detection block is never cut: until an error is detected the job hangs on it, whatever
        another error's reaction starts meanwhile (a restart would hang there too). The new block
        then covers only what lies after the last such hang, so blocks stay disjoint.
        """
        kept = []
        hang = start  # end of the detection blocks still running at ``start``
        for b in job.blocks:
            if b[2] == "detection" and b[1] > start:
                kept.append(b)
                hang = max(hang, b[1])
                continue
            if b[0] >= start:
                continue
            if b[1] > start:
                b[1] = start
            kept.append(b)
        end = start + seconds
        if end > hang:
            kept.append([hang, end, phase])
            self.push(end, "tick")
        kept.sort(key=lambda b: b[0])
        job.blocks = kept
        return end if end > hang or seconds <= 0 else hang

    def append_block(self, job: JobRun, seconds: float, phase: str) -> float:
        """Block ``job`` for ``seconds`` right after its last block (or now); returns the end."""
        start = job.blocks[-1][1] if job.blocks else self.t
        job.blocks.append([start, start + seconds, phase])
        self._touched.add(job.index)
        self.push(start + seconds, "tick")
        return start + seconds

    def stop_blocks(self, job: JobRun, at: float) -> None:
        """Cut every block of ``job`` at ``at``."""
        self.block(job, at, 0.0, "transition")

    def transition(self, job: JobRun, t: float, seconds: float, queue: float = 0.0) -> None:
        """A restart or reconfiguration of ``job`` starting at ``t`` (after ``queue`` seconds waiting in the
        cluster scheduler's queue, when given)."""
        if queue > 0:
            self.block(job, t, queue, "queue")
            job.run_start = self.append_block(job, seconds, "transition")
        else:
            job.run_start = self.block(job, t, seconds, "transition")
        job.last_restart = t
        self.reconfigurations += 1

    def jobs_on(self, node: str) -> list[JobRun]:
        """Jobs holding GPUs on ``node``, in job order (work in the jobs whose alloc was replaced since
        the last call and those on the node, not in all jobs)."""
        jobs, holding = self.jobs, self._holding
        for k in self._replaced:
            old, new = self._indexed[k], jobs[k].alloc
            for nid in old:
                if nid not in new:
                    holding[nid].discard(k)
            for nid in new:
                holding.setdefault(nid, set()).add(k)
            self._indexed[k] = new
        self._replaced.clear()
        return [jobs[k] for k in sorted(holding.get(node, ())) if jobs[k].alloc.get(node, 0) > 0]

    def waf_now(self) -> float:
        """Sum of F over the jobs producing at the current time."""
        t = self.t
        return sum(j.f() for j in self.jobs
                   if not j.waiting and not any(b[0] <= t < b[1] for b in j.blocks))

    # --- accounting ---
    def _refresh(self) -> None:
        """Re-derive the rate of the jobs that told a change since the last interval."""
        jobs, rate = self.jobs, self._rate
        for k in self._touched:
            j = jobs[k]
            rate[k] = 0.0 if j.waiting else j.f()
            if j.blocks:
                self._blocked.add(k)
        self._touched.clear()

    def advance(self, t1: float) -> None:
        """Integrate output and losses from the current time to ``t1``.

        Per job, in job order: its blocks' overlap with the interval goes to their phases at its
        healthy rate, its rate x the rest to the output and (healthy - rate) x the rest to
        ``sub_healthy``. Only jobs with blocks are visited one by one; the sums over jobs are
        sequential in job order (``np.add.accumulate``), so they equal a loop over every job.
        """
        t0 = self.t
        if t1 <= t0:
            return
        span = t1 - t0
        loss = self.loss
        if self._touched:
            self._refresh()
        run = span
        if self._blocked:
            run = np.full(len(self.jobs), span)
            for k in sorted(self._blocked):
                j = self.jobs[k]
                blocked = 0.0
                keep = []
                for b in j.blocks:
                    ov = min(b[1], t1) - max(b[0], t0)
                    if ov > 0:
                        blocked += ov
                        loss[b[2]] += j.base * ov
                    if b[1] > t1:
                        keep.append(b)
                object.__setattr__(j, "blocks", keep)
                run[k] = span - blocked
                if not keep:
                    self._blocked.discard(k)
        produced = self._rate * run
        self.job_output += produced
        self.output = _running_sum(self.output, produced)
        loss["sub_healthy"] = _running_sum(loss["sub_healthy"], (self._base - self._rate) * run)
        if self.gpu_seconds is not None:
            mixed.add_gpu_seconds(self.gpu_seconds, self.jobs, span)
        self.t = t1

    # --- the run ---
    def handle(self, kind: str, payload) -> None:
        """Carry out one entry of the heap at the current time: an event, a reaction, a repair or a timer."""
        if kind == "event":
            self._external(payload)
        elif kind == "react":
            self._react(*payload)
        elif kind == "repair":
            self._repair(payload)
        elif kind == "timer":
            self.policy.on_timer(self, payload)

    def run(self) -> dict:
        """Replay every event up to the horizon; the policy's result (see :func:`result`)."""
        self.policy.setup(self)
        for j in self.jobs:
            j.base = j.f()
        self._base = np.fromiter((j.base for j in self.jobs), dtype=float, count=len(self.jobs))
        for ev in self.events:
            heapq.heappush(self._heap, (ev.time, 0, ev.order, "event", ev))
        self._record()
        # What exists after the set-up (the scenario, the policy's per-run data) lives as long as the run:
        # in the collector's permanent generation, a full collection no longer walks it (at 1,048,576
        # GPUs one took about 0.6 s of CPU). Only where nothing else froze objects, and undone at the end.
        frozen = gc.get_freeze_count() == 0
        if frozen:
            gc.freeze()
        try:
            self._replay()
        finally:
            if frozen:
                gc.unfreeze()
        if self.checks and self.horizon > self.t:
            self.check_invariants()
        self.advance(self.horizon)
        self._record()
        return self.result()

    def _replay(self) -> None:
        """The events and the entries they schedule, in time order, up to the horizon."""
        while self._heap:
            time, _, _, kind, payload = heapq.heappop(self._heap)
            if time > self.horizon:
                break
            if self.checks and time > self.t:  # the state that holds from now until the next event
                self.check_invariants()
            self.advance(time)
            self.handle(kind, payload)
            if kind == "event" and self.progress is not None:
                self.progress()
            self._record()

    def check_invariants(self) -> None:
        """Raise AssertionError when the state about to hold until the next event is impossible: a
        node holds more GPUs than it has, or a job computes (no block covers now, not stopped) on a
        node that is down or failed-but-undetected."""
        used: dict[str, int] = {}
        for j in self.jobs:
            for nid, g in j.alloc.items():
                used[nid] = used.get(nid, 0) + g
        for nid, g in used.items():
            node = self.nodes[nid]
            usable = node.gpus - len(node.failed_gpus)
            if g > usable:
                raise AssertionError(f"t={self.t / 3600:.3f} h: {g} GPUs placed on node {nid!r} "
                                     f"of {usable} usable ({self.policy.name})")
        for j in self.jobs:
            wrong = [nid for nid in j.alloc if self.nodes[nid].gpu_type != j.gpu_type]
            if wrong:
                raise AssertionError(f"t={self.t / 3600:.3f} h: job {j.id!r} on {j.gpu_type} holds GPUs of "
                                     f"node(s) {wrong[:3]} of another type ({self.policy.name})")
        broken = self.down | set(self.pending)
        for j in self.jobs:
            on = broken.intersection(j.alloc)
            if on and not j.waiting and not any(b[0] <= self.t < b[1] for b in j.blocks):
                raise AssertionError(f"t={self.t / 3600:.3f} h: job {j.id!r} computes on failed node(s) "
                                     f"{sorted(on)} ({self.policy.name})")

    def _external(self, ev: SimEvent) -> None:
        if ev.kind == "repair":
            self._repair(ev)
            return
        self.failures += 1
        hit = self.jobs_on(ev.node)
        detect = self.policy.detection_seconds(ev.error)
        for j in hit:
            if not j.waiting:
                self.block(j, self.t, detect, "detection")
        if ev.severity == "sev1":
            self.pending[ev.node] = self.t + detect
        self.push(self.t + detect, "react", (ev, [j.index for j in hit]))

    def _react(self, ev: SimEvent, hit_idx: list[int]) -> None:
        if ev.severity == "sev1":
            self.pending.pop(ev.node, None)
            self.down.add(ev.node)
        self.policy.on_failure(self, ev, [self.jobs[i] for i in hit_idx])

    def _repair(self, ev: SimEvent) -> None:
        # A node cannot return before its failure is detected: wait for the reaction.
        if ev.node in self.pending:
            self.push(self.pending[ev.node], "repair", ev)
            return
        if ev.node not in self.down:
            return
        self.repairs += 1
        self.down.discard(ev.node)
        self.policy.on_repair(self, ev.node)

    def _record(self) -> None:
        if self.record:
            self.series.append((self.t / 3600.0, self.output, self.waf_now()))

    def result(self) -> dict:
        """weighted_tflop, reconfigurations and downtime hours per phase (docs/format.md), plus details.

        downtime_hours[phase] = weighted TFLOP lost in that phase / healthy WAF / 3600: the hours
        of the policy's whole healthy output lost (``recompute`` and ``queue`` are counted in
        ``transition`` and also reported alone as ``recompute_hours`` and ``queue_hours``).
        """
        healthy = sum(j.base for j in self.jobs)
        hours = {p: (self.loss[p] / healthy / 3600.0 if healthy > 0 else 0.0) for p in PHASES}
        out = {
            "weighted_tflop": self.output,
            "reconfigurations": self.reconfigurations,
            "downtime_hours": {"detection": hours["detection"],
                               "transition": hours["transition"] + hours["recompute"] + hours["queue"],
                               "sub_healthy": hours["sub_healthy"]},
            "recompute_hours": hours["recompute"],
            "queue_hours": hours["queue"],
            "healthy_waf_tflops": healthy,
            "mean_waf_tflops": self.output / self.horizon,
            "plans": self.plans,
            "failures": self.failures,
            "repairs": self.repairs,
        }
        if self.changes is not None:  # the planner policies: why their re-plans changed jobs
            out["changes"] = dict(self.changes)
        if self.gpu_seconds is not None:  # mixed fleets only: single-type results keep their fields
            out["type_changes"] = self.type_changes
            out["gpu_hours"] = {t: s / 3600.0 for t, s in sorted(self.gpu_seconds.items())}
        return out
