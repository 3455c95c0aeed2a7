"""A cluster's nodes as columns: ids, GPU types, racks and GPUs in cluster order, with the few nodes
that carry failed GPUs or a repair time kept aside.

:func:`read_nodes` reads the ``cluster.nodes`` array of a parsed document into :class:`NodeColumns`
in a few C-level passes over it (no model and no Python frame per node) when every entry has the
common shape and passes the checks the ``Node`` model makes; otherwise it answers None and the
caller validates the entries one model at a time, which names the first bad one. The ``Node`` models
are made from the columns only when a caller asks for them (:meth:`NodeColumns.rows`).

This module imports nothing of the package: the model that validates a node is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any, Optional

import numpy as np

from unicron_plan.text import is_unicode

MAX_NODE_GPUS = 1024  # the Node model's bound on a node's GPUs
REQUIRED = ("id", "gpu_type", "gpus")
OPTIONAL = ("failed_gpus", "rack", "expected_repair_seconds")

_NONE = type(None)


class NodeColumns:
    """Every node of a cluster as columns in cluster order (read-only by convention: do not change).

    ``ids``, ``types``, ``racks`` (None for a node without one): lists; ``gpus``: int64 array (read-only)
    and ``gpus_list`` the same as a list; ``failed``: {position: failed GPU indices} of the nodes that
    list some, ascending; ``repair``: {position: expected_repair_seconds} of the nodes that state one;
    ``given``: for each optional field, whether the entries give it (True: all, False: none, else a
    bool array per node), so that the models made from the columns have the same fields set."""

    __slots__ = ("ids", "types", "racks", "gpus", "gpus_list", "failed", "repair", "given", "_at",
                 "_healthy_before", "_codes")

    def __init__(self, ids: list, types: list, racks: list, gpus_list: list, failed: dict, repair: dict,
                 given: dict):
        self.ids, self.types, self.racks, self.gpus_list = ids, types, racks, gpus_list
        self.gpus = np.asarray(gpus_list, dtype=np.int64).reshape(len(gpus_list))
        self.gpus.flags.writeable = False
        self.failed, self.repair, self.given = failed, repair, given
        self._at = self._healthy_before = self._codes = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def at(self) -> dict:
        """{node id: position} (made once; with repeated ids, the last position of each)."""
        if self._at is None:
            self._at = dict(zip(self.ids, range(len(self.ids))))
        return self._at

    @property
    def healthy_before(self) -> np.ndarray:
        """GPUs of each node that are not in its failed_gpus (int64, read-only, made once)."""
        if self._healthy_before is None:
            out = self.gpus.copy()
            if self.failed:
                at = np.fromiter(self.failed, dtype=np.int64, count=len(self.failed))
                out[at] -= np.fromiter(map(len, self.failed.values()), dtype=np.int64, count=len(self.failed))
            out.flags.writeable = False
            self._healthy_before = out
        return self._healthy_before

    def type_codes(self) -> tuple[list, np.ndarray]:
        """(the GPU types in order of their first node, each node's index among them: int64, read-only),
        made once."""
        if self._codes is None:
            self._codes = type_codes(self.types)
        return self._codes

    def failed_of(self, k: int) -> list:
        """The failed GPU indices of the node at position ``k`` (a list not to be changed)."""
        return self.failed.get(k, [])

    def type_totals(self) -> dict[str, int]:
        """{GPU type: GPUs of its nodes, healthy or not}, in order of the types' first nodes."""
        kinds, codes = self.type_codes()
        if len(kinds) == 1:
            return {kinds[0]: int(self.gpus.sum())}
        sums = np.bincount(codes, weights=self.gpus, minlength=len(kinds))
        return {t: int(s) for t, s in zip(kinds, sums)}

    def has(self, field: str, k: int) -> bool:
        """Whether the entry at position ``k`` gave the optional ``field``."""
        given = self.given[field]
        return bool(given) if isinstance(given, bool) else bool(given[k])

    def rows(self) -> list[dict[str, Any]]:
        """The entries as dicts with the fields they gave (validated values), for the ``Node`` model."""
        out = []
        for k, (nid, gtype, gpus) in enumerate(zip(self.ids, self.types, self.gpus_list)):
            row = {"id": nid, "gpu_type": gtype, "gpus": gpus}
            if self.has("failed_gpus", k):
                row["failed_gpus"] = list(self.failed.get(k, ()))
            if self.has("rack", k):
                row["rack"] = self.racks[k]
            if self.has("expected_repair_seconds", k):
                row["expected_repair_seconds"] = self.repair.get(k)
            out.append(row)
        return out

    @classmethod
    def from_models(cls, nodes: Sequence) -> "NodeColumns":
        """The columns of validated ``Node`` models (or objects with their attributes)."""
        n = len(nodes)
        ids = list(map(attrgetter("id"), nodes))
        failed_lists = list(map(attrgetter("failed_gpus"), nodes))
        repairs = list(map(attrgetter("expected_repair_seconds"), nodes))
        some = np.flatnonzero(np.fromiter(map(bool, failed_lists), dtype=bool, count=n)).tolist()
        failed = {k: list(failed_lists[k]) for k in some}
        stated = np.flatnonzero(np.fromiter(map(is_not, repairs, repeat(None)), dtype=bool, count=n)).tolist()
        repair = {k: repairs[k] for k in stated}
        return cls(ids, list(map(attrgetter("gpu_type"), nodes)), list(map(attrgetter("rack"), nodes)),
                   list(map(attrgetter("gpus"), nodes)), failed, repair,
                   dict.fromkeys(OPTIONAL, True))


def type_codes(types: Sequence[str]) -> tuple[list, np.ndarray]:
    """(the GPU types in order of their first node, each node's index among them: int64, read-only)."""
    kinds: dict[str, int] = dict.fromkeys(types)
    if len(kinds) <= 1:
        codes = np.zeros(len(types), dtype=np.int64)
    else:
        kinds = {t: k for k, t in enumerate(kinds)}
        codes = np.fromiter(map(kinds.__getitem__, types), dtype=np.int64, count=len(types))
    codes.flags.writeable = False
    return list(kinds), codes


def _text_ok(strings) -> bool:
    """Whether the strings are valid Unicode (no lone surrogate, which the models refuse in a string whose
    length they check)."""
    return is_unicode("".join(strings))


def _count(raw: list, field: str) -> int:
    """How many of the dicts ``raw`` have the key ``field`` (one C pass)."""
    return sum(map(dict.__contains__, raw, repeat(field)))


def read_nodes(raw: Any, validate_one: Callable[[dict], Any]) -> Optional[NodeColumns]:
    """The columns of the ``cluster.nodes`` array ``raw`` of a parsed document, or None when it is not a
    non-empty list of entries of the common shape that the checks here accept. Accepted exactly when
    every entry is a dict with the fields ``id`` and ``gpu_type`` (non-empty strings) and ``gpus`` (an
    int in 1..MAX_NODE_GPUS), optionally ``failed_gpus`` (a list), ``rack`` (a string or null) and
    ``expected_repair_seconds`` (any value), nothing else; the entries with a non-empty ``failed_gpus``
    or a non-null ``expected_repair_seconds`` (few) are validated by ``validate_one`` (the ``Node``
    model's own validation; None when it raises ValueError). Each test is a C-level pass over all
    entries; whatever is refused here is left to the per-entry validation, which gives its error."""
    if type(raw) is not list or not raw:
        return None
    n = len(raw)
    if set(map(type, raw)) != {dict}:
        return None
    get = dict.get
    ids = list(map(get, raw, repeat("id")))
    types = list(map(get, raw, repeat("gpu_type")))
    gpus = list(map(get, raw, repeat("gpus")))
    if set(map(type, ids)) != {str} or set(map(type, types)) != {str} or set(map(type, gpus)) != {int}:
        return None  # (a missing field reads as None here)
    kinds = dict.fromkeys(types)  # (a few GPU types: their tests are made once each)
    if "" in ids or "" in kinds or not _text_ok(ids) or not _text_ok(kinds):
        return None
    try:
        counts = np.fromiter(gpus, dtype=np.int64, count=n)
    except OverflowError:
        return None
    if counts.min() < 1 or counts.max() > MAX_NODE_GPUS:
        return None
    racks = list(map(get, raw, repeat("rack")))
    kinds = set(map(type, racks))
    if not kinds <= {str, _NONE}:  # (the model takes any string here: no length to count, no text check)
        return None
    failed_lists = list(map(get, raw, repeat("failed_gpus")))
    kinds_failed = set(map(type, failed_lists))
    if not kinds_failed <= {list, _NONE}:
        return None
    # How many entries give each optional field: read off the values where no value can be null.
    present = {"failed_gpus": n if _NONE not in kinds_failed else _count(raw, "failed_gpus"),
               "rack": n if _NONE not in kinds else _count(raw, "rack")}
    if _NONE in kinds_failed and failed_lists.count(None) != n - present["failed_gpus"]:
        return None  # an explicit null, which the model refuses
    extra = sum(map(len, raw)) - len(REQUIRED) * n - present["failed_gpus"] - present["rack"]
    present["expected_repair_seconds"] = _count(raw, "expected_repair_seconds") if extra else 0
    if extra != present["expected_repair_seconds"]:
        return None  # a field the model does not know
    special = np.fromiter(map(bool, failed_lists), dtype=bool, count=n) if sum(map(len, filter(None, failed_lists))) \
        else np.zeros(n, dtype=bool)
    if present["expected_repair_seconds"]:
        special |= np.fromiter(map(is_not, map(get, raw, repeat("expected_repair_seconds")), repeat(None)),
                               dtype=bool, count=n)
    special = np.flatnonzero(special)
    failed, repair = {}, {}
    for k in special.tolist():
        try:
            node = validate_one(raw[k])
        except ValueError:
            return None
        if node.failed_gpus:
            failed[k] = list(node.failed_gpus)
        if node.expected_repair_seconds is not None:
            repair[k] = node.expected_repair_seconds
    given = {f: (present[f] == n) if present[f] in (0, n) else
             np.fromiter(map(dict.__contains__, raw, repeat(f)), dtype=bool, count=n) for f in OPTIONAL}
    return NodeColumns(ids, types, racks, gpus, failed, repair, given)
