"""The coordinator: state, log, plans, warm contingency and metrics, without HTTP.

Every plan comes from :meth:`Coordinator.solve`, the one call of
:func:`unicron_plan.api.solve` (or of its incremental equivalent). Changes are
serialised by one lock, committed to the log, and only then made visible and answered.

Warm contingency has two stages, both in worker processes at the lowest CPU priority, stopped
while a request solves (watched by a background thread that stops them and starts over whenever the
applied state changes; the classes of stage two split among the workers): the contingency index of the state (new counts for
every single-node and rack failure, each equivalence class of failures solved
once), then, class by class of nodes, the whole answer to "node X fails" (placed
and validated for one node of the class as :func:`unicron_plan.api.solve` with
the index would, by :func:`unicron_plan.plan.incremental.indexed_plan`, stored
compressed here as it comes; the class's other nodes get it with the two nodes
swapped). An event that is exactly such a failure, arriving while nothing is
pending on the same applied state, is answered from the stored answer; a failure
of whole nodes of the same classes as one solved before on that state, from that
plan with the nodes renamed (:meth:`Coordinator._keep_solved`); anything else is solved (with the index where it applies; an event that reads no index
incrementally, :mod:`unicron_plan.plan.incremental`).
"""

from __future__ import annotations

import contextlib
import gc
import json
import threading
import time
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.service import state as st
from unicron_plan.service.store import Store

#: Whole answers are precomputed for at most this many classes of nodes, largest first (the index
#: covers every node). Above every class of the largest clusters measured (6,575 at 1,048,576 GPUs:
#: the largest 4,096 left 8% of the nodes without a stored answer, so one single-node failure in 12
#: was solved cold).
MAX_PRECOMPUTED_CLASSES = 16384
#: A request stops the warm worker only while the worker was stopped for less than this share of the
#: last STOP_WINDOW seconds: under back-to-back requests it still runs about a quarter of the time.
STOP_SHARE = 0.75
STOP_WINDOW = 2.0
#: Incremental plans per applied cluster after which the heap is settled (:meth:`Coordinator._settle_after_plan`).
SETTLE_PLANS = 3
#: Optimal plans of whole-node failures kept per applied cluster for failures one with theirs up to
#: renaming (:meth:`Coordinator._keep_solved`), the most recently used, and the most failed nodes
#: such a failure may name.
SOLVED_KEPT = 8
SOLVED_MOST_NODES = 256
#: A stored answer for a class of at least this many nodes is relabelled from an index of the nodes
#: its changed entries list (made once, kept for the most recently used: the class's many replies
#: share it); a smaller class's by testing each changed entry.
INDEXED_CLASS_NODES = 256
#: The warm worker's CPU priority (nice value): the lowest.
WARM_NICENESS = 19
#: The most warm worker processes one warm-up starts (``serve --warm-workers``).
MAX_WARM_WORKERS = 64
#: Share of the memory available (MemAvailable) when the first worker has read the cluster that its
#: copies may take, each counted as large as it is then: fewer workers are started where it is short.
WARM_MEMORY_SHARE = 0.5
#: Bytes all warm workers together may hold, each counted as large as the first once it has read the
#: cluster (so that the service with its workers stays within 8 GiB at 1,048,576 GPUs).
WARM_MEMORY_BYTES = 6 << 30


def default_warm_workers() -> int:
    """The CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where there is no
    such call), at most MAX_WARM_WORKERS."""
    import os

    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_WARM_WORKERS, cpus))


class Conflict(Exception):
    """The state moved on since the plan was made (HTTP 409)."""


class Metrics:
    """The Prometheus series of one coordinator (its own registry)."""

    def __init__(self):
        self.registry = r = CollectorRegistry()
        self.events = Counter("unicron_events", "Events recorded, by kind.", ["kind"], registry=r)
        self.plans = Counter("unicron_plans", "Plans answered, by source (solver or contingency) and dry run.",
                             ["source", "dry_run"], registry=r)
        buckets = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30)
        self.plan_latency = Histogram("unicron_plan_latency_seconds",
                                      "Time to answer an event with a plan (state, solve, commit).",
                                      buckets=buckets, registry=r)
        self.solver_time = Histogram("unicron_solver_seconds", "api.solve wall time.", buckets=buckets, registry=r)
        self.contingency_hits = Counter("unicron_contingency_hits", "Events answered from warm contingency.",
                                        registry=r)
        self.revision = Gauge("unicron_state_revision", "Revision of the state.", registry=r)
        self.contingency_build = Histogram("unicron_contingency_build_seconds", "Background contingency builds.",
                                           buckets=(.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300), registry=r)


class Coordinator:
    """The service's state machine over a :class:`Store` in ``state_dir``."""

    def __init__(self, state_dir: str | Path, solver: str | None = None, contingency: bool = True,
                 settle_heap: bool = False, warm_workers: int | None = None):
        self.store = Store(state_dir)
        self.solver = solver
        self.metrics = Metrics()
        self.lock = threading.Lock()
        self.state = st.replay((rev, kind, body) for rev, kind, _, body in self.store.entries())
        self.last = self.store.last_revision()
        self.metrics.revision.set(self.state.revision)
        self._contingency_on = contingency
        self._cv = threading.Condition()
        self._index: tuple[int, dict | None] | None = None  # (base_version, index or None on failure)
        # (base_version, {node id: its class's representative}, {representative: WholeAnswer, or
        # (body number, head, changed entries, tail): service/answers.py}, nodes to do, {body number:
        # shared entries' JSON}): answers to single-node failures, one per class of nodes
        self._answers: tuple[int, dict[str, str], dict[str, Any], int, dict[int, list], dict[bytes, bytes]] | None = None
        self._can_fail: tuple[int, int] | None = None  # (base version, its nodes not down as a whole)
        self._order: tuple[int, dict[str, int]] | None = None  # (base_version, node id -> cluster position)
        self._fingerprint: tuple[int, str] | None = None  # (base_version, fingerprint of the base)
        self._prepared_base = None  # (base_version, core.problem.prepare of the base, or None)
        self._kept = None  # (that prepared cluster, plan.incremental.keep_plan of it, or None)
        # (base_version, {classes of the failed nodes: _Solved}, most recently used last): optimal plans
        # of whole-node failures solved on that applied cluster, for failures one up to renaming
        self._solved: tuple[int, OrderedDict] | None = None
        # (base_version, node -> its class's first node, that node -> the class's size): _node_classes
        self._classes: tuple[int, dict[str, str], dict[str, int]] | None = None
        self._closed = False
        self._settle = settle_heap
        self._collector_was_on = True  # whether the collector was on when the first request began (_worker_paused)
        self._settled = None  # (a prepared cluster, incremental plans made on it: _settle_after_plan)
        if settle_heap:
            _settle_heap()
        self._worker = None
        #: warm worker processes per warm-up (at most; fewer where memory is short: _warm_process)
        self.warm_workers = default_warm_workers() if warm_workers is None else warm_workers
        if not 1 <= self.warm_workers <= MAX_WARM_WORKERS:
            raise InvalidInstanceError("warm_workers", f"{self.warm_workers}: must be in 1..{MAX_WARM_WORKERS}")
        self.warm_pids: list[int] = []  # the warm worker processes started (tests, diagnostics)
        self._warm_pid: int | None = None  # the first of the running ones (its process group holds the others)
        self._pause_lock = threading.Lock()
        # notified when the workers are continued: the thread that receives their messages waits on it
        # while they are stopped for a request (and so takes no turn of the interpreter lock from it)
        self._continued = threading.Condition(self._pause_lock)
        self._solving = 0  # requests solving now (the warm worker is stopped while any is, within STOP_SHARE)
        self._stops: list[list] = []  # [start, end or None] of the worker's recent stops (monotonic)
        if contingency:
            self._worker = threading.Thread(target=self._contingency_loop, name="contingency", daemon=True)
            self._worker.start()

    # ------------------------------------------------------------------ planning
    def _prepared(self, state: st.State):
        """The state's applied cluster checked and tabulated once per base version (None if it fails)."""
        from unicron_plan.core.problem import prepare

        with self._cv:
            kept = self._prepared_base
        if kept is not None and kept[0] == state.base_version:
            return kept[1]
        try:
            prepared = prepare(state.base)
        except Exception:  # the plan is then checked whole, which reports what is wrong
            prepared = None
        with self._cv:
            self._prepared_base = (state.base_version, prepared)
        return prepared

    def _nodes(self, state: st.State) -> dict | None:
        """The applied cluster's nodes by id (from its prepared form), or None."""
        prepared = self._prepared(state) if state.base is not None else None
        return None if prepared is None else prepared.nodes

    def solve(self, instance, index: dict | None, fingerprint: str | None = None, observe: bool = True,
              prepared=None):
        """The one place plans are computed: :func:`unicron_plan.api.solve`, or, for an event on the
        prepared cluster that reads no index, :func:`unicron_plan.plan.incremental.incremental_plan`
        (the same plan in work that grows with the jobs it changes; where it does not apply, api.solve)."""
        from unicron_plan import api

        start = time.perf_counter()
        with self._worker_paused():
            plan = self._incremental(instance, prepared) if index is None and prepared is not None else None
            if plan is None:
                plan = api.solve(instance, solver=self.solver, contingency=index,
                                 instance_fingerprint=fingerprint, prepared=prepared)
        if observe:
            self.metrics.solver_time.observe(time.perf_counter() - start)
        return plan

    def _incremental(self, instance, prepared):
        """The incremental plan of ``instance`` on ``prepared`` (its kept plan made once), or None."""
        from unicron_plan.plan.incremental import incremental_plan
        from unicron_plan.solvers import DEFAULT_TIME_LIMIT_SECONDS

        kept = self._kept_plan(prepared, settle=self._settle)
        if kept is None:
            return None
        try:
            plan = incremental_plan(kept, instance, self.solver, DEFAULT_TIME_LIMIT_SECONDS)
        except Exception:  # any doubt (bad input included): the whole path answers, and reports it
            return None
        if self._settle:
            self._settle_after_plan(prepared)
        return plan

    def _settle_after_plan(self, prepared) -> None:
        """Settle the heap after each of the first SETTLE_PLANS incremental plans on ``prepared``: they
        make the terms their key shares with later events (kept by the plan module), which a full
        collection would otherwise walk during later requests (about 30 ms at 1,048,576 GPUs)."""
        with self._cv:
            made = self._settled[1] if self._settled is not None and self._settled[0] is prepared else 0
            if made >= SETTLE_PLANS:
                return
            self._settled = (prepared, made + 1)
        _settle_heap()

    def _kept_plan(self, prepared, settle: bool = False):
        """:func:`unicron_plan.plan.incremental.keep_plan` of ``prepared``, once per prepared cluster;
        with ``settle``, the heap is settled after making it (a cluster reached by ``apply`` has its
        kept plan made by its first event, after the heap was settled)."""
        from unicron_plan.plan.incremental import keep_plan

        with self._cv:
            kept = self._kept
        if kept is not None and kept[0] is prepared:
            return kept[1]
        try:
            made = keep_plan(prepared)
        except Exception:  # a cluster the kept plan does not cover: events are solved whole
            made = None
        with self._cv:
            self._kept = (prepared, made)
        if settle and made is not None:
            _settle_heap()
        return made

    def _prime_keys(self, kept) -> None:
        """Plan the first failures of one node per GPU type and of two per pair of types on ``kept``, with
        the upload rather than in the first requests (:func:`unicron_plan.plan.incremental.prime_keys`)."""
        from unicron_plan.plan.incremental import prime_keys
        from unicron_plan.service.answers import encode_body
        from unicron_plan.solvers import DEFAULT_TIME_LIMIT_SECONDS

        try:
            prime_keys(kept, encode_body, self.solver, DEFAULT_TIME_LIMIT_SECONDS)
        except Exception:  # (the requests make the keys then)
            pass

    def worker_paused(self):
        """The warm worker stopped for as long as the block runs (the whole HTTP exchange of an event:
        reading the body, solving, encoding and sending the plan), within STOP_SHARE."""
        return self._worker_paused()

    @contextlib.contextmanager
    def _worker_paused(self):
        """While any request is solving (and encoding its plan), the warm worker process is stopped
        (SIGSTOP), so that it takes no CPU from the request (on two hyper-threads even a lower priority
        would); it continues when the last request is done. Nested uses count once.
        The cyclic collector is off meanwhile too (and back on after the last, where it was on): a cold
        answer makes enough objects to set off tens of collections, and during a warm-up, with what the
        warm-up keeps not yet settled, a full one took 50-90 ms inside the request at 131,072 GPUs. Its
        garbage is freed by reference counts; cycles wait for the next collection."""
        with self._pause_lock:
            self._solving += 1
            if self._solving == 1:
                self._stop_worker()
                self._collector_was_on = gc.isenabled()
                gc.disable()
        try:
            yield
        finally:
            with self._pause_lock:
                self._solving -= 1
                if self._solving == 0 and self._collector_was_on:
                    gc.enable()
                if self._solving == 0 and self._stops and self._stops[-1][1] is None:
                    self._stops[-1][1] = time.monotonic()
                    if self._warm_pid is not None:
                        _signal(self._warm_pid, "SIGCONT")
                    self._continued.notify_all()

    def _stop_worker(self) -> None:
        """Stop the warm worker (caller holds the pause lock) unless it was stopped for STOP_SHARE of the
        last STOP_WINDOW seconds already, so that it finishes under any stream of requests."""
        if self._warm_pid is None:
            return
        now = time.monotonic()
        since = now - STOP_WINDOW
        self._stops = [s for s in self._stops if s[1] is None or s[1] > since]
        stopped = sum((s[1] if s[1] is not None else now) - max(s[0], since) for s in self._stops)
        if stopped < STOP_SHARE * STOP_WINDOW:
            _signal(self._warm_pid, "SIGSTOP")
            self._stops.append([now, None])

    def _stored_text(self, state: st.State, data: Any, end: bytes | None = None) -> bytes | None:
        """The precomputed answer to ``data`` on ``state`` as JSON text, or None (module docstring);
        with ``end``, the text's closing brace replaced by it."""
        if state.pending or state.base is None:
            return None
        node = _single_node_failure(data)
        with self._cv:
            answers = self._answers
        if answers is None or answers[0] != state.base_version:
            answers = None
        rep = None if node is None or answers is None else answers[1].get(node)
        if rep is None or rep not in answers[2]:
            return self._renamed_text(state, data, answers, end)
        packed = answers[2][rep]
        if isinstance(packed, tuple):  # a delta on the shared entries
            from unicron_plan.service.answers import joined_text, relabelled_text

            number, head, changed, tail = packed
            if rep == node:
                return joined_text(answers[4][number], head, changed, tail, end)
            many = self._class_sizes(state).get(rep, 0) >= INDEXED_CLASS_NODES
            return relabelled_text(answers[4][number], head, changed, tail, rep, node, self._node_order(state), end,
                                   indexed=many)
        return packed.reply(rep, node, self._node_order(state), end)  # a WholeAnswer

    def _renamed_text(self, state: st.State, data: Any, answers, end: bytes | None) -> bytes | None:
        """The text of an optimal plan solved for a failure of whole nodes one with ``data``'s up to
        renaming (:meth:`_keep_solved`), renamed for ``data``'s nodes; None where there is none, or where
        renaming would have to rewrite a hit job's sentence (it names its nodes: solved instead)."""
        nodes = _whole_node_failure(data)
        if nodes is None:
            return None
        reps = self._node_classes(state)
        classes = _failure_classes(nodes, reps)
        with self._cv:
            solved = self._solved
            found = None
            if solved is not None and solved[0] == state.base_version:
                found = solved[1].get(classes)
                if found is not None:
                    solved[1].move_to_end(classes)
        if found is None:
            return None
        from unicron_plan.service.answers import joined_text, renamed_text

        texts = found.texts()
        if texts is None:
            return None
        head, pieces, every, tail = texts
        rename = _renaming(found.nodes, nodes, reps)
        if not any(a != b for a, b in rename.items()):
            return joined_text(pieces, head, {}, tail, end)
        return renamed_text(pieces, head, every, tail, rename, self._node_order(state), end, indexed=True)

    def _keep_solved(self, before: st.State, data: Any, plan) -> None:
        """Keep ``plan``, solved for the event ``data`` on ``before``, where it is an optimal plan of a
        failure of whole nodes with nothing pending: a later failure of nodes of the same classes
        (:func:`unicron_plan.plan.contingency.node_classes`) has
        as its optimal plans those of this one with the nodes renamed (:meth:`_renamed_text`)."""
        nodes = _whole_node_failure(data)
        if nodes is None or before.pending or before.base is None or plan.status.solution != "optimal":
            return
        classes = _failure_classes(nodes, self._node_classes(before))
        with self._cv:
            if self._solved is None or self._solved[0] != before.base_version:
                self._solved = (before.base_version, OrderedDict())
            kept = self._solved[1]
            kept[classes] = _Solved(tuple(nodes), plan)
            kept.move_to_end(classes)
            while len(kept) > SOLVED_KEPT:
                kept.popitem(last=False)

    def _node_classes(self, state: st.State) -> dict[str, str]:
        """Node id -> the first node of its :func:`unicron_plan.plan.contingency.node_classes` class in
        the applied cluster, for the nodes not down as a whole (which cannot fail again), once per base
        version; empty where the cluster does not prepare."""
        return self._classes_of(state)[1]

    def _class_sizes(self, state: st.State) -> dict[str, int]:
        """The first node of each class of :meth:`_node_classes` -> how many nodes the class has."""
        return self._classes_of(state)[2]

    def _classes_of(self, state: st.State) -> tuple:
        with self._cv:
            kept = self._classes
        if kept is None or kept[0] != state.base_version:
            from unicron_plan.plan.contingency import node_classes

            prepared = self._prepared(state)
            reps: dict[str, str] = {}
            sizes: dict[str, int] = {}
            if prepared is not None:
                down = _down_nodes(state.base)
                for members in node_classes(state.base, prepared.previous):
                    if members[0] not in down:
                        reps.update(dict.fromkeys(members, members[0]))
                        sizes[members[0]] = len(members)
            kept = (state.base_version, reps, sizes)
            with self._cv:
                self._classes = kept
        return kept

    def _node_order(self, state: st.State) -> dict[str, int]:
        """Node id -> position in the applied cluster, once per base version."""
        with self._cv:
            kept = self._order
        if kept is None or kept[0] != state.base_version:
            kept = (state.base_version, {n.id: k for k, n in enumerate(state.base.cluster.nodes)})
            with self._cv:
                self._order = kept
        return kept[1]

    def _stored_answer(self, state: st.State, data: Any) -> dict | None:
        text = self._stored_text(state, data)
        return None if text is None else json.loads(text)

    def dry_run_text(self, data: Any) -> bytes | None:
        """The reply to a dry-run event from a stored answer, as JSON text; None when none is stored."""
        return self.dry_run_reply(data, solve=False)

    def dry_run_reply(self, data: Any, solve: bool = True) -> bytes | None:
        """The reply to a dry-run event as JSON text: the stored answer when there is one, else solved
        (None instead with ``solve`` False). The plan's text is used as encoded, with ``plan_id`` and
        ``revision`` appended; nothing is recorded.
        """
        start = time.perf_counter()
        state = self.state
        pending = json.dumps(st.pending_summary(state), separators=(",", ":")).encode()
        end = b',"plan_id":null,"revision":%d,"includes_pending":%s}' % (state.revision, pending)
        text = self._stored_text(state, data, end)  # (the plan's closing brace replaced by ``end``)
        if text is not None:
            self._count_stored(dry_run=True)
        elif not solve:
            return None
        else:
            with self._worker_paused():  # solving and encoding: the warm worker waits
                after, _ = st.record_event(state, data, self._nodes(state))
                plan = self._plan(state, after, dry_run=True)
                text = self._plan_text(plan)[:-1] + end
                self._keep_solved(state, data, plan)
        self.metrics.plan_latency.observe(time.perf_counter() - start)
        return text

    def _plan_text(self, plan) -> bytes:
        """``plan``'s JSON text; where it shares the kept plan's entries (an incremental plan), those
        are encoded once per key (:mod:`unicron_plan.service.answers`) and only the rest per plan."""
        from unicron_plan.plan.incremental import shared_entries
        from unicron_plan.service.answers import encode_body, joined_text, plan_text, split_plan

        with self._cv:
            kept = self._kept
        shared = shared_entries(kept[1]) if kept is not None and kept[1] is not None else None
        split = None if shared is None else split_plan(plan, shared, {}, [], most=len(shared) // 2)
        if split is None:
            return plan_text(plan)
        body = getattr(shared, "encoded", None)  # (kept with the key's terms: once per key, however they alternate)
        if body is None:
            body = encode_body(shared)
            with contextlib.suppress(AttributeError):
                shared.encoded = body
        return joined_text(body, *split)

    def _plan(self, before: st.State, after: st.State, dry_run: bool):
        """The plan of ``after`` (``before`` plus one event), from warm contingency when it applies."""
        index = fingerprint = None
        if not before.pending and after.failed and not after.exits and not after.arrivals:
            with self._cv:
                if self._index is not None and self._index[0] == after.base_version:
                    index = self._index[1]
                if self._fingerprint is not None and self._fingerprint[0] == after.base_version:
                    fingerprint = self._fingerprint[1]
            # only a node's or a rack's failure reads the index (the key is looked for only when there is
            # one), and only an index that stores some
            if index is not None and (_answers_only(index) or _index_key(after, self._nodes(after)) is None):
                index = None
        plan = self.solve(st.planning_instance(after), index, fingerprint, prepared=self._prepared(after))
        source = plan.solver.name
        if source == "contingency":
            self.metrics.contingency_hits.inc()
        self.metrics.plans.labels(source=source, dry_run=str(dry_run).lower()).inc()
        return plan

    def _count_stored(self, dry_run: bool) -> None:
        self.metrics.contingency_hits.inc()
        self.metrics.plans.labels(source="contingency", dry_run=str(dry_run).lower()).inc()

    # ------------------------------------------------------------------ changes
    def _commit(self, rows: list[tuple[str, dict]], new_state: st.State, idempotency=None, make_response=None,
                digest: str | None = None):
        """Give rows their revisions, commit them, then publish ``new_state`` (caller holds the lock)."""
        revs = list(range(self.last + 1, self.last + 1 + len(rows)))
        bodies = [body for _, body in rows]
        response = make_response(revs, bodies) if make_response else None
        self.store.append([(rev, kind, body) for rev, (kind, _), body in zip(revs, rows, bodies)],
                          None if idempotency is None else (idempotency, response, digest))
        self.last = revs[-1]
        changed_base = new_state.base_version != self.state.base_version
        self.state = new_state
        self.metrics.revision.set(new_state.revision)
        if changed_base:
            with self._cv:
                self._cv.notify_all()
        return revs, response

    def _vet(self, state: st.State, field: str | None = None) -> None:
        """Check the applied cluster of ``state`` as every plan of it will use it (cross-field checks,
        tables, each job's terms: an overflowing term is bad input) before it is committed; keep its
        prepared form. Every plan of a later state stays a finite float too: D_run and the charges of a
        job's own horizon grow as nodes fail, at most by the number of nodes (one node left in service),
        so the bound on a plan's objective is checked at that scale. ``field``: the name a new last job is
        reported under (``job``)."""
        from unicron_plan.core.problem import build_problem, check_magnitudes, prepare

        try:
            prepared = prepare(state.base)
            problem = build_problem(state.base, prepared)
            check_magnitudes(state.base, *problem.magnitudes, problem.d_run,
                             scale=float(max(len(state.base.cluster.nodes), 1)))
        except InvalidInstanceError as exc:
            if field is not None:
                raise st.as_new_job(exc, len(state.base.jobs) - 1) from None
            raise
        with self._cv:
            self._prepared_base = (state.base_version, prepared)

    def put_cluster(self, data: Any) -> dict:
        with self.lock:
            new = st.set_cluster(self.state, data)
            self._vet(new)
            kept = self._kept_plan(self._prepared_base[1])  # made with the upload, not by its first event
            if kept is not None:
                self._prime_keys(kept)
            self._node_classes(new)
            rev = self.last + 1
            body = new.base.model_dump(mode="json", exclude_none=True)
            self._commit([("cluster", body)], replace(new, revision=rev))
            if self._settle:
                _settle_heap()
            return {"revision": rev}

    def post_event(self, data: Any, dry_run: bool = False, idempotency_key: str | None = None) -> dict:
        if dry_run:
            return json.loads(self.dry_run_reply(data))
        start = time.perf_counter()
        digest = None
        if idempotency_key is not None:
            if len(idempotency_key) > 200:
                raise InvalidInstanceError("Idempotency-Key", "longer than 200 characters")
            if not idempotency_key.strip():  # (clients that send it empty would all share one answer)
                raise InvalidInstanceError("Idempotency-Key", "empty: give a key, or leave the header out")
            digest = _digest(data)
            found = self._idempotent(idempotency_key, digest)
            if found is not None:
                return found
        with self.lock:
            if idempotency_key is not None:
                found = self._idempotent(idempotency_key, digest)
                if found is not None:
                    return found
            before = self.state
            after, ev = st.record_event(before, data, self._nodes(before))
            plan = self._stored_answer(before, data)
            if plan is not None:
                self._count_stored(dry_run=False)
            else:
                with self._worker_paused():
                    solved = self._plan(before, after, dry_run=False)
                    self._keep_solved(before, data, solved)
                    plan = solved.model_dump(mode="json", exclude_none=True)
            ev_rev = self.last + 1
            reply = {**plan, "plan_id": f"p{ev_rev + 1}", "revision": ev_rev,
                     "includes_pending": st.pending_summary(before)}
            self._commit([("event", ev.model_dump(mode="json", exclude_none=True)), ("plan", reply)],
                         replace(after, revision=ev_rev), idempotency_key, lambda revs, bodies: reply, digest)
            self.metrics.events.labels(kind=ev.kind).inc()
        self.metrics.plan_latency.observe(time.perf_counter() - start)
        return reply

    def _idempotent(self, key: str, digest: str) -> dict | None:
        """The first answer given under ``key``; 422 when it was given for another body."""
        found = self.store.idempotent(key)
        if found is None:
            return None
        answer, first = found
        if first is not None and first != digest:
            raise InvalidInstanceError("Idempotency-Key", f"{key!r} was used with another body; "
                                                          "a retry must send the same body")
        return answer

    def add_job(self, data: Any) -> dict:
        with self.lock:
            new, job = st.add_job(self.state, data)
            self._vet(new, "job")
            rev = self.last + 1
            self._commit([("job", {"op": "add", "job": job.model_dump(mode="json", exclude_none=True)})],
                         replace(new, revision=rev))
            return {"revision": rev}

    def remove_job(self, job_id: str) -> dict:
        with self.lock:
            new = st.remove_job(self.state, job_id)
            rev = self.last + 1
            self._commit([("job", {"op": "remove", "id": job_id})], replace(new, revision=rev))
            return {"revision": rev}

    def apply(self, plan_id: str) -> dict:
        with self.lock:
            plan = self.get_plan(plan_id)
            if plan["revision"] != self.state.revision:
                raise Conflict(f"plan_id: {plan_id} was made at revision {plan['revision']}, "
                               f"the state is at revision {self.state.revision}")
            new = st.apply_plan(self.state, plan)
            rev = self.last + 1
            self._commit([("apply", {"plan_id": plan["plan_id"]})], replace(new, revision=rev))
            return {"revision": rev}

    def record_entry(self, kind: str, body: dict) -> int:
        """Append a history entry that changes no state (``signal``, ``action``: docs/detection.md);
        the state's revision stays, so a plan made before it can still be applied."""
        with self.lock:
            (rev,), _ = self._commit([(kind, body)], self.state)
            return rev

    # ------------------------------------------------------------------ reads
    def get_plan(self, plan_id: str) -> dict:
        revision = st.plan_revision(plan_id)
        plan = None if revision is None else self.store.get(revision, "plan")
        if plan is None:
            raise st.NotFound(f"plan {plan_id!r}")
        return plan

    def history(self, since: int = 0, limit: int | None = None) -> dict:
        return {"entries": [{"revision": rev, "type": kind, "at": at, "body": body}
                            for rev, kind, at, body in self.store.entries(since, limit)]}

    def state_document(self) -> dict:
        return st.state_document(self.state)

    def explain_plan(self, plan_id: str, replan_seconds: float = 10.0) -> dict:
        """``unicron-plan explain`` of a plan made for the current state (409 once the state moved on)."""
        from unicron_plan.api import load_plan
        from unicron_plan.tools.explain import explain

        plan = self.get_plan(plan_id)
        state = self.state
        if plan["revision"] != state.revision:
            raise Conflict(f"plan_id: {plan_id} was made at revision {plan['revision']}, the state is at "
                           f"revision {state.revision}: only a plan of the current state is explained")
        return explain(st.planning_instance(state), load_plan(plan), replan_seconds=replan_seconds)

    def contingency_status(self) -> str:
        if not self._contingency_on or self.state.base is None:
            return "off"
        with self._cv:
            current = self._index is not None and self._index[0] == self.state.base_version
            if current and self._index[1] is None:
                return "off"  # the build failed for this state (e.g. constraints): events are solved
        return "ready" if current else "building"

    def precomputed_status(self) -> dict:
        """{"done": answers stored, "total": answers to store} for the current applied state."""
        with self._cv:
            answers = self._answers
        state = self.state
        if answers is None or state.base is None or answers[0] != state.base_version:
            if state.base is None:
                return {"done": 0, "total": 0}
            if self._can_fail is None or self._can_fail[0] != state.base_version:  # the nodes to answer for
                self._can_fail = (state.base_version, len(state.base.cluster.nodes) - len(_down_nodes(state.base)))
            return {"done": 0, "total": self._can_fail[1]}
        return {"done": len(answers[1]), "total": answers[3]}

    # ------------------------------------------------------------------ warm contingency
    def _contingency_loop(self) -> None:
        _start_process_server()  # once, before any cluster: the first build does not pay for it
        while True:
            with self._cv:
                while not self._closed and (self.state.base is None or (
                        self._index is not None and self._index[0] == self.state.base_version)):
                    self._cv.wait()
                if self._closed:
                    return
                snapshot = self.state
            self._warm(snapshot)
            with self._cv:
                if self._index is None or self._index[0] != snapshot.base_version:
                    self._index = (snapshot.base_version, None)  # the worker died first: events are solved

    def _warm(self, snapshot: st.State) -> None:
        """Both stages for ``snapshot`` in worker processes (so that requests in this process do not wait
        for the interpreter lock, and they are stopped while requests solve): the first reads the
        cluster and builds the index, then forks the others (:func:`_warm_process`), each answering its
        share of the classes on its own pipe; their messages are published here as they come, and the
        workers are stopped as soon as the state moves on. Where no process can be started, the same
        stages run in this thread."""
        from multiprocessing.connection import wait

        start = time.perf_counter()
        workers = self.warm_workers
        try:
            ctx = _process_context()
            pipes = [ctx.Pipe(duplex=False) for _ in range(workers)]
            # the applied cluster goes as its JSON text (encoded in compiled code, far faster than
            # pickling the models while request threads wait for the interpreter lock)
            text = snapshot.base.model_dump_json(exclude_none=True)
            proc = ctx.Process(target=_warm_process, args=([s for _, s in pipes], text, snapshot.revision,
                                                           snapshot.base_version, self.solver,
                                                           MAX_PRECOMPUTED_CLASSES),
                               name="unicron-warm", daemon=True)
            proc.start()
            if ctx.get_start_method() == "forkserver":
                _lower_process_server()  # (a fork server started again by ``start``)
        except (OSError, ValueError, RuntimeError):
            for message in _warm_messages(snapshot, self.solver, MAX_PRECOMPUTED_CLASSES,
                                          lambda: self._moved_on(snapshot)):
                self._publish(snapshot, message, start)
            return
        for _, sender in pipes:
            sender.close()
        receivers = [r for r, _ in pipes]
        self.warm_pids.append(proc.pid)
        with self._pause_lock:
            self._warm_pid = proc.pid
            self._stops = []
            if self._solving:
                self._stop_worker()
        listening = receivers[:1]  # the others only after the index (a worker's answers follow it)
        try:
            while listening and not self._moved_on(snapshot):
                self._wait_continued(snapshot)
                ready = wait(listening, 0.05)
                if not ready:
                    if not proc.is_alive() and not any(r.poll(0) for r in listening):
                        return  # (the first worker waits for the others before it ends)
                    continue
                for receiver in ready:
                    try:
                        message = receiver.recv()
                    except (EOFError, OSError):
                        listening.remove(receiver)
                        continue
                    if message[0] == "done":
                        listening.remove(receiver)
                        continue
                    if message[0] == "index":
                        listening.extend(receivers[1:])
                    self._publish(snapshot, message, start)
        finally:
            with self._pause_lock:
                self._warm_pid = None
            for receiver in receivers:
                receiver.close()
            if not listening and proc.is_alive():  # every worker done: the first reaps the others (their
                _signal(proc.pid, "SIGCONT")        # CPU time is then counted with its own), then ends
                proc.join(5)
            if proc.is_alive() or listening:
                _signal(proc.pid, "SIGTERM")  # every worker (the first one's process group)
                _signal(proc.pid, "SIGCONT")  # a stopped process acts on SIGTERM only once continued
            proc.join(5)

    def _wait_continued(self, snapshot: st.State) -> None:
        """Wait while the workers are stopped for a request (what they sent before waits in its pipe):
        this thread then neither wakes nor unpickles, so the request has the interpreter lock to itself
        (under load a thread that takes the lock may be descheduled holding it, and the request waits
        for its next turn on a CPU)."""
        with self._pause_lock:
            while self._solving and self._stops and self._stops[-1][1] is None and not self._moved_on(snapshot):
                self._continued.wait(0.5)

    def _moved_on(self, snapshot: st.State) -> bool:
        return self._closed or self.state.base_version != snapshot.base_version

    def _publish(self, snapshot: st.State, message: tuple, start: float) -> None:
        """One message of the warm stages: ("index", index, digest, nodes to do),
        ("shared", body number, entries' JSON), ("answer", representative, its class, a WholeAnswer or
        a delta on a body sent before) or ("workers", pids of the workers the first one forked)."""
        if message[0] == "workers":
            self.warm_pids.extend(message[1])
            return
        if message[0] == "index":
            _, index, digest, total = message
            self.metrics.contingency_build.observe(time.perf_counter() - start)
            with self._cv:
                self._index = (snapshot.base_version, index)
                self._fingerprint = None if digest is None else (snapshot.base_version, digest)
                if index is not None:
                    # (version, node -> representative, representative -> answer, nodes to do,
                    #  body number -> shared entries' texts, changed entries' texts interned)
                    self._answers = (snapshot.base_version, {}, {}, total, {}, {})
            if index is not None and snapshot.base is not None:
                self._node_order(snapshot)  # (read by every relabelled answer: made before the first)
        elif message[0] == "shared":
            with self._cv:
                answers = self._answers
            if answers is not None and answers[0] == snapshot.base_version:
                answers[4][message[1]] = message[2]
        elif message[0] == "answer":
            with self._cv:
                answers = self._answers
            if answers is not None and answers[0] == snapshot.base_version:
                _, rep, members, packed = message
                if isinstance(packed, tuple):  # (held compactly, each changed entry's text once)
                    from unicron_plan.service.answers import stored_changes

                    number, head, changed, tail = packed
                    packed = (number, head, stored_changes(changed, answers[5]), tail)
                answers[2][rep] = packed
                answers[1].update(dict.fromkeys(members, rep))

    def wait_contingency(self, timeout: float = 60.0) -> bool:
        """Block until the index of the current state is built (tests and benchmarks)."""
        deadline = time.monotonic() + timeout
        while self.contingency_status() == "building":
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return self.contingency_status() == "ready"

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()


def _process_context():
    """The start method of warm workers: a fork server (each worker forks from a clean process that
    has imported the planner once), else spawn."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["unicron_plan.service.coordinator", "unicron_plan.api",
                                    "unicron_plan.plan.contingency"])
        return ctx
    return multiprocessing.get_context("spawn")


def _index_key(after: st.State, nodes: dict | None = None) -> str | None:
    """The contingency key of ``after``'s failure when it is the failure of whole nodes that is one
    (a node or a rack), else None: any other event is solved without reading the index. ``nodes``:
    the applied cluster's nodes by id, when kept."""
    from unicron_plan.plan.contingency import failure_key

    if set(after.failed) != set(after.whole):
        return None
    return failure_key(sorted(after.whole), after.base, nodes)


def _signal(pid: int, name: str) -> None:
    """Send signal ``name`` to the warm workers of the first one, ``pid``: its process group (it makes
    one as it starts, and the workers it forks are in it), or the process alone before it has made
    one (nothing where the signal does not exist or the workers have ended)."""
    import os
    import signal

    sig = getattr(signal, name, None)
    if sig is None:
        return
    try:
        os.killpg(pid, sig)
        return
    except (AttributeError, ProcessLookupError, PermissionError):
        pass
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _start_process_server() -> None:
    """Start the fork server of :func:`_process_context` now (where there is one)."""
    try:
        if _process_context().get_start_method() == "forkserver":
            from multiprocessing import forkserver

            forkserver.ensure_running()
            _lower_process_server()
    except (OSError, ValueError, RuntimeError):
        pass  # workers are then started (or the stages run in-thread) when a cluster comes


def _lower_process_server() -> None:
    """Give the fork server the warm worker's priority, so that a worker has it from its first
    instruction (its start-up, before :func:`_warm_process` runs, re-imports the service's main module)."""
    import os
    from multiprocessing import forkserver

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if pid:
        try:
            if os.getpriority(os.PRIO_PROCESS, pid) < WARM_NICENESS:
                os.setpriority(os.PRIO_PROCESS, pid, WARM_NICENESS)
        except (AttributeError, OSError):
            pass


def _warm_process(senders: list, base_json: str, revision: int, base_version: int, solver: str | None,
                  max_classes: int) -> None:
    """The warm workers: this one reads the cluster and sends the index (:func:`_warm_setup`) on the
    first pipe, then forks one worker per other pipe (fewer where memory is short:
    :func:`_workers_affordable`), announced as ("workers", their pids); worker k of n answers classes
    k, k + n, ... (:func:`_warm_answers`, body numbers k, k + len(senders), ...: no two workers' collide),
    sends "done" on its pipe and ends; this one waits for the others. Each runs at the lowest CPU
    priority (nice WARM_NICENESS), so that it takes only CPU time nothing else wants, and is stopped
    while a request solves as well (:meth:`Coordinator._worker_paused`, by the process group this one
    makes): on two hyper-threads of one core even a process of the lowest priority slows its sibling."""
    import os

    _lower_priority()
    try:
        os.setpgid(0, 0)
    except (AttributeError, OSError):
        pass
    children: list[int] = []
    sender = senders[0]
    try:
        from unicron_plan.schema import Instance

        snapshot = st.State(base=Instance.model_validate_json(base_json), revision=revision,
                            base_version=base_version)
        setup = _warm_setup(snapshot, max_classes)
        sender.send(setup[0])
        if setup[1] is None:
            sender.send(("done",))
            return
        _keep(setup[1])
        n = 1 + _workers_affordable(len(senders) - 1)
        gc.freeze()  # (the pages the forked workers share are not written by their collections)
        for k in range(1, n):
            pid = os.fork()
            if pid == 0:
                _forked_worker(senders, k, n, setup[1], solver)  # (does not return)
            children.append(pid)
        for other in senders[1:]:
            other.close()
        if children:
            sender.send(("workers", children))
        for message in _warm_answers(setup[1], solver, lambda: False, share=(0, n), stride=len(senders)):
            sender.send(message)
        sender.send(("done",))
    except (BrokenPipeError, EOFError, OSError):  # the coordinator stopped listening: the state moved on
        pass
    finally:
        sender.close()
        for pid in children:
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)


def _forked_worker(senders: list, k: int, n: int, setup: dict, solver: str | None) -> None:
    """Worker ``k`` of ``n``, forked by :func:`_warm_process`: its share of the answers on pipe ``k``."""
    import os

    code = 0
    try:
        for j, other in enumerate(senders):
            if j != k:
                other.close()
        sender = senders[k]
        for message in _warm_answers(setup, solver, lambda: False, share=(k, n), stride=len(senders)):
            sender.send(message)
        sender.send(("done",))
        sender.close()
    except (BrokenPipeError, EOFError, OSError):
        pass
    except BaseException:
        code = 1
    finally:
        os._exit(code)  # (nothing of the parent's exit runs twice)


def _workers_affordable(wanted: int) -> int:
    """How many of ``wanted`` more copies of this process fit (:func:`affordable_copies` of its RSS and
    ``MemAvailable``; all of them where these cannot be read)."""
    if wanted <= 0:
        return 0
    try:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * _page_size()
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, ValueError, IndexError, StopIteration):
        return wanted
    return affordable_copies(wanted, rss, available)


def affordable_copies(wanted: int, rss: int, available: int) -> int:
    """How many of ``wanted`` copies of a worker of ``rss`` bytes fit in WARM_MEMORY_SHARE of the
    ``available`` bytes and, with the worker itself, in WARM_MEMORY_BYTES (each copy counted whole,
    though a forked one shares the pages it does not write)."""
    rss = max(rss, 1)
    room = min(WARM_MEMORY_SHARE * available, WARM_MEMORY_BYTES - rss)
    return max(0, min(wanted, int(room // rss)))


def _page_size() -> int:
    import os

    return os.sysconf("SC_PAGE_SIZE")


def _lower_priority() -> None:
    """Give this process the lowest CPU priority (where the system has priorities)."""
    import os

    try:
        os.setpriority(os.PRIO_PROCESS, 0, WARM_NICENESS)
    except (AttributeError, OSError):
        pass


def _warm_messages(snapshot: st.State, solver: str | None, max_classes: int, stop, share: tuple[int, int] = (0, 1)):
    """The warm stages of ``snapshot`` as messages: ("index", index or None, fingerprint, nodes to do),
    then ("answer", representative, its class, its plan as a WholeAnswer) for each class of nodes
    (:func:`unicron_plan.plan.contingency.node_classes`, largest first; not nodes already down as a
    whole, which cannot fail again) whose representative's failure has a plan. An answer made from the
    kept plan is sent as a delta on the entries it shares with the others (:mod:`unicron_plan.service.answers`;
    ("shared", body number, their JSON) first, once). The index solves each equivalence class of failures once; the answer of a class is
    its representative's plan, placed and validated by :func:`unicron_plan.api.solve` as a cold
    request would be; the other nodes of the class are answered with it relabelled
    (:func:`unicron_plan.plan.contingency.relabel_plan`). ``share`` (k, n): only classes k, k + n, ...
    (their body numbers k, k + n, ...), as worker k of n sends them."""
    message, setup = _warm_setup(snapshot, max_classes)
    yield message
    if setup is not None:
        yield from _warm_answers(_keep(setup), solver, stop, share, share[1])


def _warm_setup(snapshot: st.State, max_classes: int) -> tuple[tuple, dict | None]:
    """The first message of the warm stages (the index) and what every worker reads to make answers
    (None where the cluster has none: the index failed)."""
    from unicron_plan.core.problem import prepare
    from unicron_plan.plan.contingency import (INDEX_MAX_CELLS, build_contingency, fingerprint, index_cells,
                                               node_classes)

    try:
        prepared = prepare(snapshot.base)
        digest = fingerprint(snapshot.base)
        index = ANSWERS_ONLY if index_cells(prepared.instance) > INDEX_MAX_CELLS else build_contingency(snapshot.base)
        down = _down_nodes(snapshot.base)
        classes = [c for c in node_classes(snapshot.base, prepared.previous) if c[0] not in down][:max_classes]
    except Exception:  # e.g. a cluster the planner rejects: events are solved instead
        return ("index", None, None, 0), None
    base = replace(snapshot, failed={}, whole=frozenset(), exits=(), arrivals=())
    setup = {"prepared": prepared, "digest": digest, "index": index, "classes": classes, "base": base}
    return ("index", index, digest, sum(map(len, classes))), setup


def _keep(setup: dict) -> dict:
    """``setup`` with the kept plan of its cluster (None where it has none: the answers are then made
    whole), made after the index is sent."""
    from unicron_plan.plan.incremental import keep_plan

    if "kept" not in setup:
        try:
            setup["kept"] = keep_plan(setup["prepared"])
        except Exception:
            setup["kept"] = None
    return setup


def _warm_answers(setup: dict, solver: str | None, stop, share: tuple[int, int] = (0, 1), stride: int = 1):
    """The "shared" and "answer" messages of classes k, k + n, ... of ``setup`` (``share`` (k, n)), body
    numbers k, k + stride, ... (``stride`` >= n: workers with other k never number one alike)."""
    from unicron_plan import api
    from unicron_plan.plan.incremental import incremental_plan, indexed_plan, shared_entries
    from unicron_plan.solvers import DEFAULT_TIME_LIMIT_SECONDS
    from unicron_plan.service.answers import WholeAnswer, encode_body, split_plan

    prepared, digest, index, kept, base = (setup[k] for k in ("prepared", "digest", "index", "kept", "base"))
    first, n = share
    bodies: dict[int, tuple[list, int]] = {}  # id of shared entries -> (them, their body number)
    for members in setup["classes"][first::n]:
        if stop():
            return
        try:
            after, _ = st.record_event(base, {"kind": "failure", "failed_nodes": [members[0]]}, prepared.nodes)
            instance = st.planning_instance(after)
            if _answers_only(index):  # the DP on the shared terms: kept only when proven optimal
                plan = None if kept is None else incremental_plan(kept, instance, solver, DEFAULT_TIME_LIMIT_SECONDS)
                if plan is None or plan.status.solution != "optimal":
                    continue
            else:
                plan = None if kept is None else indexed_plan(kept, instance, index, digest)
            shared = split = None
            if plan is None:
                plan = api.solve(instance, solver=solver, contingency=index, instance_fingerprint=digest,
                                 prepared=prepared)
            else:
                shared = shared_entries(kept)
                split = None if shared is None else split_plan(plan, shared, kept.holders, members)
        except Exception:  # e.g. the node has failed already: such events are solved when they come
            continue
        if split is not None:
            if id(shared) not in bodies:
                bodies[id(shared)] = (shared, first + stride * len(bodies))
                yield ("shared", bodies[id(shared)][1], encode_body(shared))
            yield ("answer", members[0], members, (bodies[id(shared)][1], *split))
        else:
            yield ("answer", members[0], members, WholeAnswer.of(plan, members[0]))
        time.sleep(0)  # in-thread: let request threads in between answers


#: The index of a cluster too large for one (INDEX_MAX_CELLS): it stores no failure, and the warm
#: stage's answers are solved one class at a time.
ANSWERS_ONLY = {"failures": {}, "infeasible": {}, "plans": {},
                "stats": {"method": "none: answers solved per class of nodes (the index exceeds its memory budget)"}}


def _answers_only(index: dict) -> bool:
    return not index.get("failures") and not index.get("infeasible")


def _down_nodes(instance) -> set[str]:
    """The nodes of ``instance`` down as a whole (every GPU in ``failed_gpus``): they cannot fail again."""
    return {n.id for n in instance.cluster.nodes if len(n.failed_gpus) == n.gpus}


def _settle_heap() -> None:
    """Collect, then move every object alive now (modules, the applied cluster) to the collector's
    permanent generation (:func:`gc.freeze`): a full collection then no longer walks them, which at
    16,384 GPUs otherwise stalls about one request in ten for 30-40 ms."""
    gc.collect()
    gc.freeze()


def _digest(data: Any) -> str:
    """SHA-256 of a request body's JSON in canonical form (sorted keys, no spaces). Defined for every
    body the reader returns: ``1e999`` (infinity) and lone surrogates (``"\\ud800"``) included."""
    import hashlib

    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _single_node_failure(data: Any) -> str | None:
    """The node of an event that is exactly the failure of one whole node, else None."""
    nodes = _whole_node_failure(data)
    return nodes[0] if nodes is not None and len(nodes) == 1 else None


def _whole_node_failure(data: Any) -> list[str] | None:
    """The nodes of an event that is exactly the failure of whole nodes (distinct ids), else None: a body
    that parsing the event could refuse (``failed_gpus`` other than absent or an empty list) is not one."""
    if not isinstance(data, dict) or data.get("kind") != "failure":
        return None
    if "failed_gpus" in data and not (type(data["failed_gpus"]) is list and not data["failed_gpus"]):
        return None
    if not set(data) <= {"kind", "failed_nodes", "failed_gpus"}:
        return None
    nodes = data.get("failed_nodes")
    if not isinstance(nodes, list) or not nodes or len(nodes) > SOLVED_MOST_NODES:
        return None
    if not all(isinstance(n, str) for n in nodes) or len(set(nodes)) != len(nodes):
        return None
    return nodes


def _failure_classes(nodes: list[str], reps: dict[str, str]) -> tuple[str, ...]:
    """The classes of ``nodes``, each named by its first node (``reps``: :meth:`Coordinator._node_classes`;
    a node it does not name stands for itself: it is then only ever matched by itself), sorted."""
    return tuple(sorted(reps.get(n, n) for n in nodes))


def _renaming(kept: tuple[str, ...], nodes: list[str], reps: dict[str, str]) -> dict[str, str]:
    """A permutation of nodes, each mapped to one of its class, that maps the failed nodes ``kept``
    onto ``nodes`` (of the same classes, :func:`_failure_classes`): one transposition of two nodes of
    one class per failed node, composed (each leaves the failed nodes renamed before it in place).
    Nodes it does not name keep their names."""
    both = set(kept).intersection(nodes)  # (failed in both: left where they are)
    waiting: dict[str, list[str]] = {}
    for n in nodes:
        if n not in both:
            waiting.setdefault(reps.get(n, n), []).append(n)
    sigma: dict[str, str] = {}  # keys and values the same set: a permutation of them
    for k in kept:
        c, n = sigma.get(k, k), k if k in both else waiting[reps.get(k, k)].pop()
        if c == n:
            continue
        for x in (k, c, n):
            if x not in sigma and x not in sigma.values():
                sigma[x] = x
        sigma = {x: n if y == c else c if y == n else y for x, y in sigma.items()}
    return sigma


class _Solved:
    """An optimal plan kept by :meth:`Coordinator._keep_solved`: the failed nodes, the plan, and its text
    as a head, one text per job and a tail, made when first read."""

    __slots__ = ("nodes", "plan", "_texts")

    def __init__(self, nodes: tuple[str, ...], plan):
        self.nodes, self.plan, self._texts = nodes, plan, None

    def texts(self) -> tuple | None:
        """(head, every entry's text, every entry as changed (a StoredChanges, indexed by its nodes once
        renamed: :func:`unicron_plan.service.answers.renamed_text`), tail); None where the plan's text
        cannot be split around its entries (:func:`unicron_plan.service.answers.plan_ends`)."""
        if self._texts is None:
            from array import array

            from unicron_plan.service.answers import StoredChanges, encode_body, plan_ends

            ends = plan_ends(self.plan)
            if ends is None:
                return None
            pieces = encode_body(self.plan.jobs)
            self._texts = (ends[0], pieces, StoredChanges(array("i", range(len(pieces))), tuple(pieces)), ends[1])
        return self._texts
