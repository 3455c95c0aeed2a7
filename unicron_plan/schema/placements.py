"""A plan's placements as arrays (job, node, GPUs), and their :class:`Placement` models made on demand.

The planner places the counts (:mod:`unicron_plan.plan.placement`) and keeps every job's split as
three arrays from there to the writer (:func:`unicron_plan.io.dumps`) and the validator
(:mod:`unicron_plan.plan.validate`), which read the arrays instead of one model per (job, node).
A :class:`PlanJob`'s ``placement`` is made from them the first time a caller reads it
(:mod:`unicron_plan.schema.plan`).
"""

from __future__ import annotations

from itertools import accumulate, chain, islice
from operator import methodcaller
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import TypeAdapter

from unicron_plan.schema.plan import Placement

_PLACEMENTS: dict[tuple[str, int], Placement] = {}  # (node, GPUs) -> its frozen Placement, shared
_MAX_PLACEMENTS = 1 << 16
_PLACEMENT_LIST = TypeAdapter(list[Placement])


class PlacementArrays:
    """Every job's placement, jobs in the plan's order: job ``k`` has the entries
    ``starts[k]:starts[k + 1]``, each a node (its position in ``names``) and a GPU count, in the
    order of the job's split. ``names``: node ids (the cluster's, in cluster order, as the planner
    makes them); ``starts``, ``node``, ``gpus``: int64 arrays. Read-only once made."""

    __slots__ = ("names", "starts", "node", "gpus", "_ids")

    def __init__(self, names: Sequence[str], starts: np.ndarray, node: np.ndarray, gpus: np.ndarray):
        self.names, self.starts, self.node, self.gpus = names, starts, node, gpus
        self._ids: list[str] | None = None

    @classmethod
    def from_splits(cls, splits: Sequence[Mapping[str, int]], names: Sequence[str],
                    position: Mapping[str, int]) -> "PlacementArrays":
        """The arrays of ``splits`` (one {node id: GPUs} per job, in order); ``position``: node id ->
        its index in ``names``. Raises KeyError for a node it does not know, OverflowError for a
        count beyond int64."""
        starts = np.zeros(len(splits) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, splits), dtype=np.int64, count=len(splits)), out=starts[1:])
        total = int(starts[-1])
        node = np.fromiter(map(position.__getitem__, chain.from_iterable(splits)), dtype=np.int64, count=total)
        gpus = np.fromiter(chain.from_iterable(map(methodcaller("values"), splits)), dtype=np.int64, count=total)
        return cls(names, starts, node, gpus)

    def __len__(self) -> int:
        """The number of jobs."""
        return len(self.starts) - 1

    def node_ids(self) -> list[str]:
        """The node id of every entry, in order (made once, then kept: do not change it)."""
        if self._ids is None:
            self._ids = list(map(self.names.__getitem__, self.node.tolist()))
        return self._ids

    def splits(self) -> list[dict[str, int]]:
        """Each job's {node id: GPUs} (a node listed twice keeps its last count: see ``lengths``)."""
        starts = self.starts
        sizes = np.diff(starts)
        if len(starts) and int(starts[0]) == 0 and not (sizes < 0).any():  # (as made: one job after another)
            return cut_dicts(zip(self.node_ids(), self.gpus.tolist()), sizes.tolist())
        ids, gpus, ends = self.node_ids(), self.gpus.tolist(), starts.tolist()
        return [dict(zip(ids[a:b], gpus[a:b])) for a, b in zip(ends, ends[1:])]

    def pairs(self, k: int) -> list[tuple[str, int]]:
        """Job ``k``'s (node id, GPUs) entries, in order."""
        a, b = int(self.starts[k]), int(self.starts[k + 1])
        return list(zip(map(self.names.__getitem__, self.node[a:b].tolist()), self.gpus[a:b].tolist()))

    def models(self) -> list[list[Placement]]:
        """Each job's list of :class:`Placement` models (:func:`placement_models`)."""
        ids, gpus, ends = self.node_ids(), self.gpus.tolist(), self.starts.tolist()
        return _cut(_shared(list(zip(ids, gpus))), ends)


class LazySplits(Sequence):
    """Each job's {node id: GPUs} of ``arrays`` (:class:`PlacementArrays`), ``arrays.splits()[k]``, made
    when first read (a reader that needs few of them makes no dict for the others)."""

    def __init__(self, arrays: PlacementArrays):
        self.arrays, self.ends = arrays, arrays.starts.tolist()
        self._made: list = [None] * len(arrays)
        self._gpus: list | None = None

    def __len__(self) -> int:
        return len(self._made)

    def __getitem__(self, k: int) -> dict[str, int]:
        split = self._made[k]
        if split is None:
            if self._gpus is None:
                self._gpus = self.arrays.gpus.tolist()
            a, b = self.ends[k], self.ends[k + 1]
            split = self._made[k] = dict(zip(self.arrays.node_ids()[a:b], self._gpus[a:b]))
        return split


class SplitView(Mapping):
    """Job ``k``'s split of :class:`LazySplits`, read through (made on the first read)."""

    __slots__ = ("splits", "k")

    def __init__(self, splits: LazySplits, k: int):
        self.splits, self.k = splits, k

    def __getitem__(self, nid: str) -> int:
        return self.splits[self.k][nid]

    def __iter__(self):
        return iter(self.splits[self.k])

    def __len__(self) -> int:
        return len(self.splits[self.k])

    def __repr__(self) -> str:
        return repr(self.splits[self.k])


class NodeTotals:
    """GPUs placed per node id (``.get``, as :func:`unicron_plan.plan.reasons.explain_jobs` reads its
    ``used``), read off an array of totals per node position: ``position`` maps a node id to its index."""

    __slots__ = ("position", "totals")

    def __init__(self, position: Mapping[str, int], totals: np.ndarray):
        self.position, self.totals = position, totals

    def get(self, nid: str, default=None):
        k = self.position.get(nid)
        return default if k is None else int(self.totals[k])


def node_totals(at: np.ndarray, gpus: np.ndarray, size: int) -> np.ndarray:
    """GPUs per position (int64, ``size`` positions) of the entries at positions ``at`` with ``gpus``
    (int64): summed in float64 where that is exact, else in int64."""
    if not len(gpus) or int(np.abs(gpus).max()) * len(gpus) < 2**52:
        return np.bincount(at, weights=gpus.astype(np.float64), minlength=size).astype(np.int64)
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, at, gpus)
    return out


def cut_dicts(pairs, sizes: list[int]) -> list[dict]:
    """A dict of each next ``sizes[k]`` (key, value) ``pairs`` (an iterator), in order (no list per dict)."""
    return [dict(islice(pairs, n)) for n in sizes]


def _cut(items: list, ends: list[int]) -> list[list]:
    return [items[a:b] for a, b in zip(ends, ends[1:])]


def _shared(keys: list[tuple[str, int]]) -> list[Placement]:
    """The frozen :class:`Placement` of each (node, GPUs), made once and shared: a plan at 16,384 GPUs
    lists thousands, and building each anew cost three quarters of a job's entry. Looked up for
    all at once; the new ones validated in one call (no Python frame per placement)."""
    found = list(map(_PLACEMENTS.get, keys))
    if not all(found):  # (a Placement is always truthy; "None in" would call its __eq__)
        if len(_PLACEMENTS) > _MAX_PLACEMENTS:
            _PLACEMENTS.clear()
        at = [k for k, got in enumerate(found) if got is None]
        missing = list(map(keys.__getitem__, at))
        made = _PLACEMENT_LIST.validate_python([{"node": node, "gpus": gpus} for node, gpus in missing])
        _PLACEMENTS.update(zip(missing, made))
        for k, p in zip(at, made):
            found[k] = p
    return found


def placement_models(wheres: Sequence[Mapping[str, int]]) -> list[list[Placement]]:
    """The frozen :class:`Placement` of each (node, GPUs) of each job's ``where``, shared between plans."""
    keys = list(chain.from_iterable(zip(w, w.values()) for w in wheres))
    return _cut(_shared(keys), [0, *accumulate(map(len, wheres))])
