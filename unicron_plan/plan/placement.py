"""Counts -> concrete nodes, moving as few GPUs as possible.

Order of work, per GPU type:
1. jobs that keep their count and were not hit, and pinned jobs, stay exactly
   where they were;
2. the other jobs retain as many of their previous GPUs as possible: a max
   flow (networkx) from jobs to their healthy previous nodes;
3. what is still missing comes from free GPUs: nodes in the job's racks first,
   whole free nodes before fragments, then the best-fitting fragment.

Per-type capacity is fungible across nodes, so any counts within capacity
can always be placed.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from itertools import chain, islice
from operator import lt

import numpy as np

from unicron_plan.core.problem import Problem
from unicron_plan.schema.placements import LazySplits, PlacementArrays, SplitView


def place(problem: Problem, counts: dict[str, int], start=None) -> dict[str, dict[str, int]]:
    """{job id: {node id: GPUs}} for planned ``counts`` (nodes in cluster order). ``start``: the
    first step's (free GPUs per node, {job: split}, jobs left to place) for a caller that keeps the
    stays' usage (:mod:`unicron_plan.plan.incremental`; only the jobs of its dict are placed)."""
    state = problem.state
    if start is not None:
        free, result, movers = start
    else:
        free, result, movers = problem.stays(counts) if state.idle is None else _stays_idle(problem, counts)
    return _in_cluster_order(state, _placed(problem, counts, free, result, movers))


def _racks(state):
    """node id -> its rack: ``state.nodes[nid].rack``, read from the healthy cluster's columns for the
    nodes no event touched (a rack does not change with health), without a record per node."""
    if state.healthy is None or state.changed is None:
        return lambda nid: state.nodes[nid].rack
    racks, order, changed = state.healthy.columns.racks, state.order, state.changed
    return lambda nid: changed[nid].rack if nid in changed else racks[order[nid]]


def _placed(problem: Problem, counts: dict[str, int], free, result, movers) -> dict[str, dict[str, int]]:
    """Steps 2 and 3 (module docstring) after the stays: ``result`` with every mover's split (its
    nodes in the order they were taken)."""
    state = problem.state
    order = state.order
    _retain(problem, movers, counts, free, result)
    # what each mover still needs (a job's split changes only in its own turn below); a job that only
    # shrinks needs none: what it retained is its split, and it picks nothing (nor its racks)
    needs = {j.id: counts[j.id] - sum(result[j.id].values()) for j in movers}
    growing = [j for j in movers if needs[j.id] > 0]
    rack = _racks(state)
    racks = {j.id: set(map(rack, state.previous[j.id])) for j in growing}
    pool = _FreePool(state, free, order, {(j.gpu_type, r) for j in growing for r in racks[j.id]})
    for j in sorted(growing, key=lambda j: (-needs[j.id], j.index)):
        need = needs[j.id]
        own = {nid for nid in result[j.id] if free[nid] > 0}  # the job's nodes with free GPUs
        while need > 0:
            nid = pool.pick(j.gpu_type, need, racks[j.id], own)
            v = free[nid]
            whole = v == state.nodes[nid].healthy_after
            take = min(need, v)
            result[j.id][nid] = result[j.id].get(nid, 0) + take
            pool.take(nid, take)
            need -= take
            if free[nid] > 0:
                own.add(nid)
            else:
                own.discard(nid)
            if whole and take == v and need > 0 and not own and RUNS:
                # the picks that would follow, taken at once while they are whole nodes of the same size
                run = pool.whole_run(nid, v, need, racks[j.id])
                result[j.id].update(dict.fromkeys(run, v))
                need -= v * len(run)
    return result


def _in_cluster_order(state, result: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Each job's split with its nodes in cluster order (a stay already in cluster order: the same dict)."""
    order = state.order
    out = {}
    previous = state.previous if state.in_order else {}
    for jid, split in result.items():
        if split is previous.get(jid):  # a stay, already in cluster order: the same dict
            out[jid] = split
            continue
        pos = list(map(order.__getitem__, split))
        if all(map(lt, pos, islice(pos, 1, None))) and split is not state.previous.get(jid):
            out[jid] = split  # (made by placement, its nodes taken in cluster order: the same dict)
            continue
        nids = sorted(split, key=order.__getitem__)
        out[jid] = dict(zip(nids, map(split.__getitem__, nids)))
    return out


def place_held(problem: Problem, counts: dict[str, int]) -> tuple[Mapping[str, dict[str, int]], PlacementArrays | None]:
    """:func:`place`'s placement, and the same as :class:`PlacementArrays` (a job per job of ``problem``,
    in order; node positions in ``problem.state.node_ids()``), sorted into cluster order on arrays:
    the nodes' positions are looked up once for both, and the placement is then a :class:`HeldPlacement`
    of the arrays (each split made when first read). None for the arrays when a count does not fit
    int64 (the placement is then :func:`place`'s)."""
    state = problem.state
    kept = None  # the stays' splits as arrays, when the state holds the previous splits so
    if state.idle is None:
        free, result, movers, kept = problem._stays(counts, as_array=True)
        if isinstance(free, np.ndarray):
            free = _FreeGPUs(state.order, free)
    else:
        free, result, movers = _stays_idle(problem, counts)
    result = _placed(problem, counts, free, result, movers)
    if list(result) != [j.id for j in problem.jobs]:  # (every job has its entry, in order)
        return _in_cluster_order(state, result), None
    splits = list(result.values())
    n = len(splits)
    lengths = np.fromiter(map(len, splits), dtype=np.int64, count=n)
    total = int(lengths.sum())
    try:
        gpus = np.fromiter(chain.from_iterable(map(dict.values, splits)), dtype=np.int64, count=total)
    except OverflowError:
        return _in_cluster_order(state, result), None
    if kept is None:
        pos = np.fromiter(map(state.order.__getitem__, chain.from_iterable(splits)), dtype=np.int64, count=total)
    else:  # the stays' nodes from the arrays, the others looked up
        pos = _positions(state.order, splits, lengths, kept)
    by = by_job_then_position(pos, lengths, len(state.order))
    pos, gpus = pos[by], gpus[by]
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    held = PlacementArrays(state.node_ids(), starts, pos, gpus)
    previous = state.previous if state.in_order else {}
    kept = {jid: split for jid, split in result.items() if split is previous.get(jid)}
    return HeldPlacement(list(result), held, kept), held


class HeldPlacement(Mapping):
    """{job id: {node id: GPUs}} of a placement held as arrays (:class:`PlacementArrays`, job ``k`` the
    ``k``-th id), each split made from them when first read; ``kept``: the splits the placement kept as
    they were (a staying job's previous split itself, in cluster order), given as those dicts."""

    def __init__(self, ids: list[str], arrays: PlacementArrays, kept: dict[str, dict[str, int]]):
        self.ids, self.arrays, self.kept = ids, arrays, kept
        self.splits = LazySplits(arrays)
        self._at = dict(zip(ids, range(len(ids))))

    def __getitem__(self, jid: str) -> dict[str, int]:
        k = self._at[jid]
        split = self.kept.get(jid)
        return split if split is not None else self.splits[k]

    def __iter__(self):
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def view(self, k: int) -> Mapping[str, int]:
        """Job ``k``'s split, read through (made on the first read)."""
        split = self.kept.get(self.ids[k])
        return split if split is not None else SplitView(self.splits, k)


class _FreeGPUs:
    """Free GPUs per node id, as :meth:`Problem.stays` gives them (every node, in cluster order), held in
    a list by cluster position: read and written by node id, without a dict entry per node."""

    __slots__ = ("order", "left")

    def __init__(self, order: dict[str, int], left: np.ndarray):
        self.order, self.left = order, left.tolist()

    def __getitem__(self, nid: str) -> int:
        return self.left[self.order[nid]]

    def __setitem__(self, nid: str, gpus: int) -> None:
        self.left[self.order[nid]] = gpus

    def __len__(self) -> int:
        return len(self.left)

    def values(self) -> list[int]:
        """The free GPUs of every node, in cluster order."""
        return self.left

    def update(self, items: dict[str, int]) -> None:
        for nid, gpus in items.items():
            self[nid] = gpus


def by_job_then_position(pos: np.ndarray, lengths: np.ndarray, size: int) -> np.ndarray:
    """The order of entries (one job's after another, ``lengths`` of them each, at positions ``pos``) by
    job, then position, ties kept in turn: ``np.lexsort((pos, job))``, as one stable sort of job x
    ``size`` + position when every position is in 0..size - 1 and that key fits int64 (a tenth of the
    time at 1,048,576 GPUs)."""
    n = len(lengths)
    job = np.repeat(np.arange(n, dtype=np.int64), lengths)
    if len(pos) and n * size < 2**62 and int(pos.min()) >= 0 and int(pos.max()) < size:
        return np.argsort(job * size + pos, kind="stable")
    return np.lexsort((pos, job))


def _positions(order: dict[str, int], splits: list[dict[str, int]], lengths: np.ndarray, kept) -> np.ndarray:
    """The cluster position of every node of ``splits`` (one split after another; ``lengths`` their
    sizes): those of the splits at places ``kept[2]`` are ``kept[0]`` (one after another, in each split's
    order), the others looked up in ``order``."""
    held, _, places = kept
    total = int(lengths.sum())
    mine = np.zeros(len(splits), dtype=bool)
    mine[places] = True
    from_kept = np.repeat(mine, lengths)
    if int(np.count_nonzero(from_kept)) != len(held):  # (not the stays' splits: every node looked up)
        return np.fromiter(map(order.__getitem__, chain.from_iterable(splits)), dtype=np.int64, count=total)
    pos = np.empty(total, dtype=np.int64)
    pos[from_kept] = held
    others = [splits[k] for k in np.flatnonzero(~mine).tolist()]
    pos[~from_kept] = np.fromiter(map(order.__getitem__, chain.from_iterable(others)), dtype=np.int64,
                                  count=total - len(held))
    return pos


def _stays_idle(problem: Problem, counts: dict[str, int]):
    """:meth:`Problem.stays` from the state's ``idle`` GPUs, touching only the jobs that do not stay.

    The free GPUs are the idle ones plus the previous GPUs of the jobs that do not stay, listed only
    for the nodes where they are not 0 (every other node is full); a staying job's split is its
    previous dict itself, not a copy.
    """
    previous = problem.state.previous
    free = dict(problem.state.idle)
    result: dict[str, dict[str, int]] = {}
    movers = []
    for j in problem.jobs:
        y = counts[j.id]
        split = previous[j.id]
        if y != 0 and ((y == j.x and not j.hit and not j.off_type) or j.pinned):
            result[j.id] = split
            continue
        result[j.id] = {}
        if y != 0:
            movers.append(j)
        for nid, g in split.items():
            free[nid] = free.get(nid, 0) + g
    return free, result, movers


def _retain(problem: Problem, movers, counts, free, result) -> None:
    """Max flow: each changed job keeps as many previous GPUs as fit in its new count.

    When no node with free GPUs was shared by two movers the flow splits per
    job: each keeps its previous nodes in their previous order up to its new
    count (a maximum flow, found without building a network).
    """
    shared = set()
    seen: set[str] = set()
    for j in movers:
        for nid in problem.state.previous[j.id]:
            if free[nid] > 0:
                if nid in seen:
                    shared.add(nid)
                seen.add(nid)
    if not shared:
        for j in movers:
            left = counts[j.id]
            for nid, had in problem.state.previous[j.id].items():
                take = min(had, free[nid], left)
                if take > 0:
                    result[j.id][nid] = take
                    free[nid] -= take
                    left -= take
        return
    import networkx as nx

    from unicron_plan.core.cluster import deterministic_flow
    from unicron_plan.core.constraints import tp_unit

    # Where tp holds by itself (constraints.tp_unit) every quantity is a multiple of the unit;
    # the flow runs in units so that it keeps whole tp groups.
    unit = {t: tp_unit(problem, t) for t in {j.gpu_type for j in movers}}
    g = nx.DiGraph()
    for j in movers:
        u = unit[j.gpu_type]
        g.add_edge("s", ("j", j.id), capacity=counts[j.id] // u)
        for nid, had in problem.state.previous[j.id].items():
            if free[nid] > 0:
                g.add_edge(("j", j.id), ("n", nid), capacity=had // u)
                g.add_edge(("n", nid), "t", capacity=free[nid] // u)
    if "t" not in g:
        return
    _, flow = nx.maximum_flow(g, "s", "t", flow_func=deterministic_flow())
    for j in movers:
        u = unit[j.gpu_type]
        for (_, nid), f in flow[("j", j.id)].items():
            if f > 0:
                result[j.id][nid] = f * u
                free[nid] -= f * u


RUNS = True  # take runs of whole nodes at once (FreePool.whole_run); False: one pick per node (tests)


def _bucket_key(v: int, whole: bool, need: int) -> tuple:
    """The preference of a free node with ``v`` free GPUs (module docstring, step 3)."""
    fits = v >= need
    return (not (whole and v <= need), not fits, v if fits else -v)


def _buckets(code: np.ndarray, pos: np.ndarray, v: np.ndarray, whole: np.ndarray) -> dict[int, dict]:
    """{code: {(free GPUs, whole): cluster positions}} of the free nodes at ``pos`` (ascending), each
    with its group ``code``, free count ``v`` and whether it is ``whole``: a fragment bucket ascending
    (a heap), a whole bucket descending (its head last, :class:`_FreePool`)."""
    if not len(pos):
        return {}
    base = int(v.max()) + 1
    key = (code * base + v) * 2 + whole
    by_key = np.argsort(key, kind="stable")  # stable: positions stay ascending within a bucket
    key, pos = key[by_key], pos[by_key]
    cuts = np.flatnonzero(np.diff(key)) + 1
    starts = [0, *cuts.tolist()]
    out: dict[int, dict] = {}
    for a, b in zip(starts, [*cuts.tolist(), len(key)]):
        k = int(key[a])
        c, free = divmod(k // 2, base)
        whole_key = bool(k % 2)
        out.setdefault(c, {})[(free, whole_key)] = (pos[a:b][::-1] if whole_key else pos[a:b]).tolist()
    return out


class _FreePool:
    """Free GPUs per node, indexed for the step-3 preference order.

    The preference is (node already used by the job, node in the job's racks,
    whole node filled completely, tightest fitting fragment else largest,
    cluster order). It depends on a node only through its free count and
    whether it is whole, so free nodes sit in buckets keyed (free, whole),
    per GPU type and per (GPU type, rack), each a heap of cluster positions.
    Free counts only fall, so entries are pushed once per bucket and stale
    ones are skipped lazily. Equal to a scan of every node, in O(log n) a pick.
    A node is whole only until its first take, so whole buckets are filled once
    and only lose nodes: they are kept as lists in descending order (head last,
    taken with ``pop()``, runs of nodes sliced off at once).
    """

    def __init__(self, state, free: dict[str, int], order: dict[str, int], racks: set):
        """``free``: GPUs left per node (every node in cluster order, or those of ``state.idle`` and
        the previous nodes of the jobs to place); ``racks``: the (GPU type, rack) pairs that
        picks will ask for (only those are indexed)."""
        self.state, self.free, self.order, self.racks = state, free, order, racks
        self.ids = state.node_ids()
        arrays = state.node_arrays()
        if state.idle is None:  # every node, in cluster order (Problem.stays)
            left = np.fromiter(free.values(), dtype=np.int64, count=len(free))
            pos = np.flatnonzero(left > 0)
            v = left[pos]
            whole = v == state.healthy_after_array()[pos]
        else:  # only the nodes where there may be free GPUs (_stays_idle): every other node is full
            pos = np.fromiter(map(order.__getitem__, free), dtype=np.int64, count=len(free))
            v = np.fromiter(free.values(), dtype=np.int64, count=len(free))
            keep = v > 0
            pos, v = pos[keep], v[keep]
            by_pos = np.argsort(pos)
            pos, v = pos[by_pos], v[by_pos]
            whole = v == state.healthy_after_array()[pos]
        group = arrays.group[pos]
        self.by_type = {arrays.types[k]: b for k, b in _buckets(arrays.group_type[group], pos, v, whole).items()}
        wanted = [arrays.groups[pair] for pair in racks if pair in arrays.groups]
        codes = list(arrays.groups)
        inside = np.isin(group, np.asarray(wanted, dtype=np.int64))
        self.by_rack = {codes[k]: b for k, b in
                        _buckets(group[inside], pos[inside], v[inside], whole[inside]).items()}

    def _state_of(self, nid: str) -> tuple[int, bool]:
        v = self.free[nid]
        return v, v == self.state.nodes[nid].healthy_after

    def _push(self, nid: str) -> None:
        """Index ``nid`` again after a take left it free GPUs (a fragment now)."""
        n = self.state.nodes[nid]
        key = self._state_of(nid)
        if key[1]:  # pragma: no cover - a node pushed after a take is no longer whole
            raise RuntimeError("placement: a whole node cannot be pushed again")
        indexed = [self.by_type.setdefault(n.gpu_type, {})]
        if (n.gpu_type, n.rack) in self.racks:
            indexed.append(self.by_rack.setdefault((n.gpu_type, n.rack), {}))
        for buckets in indexed:
            heapq.heappush(buckets.setdefault(key, []), self.order[nid])

    def take(self, nid: str, gpus: int) -> None:
        """Record that ``gpus`` GPUs of ``nid`` were given away."""
        self.free[nid] -= gpus
        if self.free[nid] > 0:
            self._push(nid)

    def _drop_stale(self, heap: list[int], v_key: int, whole_key: bool) -> None:
        """Drop the head of bucket (v_key, whole_key) until it is a node still in that state (its
        free count changed since it was pushed otherwise)."""
        free, ids = self.free, self.ids
        if whole_key:  # live while untouched: free still v_key (descending list, head last)
            while heap and free[ids[heap[-1]]] != v_key:
                heap.pop()
            return
        nodes = self.state.nodes
        while heap:
            nid = ids[heap[0]]
            v = free[nid]
            if v == v_key and v != nodes[nid].healthy_after:
                return
            heapq.heappop(heap)

    def _best(self, buckets_list, need: int):
        # _bucket_key inlined: this runs for every pick
        best = None
        for buckets in buckets_list:
            emptied = []
            for key, heap in buckets.items():
                v_key, whole_key = key
                self._drop_stale(heap, v_key, whole_key)
                if not heap:
                    emptied.append(key)
                    continue
                if v_key <= 0:
                    continue
                fits = v_key >= need
                cand = ((not (whole_key and v_key <= need), not fits, v_key if fits else -v_key),
                        heap[-1] if whole_key else heap[0])
                if best is None or cand < best:
                    best = cand
            for key in emptied:  # a later push makes the bucket again
                del buckets[key]
        return None if best is None else self.ids[best[1]]

    def whole_run(self, first: str, v: int, need: int, racks: set) -> list[str]:
        """The nodes that the next picks would return, in order, while each is a whole node of ``v``
        GPUs filled completely, after ``first`` (such a node, just taken) left ``need`` GPUs to place
        and the job has no node with free GPUs; they are taken here (all their GPUs).

        ``first`` won at its level (the job's racks if it is in one, else the whole type) with key
        (v, whole): it was the largest whole size below the need, or the exact fit. As the need
        falls by v per node, the next pick stays in that bucket while v <= need and no whole bucket
        of the level fits the need exactly (no larger whole size below the need can appear, and
        fragments and larger nodes rank below every whole node that fits). A whole bucket only
        loses nodes (free counts only fall), so an entry of it is live while its node has v free.
        """
        node = self.state.nodes[first]
        gpu_type = node.gpu_type
        if node.rack in racks:
            dicts = [self.by_rack.get((gpu_type, r), {}) for r in racks]
        else:
            dicts = [self.by_type.get(gpu_type, {})]
        key = (v, True)
        sizes = set()  # whole sizes with a live node at this level, besides v
        for buckets in dicts:
            for (size, whole), heap in buckets.items():
                if not whole or size == v:
                    continue
                self._drop_stale(heap, size, True)
                if heap:
                    sizes.add(size)
        # the number of picks that stay in the bucket (if it holds that many live nodes): while
        # v <= need, until the need is another whole size of the level
        steps = need // v
        for size in sizes:
            if size <= need and (need - size) % v == 0:
                steps = min(steps, (need - size) // v)
        lists = [b[key] for b in dicts if key in b]  # descending, head last
        free, ids, run = self.free, self.ids, []
        if len(lists) == 1:
            bucket = lists[0]
            while bucket and len(run) < steps:
                chunk = bucket[-(steps - len(run)):]
                del bucket[-len(chunk):]
                run += [nid for nid in map(ids.__getitem__, reversed(chunk)) if free[nid] == v]  # else stale
        elif steps > 0:  # the lists merged by their heads: a take changes only the head of the list it took from
            heads = []
            for k, bucket in enumerate(lists):
                self._drop_stale(bucket, v, True)
                if bucket:
                    heads.append((bucket[-1], k))
            heapq.heapify(heads)
            while heads and len(run) < steps:
                k = heapq.heappop(heads)[1]
                bucket = lists[k]
                run.append(ids[bucket.pop()])  # a node sits in one rack's list: no other list holds it
                self._drop_stale(bucket, v, True)
                if bucket:
                    heapq.heappush(heads, (bucket[-1], k))
        free.update(dict.fromkeys(run, 0))
        return run

    def pick(self, gpu_type: str, need: int, racks: set, own: set[str]) -> str:
        """The next node for a job of ``gpu_type`` needing ``need``; ``own``: its nodes with free GPUs."""
        # A free node the job already uses beats every other; then free nodes of its racks
        # (none of them is the job's: those have no free GPU here), then any free node.
        if own:
            return min(own, key=lambda nid: (_bucket_key(*self._state_of(nid), need), self.order[nid]))
        found = self._best([self.by_rack.get((gpu_type, r), {}) for r in racks], need)
        if found is None:
            found = self._best([self.by_type.get(gpu_type, {})], need)
        if found is None:  # pragma: no cover - counts within capacity always fit
            raise RuntimeError("placement: no free GPU left of type " + gpu_type)
        return found
