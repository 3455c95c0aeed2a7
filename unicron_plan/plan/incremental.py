"""A plan of an event on a kept cluster in work that grows with the jobs the event changes.

A failure (or a dry run of one) changes few jobs: the hit ones and the few the planner resizes.
Every other job keeps its count and its split, and its plan entry is that of the state before the
event but for its ``gain`` (D_run changes with the nodes in service). :class:`KeptPlan` holds those
entries once per cluster (the plan that keeps every job, checked whole by the independent
validator); :func:`incremental_plan` then solves the event as :func:`unicron_plan.api.solve` does
(the same problem, solver and placement), assembles and explains only the changed jobs
(:func:`unicron_plan.plan.assemble.to_plan` on them, with the whole plan's GPUs per node for their
keep costs), takes the kept entries for the others, and validates the delta: the changed jobs by
:func:`unicron_plan.plan.validate.validate_plan`, every node a changed job leaves or takes and
every node the event touched, the capacity per GPU type, the objective and the plan's totals.

When most jobs change (more than WHOLE_SHARE of them: e.g. the first event on a cluster far from
its optimum) the solved counts are assembled and validated whole, as api.solve does.
The problem itself is built from terms shared by every event of one key (:func:`event_problem`:
the nodes left in service, the capacity per GPU type, the expected repair), only the jobs hit
differently being tabulated afresh; the DP reuses the others' Pareto options, and the kept entries
with the key's ``gain`` are made once per key (:func:`shared_entries`).
It returns None (the caller solves whole) wherever it does not apply: a cluster whose kept plan
does not validate, jobs that may change GPU type, solvers that place at node level, a churn limit, tracked idle
GPUs, or a delta that does not validate. The plan is the one :func:`unicron_plan.api.solve` gives
but for ``solver.wall_seconds`` (tests/test_incremental_plan.py compares them on random clusters
and events).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter, OrderedDict
from itertools import chain, repeat
from operator import methodcaller, neg, sub as _minus
from collections.abc import Mapping

import numpy as np
from pydantic import BaseModel

from unicron_plan.core import constraints, cost
from unicron_plan.core.checks import check_event
from unicron_plan.core.cluster import build_state
from unicron_plan.core.problem import (FlatTables, PreparedCluster, Problem, RawSolution, add_alternatives,
                                       build_problem, tabulate)
from unicron_plan.errors import InfeasibleError
from unicron_plan.plan.assemble import to_plan
from unicron_plan.plan.placement import place
from unicron_plan.plan.reasons import changes_of, previous_fits
from unicron_plan.plan.validate import REL_TOL, validate_plan
from unicron_plan.schema import Instance, Plan, PlanJob


#: Above this share of the jobs changed, the whole plan is assembled and validated (the delta would
#: cost more than the whole).
WHOLE_SHARE = 0.5
#: The shared terms kept per cluster (:func:`event_problem`), the most recently used: one per distinct
#: (event kind, nodes in service, capacity per type, expected repair); failures of two whole nodes
#: in service of one GPU type all share one.
QUIET_KEPT = 4
#: On a fleet of t GPU types a failure of one node takes capacity from one of t types, and one of two
#: nodes from one of t (t + 1) / 2 pairs of types: so t (t + 3) / 2 keys are kept where that is more
#: (at most QUIET_MOST).
QUIET_MOST = 40
#: The changed entries a key's terms keep per job (:class:`_Made`), the most recently used, and over
#: every job at most MADE_MOST (beyond it they start again empty).
MADE_PER_JOB = 8
MADE_MOST = 20_000


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-6)


@dataclasses.dataclass(frozen=True)
class KeptPlan:
    """The plan that keeps every job of a prepared cluster, validated whole: each job's entry, its
    F at its count, and the GPUs every job holds per node."""

    prepared: PreparedCluster
    entries: list  # PlanJob per job, instance order (``gain`` of the cluster without event)
    f_kept: np.ndarray  # F(x) of each job, as its entry's waf_tflops
    usage: Counter  # node id -> GPUs of every job's previous split
    free: dict[str, int]  # node id -> GPUs usable before the event less the usage (cluster order)
    holders: dict = dataclasses.field(default_factory=dict, compare=False)  # node id -> ids of the jobs listing it
    ids: list = dataclasses.field(default_factory=list, compare=False)  # job ids, instance order
    per_type: dict = dataclasses.field(default_factory=dict, compare=False)  # GPU type -> GPUs of the entries
    # (event kind, nodes in service, capacity, repair) -> _Quiet, most recently used last (event_problem)
    quiet: OrderedDict = dataclasses.field(default_factory=OrderedDict, compare=False)


def keep_plan(prepared: PreparedCluster) -> KeptPlan | None:
    """The :class:`KeptPlan` of ``prepared`` (None where it does not apply or does not validate)."""
    base = prepared.instance
    if base.max_changed_jobs is not None or prepared.type_tables:
        return None
    problem = build_problem(base, prepared)
    if problem.state.idle is not None:
        return None
    counts = {j.id: j.x for j in problem.jobs}
    raw = RawSolution(counts=counts, objective=0.0, bound=0.0, termination="time_limit", solution="feasible")
    plan = to_plan(problem, raw, "kept", 0.0, arrays=False)  # (its entries are copied field by field)
    if not validate_plan(base, plan, derived=problem.derived()).valid:
        return None
    if any(pj.action not in ("keep", "idle") for pj in plan.jobs):
        return None
    usage: Counter = Counter()
    for split in prepared.previous.values():
        usage.update(split)
    f_kept = np.fromiter((pj.waf_tflops for pj in plan.jobs), dtype=float, count=len(plan.jobs))
    free = problem.state.usable_gpus()
    for nid, g in usage.items():
        free[nid] -= g
    holders: dict[str, list[str]] = {}
    for j in base.jobs:
        for nid in j.current.nodes:
            holders.setdefault(nid, []).append(j.id)
    per_type: dict[str, int] = {}
    for pj, j in zip(plan.jobs, problem.jobs):
        per_type[j.gpu_type] = per_type.get(j.gpu_type, 0) + pj.gpus
    return KeptPlan(prepared, plan.jobs, f_kept, usage, free, holders, [j.id for j in base.jobs], per_type)


@dataclasses.dataclass
class _Quiet:
    """Every job's terms after an event of one key (:func:`event_problem`), with the hit flags they were
    tabulated under, and per GPU type those jobs' Pareto options (``dp.pareto_joined``), made when
    first asked for."""

    jobs: list
    hit: list  # per job, whether its terms are those of a hit job
    hit_at: set = dataclasses.field(default_factory=set)  # the positions of the hit ones
    x: np.ndarray | None = None  # every job's current count
    flagged: set = dataclasses.field(default_factory=set)  # positions of the jobs leaving or on another type
    pareto: dict = dataclasses.field(default_factory=dict)  # gpu type -> (jobs, options, joined)
    entries: list | None = None  # the kept plan's entries with this key's gain (incremental_plan): a _Body
    bounds: dict = dataclasses.field(default_factory=dict)  # gpu type -> dp.SharedOptions of pareto's joined
    made: "_Made | None" = None  # the changed entries made and checked by this key's plans (incremental_plan)
    solved: dict = dataclasses.field(default_factory=dict)  # gpu type -> the DP's results on the shared options
    left: tuple | None = None  # (changed job ids, their GPUs left per node, the free GPUs then): _left_by

    def options(self, jobs: list) -> tuple:
        """The :attr:`SolverOptions.pareto` of problems made from these terms: one GPU type's options
        are the shared jobs' (made once), with those of the jobs tabulated afresh spliced in; with
        them, a :class:`unicron_plan.solvers.dp.Splice` of the shared options (the DP then reads its
        bounds from the parts kept for the shared jobs), and where no job is tabulated afresh the memo
        of the DP's results on these very options (capacity -> counts and value)."""
        from unicron_plan.solvers import dp

        t = jobs[0].gpu_type if jobs else None
        made = self.pareto.get(t)
        if made is None:
            shared = [j for j in self.jobs if j.gpu_type == t]
            made = self.pareto[t] = (shared, *dp.pareto_joined(shared))
        shared, options, joined = made
        if len(shared) != len(jobs) or joined is None:
            return dp.pareto_joined(jobs)
        kept = self.bounds.get(t)
        if kept is None and dp.NATIVE_HULL is not None:
            kept = self.bounds[t] = dp.SharedOptions(joined)
        new = [k for k, (a, b) in enumerate(zip(jobs, shared)) if a is not b]
        if not new:  # the shared jobs' own options: the DP keeps its results on them (dp.solve's memo)
            none = type(joined)(joined.y[:0], joined.g[:0], joined.off[:1])
            return options, joined, (None if kept is None else kept.splice([], none, joined)), \
                self.solved.setdefault(t, {})
        fresh, fresh_joined = dp.pareto_joined([jobs[k] for k in new])
        if fresh_joined is None:
            return dp.pareto_joined(jobs)
        options = list(options)
        sizes = np.diff(joined.off)
        ys, gs, at = [], [], 0
        for k, (y, g) in zip(new, fresh):
            ys += [joined.y[joined.off[at]:joined.off[k]], y]
            gs += [joined.g[joined.off[at]:joined.off[k]], g]
            options[k], sizes[k], at = (y, g), len(y), k + 1
        ys.append(joined.y[joined.off[at]:])
        gs.append(joined.g[joined.off[at]:])
        off = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=off[1:])
        spliced = type(joined)(np.concatenate(ys), np.concatenate(gs), off)
        return options, spliced, (None if kept is None else kept.splice(new, fresh_joined, spliced))


class _Body(list):
    """The kept entries with one key's gain (:attr:`_Quiet.entries`), and ``texts``: the changed entries
    made for that key's plans (:class:`_Made`), id -> [entry, its JSON text or None], for the writer of a
    plan's text (:func:`unicron_plan.service.answers.split_plan`), which fills in the texts; ``encoded``:
    the entries' own JSON texts, made once by that writer (:func:`unicron_plan.service.answers.encode_body`)."""

    texts: dict | None = None
    encoded: list | None = None


class _Made:
    """The changed entries made, and checked by the validator, for the plans of one key's terms
    (:class:`_Quiet`, whose D_run is ``d_run``), so that a later plan of the key that gives a job the very
    same count and split reuses the entry (and its JSON text) instead of assembling, explaining and
    checking it again.

    Only a job neither hit nor leaving nor on another type, whose terms are the key's own (not tabulated
    afresh), placed on no node the event touched, is kept. Its entry is then a function of its
    position, its count, its split (the nodes in their order and the GPUs on each) and whether its
    previous split fits in what the plan leaves to it (its ``keep_cost``, :func:`previous_fits`): its
    terms (F, D_trans, the horizon), D_run, its action, gain, reason and sentence are the key's, and
    so are the validator's checks of the job alone (the nodes of its split are the healthy cluster's:
    neither drained nor touched). Those four make the cache key; the checks over every node (load,
    capacity per type, totals) are made over the whole delta for every plan (:func:`_delta_valid`).
    At most MADE_PER_JOB entries per job, the most recently used, and MADE_MOST in all."""

    def __init__(self, d_run: float):
        import threading

        self.d_run = d_run
        self.by_job: dict[int, OrderedDict] = {}  # job position -> {(count, split, fits): entry}
        self.texts: dict[int, list] = {}  # id(entry) -> [entry, its JSON text or None]
        self.size = 0
        self.lock = threading.Lock()

    def find(self, keys: dict) -> dict:
        """{position: entry} of the ``keys`` (position -> cache key) found."""
        out = {}
        with self.lock:
            for k, key in keys.items():
                variants = self.by_job.get(k)
                got = None if variants is None else variants.get(key)
                if got is not None:
                    variants.move_to_end(key)
                    out[k] = got
        return out

    def keep(self, made: dict) -> None:
        """Keep ``made``: position -> (cache key, entry)."""
        with self.lock:
            if self.size + len(made) > MADE_MOST:
                self.by_job.clear()
                self.texts.clear()
                self.size = 0
            for k, (key, entry) in list(made.items())[:MADE_MOST]:
                variants = self.by_job.setdefault(k, OrderedDict())
                old = variants.pop(key, None)
                if old is not None:
                    self.texts.pop(id(old), None)
                    self.size -= 1
                variants[key] = entry
                self.texts[id(entry)] = [entry, None]
                self.size += 1
                while len(variants) > MADE_PER_JOB:
                    old = variants.popitem(last=False)[1]
                    self.texts.pop(id(old), None)
                    self.size -= 1


def _cache_keys(kept: KeptPlan, problem: Problem, quiet: "_Quiet", changed: list[int], counts: Mapping[str, int],
                placement: dict, used: "_Used") -> dict:
    """{position: :class:`_Made` key} of the changed jobs whose entry may be kept (its docstring)."""
    state = problem.state
    if state.healthy is None or state.touched is None or len(quiet.jobs) != len(problem.jobs):
        return {}
    touched = set(state.touched)
    nodes, previous, shared, jobs = state.nodes, state.previous, quiet.jobs, problem.jobs
    left, delta = kept.free, used.delta
    keys = {}
    for k in changed:
        j = jobs[k]
        if j.hit or j.exiting or j.off_type or j is not shared[k]:
            continue
        where = placement.get(j.id, {})
        if not touched.isdisjoint(where):
            continue
        before = previous.get(j.id, {})
        fits = None
        if touched.isdisjoint(before):
            try:
                fits = _fits(before, where, left, delta)
            except KeyError:  # (a node outside the cluster)
                pass
        if fits is None:
            fits = previous_fits(before, where, nodes, used)
        keys[k] = (counts[j.id], tuple(where.items()), fits)
    return keys


def _fits(before: dict, where: dict, left: dict, delta: dict) -> bool:
    """:func:`previous_fits` of a split ``before`` on nodes the event did not touch: such a node is in
    service with its healthy GPUs, of which the kept plan leaves ``left`` free, less the plan's change
    ``delta`` there, plus what the job's own split ``where`` takes there."""
    for nid, g in before.items():
        if left[nid] - delta.get(nid, 0) + where.get(nid, 0) < g:
            return False
    return True


def event_problem(kept: KeptPlan, instance: Instance) -> tuple[Problem, _Quiet] | None:
    """(``build_problem(instance, kept.prepared)`` in work that grows with the jobs the event hits,
    the shared terms it reuses, whose ``options`` are the :attr:`SolverOptions.pareto` of the
    problem), or None where that does not apply (an instance the kept plan does not cover, an event
    that makes jobs leave, a mixed fleet, or a precheck that fails: build_problem then reports it).

    A job's terms depend on the event only through whether it hits the job, the nodes left in
    service (D_run, and the horizon of its transition), the capacity per GPU type and, under the
    "lifetime" horizon, the expected repair. So the first event of each such key has every job
    tabulated, and the next ones reuse those terms (and their Pareto options) for every job hit by
    neither, tabulating only the others. The problem is build_problem's, term for term
    (tests/test_incremental_plan.py).
    """
    prepared = kept.prepared
    if not prepared.covers(instance):
        return None
    check_event(instance, prepared.nodes)
    holders = kept.holders
    state = build_state(instance, prepared.previous, prepared.healthy, prepared.unhealthy,
                        holders=lambda nodes: {jid for n in nodes for jid in holders.get(n, ())}, job_ids=kept.ids)
    if state.exiting or state.idle is not None or prepared.type_tables:
        return None
    capacity = state.capacity()
    repair = cost.pending_repair_seconds(instance) if instance.cost.horizon == "lifetime" else None
    key = (instance.event.kind if instance.event is not None else None, state.nodes_in_service(),
           tuple(sorted(capacity.items())), repair)
    hit = state.hit  # (built from the job ids in order: its values are the flags in job order)
    flags = list(hit.values()) if len(hit) == len(instance.jobs) else [hit[j.id] for j in instance.jobs]
    quiet = kept.quiet.get(key)
    try:
        if quiet is None:
            terms = tabulate(instance, state, prepared.tables, prepared.layouts, prepared.flat).jobs
            quiet = _Quiet(terms, flags, {k for k, f in enumerate(flags) if f},
                           np.fromiter((j.x for j in terms), dtype=np.int64, count=len(terms)),
                           {k for k, j in enumerate(terms) if j.exiting or j.off_type})
            kept.quiet[key] = quiet
            t = len(kept.per_type)
            while len(kept.quiet) > min(max(QUIET_KEPT, t * (t + 3) // 2), QUIET_MOST):
                kept.quiet.popitem(last=False)
        kept.quiet.move_to_end(key)
        jobs = list(quiet.jobs)
        redo = sorted(set(_hit_positions(flags)) ^ quiet.hit_at)  # the jobs hit otherwise than in the terms
        if redo:
            sub = instance.model_copy(update={"jobs": [instance.jobs[k] for k in redo]})
            part = tabulate(sub, state, prepared.tables, prepared.layouts, _flat_of(prepared.flat, redo))
            for k, terms in zip(redo, part.jobs):
                jobs[k] = dataclasses.replace(terms, index=k)
        limit = instance.max_changed_jobs
        problem = Problem(instance, state, cost.d_run_seconds(instance, state.nodes_in_service()), capacity,
                          jobs, max_changed_jobs=None if limit is None else min(limit, len(jobs)))
        constraints.precheck(problem)
    except InfeasibleError:
        return None
    return add_alternatives(problem, prepared.type_tables, prepared.type_layouts), quiet


def prime_keys(kept: KeptPlan, encode=None, solver: str | None = None, time_limit_seconds: float | None = None) -> int:
    """Make the shared terms (:func:`event_problem`) of the failure of one whole node of each GPU type
    and of two of each pair of types, on the nodes in service with every GPU healthy that are most
    common per type and GPU count, by planning that failure (:func:`incremental_plan` with ``solver``
    and ``time_limit_seconds``: the key's kept entries, the DP's results on its options and the
    changed entries it makes are kept with it; ``encode``: a function that gives the kept entries'
    JSON texts, kept as their ``encoded``), so that no request pays for making them; returns how many
    keys were made (at most the number kept)."""
    from unicron_plan.schema import Event

    prepared = kept.prepared
    shapes: dict[tuple, list[str]] = {}  # (type, GPUs) -> healthy nodes
    for n in prepared.instance.cluster.nodes:
        if not n.failed_gpus:
            shapes.setdefault((n.gpu_type, n.gpus), []).append(n.id)
    common: dict[str, list[str]] = {}
    for (t, _), nodes in sorted(shapes.items(), key=lambda kv: -len(kv[1])):
        common.setdefault(t, nodes)
    types = sorted(common)
    failures = [[common[t][0]] for t in types]
    failures += [[common[a][-1], common[b][-2]] for k, a in enumerate(types) for b in types[k:]
                 if len(common[b]) >= 2]
    before = len(kept.quiet)
    for nodes in failures[:QUIET_MOST]:
        event = prepared.instance.model_copy(update={"event": Event(kind="failure", failed_nodes=nodes)})
        try:
            made = event_problem(kept, event)
            if made is not None:
                incremental_plan(kept, event, solver, time_limit_seconds)
        except Exception:  # (a failure the checks refuse: its key is made by the first that comes)
            continue
        if made is None:
            continue
        problem, quiet = made
        if quiet.entries is None:  # (a plan that changed most jobs: assembled whole)
            quiet.entries = _kept_entries(kept, (kept.f_kept * problem.d_run).tolist())
        if encode is not None and quiet.entries.encoded is None:
            quiet.entries.encoded = encode(quiet.entries)
    return len(kept.quiet) - before


def _kept_entries(kept: KeptPlan, gains: list[float]) -> _Body:
    """The kept plan's entries with ``gains`` (each job's F(x) D_run of one key)."""
    return _Body(_with_gain(pj, g) for pj, g in zip(kept.entries, gains))


def _hit_positions(flags) -> list[int]:
    """The positions of the True ones of ``flags`` (a job's hit flags in job order)."""
    return np.flatnonzero(np.fromiter(flags, dtype=bool, count=len(flags))).tolist()


def _flat_of(flat: FlatTables, rows: list[int]) -> FlatTables:
    """The :class:`FlatTables` of the jobs at ``rows`` alone (in that order)."""
    lo, hi = flat.off[rows], flat.off[np.asarray(rows) + 1]
    off = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(hi - lo, out=off[1:])
    return FlatTables(np.concatenate([flat.counts[a:b] for a, b in zip(lo.tolist(), hi.tolist())]),
                      np.concatenate([flat.f[a:b] for a, b in zip(lo.tolist(), hi.tolist())]), off)


def _left_by(kept: KeptPlan, quiet: "_Quiet | None", previous: dict, ids: list[str]) -> tuple[dict, dict]:
    """(GPUs per node the jobs ``ids`` leave, negated: their ``previous`` splits summed; the kept plan's
    free GPUs plus those, every node in ``kept.free``'s order), new dicts. The first plan of a key
    keeps both (``quiet.left``); a later plan whose changed jobs are mostly the same (the jobs most
    failures of a key resize) starts from copies of them and adds or takes out the few others' splits."""
    base = None if quiet is None else quiet.left
    left = kept.free
    if base is not None:
        was, base_delta, base_free = base
        now = set(ids)
        gone = [jid for jid in was if jid not in now]
        extra = [jid for jid in ids if jid not in was]
        if 4 * (len(gone) + len(extra)) <= len(ids):
            delta, free = base_delta.copy(), base_free.copy()
            for jid, sign in chain(zip(gone, repeat(1)), zip(extra, repeat(-1))):
                for nid, g in previous.get(jid, {}).items():
                    v = delta.get(nid, 0) + sign * g
                    if v:
                        delta[nid] = v
                    else:
                        delta.pop(nid, None)
                    free[nid] = left[nid] - v
            return delta, free
    delta = _summed([previous.get(jid, {}) for jid in ids], negate=True)
    free = left.copy()
    free.update(zip(delta, map(_minus, map(left.__getitem__, delta), delta.values())))
    if quiet is not None and base is None:
        quiet.left = (frozenset(ids), delta.copy(), free.copy())
    return delta, free


def _summed(splits: list, negate: bool = False) -> dict:
    """{node: GPUs} summed over ``splits`` (negated with ``negate``): one merge in C where no node is in
    two splits."""
    merged = dict(chain.from_iterable(map(methodcaller("items"), splits)))
    if len(merged) == sum(map(len, splits)):
        return dict(zip(merged, map(neg, merged.values()))) if negate else merged
    out: dict = {}
    for split in splits:
        for nid, g in split.items():
            out[nid] = out.get(nid, 0) + (-g if negate else g)
    return out


def _with_gain(entry: PlanJob, gain: float) -> PlanJob:
    """A copy of a kept entry with its ``gain`` (what ``model_copy(update=...)`` makes, without its
    per-field machinery: thousands of entries per plan; an entry made with its placement, not held as
    arrays: :func:`keep_plan`)."""
    new = _NEW(PlanJob)
    state = entry.__dict__.copy()
    state["gain"] = gain
    _SET(new, "__dict__", state)
    _SET(new, "__pydantic_fields_set__", set(entry.__pydantic_fields_set__))
    _SET(new, "__pydantic_extra__", None)
    _SET(new, "__pydantic_private__", None)
    return new


_NEW, _SET = object.__new__, object.__setattr__


class _Used(Mapping):
    """GPUs per node of a whole plan: the kept usage with the changed jobs' previous splits taken out
    and their planned splits put in (``delta``: node -> change)."""

    def __init__(self, usage: Counter, delta: dict[str, int]):
        self.usage, self.delta = usage, delta

    def get(self, nid, default=0):
        return self.usage.get(nid, 0) + self.delta.get(nid, 0) or default

    def __getitem__(self, nid):
        return self.get(nid)

    def __iter__(self):
        return iter(self.usage.keys() | self.delta.keys())

    def __len__(self):
        return len(self.usage.keys() | self.delta.keys())


def _changed(problem: Problem, counts: Mapping[str, int], quiet: "_Quiet | None" = None,
             ids: list | None = None) -> list[int]:
    """Positions of the jobs whose entry may differ from their kept one: resized, hit, leaving,
    or on another GPU type (a job that keeps its count unhit stays on its split: Problem.stays).
    ``quiet``: the shared terms the problem was made from (``ids``: its job ids): the flags are read
    from them but for the jobs tabulated afresh."""
    jobs = problem.jobs
    if quiet is None or ids is None or len(ids) != len(jobs) or len(problem.state.hit) != len(jobs):
        return [k for k, j in enumerate(jobs) if counts[j.id] != j.x or j.hit or j.exiting or j.off_type]
    fresh = [k for k, (a, b) in enumerate(zip(jobs, quiet.jobs)) if a is not b]  # tabulated afresh
    x = quiet.x.copy()
    x[fresh] = [jobs[k].x for k in fresh]
    got = np.fromiter(map(counts.__getitem__, ids), dtype=np.int64, count=len(ids))
    out = set(np.flatnonzero(got != x).tolist()) | set(_hit_positions(problem.state.hit.values()))
    out |= quiet.flagged.difference(fresh)
    out.update(k for k in fresh if jobs[k].exiting or jobs[k].off_type)
    return sorted(out)


def indexed_plan(kept: KeptPlan, instance: Instance, index: dict, digest: str) -> Plan | None:
    """The plan of ``instance`` from the counts ``index`` stores for its failure, built as
    :func:`incremental_plan` builds it: what :func:`unicron_plan.api.solve` with the index gives
    (solver ``contingency``), for an index built from this very cluster (``digest``: its
    fingerprint) in this process, whose optimality is then not proven again; None where none applies
    or the plan's objective is not the stored one."""
    from unicron_plan.plan.contingency import lookup

    found = lookup(instance, index, digest)
    if found is None or found[1] is None:
        return None
    key, counts, stored = found
    entry = index["plans"].get(index["failures"][key]["plan"], {})
    if entry.get("types"):
        return None
    raw = RawSolution(counts=counts, objective=stored, bound=stored,
                      options={"contingency_key": key, "precomputed": True})
    plan = incremental_plan(kept, instance, "contingency", raw=raw)
    if plan is None or abs(plan.objective - stored) > 1e-9 * max(1.0, abs(stored)):
        return None
    return plan


def incremental_plan(kept: KeptPlan, instance: Instance, solver: str | None = None,
                     time_limit_seconds: float | None = None, raw: RawSolution | None = None) -> Plan | None:
    """The plan of ``instance`` (the kept cluster with an event) built from ``kept`` (module
    docstring), or None where the caller must solve it whole. ``raw``: the counts to place (named
    ``solver``) instead of solving."""
    from unicron_plan.api import post_solve_reserve
    from unicron_plan.core.constraints import dp_limitations
    from unicron_plan.solvers import SolverOptions, get_solver

    prepared = kept.prepared
    if not prepared.covers(instance):
        return None
    start = time.perf_counter()
    made = event_problem(kept, instance)
    problem, quiet = made if made is not None else (build_problem(instance, prepared), None)
    pareto = None if quiet is None else quiet.options
    if problem.alternatives or problem.state.idle is not None or problem.max_changed_jobs is not None:
        return None
    if raw is None:
        if solver is None:
            solver = "auto" if dp_limitations(problem) else "dp"
        options = SolverOptions(time_limit_seconds=time_limit_seconds, pareto=pareto)
        if time_limit_seconds is not None:
            reserve = post_solve_reserve(problem, 2.0, float(time_limit_seconds))
            options = SolverOptions(time_limit_seconds=time_limit_seconds, slowdown=2.0,
                                    deadline=start + float(time_limit_seconds) - reserve, pareto=pareto)
        raw = get_solver(solver)(problem, options)
    ids = kept.ids if len(kept.ids) == len(problem.jobs) else [j.id for j in problem.jobs]
    if raw.types or raw.placement is not None or raw.counts.keys() != set(ids):
        return None
    counts = raw.counts
    changed = _changed(problem, counts, quiet, ids if ids is kept.ids else None)
    jobs = problem.jobs
    if len(changed) > WHOLE_SHARE * len(jobs):  # most jobs change: api.solve's assembly, without a second solve
        return _whole(instance, problem, raw, solver, start)
    if any(jobs[k].pinned for k in changed):  # (a pinned job stays where it was even when changed)
        return None
    state = problem.state
    # GPUs per node: the changed jobs' previous splits out, then their new ones in
    usage = kept.usage
    if state.healthy is not None and state.touched is not None:
        # placement's first step (Problem.stays) from the kept usage: every unchanged job stays. A node
        # the event did not touch is usable as in the healthy cluster (ClusterState.usable_gpus), as
        # before the event (the nodes touched then, those with failed GPUs, are touched now too): its
        # kept free GPUs less the change
        delta, free = _left_by(kept, quiet, state.previous, [jobs[k].id for k in changed])
        for nid in state.touched:
            free[nid] = state.nodes[nid].usable - usage.get(nid, 0) - delta.get(nid, 0)
    else:
        previous = state.previous
        delta = _summed([previous.get(jobs[k].id, {}) for k in changed], negate=True)
        free = kept.free.copy()
        for nid in set(delta).union(state.nodes):
            free[nid] = state.nodes[nid].usable - usage.get(nid, 0) - delta.get(nid, 0)
    result = {jobs[k].id: {} for k in changed}
    movers = [jobs[k] for k in changed if counts[jobs[k].id]]
    placement = place(problem, counts, start=(free, result, movers))
    taken = _summed([placement.get(jobs[k].id, {}) for k in changed])
    both = [nid for nid in taken if nid in delta] if len(delta) < len(taken) else \
        [nid for nid in delta if nid in taken]
    sums = [delta[nid] + taken[nid] for nid in both]
    delta.update(taken)
    delta.update(zip(both, sums))
    used = _Used(kept.usage, delta)
    made = keys = None
    reused: dict = {}  # position -> an entry made and checked for an earlier plan of this key
    if quiet is not None:
        made = quiet.made
        if made is None or made.d_run != problem.d_run:
            made = quiet.made = _Made(problem.d_run)
        keys = _cache_keys(kept, problem, quiet, changed, counts, placement, used)
        reused = made.find(keys)
    new = [k for k in changed if k not in reused] if reused else changed  # assembled and checked here
    sub = dataclasses.replace(problem, jobs=[jobs[k] for k in new])
    sub_raw = dataclasses.replace(raw, placement={jobs[k].id: placement.get(jobs[k].id, {}) for k in new})
    part = to_plan(sub, sub_raw, solver, 0.0, used=used)
    # the kept jobs' gains: F(x) D_run, no transition (cost.gain of an unchanged job)
    gains = (kept.f_kept * problem.d_run).tolist()
    if quiet is not None and quiet.entries is None:  # (shared by every event of its key: one D_run)
        quiet.entries = _kept_entries(kept, gains)
    if quiet is not None:
        quiet.entries.texts = made.texts
        entries = list(quiet.entries)
    else:
        entries = [_with_gain(pj, g) for pj, g in zip(kept.entries, gains)]
    for k, pj in zip(new, part.jobs):
        entries[k] = pj
        gains[k] = pj.gain
    for k, pj in reused.items():
        entries[k] = pj
        gains[k] = pj.gain
    total_waf = 0.0
    for pj in entries:
        total_waf += pj.waf_tflops
    objective = float(sum(gains))
    bound = objective if raw.solution == "optimal" else max(raw.bound, objective)
    gap = (bound - objective) / max(abs(bound), 1.0) if math.isfinite(bound) else None
    reasons = [pj.reason for pj in entries]
    plan = _copied(part, dict(objective=objective, bound=bound, gap=gap, waf_tflops=total_waf, jobs=entries,
                              changes=changes_of(reasons)))
    if not _delta_valid(kept, instance, problem, plan, part, changed, used, delta, new):
        return None
    if keys:  # the entries made here and checked, for the next plans of this key
        made.keep({k: (keys[k], pj) for k, pj in zip(new, part.jobs) if k in keys})
    plan.solver = plan.solver.model_copy(update={"wall_seconds": time.perf_counter() - start})
    return plan


def _copied(part: Plan, update: dict) -> Plan:
    """``part.model_copy(update=update)`` whose changed jobs keep their placements held as arrays: the
    copy is pydantic's (``Plan.__copy__`` makes every placement's models first), so the validator reads
    ``part``'s arrays and the models are made once, when the plan is first written or read; the copy
    holds no arrays of its own (its jobs are not ``part``'s: each job makes its placement itself)."""
    new = BaseModel.__copy__(part)
    new.__dict__.update(update)
    new.__pydantic_fields_set__.update(update)
    private = new.__pydantic_private__
    if private and "_placements" in private:
        private["_placements"] = None
    return new


def _whole(instance: Instance, problem: Problem, raw: RawSolution, solver: str, start: float) -> Plan | None:
    """The plan as :func:`unicron_plan.api.solve` assembles and validates it (None if it does not validate)."""
    plan = to_plan(problem, raw, solver, time.perf_counter() - start)
    report = validate_plan(instance, plan, derived=problem.derived())
    return plan if report.valid else None


def _delta_valid(kept: KeptPlan, instance: Instance, problem: Problem, plan: Plan, part: Plan,
                 changed: list[int], used: _Used, delta: dict[str, int], new: list[int] | None = None) -> bool:
    """The delta of ``plan`` checked: the changed jobs by the independent validator (on the instance
    restricted to them), the nodes they leave or take and the nodes the event touched against their
    healthy GPUs, the capacity per GPU type, the kept jobs' entries and the plan's totals. ``new``:
    the changed jobs ``part`` holds (by default all); the others' entries were made and checked alone
    for an earlier plan of the same key, with the same count, split and keep (:class:`_Made`)."""
    state = problem.state
    if new is None:
        new = changed
    sub_instance = instance.model_copy(update={"jobs": [instance.jobs[j.index] for j in
                                                        (problem.jobs[k] for k in new)]})
    # (the tables of problem.derived(), every job's, are the prepared cluster's: the same mapping)
    report = validate_plan(sub_instance, part, derived=(kept.prepared.tables, state), whole_used=used)
    if not report.valid:
        return False
    # every node whose load changed, and every node the event touched (a kept job on it would be hit)
    # (a state not re-derived from a healthy cluster does not list them: every node is checked)
    if state.healthy is not None and state.touched is not None:
        # a node the event did not touch has its healthy GPUs usable (ClusterState.usable_gpus): read
        # from the healthy cluster, without a record per node
        # (GPUs usable less the kept usage: the kept free GPUs, as for placement) less the change
        event = set(state.touched)
        rest = delta.keys() - event
        try:
            left = list(map(_minus, map(kept.free.__getitem__, rest), map(delta.__getitem__, rest)))
        except KeyError:  # a node outside the cluster
            return False
        if left and min(left) < 0:
            return False
        touched = event
    else:
        touched = set(delta) | set(state.nodes)
    for nid in touched:
        node = state.nodes.get(nid)
        load = used.get(nid, 0)
        if node is None or load > node.usable:
            return False
    capacity = state.capacity()
    per_type = dict(kept.per_type)  # the kept entries' GPUs per type, the changed ones' taken out, theirs put in
    for k in changed:
        t = problem.jobs[k].gpu_type
        per_type[t] = per_type.get(t, 0) + plan.jobs[k].gpus - kept.entries[k].gpus
    if any(used_t > capacity.get(t, 0) for t, used_t in per_type.items()):
        return False
    is_changed = np.zeros(len(problem.jobs), dtype=bool)
    is_changed[changed] = True
    kept_idx = np.flatnonzero(~is_changed)
    kept_gain = kept.f_kept[kept_idx] * problem.d_run
    if len(state.hit) == len(problem.jobs) and len(kept.ids) == len(problem.jobs):  # (flags in job order)
        if not is_changed[_hit_positions(state.hit.values())].all():  # a kept job was hit
            return False
    elif not {jid for jid, h in state.hit.items() if h} <= {problem.jobs[k].id for k in changed}:
        return False
    total = float(kept_gain.sum()) + report.objective
    waf = float(kept.f_kept[kept_idx].sum()) + float(sum(pj.waf_tflops for pj in part.jobs))
    if len(new) != len(changed):  # the entries kept from earlier plans: their checked gains and F
        is_changed[new] = False
        again = [plan.jobs[k] for k in np.flatnonzero(is_changed).tolist()]
        total += float(sum(pj.gain for pj in again))
        waf += float(sum(pj.waf_tflops for pj in again))
    if not (_close(plan.objective, total) and _close(plan.waf_tflops, waf)):
        return False
    if plan.status.solution == "optimal" and not _close(plan.bound, plan.objective):
        return False
    return plan.changes == changes_of([pj.reason for pj in plan.jobs])


def shared_entries(kept: KeptPlan) -> list | None:
    """The entries the last plan made from ``kept`` shares with every plan of its event's key (the kept
    entries with that key's gain; a plan's entry for a job it does not change is that very object), or
    None when there are none yet."""
    if not kept.quiet:
        return None
    return kept.quiet[next(reversed(kept.quiet))].entries
