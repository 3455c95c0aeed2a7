"""The cluster after an event: health, drained nodes, capacity, hit jobs and
where each job's GPUs were before the event.

Everything here is derived from the instance only, so that solvers, placement
and the independent validator see one and the same cluster state.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from itertools import chain, compress, repeat
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from unicron_plan.schema import Instance
from unicron_plan.schema.nodes import NodeColumns, type_codes

if TYPE_CHECKING:  # networkx is imported lazily: it costs ~0.25 s of CLI start-up
    import networkx as nx


def rack_key(node_id: str, rack: str | None):
    """The rack a node belongs to for `same_rack`: its rack, or a rack of its own when it has none."""
    return rack if rack is not None else ("node", node_id)


class NodeHealth(NamedTuple):
    """One node's GPUs before and after the event (a tuple: thousands are made per plan)."""

    id: str
    gpu_type: str
    rack: str | None
    gpus: int
    healthy_before: int
    healthy_after: int
    lost_in_event: bool
    drained: bool

    @property
    def usable(self) -> int:
        """GPUs a plan may use on the node: none when it is drained, else its healthy GPUs after the event."""
        return 0 if self.drained else self.healthy_after


@dataclass
class ClusterState:
    """Derived state of the cluster after the event (see docs/format.md, Objective)."""

    instance: Instance
    nodes: Mapping[str, NodeHealth]  # a dict, or a NodeTable (build_state): read it as a mapping
    hit: dict[str, bool]
    previous: dict[str, dict[str, int]] = field(default_factory=dict)
    exiting: frozenset = frozenset()  # jobs leaving in a job_exit event (planned 0, charged nothing)
    # capacity() and nodes_in_service() when build_state counted them on its walk over the nodes
    counted: tuple[dict[str, int], int] | None = field(default=None, repr=False, compare=False)
    order: dict[str, int] = field(default=None, repr=False, compare=False)  # node id -> position in the cluster
    # when built from a HealthyCluster: that cluster, and the nodes re-derived from it (cluster order)
    healthy: "HealthyCluster | None" = field(default=None, repr=False, compare=False)
    touched: list[str] | None = field(default=None, repr=False, compare=False)
    # with ``healthy`` and ``touched``: the records of the touched nodes ({id: NodeHealth}, cluster order);
    # ``nodes`` may then be given as None and is made from the two on first access
    changed: dict[str, NodeHealth] | None = field(default=None, repr=False, compare=False)
    # Kept by callers that track their allocations between events (the simulator), for placement:
    # ``idle``: usable GPUs minus those of every job's previous split, for the nodes where that is not 0;
    # ``in_order``: every previous split lists its nodes in cluster order.
    idle: dict[str, int] | None = field(default=None, repr=False, compare=False)
    in_order: bool = field(default=False, repr=False, compare=False)
    # ``previous`` as arrays (SplitArrays of the instance's jobs), when the checks made them; used while
    # ``split_arrays.fits(previous, ...)`` (see :meth:`previous_arrays`)
    split_arrays: "SplitArrays | None" = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.order is None:
            self.order = {nid: k for k, nid in enumerate(self.nodes)}

    def previous_arrays(self) -> "SplitArrays | None":
        """``previous`` as :class:`SplitArrays` (jobs in the instance's order, positions in
        :meth:`node_ids`), when the checks made them and ``previous`` is still the dict they were made of."""
        arrays = self.split_arrays
        if arrays is None or self.healthy is None or not arrays.fits(self.previous, len(self.healthy.ids)):
            return None
        return arrays

    def _record(self, nid: str) -> NodeHealth:
        """The record of a touched node (without making ``nodes``)."""
        return self.changed[nid] if self.changed is not None else self.nodes[nid]

    def usable_gpus(self) -> dict[str, int]:
        """{node id: GPUs a plan may use there (0 when drained)}: a fresh dict, in cluster order."""
        if self.healthy is None or self.touched is None:
            return {nid: n.usable for nid, n in self.nodes.items()}
        free = dict(self.healthy.usable)
        for nid in self.touched:
            n = self._record(nid)
            free[nid] = n.usable
        return free

    def usable_array(self) -> np.ndarray | None:
        """:meth:`usable_gpus`'s values as a fresh int64 array in cluster order (:meth:`node_ids`), when the
        state was built from a healthy cluster (else None)."""
        if self.healthy is None or self.touched is None:
            return None
        out = self.healthy.columns.gpus.copy()
        for nid in self.touched:
            n = self._record(nid)
            out[self.order[nid]] = n.usable
        return out

    def node_arrays(self) -> "NodeArrays":
        """The nodes as :class:`NodeArrays` (kept with the healthy cluster the state was built from)."""
        return self.healthy.arrays if self.healthy is not None else node_arrays(self.nodes)

    def node_ids(self) -> list[str]:
        """Node ids in cluster order (kept with the healthy cluster the state was built from; do not change)."""
        return self.healthy.ids if self.healthy is not None else list(self.nodes)

    def healthy_after_array(self) -> np.ndarray:
        """Healthy GPUs after the event per node, in cluster order (int64)."""
        if self.healthy is None or self.touched is None:
            return np.fromiter((n.healthy_after for n in self.nodes.values()), dtype=np.int64,
                               count=len(self.nodes))
        out = self.healthy.arrays.gpus.copy()
        for nid in self.touched:
            out[self.order[nid]] = self._record(nid).healthy_after
        return out

    @property
    def drained_nodes(self) -> list[str]:
        """Nodes out of service after the event, in instance order."""
        if self.touched is not None:  # only re-derived nodes can be drained (in cluster order)
            return [nid for nid in self.touched if self._record(nid).drained]
        return [n.id for n in self.nodes.values() if n.drained]

    def usable_ids(self) -> dict[str, set[str]]:
        """{GPU type: ids of its nodes in service (not drained)}: a fresh set per type."""
        if self.healthy is None or self.touched is None:
            out: dict[str, set[str]] = {}
            for n in self.nodes.values():
                if not n.drained:
                    out.setdefault(n.gpu_type, set()).add(n.id)
            return out
        out = {t: set(ids) for t, ids in self.healthy.ids_by_type.items()}
        for nid in self.drained_nodes:
            out[self._record(nid).gpu_type].discard(nid)
        return out

    def capacity(self) -> dict[str, int]:
        """Healthy, non-drained GPUs per GPU type (every declared type present)."""
        if self.counted is not None:
            return dict(self.counted[0])
        cap = {t: 0 for t in self.instance.cluster.gpu_types}
        for n in self.nodes.values():
            if not n.drained:
                cap[n.gpu_type] += n.healthy_after
        return cap

    def nodes_in_service(self) -> int:
        """H of docs/format.md: nodes not failed, not drained, with a healthy GPU."""
        if self.counted is not None:
            return self.counted[1]
        return sum(1 for n in self.nodes.values() if not n.drained and n.healthy_after > 0)

    @cached_property
    def graph(self) -> "nx.Graph":
        """The cluster as a graph: rack -> node edges, node attributes carry health and type."""
        import networkx as nx

        g = nx.Graph()
        for n in self.nodes.values():
            g.add_node(n.id, kind="node", gpu_type=n.gpu_type, gpus=n.gpus,
                       healthy=n.healthy_after, drained=n.drained)
            if n.rack is not None:
                g.add_node(("rack", n.rack), kind="rack")
                g.add_edge(("rack", n.rack), n.id)
        return g


class NodeTable(Mapping):
    """{node id: NodeHealth} of a cluster state, every node in cluster order: the touched nodes' records,
    the others made from the healthy cluster when looked up (most callers read a few nodes). A caller
    that reads many (more than FULL_AFTER lookups, or all through ``items()`` or ``values()``) gets them
    from one dict made then."""

    __slots__ = ("_healthy", "_changed", "_full", "_lookups")
    FULL_AFTER = 20_000

    def __init__(self, healthy: "HealthyCluster", changed: dict[str, NodeHealth]):
        self._healthy, self._changed, self._full, self._lookups = healthy, changed, None, 0

    def _dict(self) -> dict[str, NodeHealth]:
        if self._full is None:
            full = dict(self._healthy.nodes)  # every node healthy, then the touched ones' records
            full.update(self._changed)
            self._full = full
        return self._full

    def __getitem__(self, nid) -> NodeHealth:
        if self._full is not None:
            return self._full[nid]
        record = self._changed.get(nid)
        if record is not None:
            return record
        made = self._healthy.__dict__.get("nodes")  # the healthy records, when made already
        if made is not None:
            return made[nid]
        self._lookups += 1
        if self._lookups > self.FULL_AFTER:
            return self._dict()[nid]
        k = self._healthy.order[nid]  # (KeyError for a node not in the cluster)
        columns = self._healthy.columns
        gpus = columns.gpus_list[k]
        return NodeHealth(columns.ids[k], columns.types[k], columns.racks[k], gpus, gpus, gpus, False, False)

    def get(self, nid, default=None):
        try:
            return self[nid]
        except KeyError:
            return default

    def usable_gpus(self, nid) -> int | None:
        """The healthy GPUs of node ``nid`` after the event, or None where it is drained or not in the
        cluster: what a check of a previous split reads, without making the node's record."""
        full = self._full
        record = full.get(nid) if full is not None else self._changed.get(nid)
        if record is None:
            if full is not None:
                return None
            k = self._healthy.order.get(nid)
            return None if k is None else self._healthy.columns.gpus_list[k]
        return None if record.drained else record.healthy_after

    def __contains__(self, nid) -> bool:
        return nid in self._healthy.order

    def __iter__(self):
        return iter(self._full if self._full is not None else self._healthy.order)

    def __len__(self) -> int:
        return len(self._healthy.order)

    def items(self):
        return self._dict().items()

    def values(self):
        return self._dict().values()

    def __repr__(self) -> str:
        return repr(self._dict())


def _state_nodes(state: ClusterState):
    nodes = state.__dict__["_nodes"]
    if nodes is None and state.healthy is not None and state.changed is not None:
        nodes = state.__dict__["_nodes"] = NodeTable(state.healthy, state.changed)
    return nodes


def _set_state_nodes(state: ClusterState, nodes) -> None:
    state.__dict__["_nodes"] = nodes


# {node id: NodeHealth} of every node in cluster order: a dict, or when build_state gave the healthy
# cluster and the touched nodes' records instead, a NodeTable made on first access.
ClusterState.nodes = property(_state_nodes, _set_state_nodes, doc=_state_nodes.__doc__)


class PositionMap(Mapping):
    """{node id: a value per node position}, read through the id -> position map (ints: a value of an
    int array is handed out as a Python int)."""

    __slots__ = ("at", "values")

    def __init__(self, at: dict, values):
        self.at, self.values = at, values

    def __getitem__(self, nid):
        return int(self.values[self.at[nid]])

    def __iter__(self):
        return iter(self.at)

    def __len__(self) -> int:
        return len(self.at)


def build_state(instance: Instance, previous: dict[str, dict[str, int]] | None = None,
                healthy: "HealthyCluster | None" = None, unhealthy: Collection[str] | None = None,
                holders: Callable[[set[str]], set[str]] | None = None,
                job_ids: list[str] | None = None) -> ClusterState:
    """Apply the event to the cluster (node or GPU isolation) and find the hit jobs.

    Assumes the instance passed :func:`unicron_plan.core.checks.check_instance`; ``previous``
    is the split that check returned (derived here when not given). ``healthy``: the
    :func:`healthy_nodes` of this cluster, for callers that derive many states of one cluster
    (made here when not given). ``unhealthy`` (with ``healthy``): ids including every node
    with failed GPUs, for callers that know them; only those and the event's nodes are then
    visited, instead of every node. ``holders``: for callers that index their jobs by node, the ids of
    the jobs listing any of the given nodes (the hit jobs are then found without visiting every job);
    ``job_ids`` (with ``holders``): the instance's job ids in order, when the caller keeps them.
    """
    event = instance.event
    failure = event if event is not None and event.kind == "failure" else None
    failed_nodes = set(failure.failed_nodes) if failure else set()
    event_gpus: dict[str, set[int]] = defaultdict(set)
    if failure:
        for fg in failure.failed_gpus:
            event_gpus[fg.node].add(fg.gpu)
    node_isolation = instance.isolation == "node"
    healthy = healthy if healthy is not None else healthy_nodes(instance)
    # Start from every node healthy; re-derive only the nodes with failed GPUs or touched by the event
    # (by position; ``unhealthy``, when given, names every node with failed GPUs). Their fields are this
    # instance's: its nodes as read (no model made), else its node models at those positions.
    order = healthy.order
    own = instance.cluster.read_columns()
    named = failed_nodes | set(event_gpus) | set(_repaired_ids(instance))
    if unhealthy is not None:
        walk = sorted({order[nid] for nid in named | set(unhealthy) if nid in order})
    else:
        own = own if own is not None else instance.cluster.node_columns()
        walk = sorted({order[nid] for nid in named if nid in order} | set(own.failed))
    if own is not None:
        records = [(own.ids[k], own.types[k], own.racks[k], own.gpus_list[k], own.failed.get(k, ())) for k in walk]
    else:
        models = instance.cluster.nodes
        records = [(n.id, n.gpu_type, n.rack, n.gpus, n.failed_gpus) for n in map(models.__getitem__, walk)]
    repaired = _repaired(instance, records)
    nodes = {}  # the touched nodes' records (the others are the healthy cluster's)
    cap, in_service = dict(healthy.capacity), healthy.in_service
    affected = set()  # nodes lost in the event or drained
    touched = []  # nodes re-derived
    for nid, gtype, rack, gpus, failed in records:
        if not failed and nid not in failed_nodes and nid not in event_gpus:
            continue
        touched.append(nid)
        cap[gtype] -= gpus  # take the node's healthy record out of the totals
        in_service -= gpus > 0
        before = set(failed)
        failed_after = (before - repaired.get(nid, set())) | event_gpus.get(nid, set())
        lost = nid in failed_nodes or bool(event_gpus.get(nid))
        drained = nid in failed_nodes or (node_isolation and lost)
        after = 0 if drained else gpus - len(failed_after)
        nodes[nid] = NodeHealth(nid, gtype, rack, gpus, gpus - len(before), after, lost, drained)
        if not drained:
            cap[gtype] += after
            in_service += after > 0
        if lost or drained:
            affected.add(nid)
    if holders is not None:
        hit = dict.fromkeys(job_ids if job_ids is not None else (job.id for job in instance.jobs), False)
        if affected:
            hit.update(dict.fromkeys(holders(affected), True))
    else:
        hit = {job.id: not affected.isdisjoint(job.current.nodes) for job in instance.jobs}
    state = ClusterState(instance, None, hit, exiting=exiting_jobs(instance), counted=(cap, in_service),
                         order=healthy.order, healthy=healthy, touched=touched, changed=nodes)
    if previous is None:  # the healthy GPUs before the event: every node's, the touched ones' own
        before = healthy.columns.gpus.copy()
        for nid, n in nodes.items():
            before[order[nid]] = n.healthy_before
        previous = previous_distribution(instance, PositionMap(order, before))
    state.previous = previous
    return state


class NodeArrays(NamedTuple):
    """A cluster's nodes as arrays in cluster order, for callers that work on all of them at once."""

    gpus: np.ndarray  # GPUs of each node (int64)
    group: np.ndarray  # code of each node's (GPU type, rack) pair (int64)
    groups: dict[tuple[str, str | None], int]  # (GPU type, rack) -> code
    types: list[str]  # the GPU types of the nodes, in order of first appearance
    group_type: np.ndarray  # code -> index of its GPU type in ``types`` (int64)


@dataclass(frozen=True)
class HealthyCluster:
    """Every node of a cluster as if all its GPUs were healthy and no event touched it, with the totals."""

    capacity: dict[str, int]
    in_service: int
    order: dict[str, int]  # node id -> position in the cluster
    columns: NodeColumns  # the nodes as columns in cluster order

    @cached_property
    def nodes(self) -> dict[str, NodeHealth]:
        """{node id: NodeHealth}, every node healthy, in cluster order (made on first use, then kept;
        the records made in C calls, no Python frame per node)."""
        ids, types, racks, gpus = self.columns.ids, self.columns.types, self.columns.racks, self.columns.gpus_list
        return dict(zip(ids, map(_health, zip(ids, types, racks, gpus, gpus, gpus, repeat(False), repeat(False)))))

    @cached_property
    def usable(self) -> dict[str, int]:
        """{node id: its GPUs} (made on first use, then kept)."""
        return dict(zip(self.columns.ids, self.columns.gpus_list))

    @cached_property
    def ids_by_type(self) -> dict[str, frozenset[str]]:
        """{GPU type: ids of its nodes} (made on first use, then kept)."""
        ids, types = self.columns.ids, self.columns.types
        kinds = dict.fromkeys(types)
        if len(kinds) == 1:
            return {t: frozenset(ids) for t in kinds}
        return {t: frozenset(compress(ids, map(t.__eq__, types))) for t in kinds}

    @property
    def ids(self) -> list[str]:
        """Node ids in cluster order (do not change)."""
        return self.columns.ids

    @cached_property
    def arrays(self) -> NodeArrays:
        """The nodes as :class:`NodeArrays` (made on first use, then kept)."""
        columns = self.columns
        return _node_arrays(columns.types, columns.racks, columns.gpus, columns.type_codes())


def node_arrays(nodes: dict[str, NodeHealth]) -> NodeArrays:
    """The :class:`NodeArrays` of ``nodes`` (``gpus``: their GPUs as if healthy)."""
    return _node_arrays(*zip(*((h.gpu_type, h.rack, h.gpus) for h in nodes.values()))) if nodes \
        else _node_arrays([], [], [])


def _node_arrays(types: Sequence[str], racks: Sequence[str | None], gpus: Sequence[int],
                 codes: "tuple[list, np.ndarray] | None" = None) -> NodeArrays:
    """The :class:`NodeArrays` of nodes given as columns (GPU types, racks, GPUs) in cluster order; ``codes``:
    the types' codes when known (:meth:`NodeColumns.type_codes`). The (GPU type, rack) codes in order of
    each pair's first node, from the types' codes and the racks' (each in order of first appearance),
    joined on arrays."""
    kinds, type_code = codes if codes is not None else type_codes(types)
    n = len(racks)
    rack_at: dict = {}
    rack_code = np.fromiter(map(rack_at.setdefault, racks, map(len, repeat(rack_at))), dtype=np.int64, count=n)
    names = list(rack_at)
    if len(kinds) <= 1:  # one GPU type: a pair's code is its rack's
        group, pairs = rack_code, [(k, r) for k in kinds for r in names]
    else:
        key = type_code * len(names) + rack_code
        unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        by_first = np.argsort(first, kind="stable")
        code = np.empty(len(unique), dtype=np.int64)
        code[by_first] = np.arange(len(unique), dtype=np.int64)
        group = code[inverse.reshape(n)]
        pairs = [(kinds[k // len(names)], names[k % len(names)]) for k in unique[by_first].tolist()]
    groups = dict(zip(pairs, range(len(pairs))))
    index = {t: k for k, t in enumerate(kinds)}
    return NodeArrays(np.array(gpus, dtype=np.int64).reshape(n), np.asarray(group, dtype=np.int64).reshape(n),
                      groups, list(kinds),
                      np.asarray([index[t] for t, _ in pairs], dtype=np.int64).reshape(len(pairs)))


_health = partial(tuple.__new__, NodeHealth)  # a NodeHealth from an iterable of its fields, made in C


def healthy_nodes(instance: Instance, ids: list | None = None, order: dict | None = None,
                  columns: NodeColumns | None = None) -> HealthyCluster:
    """The :class:`HealthyCluster` of ``instance`` (for :func:`build_state`), from the cluster's nodes as
    columns (:meth:`unicron_plan.schema.Cluster.node_columns`: no node model is read); the records are
    made in C calls (no Python frame per node). ``ids``, ``order`` and ``columns``: the nodes' ids in
    cluster order, id -> position and the columns, when the instance checks made them
    (``check_instance``'s ``nodes_seen``)."""
    cluster = instance.cluster
    columns = columns if columns is not None else cluster.node_columns()
    ids = ids if ids is not None else columns.ids
    cap = {t: 0 for t in cluster.gpu_types}
    cap.update((t, cap.get(t, 0) + g) for t, g in columns.type_totals().items())
    order = order if order is not None else columns.at
    return HealthyCluster(cap, len(ids) - int(np.count_nonzero(columns.gpus == 0)), order, columns)


def _repaired_ids(instance: Instance) -> list[str]:
    """Ids of the nodes a repair event names ([] otherwise)."""
    event = instance.event
    if event is None or event.kind != "repair":
        return []
    return list(event.repaired_nodes) + [rg.node for rg in event.repaired_gpus]


def _repaired(instance: Instance, records: list) -> dict[str, set[int]]:
    """{node: GPU indices that return to service} for a repair event ({} otherwise), the repaired
    nodes' failed GPUs read from ``records``, the touched nodes as (id, GPU type, rack, GPUs, failed GPUs)."""
    event = instance.event
    if event is None or event.kind != "repair":
        return {}
    out: dict[str, set[int]] = defaultdict(set)
    if event.repaired_nodes:
        listed = set(event.repaired_nodes)
        for nid, _, _, _, failed in records:
            if nid in listed:
                out[nid] |= set(failed)
    for rg in event.repaired_gpus:
        out[rg.node].add(rg.gpu)
    return dict(out)


def exiting_jobs(instance: Instance) -> frozenset:
    """Ids of the jobs that leave in a job_exit event (empty otherwise)."""
    event = instance.event
    return frozenset(event.jobs) if event is not None and event.kind == "job_exit" else frozenset()


class SplitArrays(NamedTuple):
    """Every job's previous split as arrays, the jobs in instance order: job k's split holds
    ``gpus[starts[k]:starts[k + 1]]`` GPUs on the nodes at cluster positions ``pos[starts[k]:starts[k + 1]]``,
    in the order of the split's keys. ``of``: the dict of splits they were made with (a caller checks
    it is still the one it holds)."""

    of: dict
    starts: np.ndarray
    pos: np.ndarray
    gpus: np.ndarray

    def fits(self, previous: dict, node_count: int) -> bool:
        """These arrays are those of ``previous`` (the same dict, as many entries) on ``node_count`` nodes."""
        return (previous is self.of and len(self.starts) == len(previous) + 1
                and int(self.starts[-1]) == sum(map(len, previous.values()))
                and (not len(self.pos) or int(self.pos.max()) < node_count))

    def rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the positions, the GPUs) of the splits of the jobs at ``rows`` (instance order), one after another."""
        first, sizes = self.starts[rows], self.starts[rows + 1] - self.starts[rows]
        at = np.arange(int(sizes.sum()), dtype=np.int64)
        at += np.repeat(first - (np.cumsum(sizes) - sizes), sizes)
        return self.pos[at], self.gpus[at]


def previous_distribution(instance: Instance, healthy_before: dict[str, int],
                          listed: tuple[np.ndarray, np.ndarray] | None = None,
                          arrays: list | None = None) -> dict[str, dict[str, int]]:
    """How many GPUs each job held on each of its nodes before the event.

    The instance gives a job's count and its node list, not the split. A job
    alone on its nodes fills them in the listed order (whole tp groups); jobs
    that share nodes get a split that fits, found exactly: a max flow
    (networkx), or a small CP-SAT model when one of them has tp > 1. Returns
    ``{}`` for a job's entry that cannot be fitted (the instance checks report it).
    ``listed``: (the cluster position of every node the jobs list, in job order, every one a node of
    the cluster; the healthy GPUs before the event of every node by position), for a caller that
    looked them up (the checks): the nodes are then not looked up again. ``arrays`` (with ``listed``): a
    list to which the splits as :class:`SplitArrays` are appended, when every job is alone on its nodes.
    """
    if listed is not None and (not len(listed[0]) or np.bincount(listed[0]).max() < 2):
        shared_nodes: set = set()  # no node listed twice (found on the positions)
    else:
        counted = Counter(chain.from_iterable(job.current.nodes for job in instance.jobs))
        shared_nodes = {n for n, k in counted.items() if k > 1} \
            if len(counted) < sum(counted.values()) else set()  # (no node listed twice: nothing to look for)
    shared_jobs = {job.id for job in instance.jobs if not shared_nodes.isdisjoint(job.current.nodes)} \
        if shared_nodes else set()
    solo = [job for job in instance.jobs if job.current.gpus and job.id not in shared_jobs]
    cap = None
    if listed is not None and not shared_jobs:  # the solo jobs' nodes, in order: those of the jobs holding GPUs
        sizes = np.fromiter((len(job.current.nodes) for job in instance.jobs), dtype=np.int64, count=len(instance.jobs))
        holds = np.fromiter((job.current.gpus > 0 for job in instance.jobs), dtype=bool, count=len(instance.jobs))
        cap = listed[1][listed[0][np.repeat(holds, sizes)]]
    solo_arrays = [] if cap is not None and arrays is not None else None
    out = _solo_split(solo, healthy_before, cap, solo_arrays)
    if solo_arrays and len(solo) == int(holds.sum()):  # (the solo jobs: those holding GPUs, in instance order)
        owner, kept, took = solo_arrays[0]  # (per entry of the solo jobs' nodes: its job among them, in the split, GPUs)
        per_job = np.zeros(len(instance.jobs), dtype=np.int64)
        per_job[holds] = np.bincount(owner[kept], minlength=len(solo))
        starts = np.zeros(len(instance.jobs) + 1, dtype=np.int64)
        np.cumsum(per_job, out=starts[1:])
        arrays.append(SplitArrays(out, starts, listed[0][np.repeat(holds, sizes)][kept], took[kept]))
    if shared_jobs:
        shared = [j for j in instance.jobs if j.id in shared_jobs]
        if any((j.tp or 1) > 1 for j in shared):
            # Whole tp groups on every node: a small exact model (a flow cannot keep multiples).
            out.update(_tp_split(shared, healthy_before))
        else:
            out.update(_flow_split(shared, healthy_before))
    for job in instance.jobs:
        out.setdefault(job.id, {})
    return out


def _solo_split(jobs, healthy_before: dict[str, int], cap: np.ndarray | None = None,
                arrays: list | None = None) -> dict[str, dict[str, int]]:
    """The split of jobs alone on their nodes: each fills its nodes in the listed order, whole tp
    groups per node ({} when they do not hold its count). The fill of all jobs at once: a node's
    take is what is left of the count after the nodes before it, at most the node's capacity.
    ``cap``: the healthy GPUs before the event of every node the jobs list, in order, when known.
    ``arrays`` (with ``cap``): a list to which (each listed node's job among ``jobs``, whether it is in the
    job's split, the GPUs taken there) is appended, per listed node in order."""
    nodes = list(chain.from_iterable(job.current.nodes for job in jobs))
    sizes = np.fromiter(map(len, (job.current.nodes for job in jobs)), dtype=np.int64, count=len(jobs))
    units = np.fromiter(((job.tp or 1) for job in jobs), dtype=np.int64, count=len(jobs))
    # (a count beyond 2**62 is held by no cluster: it stays beyond every node's capacity in int64)
    want = np.fromiter((min(job.current.gpus, 1 << 62) for job in jobs), dtype=np.int64, count=len(jobs))
    cap_given = cap is not None and len(cap) == len(nodes)
    if not cap_given:
        cap = np.fromiter(map(healthy_before.__getitem__, nodes), dtype=np.int64, count=len(nodes))
    unit = np.repeat(units, sizes)
    cap = cap // unit * unit  # tp groups never straddle nodes
    ends = np.cumsum(sizes)
    total = np.zeros(len(nodes) + 1, dtype=np.int64)
    np.cumsum(cap, out=total[1:])
    before = total[:-1] - np.repeat(total[ends - sizes], sizes)  # capacity of the job's nodes before each
    take = np.minimum(np.maximum(np.repeat(want, sizes) - before, 0), cap)
    np.cumsum(take, out=total[1:])
    held = total[ends] - total[ends - sizes]
    if arrays is not None and cap_given:
        arrays.append((np.repeat(np.arange(len(jobs), dtype=np.int64), sizes),
                       (take > 0) & np.repeat(held == want, sizes), take))
    take = take.tolist()
    out: dict[str, dict[str, int]] = {}
    start = 0
    for job, end, whole in zip(jobs, ends.tolist(), (held == want).tolist()):
        if whole:
            part = take[start:end]
            out[job.id] = dict(zip(compress(nodes[start:end], part), filter(None, part)))
        else:
            out[job.id] = {}
        start = end
    return out


def _flow_split(jobs, healthy_before: dict[str, int]) -> dict[str, dict[str, int]]:
    if not jobs:
        return {}
    import networkx as nx

    g = nx.DiGraph()
    for job in jobs:
        g.add_edge("source", ("job", job.id), capacity=job.current.gpus)
        for n in job.current.nodes:
            g.add_edge(("job", job.id), ("node", n))
            g.add_edge(("node", n), "sink", capacity=healthy_before[n])
    value, flow = nx.maximum_flow(g, "source", "sink", flow_func=deterministic_flow())
    out = {}
    for job in jobs:
        split = {n[1]: f for n, f in flow[("job", job.id)].items() if f > 0}
        out[job.id] = split if sum(split.values()) == job.current.gpus else {}
    return out


def deterministic_flow():
    """The max-flow algorithm whose flow depends only on the graph's insertion order.

    Edmonds-Karp walks adjacency dicts breadth first; networkx's default (preflow-push)
    keeps sets of nodes, whose order follows the string hash and so changes from one
    process to the next: equal inputs would get different splits in different processes.
    """
    from networkx.algorithms.flow import edmonds_karp

    return edmonds_karp


TP_SPLIT_SECONDS = 10.0  # bound on the exact tp split of jobs sharing nodes


def _tp_split(jobs, healthy_before: dict[str, int]) -> dict[str, dict[str, int]]:
    """Per-node split of jobs sharing nodes, each in whole tp groups: a feasibility model
    (OR-Tools CP-SAT, one worker, so the answer is deterministic). {} entries when none exists."""
    from unicron_plan.extras import require

    cp_model = require("ortools.sat.python.cp_model", "splitting jobs with tp > 1 that share nodes")
    cp = cp_model.CpModel()
    groups: dict[tuple[str, str], object] = {}
    per_node: dict[str, list] = defaultdict(list)
    for job in jobs:
        unit = job.tp or 1
        terms = []
        for n in job.current.nodes:
            v = cp.new_int_var(0, healthy_before[n] // unit, f"{job.id}@{n}")
            groups[(job.id, n)] = v
            terms.append(v * unit)
            per_node[n].append(v * unit)
        cp.add(sum(terms) == job.current.gpus)
    for n, terms in per_node.items():
        cp.add(sum(terms) <= healthy_before[n])
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = TP_SPLIT_SECONDS
    status = solver.solve(cp)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return {job.id: {} for job in jobs}
    out = {}
    for job in jobs:
        unit = job.tp or 1
        split = {n: solver.value(groups[(job.id, n)]) * unit for n in job.current.nodes}
        out[job.id] = {n: g for n, g in split.items() if g}
    return out
