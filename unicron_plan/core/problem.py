"""Instance -> dense, index-stable problem; what a solver returns (RawSolution).

Like a cvxpy reduction: :func:`build_problem` maps ids to indices and the
objective to per-job gain vectors (via :mod:`unicron_plan.core.cost`), solvers work
on indices only, and :func:`unicron_plan.plan.assemble.to_plan` maps their
answer back to ids.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, sub

import numpy as np

from unicron_plan.core import constraints, cost
from unicron_plan.core.cluster import ClusterState, HealthyCluster, build_state, healthy_nodes
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.schema import Instance
from unicron_plan.core.checks import check_event, check_instance


@dataclass
class JobTerms:
    """One job's allowed counts and its objective term at each of them."""

    index: int
    id: str
    gpu_type: str
    weight: float
    x: int
    hit: bool
    d_trans: float
    f_x: float
    table: Mapping[int, float]
    counts: np.ndarray  # allowed counts, ascending (int64); 0 first unless a constraint forbids it
    f: np.ndarray  # F(y) at counts
    gains: np.ndarray  # G(y) at counts
    layouts: dict[int, dict[str, int]] = field(default_factory=dict)
    d_run: float = 0.0
    # Constraints (unicron_plan.core.constraints); counts above are already filtered.
    tp: int = 1
    pinned: bool = False
    max_nodes: int | None = None
    same_rack: bool = False
    min_gain_fraction: float | None = None
    exiting: bool = False  # leaves in a job_exit event: only y = 0, G = 0
    off_type: bool = False  # the terms on another GPU type than the job's current one: every count is a change
    d_repeat: float = 0.0  # "lifetime" horizon: a change to another count is charged F(x) x d_repeat more

    def f_of(self, y: int) -> float:
        """F(y) of this job (0 for y = 0)."""
        return 0.0 if y == 0 else float(cost.waf(self.weight, self.table[y]))

    def gain_of(self, y: int, moved: bool = False, f_y: float | None = None) -> float:
        """G(y) of this job (``moved``: it keeps its count on another split, and pays for it; ``f_y``:
        its :meth:`f_of` ``y`` when the caller has it)."""
        return float(cost.gain(self.f_of(y) if f_y is None else f_y, y, self.x, self.f_x, self.hit, self.d_run,
                               self.d_trans, self.exiting, moved or self.off_type, self.d_repeat))


@dataclass
class Problem:
    """The normalised problem every solver receives."""

    instance: Instance
    state: ClusterState
    d_run: float
    capacity: dict[str, int]
    jobs: list[JobTerms]
    max_changed_jobs: int | None = None
    # Mixed fleets: {job id: its terms on every GPU type it may use, its current type's (jobs[i]) first},
    # for the jobs with several types (empty: every job is bound to its type, the single-type problem).
    alternatives: dict[str, list[JobTerms]] = field(default_factory=dict)
    # (the largest F of any job's table, weighted TFLOP/s; the largest charge of a change, TFLOP): what
    # check_magnitudes bounds a plan's objective with
    magnitudes: tuple[float, float] = (0.0, 0.0)

    def derived(self) -> tuple:
        """The checked tables and cluster state this problem was built from (the validator's
        ``derived``); on a mixed fleet also every job's table per GPU type."""
        tables = {j.id: j.table for j in self.jobs}
        if self.alternatives:
            return tables, self.state, {jid: {a.gpu_type: a.table for a in alts}
                                        for jid, alts in self.alternatives.items()}
        return tables, self.state

    def with_types(self, types: Mapping[str, str]) -> "Problem":
        """This problem with each job of ``types`` on the GPU type given there (its terms from
        ``alternatives``; a job's previous split is empty on another type, it has no GPUs there).
        The problem itself when no job changes type."""
        moved = {jid: t for jid, t in types.items()
                 if jid in self.alternatives and t != self.alternatives[jid][0].gpu_type}
        if not moved:
            return self
        jobs = list(self.jobs)
        previous = dict(self.state.previous)
        idle = None if self.state.idle is None else dict(self.state.idle)
        for k, j in enumerate(jobs):
            t = moved.get(j.id)
            if t is not None:
                jobs[k] = next(a for a in self.alternatives[j.id] if a.gpu_type == t)
                if idle is not None:  # the GPUs it leaves on its old type are idle now (listed where not 0)
                    for nid, g in previous[j.id].items():
                        v = idle.get(nid, 0) + g
                        if v:
                            idle[nid] = v
                        else:
                            idle.pop(nid, None)
                previous[j.id] = {}
        state = dataclasses.replace(self.state, previous=previous, idle=idle)
        return dataclasses.replace(self, jobs=jobs, state=state)

    def churn_holds(self, counts: Mapping[str, int]) -> bool:
        """Whether ``counts`` (per job, each job on its terms here) changes at most ``max_changed_jobs``
        jobs; a job running on another GPU type than its current one is changed."""
        if self.max_changed_jobs is None:
            return True
        changed = sum(bool(cost.is_changed(counts[j.id], j.x, j.hit, j.exiting, j.off_type and counts[j.id] > 0))
                      for j in self.jobs)
        return changed <= self.max_changed_jobs

    def jobs_of_type(self, gpu_type: str) -> list[JobTerms]:
        """Jobs that run on ``gpu_type``, in instance order."""
        return [j for j in self.jobs if j.gpu_type == gpu_type]

    def stays(self, counts: dict[str, int]):
        """Placement's first step: (free GPUs per node, {job: {node: GPUs}}, the jobs left to place).

        A job that keeps its count and was not hit, and a pinned job, keeps its previous split
        exactly; the free GPUs are what usable nodes have left after them (negative when the
        stays overfill a node, which only constrained callers need to check).
        """
        free, result, movers, _ = self._stays(counts)
        return free, result, movers

    def _stays(self, counts: dict[str, int], as_array: bool = False):
        """:meth:`stays`, and the kept splits as (positions, GPUs, the kept jobs' places in ``jobs``):
        the positions and GPUs one split after another in job order (``state.previous_arrays``), when the
        state holds them (else None). ``as_array``: the free GPUs then as an int64 array in cluster order
        (:meth:`ClusterState.node_ids`) instead of a dict."""
        result: dict[str, dict[str, int]] = {j.id: {} for j in self.jobs}
        movers = []
        kept = []
        rows = []
        places = []
        for k, j in enumerate(self.jobs):
            y = counts[j.id]
            if y == 0:
                continue
            if (y == j.x and not j.hit and not j.off_type) or j.pinned:  # pinned: the previous split (constraints.precheck)
                kept.append(self.state.previous[j.id])
                result[j.id] = dict(kept[-1])
                rows.append(j)
                places.append(k)
            else:
                movers.append(j)
        taken = self._kept_arrays(rows, kept)
        left = self.state.usable_array() if taken is not None else None
        if left is not None:  # the free GPUs left, on arrays
            np.subtract.at(left, *taken)
            free = left if as_array else dict(zip(self.state.node_ids(), left.tolist()))
            return free, result, movers, (*taken, places)
        free = self.state.usable_gpus()
        nodes = list(chain.from_iterable(kept))
        if len(set(nodes)) == len(nodes):  # each node in one split: the free GPUs left, in C calls
            free.update(zip(nodes, map(sub, map(free.__getitem__, nodes), chain.from_iterable(map(dict.values, kept)))))
        else:
            for split in kept:
                for nid, g in split.items():
                    free[nid] -= g
        return free, result, movers, None

    def _kept_arrays(self, rows, kept) -> tuple[np.ndarray, np.ndarray] | None:
        """The splits ``kept`` of the jobs ``rows`` as (positions, GPUs) from ``state.previous_arrays``,
        when those are this instance's (else None)."""
        state = self.state
        arrays = state.previous_arrays()
        if arrays is None or not rows:
            return None
        jobs = state.instance.jobs
        m = len(jobs)
        if len(arrays.starts) != m + 1 or any(not 0 <= j.index < m or jobs[j.index].id != j.id for j in rows):
            return None
        at = np.fromiter((j.index for j in rows), dtype=np.int64, count=len(rows))
        sizes = np.fromiter(map(len, kept), dtype=np.int64, count=len(kept))
        if not np.array_equal(arrays.starts[at + 1] - arrays.starts[at], sizes):
            return None
        try:
            return arrays.rows(at)
        except (IndexError, ValueError):
            return None

    def objective(self, counts: dict[str, int], placement: dict[str, dict[str, int]] | None = None) -> float:
        """sum_i G_i(y_i) for a count per job id; with a ``placement``, moved jobs pay their transition."""
        moved = self.moved(counts, placement)
        return float(sum(j.gain_of(counts[j.id], j.id in moved) for j in self.jobs))

    def moved(self, counts: dict[str, int], placement: dict[str, dict[str, int]] | None) -> set[str]:
        """Jobs that keep their count on another split than their previous one (none without a placement)."""
        if placement is None:
            return set()
        return {j.id for j in self.jobs
                if cost.is_moved(j.x, counts[j.id], placement.get(j.id, {}), self.state.previous.get(j.id, {}))}


def resolve_tables(instance: Instance) -> tuple[dict[str, Mapping[int, float]], dict[str, dict[int, dict]]]:
    """Each job's throughput table, derived from the model library where a job names a model."""
    tables: dict[str, dict[int, float]] = {}
    layouts: dict[str, dict[int, dict]] = {}
    total: dict[str, int] | None = None  # GPUs per type, for the jobs that name a model (counted once, if any)
    if instance.efficiency and any(j.throughput.model is not None for j in instance.jobs):
        from unicron_plan.perf.library import get_gpu

        for gpu_type in instance.efficiency:
            get_gpu(gpu_type, f"efficiency.{gpu_type}")
    for k, job in enumerate(instance.jobs):
        tp = job.throughput
        if tp.has_table:
            tables[job.id] = tp.table_view()
            continue
        try:
            from unicron_plan.perf import derive_table
        except ImportError:  # pragma: no cover - perf ships with the package
            raise InvalidInstanceError(f"jobs[{k}].throughput.model",
                                       "model-derived throughput needs unicron_plan.perf") from None
        if total is None:
            total = _gpus_per_type(instance)
        capacity = total.get(tp.gpu_type, 0)
        if job.current.gpus > capacity:  # checked before deriving: the layout search is bounded by capacity
            raise InvalidInstanceError(f"jobs[{k}].current.gpus",
                                       f"{job.current.gpus} is more than the {capacity} {tp.gpu_type} GPUs "
                                       f"of the cluster")
        try:
            curve = derive_table(tp.model, tp.gpu_type, tp.global_batch, tp.seq_len,
                                 recompute=tp.recompute or "auto", max_gpus=max(capacity, 1),
                                 constants=(instance.efficiency or {}).get(tp.gpu_type))
        except InvalidInstanceError as exc:
            raise InvalidInstanceError(f"jobs[{k}].throughput.{exc.field}", exc.message) from None
        tables[job.id] = curve.tflops_table()
        layouts[job.id] = {n: curve.layout(n) for n in tables[job.id]}
    return tables, layouts


def _gpus_per_type(instance: Instance) -> dict[str, int]:
    """{GPU type: GPUs of its nodes, healthy or not}, in order of the types' first nodes."""
    return instance.cluster.node_columns().type_totals()


@dataclass(frozen=True)
class PreparedCluster:
    """A cluster and its jobs (an instance without event) checked and tabulated once, for callers
    that plan many events against it (the service): only the event is checked per plan."""

    instance: Instance  # its event is None
    tables: Mapping[str, Mapping[int, float]]
    layouts: Mapping[str, dict[int, dict]]
    previous: dict[str, dict[str, int]]  # check_instance's split of the current allocations
    healthy: HealthyCluster
    nodes: dict  # node id -> node
    flat: "FlatTables"
    unhealthy: frozenset  # ids of the nodes with failed GPUs
    # mixed fleets: resolve_type_tables of the jobs with several GPU types (empty otherwise)
    type_tables: Mapping[str, Mapping[str, Mapping[int, float]]] = field(default_factory=dict)
    type_layouts: Mapping[str, Mapping[str, dict[int, dict]]] = field(default_factory=dict)

    def covers(self, instance: Instance) -> bool:
        """``instance`` is this one with some event: the very same cluster and jobs objects."""
        if instance.cluster is not self.instance.cluster or instance.jobs is not self.instance.jobs:
            return False
        return all(getattr(instance, f) == getattr(self.instance, f)
                   for f in type(instance).model_fields if f not in ("cluster", "jobs", "event"))


def prepare(instance: Instance) -> PreparedCluster:
    """Check ``instance`` without its event (InvalidInstanceError naming the field) and keep what
    every plan of an event on it starts from."""
    base = instance if instance.event is None else instance.model_copy(update={"event": None})
    tables, layouts = resolve_tables(base)
    seen: dict = {}
    previous = check_instance(base, tables, seen)
    type_tables, type_layouts = resolve_type_tables(base, tables, layouts)
    healthy = healthy_nodes(base, **seen)
    columns = healthy.columns
    return PreparedCluster(base, tables, layouts, previous, healthy,
                           {n.id: n for n in base.cluster.nodes}, flat_tables(base, tables),
                           frozenset(columns.ids[k] for k in columns.failed), type_tables, type_layouts)


def build_problem(instance: Instance, prepared: PreparedCluster | None = None) -> Problem:
    """Check the instance, apply the event and tabulate every job's gains.

    With ``prepared`` (:func:`prepare` of this instance without its event) only the event is
    checked; an instance it does not cover is checked whole.
    """
    if prepared is not None and prepared.covers(instance):
        check_event(instance, prepared.nodes)
        state = build_state(instance, prepared.previous, prepared.healthy, prepared.unhealthy)
        problem = tabulate(instance, state, prepared.tables, prepared.layouts, prepared.flat)
        return add_alternatives(problem, prepared.type_tables, prepared.type_layouts)
    tables, layouts = resolve_tables(instance)
    seen: dict = {}  # the nodes' ids and positions, made once by the checks
    arrays: list = []  # the splits as arrays, when the checks make them
    previous = check_instance(instance, tables, seen, arrays)
    state = build_state(instance, previous, healthy_nodes(instance, **seen))
    if arrays:
        state.split_arrays = arrays[0]
    problem = tabulate(instance, state, tables, layouts)
    return add_alternatives(problem, *resolve_type_tables(instance, tables, layouts))


def resolve_type_tables(instance: Instance, tables: Mapping[str, Mapping[int, float]],
                        layouts: Mapping[str, dict[int, dict]]):
    """({job id: {GPU type: table}}, {job id: {GPU type: layouts}}) of the jobs that may run on several
    GPU types (``by_type``, or ``gpu_types`` derived from the performance model); ``tables`` and
    ``layouts`` (of :func:`resolve_tables`) give the current type's. Empty for a single-type instance."""
    type_tables: dict[str, dict[str, Mapping[int, float]]] = {}
    type_layouts: dict[str, dict[str, dict[int, dict]]] = {}
    total: dict[str, int] | None = None
    for k, job in enumerate(instance.jobs):
        tp = job.throughput
        if tp.by_type is None and tp.gpu_types is None:
            continue
        types = tp.allowed_types()
        if len(types) < 2:
            continue
        out = {types[0]: tables[job.id]}
        outl = {types[0]: layouts.get(job.id, {})}
        for t in types[1:]:
            if tp.by_type is not None:
                out[t] = tp.type_table(t)
                continue
            from unicron_plan.perf import derive_table

            if total is None:
                total = _gpus_per_type(instance)
            try:
                curve = derive_table(tp.model, t, tp.global_batch, tp.seq_len, recompute=tp.recompute or "auto",
                                     max_gpus=max(total.get(t, 0), 1),
                                     constants=(instance.efficiency or {}).get(t))
            except InvalidInstanceError as exc:
                raise InvalidInstanceError(f"jobs[{k}].throughput.gpu_types ({t}): {exc.field}",
                                           exc.message) from None
            out[t] = curve.tflops_table()
            outl[t] = {n: curve.layout(n) for n in out[t]}
        type_tables[job.id], type_layouts[job.id] = out, outl
    return type_tables, type_layouts


@np.errstate(over="ignore", invalid="ignore")
def add_alternatives(problem: Problem, type_tables, type_layouts) -> Problem:
    """Fill ``problem.alternatives`` (in place) from :func:`resolve_type_tables`: for every job with
    several types that neither leaves nor is pinned, its terms on each other type. There every count
    is a change (the job moves to other nodes): G(y) = F_t(y) D_run - F(x) D_trans, the counts that
    fit the type's capacity, filtered by tp and hysteresis; y = 0 is allowed as on the current type."""
    if not type_tables:
        return problem
    alternatives: dict[str, list[JobTerms]] = {}
    for jt in problem.jobs:
        types = type_tables.get(jt.id)
        if not types or jt.exiting or jt.pinned:
            continue
        job = problem.instance.jobs[jt.index]
        zero_ok = len(jt.counts) > 0 and int(jt.counts[0]) == 0
        penalty = jt.f_x * jt.d_trans
        options = [jt]
        for t, table in types.items():
            if t == jt.gpu_type:
                continue
            cap = problem.capacity.get(t, 0)
            keys = sorted(c for c in table if c <= cap)
            counts = np.asarray([0] + keys, dtype=np.int64)
            f = np.concatenate([np.zeros(1), np.asarray(cost.waf(job.weight, np.asarray(
                [table[c] for c in keys], dtype=float)), dtype=float).reshape(len(keys))])
            gains = f * problem.d_run - penalty - cost.repeat_penalty(jt.f_x, counts, jt.x, jt.d_repeat, True)
            if not np.isfinite(gains).all():
                raise InvalidInstanceError(f"jobs[{jt.index}].throughput.by_type.{t}",
                                           f"weight {job.weight} x TFLOP/s x D_run {problem.d_run} s overflows "
                                           f"a float; use smaller units")
            keep = np.ones(len(counts), dtype=bool)
            if (job.tp is not None and job.tp > 1) or (job.min_gain_fraction is not None and not jt.hit):
                keep = constraints.allowed_mask(job, counts, gains, -1, jt.hit, jt.f_x, problem.d_run)
            keep[0] = zero_ok
            if not keep.any():
                continue  # no count allowed there
            options.append(dataclasses.replace(
                jt, gpu_type=t, table=table, counts=counts[keep], f=f[keep], gains=gains[keep],
                layouts=dict(type_layouts.get(jt.id, {}).get(t, {})), off_type=True))
        if len(options) > 1:
            alternatives[jt.id] = options
    problem.alternatives = alternatives
    return problem


@dataclass(frozen=True)
class FlatTables:
    """Every job's table as one pair of read-only arrays: job i's counts (0 first, ascending) at
    ``counts[off[i]:off[i + 1]]`` and its F = weight x TFLOP/s at them (0 at count 0)."""

    counts: np.ndarray
    f: np.ndarray
    off: np.ndarray


def _x_entries(flat: FlatTables, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """F of each job at its count ``xs[i]`` from its flat table (0 at 0), NaN where the count is not
    in it; and the positions in the flat arrays of the entries at those counts (None when the keys
    below could overflow: then the caller compares the counts itself)."""
    m = len(xs)
    if not m:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    sizes = np.diff(flat.off)
    scale = int(flat.counts.max()) + 1 if len(flat.counts) else 1
    scale = max(scale, int(xs.max()) + 1)
    # job i's entries are the keys i * scale + count, ascending over the whole flat array
    # (built in place: one array the length of the tables)
    keys = np.repeat(np.arange(m, dtype=np.int64), sizes)
    keys *= scale
    keys += flat.counts
    want = np.arange(m, dtype=np.int64) * scale + xs
    at = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
    found = keys[at] == want
    # the positions are those of the equal counts when the keys cannot overflow and the only 0 of a
    # job is its leading one (its other counts are distinct)
    exact = (m * scale < 2 ** 62 and int(flat.counts.min(initial=0)) >= 0 and int(xs.min()) >= 0
             and np.count_nonzero(flat.counts) == len(flat.counts) - m)
    return np.where(found, flat.f[at], np.nan), (at[found] if exact else None)


@np.errstate(over="ignore")  # a weight x TFLOP/s that overflows is bad input: check_magnitudes names it
def flat_tables(instance: Instance, tables: Mapping[str, Mapping[int, float]]) -> FlatTables:
    """The :class:`FlatTables` of the instance's jobs (``tables`` from :func:`resolve_tables`)."""
    jobs = instance.jobs
    arrays = [_table_arrays(job, tables[job.id]) for job in jobs]
    m = len(arrays)
    sizes = np.fromiter((len(keys) + 1 for keys, _ in arrays), dtype=np.int64, count=m)
    off = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(sizes, out=off[1:])
    if not m:
        return FlatTables(np.zeros(0, dtype=np.int64), np.zeros(0), off)
    # every job's entries after a zero (the count 0 and its F), joined in one call each; F = weight x
    # TFLOP/s (cost.waf) elementwise, each job's weight repeated over its entries (the same products)
    zero_count, zero_f = np.zeros(1, dtype=np.int64), np.zeros(1)
    counts = np.concatenate([part for keys, _ in arrays for part in (zero_count, keys)]).astype(np.int64, copy=False)
    f = np.concatenate([part for _, vals in arrays for part in (zero_f, vals)]).astype(float, copy=False)
    weights = np.fromiter(map(np.float64, map(attrgetter("weight"), jobs)), dtype=np.float64, count=m)
    np.multiply(np.repeat(weights, sizes), f, out=f)  # cost.waf: weight x TFLOP/s
    f[off[:-1]] = 0.0
    counts.flags.writeable = f.flags.writeable = False
    return FlatTables(counts, f, off)


def _table_arrays(job, table: Mapping[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """(counts ascending, TFLOP/s at them) of a job's resolved table."""
    if job.throughput.has_table:
        return job.throughput.table_arrays()
    keys = np.fromiter(table.keys(), dtype=np.int64, count=len(table))
    vals = np.fromiter(table.values(), dtype=float, count=len(table))
    order = np.argsort(keys, kind="stable")
    return keys[order], vals[order]


@np.errstate(over="ignore", invalid="ignore")  # an overflowing term is reported as bad input
def tabulate(instance: Instance, state: ClusterState, tables: Mapping[str, Mapping[int, float]],
             layouts: Mapping[str, dict[int, dict]], flat: FlatTables | None = None) -> Problem:
    """Every job's gains on a cluster state already derived from ``instance`` (its tables from
    :func:`resolve_tables`): the part of :func:`build_problem` after the checks, for callers that
    keep a trusted state of their own (the simulator). ``flat``: :func:`flat_tables` of these
    jobs and tables, for callers that keep them (made here when not given).

    All jobs' gains come from one set of array operations over the flat tables; each job's
    terms are then views of its slice (the counts that fit its type's capacity).
    """
    flat = flat if flat is not None else flat_tables(instance, tables)
    d_run = cost.d_run_seconds(instance, state.nodes_in_service())
    capacity = state.capacity()
    m = len(instance.jobs)
    sizes = np.diff(flat.off)
    ids = [job.id for job in instance.jobs]
    types = [job.throughput.gpu_type for job in instance.jobs]
    x_list = [job.current.gpus for job in instance.jobs]
    xs = np.asarray(x_list, dtype=np.int64).reshape(m)
    cap = np.fromiter(map(capacity.__getitem__, types), dtype=np.int64, count=m)
    hit = np.fromiter(map(state.hit.__getitem__, ids), dtype=bool, count=m)
    exiting = np.fromiter(map(state.exiting.__contains__, ids), dtype=bool, count=m)
    f_x, at_x = _x_entries(flat, xs)
    for i in np.flatnonzero(np.isnan(f_x)).tolist():  # not in the table: the lookup names the count
        job = instance.jobs[i]
        f_x[i] = float(cost.waf(job.weight, tables[job.id][x_list[i]]))
    f_x = f_x.tolist()
    d_repeat = [0.0] * m
    if cost.uses_job_horizon(instance):  # each job's D_trans scaled by its horizon (docs/model.md)
        h = state.nodes_in_service()
        repair = cost.pending_repair_seconds(instance) if instance.cost.horizon == "lifetime" else None
        terms = [cost.job_transition_terms(instance, job, state.previous.get(job.id, {}), h, repair_seconds=repair)
                 for job in instance.jobs]
        d_trans, d_repeat = [t[0] for t in terms], [t[1] for t in terms]
    else:
        d_trans = [cost.d_trans_seconds(instance, job) for job in instance.jobs]
    pen = [a * b for a, b in zip(f_x, d_trans)]
    # G(y) = F(y) D_run - [changed] F(x) D_trans with changed = (y != x or hit), never for a leaving job;
    # built in place on one float array and byte arrays (the tables hold millions of entries)
    if at_x is None:  # keys that could overflow: compare the counts themselves
        resized = flat.counts != np.repeat(xs, sizes)
    else:  # every entry but the one at the job's count (counts are distinct within a job)
        resized = np.ones(len(flat.counts), dtype=bool)
        resized[at_x] = False
    changed = np.repeat(hit, sizes)
    changed |= resized
    changed &= np.repeat(~exiting, sizes)
    gains_all = flat.f * d_run
    # x - 0.0 is x, so subtracting only where changed gives the bytes of subtracting a 0 elsewhere
    np.subtract(gains_all, np.repeat(np.asarray(pen, dtype=float), sizes), out=gains_all, where=changed)
    if any(d_repeat):  # "lifetime": a change to another count is charged again at the return (cost.gain)
        again = np.asarray(f_x, dtype=float) * np.asarray(d_repeat, dtype=float)
        changed &= resized
        np.subtract(gains_all, np.repeat(again, sizes), out=gains_all, where=changed)
    del changed, resized
    # counts ascend: the counts that fit are a prefix (only the leading 0 for a leaving job);
    # a job is bad when a gain of that prefix overflows (reduceat needs at least one job)
    fits = bad = np.zeros(0, dtype=np.int64)
    if m:
        starts = flat.off[:-1]
        one_cap = bool((cap == cap[0]).all())  # one GPU type: compare with a number, not a repeat
        fit = flat.counts <= (int(cap[0]) if one_cap else np.repeat(cap, sizes))
        fits = np.add.reduceat(fit, starts, dtype=np.int64)
        del fit
        fits = np.where(exiting, 1, fits)
        # the entries that are not finite (usually none), each charged to its job when within its prefix
        nonfinite = np.isfinite(gains_all)
        np.logical_not(nonfinite, out=nonfinite)
        where_nf = np.flatnonzero(nonfinite)
        del nonfinite
        bad = np.zeros(m, dtype=bool)
        if len(where_nf):
            job_nf = np.searchsorted(flat.off, where_nf, side="right") - 1
            bad[job_nf[where_nf - flat.off[job_nf] < fits[job_nf]]] = True
    overflow = np.flatnonzero(bad | ~np.isfinite(np.asarray(pen, dtype=float)))
    if len(overflow):
        i = int(overflow[0])
        job = instance.jobs[i]
        vals = _table_arrays(job, tables[job.id])[1]
        raise InvalidInstanceError(
            f"jobs[{i}]", f"weight {job.weight} x TFLOP/s (up to {vals.max() if len(vals) else 0}) x "
                          f"D_run {d_run} s (or x D_trans {d_trans[i]} s) overflows a float; use smaller units")
    f_max = float(flat.f.max()) if len(flat.f) else 0.0
    charge_max = max(map(sum, zip(pen, (a * b for a, b in zip(f_x, d_repeat)))), default=0.0)
    check_magnitudes(instance, f_max, charge_max, d_run)
    jobs = []
    starts_l = flat.off[:-1].tolist()
    all_counts, all_f = flat.counts, flat.f
    for i, job, lo, n_fit, x, exits, job_hit in zip(range(m), instance.jobs, starts_l, fits.tolist(), x_list,
                                                     exiting.tolist(), hit.tolist()):
        hi = lo + n_fit
        counts, f, gains = all_counts[lo:hi], all_f[lo:hi], gains_all[lo:hi]
        tp, pinned, min_gain = job.tp, job.pinned, job.min_gain_fraction
        if not exits and ((tp is not None and tp > 1) or pinned or (min_gain is not None and not job_hit)):
            keep = constraints.allowed_mask(job, counts, gains, x, job_hit, f_x[i], d_run, exits)
            if not keep.all():
                counts, f, gains = counts[keep], f[keep], gains[keep]
        jobs.append(JobTerms(i, ids[i], types[i], job.weight, x, job_hit, d_trans[i], f_x[i],
                             tables[ids[i]], counts, f, gains, layouts.get(ids[i], {}), d_run,
                             tp=tp or 1, pinned=bool(pinned) and not exits, max_nodes=job.max_nodes,
                             same_rack=bool(job.same_rack), min_gain_fraction=None if exits else min_gain,
                             exiting=exits, d_repeat=d_repeat[i]))
    limit = instance.max_changed_jobs
    if limit is not None:
        limit = min(limit, len(jobs))  # a larger limit binds nothing (and must not overflow a solver)
    problem = Problem(instance, state, d_run, capacity, jobs, max_changed_jobs=limit,
                      magnitudes=(f_max, charge_max))
    constraints.precheck(problem)
    return problem


def check_magnitudes(instance: Instance, f_max: float, charge_max: float, d_run: float,
                     scale: float = 1.0) -> None:
    """A bound on every plan's objective and rates is a finite float: each job's term is at most ``f_max``
    (weighted TFLOP/s) x D_run plus ``charge_max`` (TFLOP) in magnitude, so every objective is at most m
    times that, and every rate (TFLOP / D_run, as plans and explanations report) that over D_run. ``scale``:
    how much D_run and the charges may yet grow (the service: as nodes fail). InvalidInstanceError naming
    ``jobs`` (the terms together overflow) or the cost field giving D_run (the rates overflow)."""
    m = float(len(instance.jobs))
    total = m * (f_max * d_run + charge_max) * scale
    if not math.isfinite(total):
        raise InvalidInstanceError("jobs", f"{len(instance.jobs)} jobs' terms (weighted TFLOP/s up to {f_max} x "
                                           f"D_run {d_run} s, charges up to {charge_max} TFLOP) could overflow a "
                                           f"float in a plan's objective; use smaller units")
    if not (d_run > 0 and math.isfinite(total / d_run)):
        field_name = "cost.expected_run_seconds" if instance.cost.expected_run_seconds is not None \
            else "cost.node_mtbf_hours"
        raise InvalidInstanceError(field_name, f"D_run {d_run} s is so short that a plan's rate (its charges of up "
                                               f"to {charge_max} TFLOP over D_run) could overflow a float")


@dataclass
class RawSolution:
    """What a solver returns: a count per job id, the proven bound and the status."""

    counts: dict[str, int]
    objective: float
    bound: float
    termination: str = "optimal"
    solution: str = "optimal"
    placement: dict[str, dict[str, int]] | None = None  # solvers that place at node level
    options: dict = field(default_factory=dict)
    types: dict[str, str] | None = None  # mixed fleets: the GPU type chosen per job (None: current types)


def action_of(x: int, y: int, hit: bool, moved: bool) -> str:
    """The plan action for previous count x, planned count y."""
    if x == 0 and y == 0:
        return "idle"
    if y == 0:
        return "suspend"
    if x == 0:
        return "resume"
    if y < x:
        return "shrink"
    if y > x:
        return "grow"
    return "restart" if (hit or moved) else "keep"
