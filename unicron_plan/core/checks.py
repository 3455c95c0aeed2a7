"""Rules that relate fields to each other: unique ids, resolved references and
current allocations that fit. Each failure names the exact field path."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain, repeat
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.faults.severity import classify
from unicron_plan.schema.instance import Cost, Instance
from unicron_plan.schema.nodes import NodeColumns

if TYPE_CHECKING:  # the scenario model is imported by the simulator, not by every solve
    from unicron_plan.schema.scenario import Scenario


def _unique(items, what: str) -> None:
    if len(set(items)) == len(items):
        return
    seen: dict[str, int] = {}
    for k, item_id in enumerate(items):
        if item_id in seen:
            raise InvalidInstanceError(f"{what}[{k}].id", f"{item_id!r} duplicates {what}[{seen[item_id]}].id")
        seen[item_id] = k


def _check_refs(ids, known, path: str, what: str = "node") -> None:
    """Every id of ``ids`` (at ``path[i]``) is in ``known`` and appears once."""
    seen = set()
    for i, item in enumerate(ids):
        if item not in known:
            raise InvalidInstanceError(f"{path}[{i}]", f"unknown {what} {item!r}")
        if item in seen:
            raise InvalidInstanceError(f"{path}[{i}]", f"{what} {item!r} is listed twice")
        seen.add(item)


def check_instance(instance: Instance, tables: dict[str, dict[int, float]] | None = None,
                   nodes_seen: dict | None = None, split_arrays: list | None = None) -> dict[str, dict[str, int]]:
    """Raise InvalidInstanceError on the first cross-field inconsistency.

    ``tables`` are the throughput tables per job id (derived ones included);
    when omitted, only jobs with a literal table are checked against it.
    Returns each job's split over its nodes before the event (``cluster.previous_distribution``),
    which the checks derive anyway, so that building the cluster state need not derive it again.
    ``nodes_seen``: a dict that receives the nodes' ids in cluster order (``ids``), their positions
    (``order``, id -> position) and the nodes as columns (``columns``,
    :class:`unicron_plan.schema.nodes.NodeColumns`), for :func:`unicron_plan.core.cluster.healthy_nodes`
    to reuse. ``split_arrays``: a list to which the returned splits as
    :class:`unicron_plan.core.cluster.SplitArrays` are appended, when they are made (every job alone on
    its nodes). The nodes are read as columns (:meth:`unicron_plan.schema.Cluster.node_columns`): no node
    model is made.
    """
    from unicron_plan.core.cluster import PositionMap, previous_distribution

    cluster = instance.cluster
    columns = cluster.node_columns()
    ids, types = columns.ids, columns.types
    if len(columns.at) != len(ids):  # (the id -> position map is made anyway) a repeated id: name the first
        _unique(ids, "cluster.nodes")
    _unique([j.id for j in instance.jobs], "jobs")
    for t in dict.fromkeys(types):
        if t not in cluster.gpu_types:
            k = types.index(t)
            raise InvalidInstanceError(f"cluster.nodes[{k}].gpu_type",
                                       f"{t!r} is not in cluster.gpu_types ({', '.join(sorted(cluster.gpu_types))})")
    at = columns.at  # the ids are distinct (above)
    if nodes_seen is not None:
        nodes_seen.update(ids=ids, order=at, columns=columns)
    pos, hb, wrong, held = _listed_nodes(instance, ids, types, list(cluster.gpu_types), columns.healthy_before, at,
                                         columns.type_codes())
    for k, job in enumerate(instance.jobs):
        where = f"jobs[{k}]"
        gtype = job.throughput.gpu_type
        if gtype not in cluster.gpu_types:
            raise InvalidInstanceError(f"{where}.throughput.gpu_type",
                                       f"{gtype!r} is not in cluster.gpu_types ({', '.join(sorted(cluster.gpu_types))})")
        if job.throughput.by_type is not None or job.throughput.gpu_types is not None:
            _check_other_types(job, f"{where}.throughput", cluster.gpu_types)
        cur = job.current
        if cur.gpus != 0:  # (a job holding no GPU has no count to look up)
            table = (tables or {}).get(job.id)
            # Literal tables are checked on their keys, canonical decimal strings (no int() pass).
            known = (cur.gpus in table) if table is not None else (
                str(cur.gpus) in job.throughput.tflops if job.throughput.tflops is not None else
                cur.gpus in job.throughput.table_view() if job.throughput.compact is not None else True)
        if cur.gpus != 0 and not known:
            raise InvalidInstanceError(f"{where}.current.gpus",
                                       f"{cur.gpus} is not a GPU count of the job's throughput table (nor 0)")
        if cur.gpus == 0 and cur.nodes:
            raise InvalidInstanceError(f"{where}.current.nodes", "a job with current.gpus 0 lists no nodes")
        if cur.gpus > 0 and not cur.nodes:
            raise InvalidInstanceError(f"{where}.current.nodes", f"the job holds {cur.gpus} GPUs but lists no nodes")
        if wrong[k]:  # (found for all jobs at once, _listed_nodes); this walk names the first bad entry
            _check_refs(cur.nodes, at, f"{where}.current.nodes")
            for i, nid in enumerate(cur.nodes):
                if types[at[nid]] != gtype:
                    raise InvalidInstanceError(f"{where}.current.nodes[{i}]",
                                               f"node {nid!r} has GPU type {types[at[nid]]!r}, the job runs on {gtype!r}")
        healthy = held[k]
        if cur.gpus > healthy:
            raise InvalidInstanceError(f"{where}.current.gpus",
                                       f"{cur.gpus} GPUs do not fit in the {healthy} healthy GPUs of its current nodes")
        if (job.transition_seconds is None and instance.cost.default_transition_seconds is None
                and job.throughput.model is None):
            raise InvalidInstanceError(f"{where}.transition_seconds",
                                       "missing, and cost.default_transition_seconds is not given either")
    split = previous_distribution(instance, PositionMap(at, hb), (pos, hb), split_arrays)
    _check_job_constraints(instance, split, columns)
    unplaced = [(k, job) for k, job in enumerate(instance.jobs) if job.current.gpus > 0 and not split[job.id]]
    if unplaced:
        k, job = unplaced[0]
        mine = set(job.current.nodes)
        others = [j.id for j in instance.jobs if j is not job and mine & set(j.current.nodes)]
        raise InvalidInstanceError(
            f"jobs[{k}].current",
            f"its {job.current.gpus} GPUs and those of {', '.join(map(repr, others))}, which share "
            f"its nodes, do not fit in the healthy GPUs of those nodes together")
    check_event(instance, columns)
    return split


def _listed_nodes(instance: Instance, ids: list, types: list, kinds: list, healthy_before,
                  at: dict | None = None, codes: tuple | None = None):
    """The nodes every job lists, looked up once for all jobs: (their positions in the cluster, in job
    order; the healthy GPUs before the event of every node by position; per job, whether its list has
    an unknown node, a node twice or a node of another GPU type than the job's; per job, the healthy
    GPUs before the event of its nodes, summed). ``kinds``: every GPU type, those of ``types`` among them.
    ``healthy_before``: the healthy GPUs before the event by node id (in cluster order), or by position
    as an int64 array. ``codes``: (the GPU types in order of first appearance, each node's index among
    them), when known (:meth:`unicron_plan.schema.nodes.NodeColumns.type_codes`)."""
    jobs = instance.jobs
    m, n = len(jobs), len(ids)
    lists = [job.current.nodes for job in jobs]
    sizes = np.fromiter(map(len, lists), dtype=np.int64, count=m)
    at = at if at is not None else dict(zip(ids, range(n)))  # id -> position
    flat = list(chain.from_iterable(lists))
    pos = _positions(ids, at, flat)
    code = {t: k for k, t in enumerate(kinds)}
    if codes is not None:
        node_type = np.asarray([code[t] for t in codes[0]], dtype=np.int64).reshape(len(codes[0]))[codes[1]]
    else:
        node_type = np.fromiter(map(code.__getitem__, types), dtype=np.int64, count=n)
    job_type = np.fromiter((code.get(job.throughput.gpu_type, -1) for job in jobs), dtype=np.int64, count=m)
    hb = healthy_before if isinstance(healthy_before, np.ndarray) else \
        np.fromiter(healthy_before.values(), dtype=np.int64, count=n)
    owner = np.repeat(np.arange(m, dtype=np.int64), sizes)
    known = pos >= 0
    at_known = np.where(known, pos, 0)
    bad = ~known | (node_type[at_known] != job_type[owner]) if n else ~known
    key = np.sort(owner * (n + 1) + pos + 1)  # a node listed twice by one job: two equal keys
    twice = owner[:0] if not len(key) else key[1:][key[1:] == key[:-1]] // (n + 1)
    wrong = np.zeros(m, dtype=bool)
    wrong[owner[bad]] = True
    wrong[twice] = True
    held = np.bincount(owner, weights=np.where(known, hb[at_known], 0), minlength=m) if n else np.zeros(m)
    return pos, hb, wrong.tolist(), held.astype(np.int64).tolist()


def _positions(ids: list, at: dict, names: list) -> np.ndarray:
    """``at.get(name, -1)`` of each of ``names`` (``at``: id -> position of ``ids``), as int64: found on the
    strings' short keys (:func:`_short_keys`) when the ids are distinct and every string has one, a sort
    and a binary search in place of a dict lookup per name (each of which reads the node id it finds, a
    string elsewhere in memory); else looked up."""
    if names and len(at) == len(ids):
        key_ids = _short_keys(ids)
        key_names = _short_keys(names) if key_ids is not None else None
        if key_names is not None:
            order = np.argsort(key_ids, kind="stable")
            ranked = key_ids[order]
            k = np.minimum(np.searchsorted(ranked, key_names), len(ranked) - 1)
            return np.where(ranked[k] == key_names, order[k], -1)
    return np.fromiter(map(at.get, names, repeat(-1)), dtype=np.int64, count=len(names))


def _short_keys(strings: list) -> "np.ndarray | None":
    """Each of ``strings`` as a uint64 of its characters' bytes (zeros after them): equal keys for equal
    strings and only for them, when each is a str of at most 8 ASCII characters, none of them NUL; else None."""
    n = len(strings)
    if not n or set(map(type, strings)) != {str}:
        return None
    try:
        text = "\x00".join(strings).encode("ascii")
    except UnicodeEncodeError:
        return None
    raw = np.frombuffer(text, dtype=np.uint8)
    cuts = np.flatnonzero(raw == 0)
    if len(cuts) != n - 1:  # (a NUL within a string)
        return None
    starts = np.zeros(n, dtype=np.int64)
    starts[1:] = cuts + 1
    ends = np.full(n, len(raw), dtype=np.int64)
    ends[:-1] = cuts
    lengths = ends - starts
    if int(lengths.max()) > 8:
        return None
    padded = np.zeros(len(raw) + 8, dtype=np.uint8)
    padded[:len(raw)] = raw
    lanes = np.arange(8, dtype=np.int64)
    chars = padded[starts[:, None] + lanes]
    chars[lanes >= lengths[:, None]] = 0
    return chars.view(">u8").reshape(n).astype(np.uint64)


def _check_other_types(job, where: str, declared) -> None:
    """Every GPU type a mixed-fleet job may run on is declared in cluster.gpu_types."""
    field = "by_type" if job.throughput.by_type is not None else "gpu_types"
    for t in job.throughput.allowed_types()[1:]:
        if t not in declared:
            raise InvalidInstanceError(f"{where}.{field}.{t}" if field == "by_type" else f"{where}.{field}",
                                       f"{t!r} is not in cluster.gpu_types ({', '.join(sorted(declared))})")


def check_event(instance: Instance, nodes=None) -> None:
    """The event's references and preconditions against the cluster and jobs (the part of
    :func:`check_instance` that depends on the event). ``nodes``: the cluster's nodes when known, as
    :class:`unicron_plan.schema.nodes.NodeColumns` or as a dict of the node models by id."""
    ev = instance.event
    if ev is None:
        return
    if nodes is None:  # the nodes as read, else the models by id
        nodes = instance.cluster.read_columns()
        if nodes is None:
            nodes = {n.id: n for n in instance.cluster.nodes}
    if isinstance(nodes, NodeColumns):
        columns, at = nodes, nodes.at
        nodes = _NodeView(columns, at)
    if ev.kind != "failure":
        _check_other_event(instance, nodes)
        return
    _check_refs(ev.failed_nodes, nodes, "event.failed_nodes")
    for i, nid in enumerate(ev.failed_nodes):
        if len(nodes[nid].failed_gpus) == nodes[nid].gpus:
            raise InvalidInstanceError(f"event.failed_nodes[{i}]",
                                       f"every GPU of node {nid!r} is already in its failed_gpus: "
                                       f"nothing new can fail")
    seen_gpus = set()
    for i, fg in enumerate(ev.failed_gpus):
        if fg.node not in nodes:
            raise InvalidInstanceError(f"event.failed_gpus[{i}].node", f"unknown node {fg.node!r}")
        if fg.gpu >= nodes[fg.node].gpus:
            raise InvalidInstanceError(f"event.failed_gpus[{i}].gpu",
                                       f"{fg.gpu} is outside 0..{nodes[fg.node].gpus - 1} of node {fg.node!r}")
        if fg.gpu in nodes[fg.node].failed_gpus:
            raise InvalidInstanceError(f"event.failed_gpus[{i}].gpu",
                                       f"GPU {fg.gpu} of {fg.node!r} is already in its failed_gpus: "
                                       f"it cannot fail again")
        if (fg.node, fg.gpu) in seen_gpus:
            raise InvalidInstanceError(f"event.failed_gpus[{i}]", f"GPU {fg.gpu} of {fg.node!r} is listed twice")
        seen_gpus.add((fg.node, fg.gpu))
    lost = set(ev.failed_nodes) | {fg.node for fg in ev.failed_gpus}
    for nid in ev.expected_repair_seconds or {}:
        if nid not in lost:
            raise InvalidInstanceError("event.expected_repair_seconds",
                                       f"node {nid!r} is not a node of failed_nodes or failed_gpus")


class _NodeFields(NamedTuple):
    gpus: int
    failed_gpus: list


class _NodeView(Mapping):
    """{node id: its ``gpus`` and ``failed_gpus``} read from the columns, for the event's few nodes."""

    __slots__ = ("columns", "at")

    def __init__(self, columns: NodeColumns, at: dict):
        self.columns, self.at = columns, at

    def __getitem__(self, nid) -> _NodeFields:
        k = self.at[nid]
        return _NodeFields(self.columns.gpus_list[k], self.columns.failed_of(k))

    def __contains__(self, nid) -> bool:
        return nid in self.at

    def __iter__(self):
        return iter(self.at)

    def __len__(self) -> int:
        return len(self.at)


def _check_job_constraints(instance: Instance, split: dict[str, dict[str, int]],
                           columns: NodeColumns | None = None) -> None:
    """The current allocation must satisfy the job's own constraints (tp, max_nodes, same_rack),
    so that keeping it is always a valid choice (docs/solvers.md, "Constraints").
    ``columns``: the cluster's nodes as columns, when read already."""
    from unicron_plan.core.cluster import rack_key

    racks = {}
    if any(job.same_rack for job in instance.jobs):  # (a walk over every node: only when asked)
        columns = columns if columns is not None else instance.cluster.node_columns()
        racks = dict(zip(columns.ids, map(rack_key, columns.ids, columns.racks)))
    for k, job in enumerate(instance.jobs):
        cur = job.current
        if job.tp is not None and cur.gpus % job.tp:
            raise InvalidInstanceError(f"jobs[{k}].current.gpus",
                                       f"{cur.gpus} is not a multiple of the job's tp {job.tp}")
        if job.tp is not None and job.tp > 1 and cur.gpus > 0 and not split[job.id]:
            raise InvalidInstanceError(f"jobs[{k}].current.nodes",
                                       f"{cur.gpus} GPUs cannot be split over these nodes in whole "
                                       f"tp groups of {job.tp} (next to the jobs sharing them)")
        if job.max_nodes is not None and len(cur.nodes) > job.max_nodes:
            raise InvalidInstanceError(f"jobs[{k}].current.nodes",
                                       f"{len(cur.nodes)} nodes exceed the job's max_nodes {job.max_nodes}")
        if job.same_rack and len({racks[n] for n in cur.nodes}) > 1:
            raise InvalidInstanceError(f"jobs[{k}].current.nodes",
                                       "the nodes span several racks but the job sets same_rack")


def _check_other_event(instance: Instance, nodes: dict) -> None:
    """References and preconditions of the repair, job_arrival and job_exit events."""
    ev = instance.event
    if ev.kind == "repair":
        if not ev.repaired_nodes and not ev.repaired_gpus:
            raise InvalidInstanceError("event.repaired_nodes", "a repair event names no node and no GPU")
        _check_refs(ev.repaired_nodes, nodes, "event.repaired_nodes")
        whole = set()
        for i, nid in enumerate(ev.repaired_nodes):
            if not nodes[nid].failed_gpus:
                raise InvalidInstanceError(f"event.repaired_nodes[{i}]",
                                           f"node {nid!r} has no failed GPU (failed_gpus is empty): nothing to repair")
            whole.add(nid)
        seen = set()
        for i, rg in enumerate(ev.repaired_gpus):
            if rg.node not in nodes:
                raise InvalidInstanceError(f"event.repaired_gpus[{i}].node", f"unknown node {rg.node!r}")
            if rg.gpu not in nodes[rg.node].failed_gpus:
                raise InvalidInstanceError(f"event.repaired_gpus[{i}].gpu",
                                           f"GPU {rg.gpu} of {rg.node!r} is not in its failed_gpus: nothing to repair")
            if rg.node in whole or (rg.node, rg.gpu) in seen:
                raise InvalidInstanceError(f"event.repaired_gpus[{i}]",
                                           f"GPU {rg.gpu} of {rg.node!r} is already repaired by this event")
            seen.add((rg.node, rg.gpu))
        return
    jobs = {j.id: j for j in instance.jobs}
    _check_refs(ev.jobs, jobs, "event.jobs", what="job")
    for i, jid in enumerate(ev.jobs):
        if ev.kind == "job_arrival" and jobs[jid].current.gpus != 0:
            raise InvalidInstanceError(f"event.jobs[{i}]",
                                       f"arriving job {jid!r} must have current.gpus 0, not {jobs[jid].current.gpus}")


def _check_error_kind(error: str, where: str, severity: str | None = None) -> None:
    """``error`` is an error kind of the taxonomy (of ``severity`` when given)."""
    try:
        cls = classify(error)
    except ValueError as exc:
        raise InvalidInstanceError(where, str(exc)) from None
    if severity is not None and cls.severity.value != severity:
        raise InvalidInstanceError(where, f"{error!r} is {cls.severity.value}, not {severity}")


def check_scenario(scenario: Scenario) -> None:
    """Cross-field checks: the time-0 instance is valid, and the trace is consistent in time order."""
    inst = Instance.model_construct(
        schema_version="1", name=scenario.name, cluster=scenario.cluster, jobs=scenario.jobs, event=None,
        cost=Cost.model_construct(expected_run_seconds=1.0, node_mtbf_hours=None,
                                  default_transition_seconds=scenario.cost.default_transition_seconds),
        isolation=scenario.isolation, reference=None)
    check_instance(inst)
    for k, job in enumerate(scenario.jobs):
        if not job.throughput.has_table:
            raise InvalidInstanceError(f"jobs[{k}].throughput", "scenarios need the table form ('tflops' or 'compact')")
        for name, used in (("tp", (job.tp or 1) > 1), ("max_nodes", job.max_nodes is not None),
                           ("same_rack", bool(job.same_rack))):
            if used:  # the planner policies place counts without them: a run would stop at the first that binds
                raise InvalidInstanceError(f"jobs[{k}].{name}", "node-level constraints (tp above 1, max_nodes, "
                                           "same_rack) are not simulated; leave it out of the scenario")
    for k, d in enumerate(scenario.failures.domains if scenario.failures is not None else ()):
        _check_error_kind(d.error, f"failures.domains[{k}].error", "sev1")
    for name, m in (scenario.policy_models or {}).items():
        for error in m.detection_seconds or {}:
            _check_error_kind(error, f"policy_models.{name}.detection_seconds.{error}")
    if scenario.trace is None:
        return
    nodes = {n.id for n in scenario.cluster.nodes}
    down: set[str] = set()
    order = sorted(range(len(scenario.trace)), key=lambda i: (scenario.trace[i].time_hours, i))
    for i in order:
        ev = scenario.trace[i]
        where = f"trace[{i}]"
        if ev.node not in nodes:
            raise InvalidInstanceError(f"{where}.node", f"unknown node {ev.node!r}")
        if ev.time_hours > scenario.duration_hours:
            raise InvalidInstanceError(f"{where}.time_hours",
                                       f"{ev.time_hours} is after duration_hours {scenario.duration_hours}")
        if ev.error is not None:
            _check_error_kind(ev.error, f"{where}.error", ev.severity)
        if ev.kind == "failure":
            if ev.node in down:
                raise InvalidInstanceError(f"{where}.node", f"node {ev.node!r} is already down (SEV1) then")
            if ev.severity == "sev1":
                down.add(ev.node)
        else:
            if ev.node not in down:
                raise InvalidInstanceError(f"{where}.node", f"node {ev.node!r} is not down then: nothing to repair")
            down.discard(ev.node)
