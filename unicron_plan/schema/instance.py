"""The v1 instance: cluster, jobs, event and cost (docs/format.md, "Instance").

Field-level rules live here (types, ranges, closed objects); rules that relate
fields to each other (unique ids, references, allocations that fit) live in
:mod:`unicron_plan.core.checks` so that their errors can name the exact path.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from collections.abc import Mapping
from typing import Annotated, Literal, Optional, Union

import numpy as np
from pydantic import BaseModel, Field, PrivateAttr, TypeAdapter, ValidationInfo, field_validator, model_serializer, model_validator

from unicron_plan.schema.base import StrictModel
from unicron_plan.schema.efficiency import MAX_GLOBAL_BATCH, MAX_SEQ_LEN, EfficiencyConstants
from unicron_plan.schema.nodes import NodeColumns, read_nodes

_COUNT_KEY = re.compile(r"[1-9][0-9]*")  # used with fullmatch (a "$" would admit a trailing newline)
# Throughput keys longer than this (>= 10**15 GPUs) exceed any cluster that fits in memory.
MAX_COUNT_DIGITS = 15


class GpuType(StrictModel):
    """One GPU model available in the cluster."""

    peak_tflops: float = Field(gt=0, description="Peak dense bf16 TFLOP/s per GPU.")
    memory_gib: float = Field(gt=0, description="HBM capacity per GPU in GiB.")
    intra_node_gbps: float = Field(gt=0, description="NVLink bandwidth per GPU, GB/s.")
    inter_node_gbps: float = Field(gt=0, description="Network bandwidth per GPU, GB/s.")


#: The longest repair time an instance may state (ten years, in seconds).
MAX_REPAIR_SECONDS = 10 * 365 * 86400.0


class Node(StrictModel):
    """A server with `gpus` GPUs of one type."""

    id: str = Field(min_length=1, description="Unique node name.")
    gpu_type: str = Field(min_length=1, description="A key of cluster.gpu_types.")
    gpus: int = Field(ge=1, le=1024, description="GPUs in the node (at most 1024).")
    failed_gpus: list[int] = Field(default_factory=list,
                                   description="GPU indices already failed before the event.")
    rack: Optional[str] = Field(default=None, description="Rack name; a node without one is a rack of its own.")
    expected_repair_seconds: Optional[float] = Field(
        default=None, gt=0, le=MAX_REPAIR_SECONDS,
        description="A node with failed GPUs whose repair is under way: the expected seconds until it returns "
                    "(read by cost.horizon 'lifetime' after a job arrival; docs/model.md).")

    @model_validator(mode="after")
    def _failed_indices_in_range(self) -> "Node":
        if not self.failed_gpus and self.expected_repair_seconds is None:  # most nodes: nothing to check
            return self
        seen = set()
        for k, g in enumerate(self.failed_gpus):
            if not 0 <= g < self.gpus:
                raise ValueError(f"failed_gpus[{k}]: GPU index {g} is outside 0..{self.gpus - 1}")
            if g in seen:
                raise ValueError(f"failed_gpus[{k}]: GPU index {g} is listed twice")
            seen.add(g)
        if self.expected_repair_seconds is not None and not self.failed_gpus:
            raise ValueError("expected_repair_seconds: the node has no failed GPU to repair")
        return self


# A cluster read from a document whose nodes all have the common shape holds them as columns
# (Cluster.node_columns, read by unicron_plan.schema.nodes.read_nodes without a model per node); its
# ``nodes`` are then made, once, on first access (the same models validation makes). Once made, the
# models are what the columns are read from. (The docstring below is the schema's description.)
class Cluster(StrictModel):
    """GPU types and the nodes that carry them."""

    gpu_types: dict[str, GpuType] = Field(min_length=1, description="GPU types by name (at least one).")
    nodes: list[Node] = Field(min_length=1, description="Every node of the cluster, ids unique.")
    _columns: Optional[NodeColumns] = PrivateAttr(default=None)  # the nodes as read, while no model is made

    @model_validator(mode="wrap")
    @classmethod
    def _nodes_as_columns(cls, data, handler, info: ValidationInfo):
        raw = data.get("nodes") if type(data) is dict else None
        read = info.context.get("node_columns") if type(info.context) is dict else None
        if read is not None and read[0] is raw:  # (read from this very list by the reader, just before)
            columns = read[1]
        else:
            columns = read_node_columns(raw) if raw is not None else None
        if columns is None:  # not the common shape, or some entry is bad: the models name it
            return handler(data)
        cluster = handler({**data, "nodes": [_placeholder_node()]})
        del cluster.__dict__["nodes"]
        _set_private(cluster, "_columns", columns)
        return cluster

    @model_serializer(mode="wrap")
    def _dump_with_nodes(self, handler):
        self._made_nodes()
        return handler(self)

    def __getattr__(self, name: str):
        if name == "nodes":
            made = self._made_nodes()
            if made is not None:
                return made
        return super().__getattr__(name)

    def _made_nodes(self):
        """The node models, made from the columns when they were not made yet (None when there are
        no columns and no models: a cluster being built)."""
        nodes = self.__dict__.get("nodes")
        if nodes is not None:
            return nodes
        private = self.__pydantic_private__
        columns = private.get("_columns") if private is not None else None
        if columns is None:
            return None
        nodes = _node_list().validate_python(columns.rows())
        self.__dict__["nodes"] = nodes
        return nodes

    def read_columns(self) -> Optional[NodeColumns]:
        """The nodes as read from the document, while no node model was made; else None."""
        private = self.__pydantic_private__
        columns = private.get("_columns") if private is not None else None
        return columns if columns is not None and "nodes" not in self.__dict__ else None

    def node_columns(self) -> NodeColumns:
        """The nodes as :class:`NodeColumns`: those read from the document while no model was made,
        else read from the models (each call: they may have been changed)."""
        columns = self.read_columns()
        return columns if columns is not None else NodeColumns.from_models(self.nodes)

    def __eq__(self, other):
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(other) is type(self) and self.gpu_types == other.gpu_types and self.nodes == other.nodes \
            and (self.__pydantic_extra__ or {}) == (other.__pydantic_extra__ or {})

    __hash__ = None

    def __iter__(self):
        self._made_nodes()
        return super().__iter__()

    def __repr_args__(self):
        self._made_nodes()
        return super().__repr_args__()


def read_node_columns(raw) -> Optional[NodeColumns]:
    """The columns of a parsed ``cluster.nodes`` array (:func:`unicron_plan.schema.nodes.read_nodes` with
    the ``Node`` model's validation), or None. A reader that gives them with the document puts them in
    the validation's context as ``node_columns``: (the very list they were read from, the columns),
    which the cluster then takes instead of reading the list again."""
    return read_nodes(raw, Node.model_validate)


@functools.lru_cache(maxsize=1)
def _placeholder_node() -> Node:
    """A valid node that stands for the nodes read as columns while the cluster's other fields are validated."""
    return Node(id="_", gpu_type="_", gpus=1)


@functools.lru_cache(maxsize=1)
def _node_list() -> TypeAdapter:
    return TypeAdapter(list[Node])


def _private(model, name: str):
    """A private attribute of a validated model, read from its store: ``model._name`` goes through
    ``BaseModel.__getattr__`` (a Python call, tens of thousands per plan at 1,048,576 GPUs)."""
    private = model.__pydantic_private__
    return private.get(name) if private is not None else getattr(model, name)


def _set_private(model, name: str, value) -> None:
    """Set a private attribute of a validated model in its store (``model._name = value`` goes through
    ``BaseModel.__setattr__``, a Python call)."""
    private = model.__pydantic_private__
    if private is not None:
        private[name] = value
    else:
        setattr(model, name, value)


MAX_COMPACT_COUNT = 10**MAX_COUNT_DIGITS - 1  # the largest count of the compact table form
_NOT_DIGITS = {ord(ch): None for ch in "0123456789,"}  # str.translate deletes these


class ArrayTable(Mapping):
    """A read-only {GPU count: TFLOP/s} mapping over two ascending arrays: lookups by binary search,
    no dict or int object per count (a 131,072-GPU instance holds hundreds of thousands)."""

    __slots__ = ("counts", "tflops")

    def __init__(self, counts: np.ndarray, tflops: np.ndarray):
        self.counts, self.tflops = counts, tflops

    def _at(self, key) -> int:
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
            return -1
        k = int(self.counts.searchsorted(key))  # the method: a third of the function's call cost
        return k if k < len(self.counts) and int(self.counts[k]) == key else -1

    def __getitem__(self, key) -> float:
        k = self._at(key)
        if k < 0:
            raise KeyError(key)
        return float(self.tflops[k])

    def __contains__(self, key) -> bool:
        return self._at(key) >= 0

    def get(self, key, default=None):
        k = self._at(key)  # (one search: Mapping.get would make two calls for it)
        return default if k < 0 else float(self.tflops[k])

    def __iter__(self):
        return iter(self.counts.tolist())

    def __len__(self) -> int:
        return len(self.counts)

    def keys(self):
        return self.counts.tolist()

    def values(self):
        return self.tflops.tolist()

    def items(self):
        return list(zip(self.counts.tolist(), self.tflops.tolist()))

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    __hash__ = None


# A compact table whose numbers the reader gave as arrays (io.read_json_tables) holds only its arrays;
# its ``counts`` and ``tflops`` lists are made from them, once, on first access or dump (the same lists
# the per-entry validation makes: ints and floats). (The docstring below is the schema's description.)
class CompactTable(StrictModel):
    """The table form as two arrays: ``counts`` (strictly ascending integers >= 1) and the
    ``tflops`` at them (>= 0), parsed without a dict or a string per count; the checks across
    entries run on numpy arrays, kept read-only for the readers of the table (:meth:`arrays`)."""

    counts: list[int] = Field(min_length=1, description="Allowed GPU counts, strictly ascending, >= 1.")
    tflops: list[float] = Field(min_length=1, description="Aggregate TFLOP/s of the job at each count (>= 0).")
    _arrays: Optional[tuple] = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _aligned(self) -> "CompactTable":
        if len(self.counts) != len(self.tflops):
            raise ValueError(f"'counts' has {len(self.counts)} entries, 'tflops' {len(self.tflops)}")
        try:
            counts = np.asarray(self.counts, dtype=np.int64)
        except OverflowError:
            counts = None
        if counts is None or counts.min() < 1 or counts.max() > MAX_COMPACT_COUNT:
            raise ValueError(f"counts must lie in [1, {MAX_COMPACT_COUNT}]")
        steps = counts[1:] - counts[:-1]
        if len(steps) and steps.min() <= 0:
            k = int(np.argmax(steps <= 0)) + 1
            raise ValueError(f"counts must be strictly ascending (counts[{k}] = {self.counts[k]})")
        tflops = np.asarray(self.tflops, dtype=float)
        if tflops.min() < 0:
            k = int(np.argmax(tflops < 0))
            raise ValueError(f"tflops[{k}]: {self.tflops[k]} is negative")
        counts.flags.writeable = tflops.flags.writeable = False
        _set_private(self, "_arrays", (counts, tflops))
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _deferred(cls, data, handler, info: ValidationInfo) -> "CompactTable":
        """Under :func:`read_tables_once` (the validation context holds a list ``compact_tables``): a
        table of two lists of one length >= 1 and nothing else is kept as read (no copy of its lists
        entry by entry) and listed there, its entries checked afterwards on arrays by
        :func:`settle_tables`. Any other input takes the per-entry validation. (Declared after
        :meth:`_aligned`: a later validator wraps the earlier ones, so this one runs first.)"""
        context = info.context
        deferred = context.get("compact_tables") if type(context) is dict else None
        if type(deferred) is list and type(data) is dict and len(data) == 2:
            counts, tflops = data.get("counts"), data.get("tflops")
            as_lists = type(counts) is list and type(tflops) is list and counts and len(counts) == len(tflops)
            as_arrays = type(counts) is np.ndarray and type(tflops) is np.ndarray and counts.dtype == np.int64 \
                and tflops.dtype == np.float64 and counts.ndim == tflops.ndim == 1 \
                and 0 < len(counts) == len(tflops)  # read as arrays: settle_tables checks them
            if as_lists or as_arrays:
                table = cls._kept(counts, tflops)
                deferred.append(table)
                return table
        return handler(data)

    @classmethod
    def _kept(cls, counts, tflops) -> "CompactTable":
        """``cls.model_construct(counts=counts, tflops=tflops)`` (both fields set, no extra, the private
        attribute at its default) without its per-field walk: 8,192 tables at 1,048,576 GPUs."""
        table = cls.__new__(cls)
        setattr_ = object.__setattr__
        setattr_(table, "__dict__", {"counts": counts, "tflops": tflops})
        setattr_(table, "__pydantic_fields_set__", {"counts", "tflops"})
        setattr_(table, "__pydantic_extra__", None)
        setattr_(table, "__pydantic_private__", {"_arrays": None})
        return table

    def _made_lists(self) -> None:
        """Make the ``counts`` and ``tflops`` lists from the arrays when the table holds only those."""
        fields = self.__dict__
        if "counts" not in fields:
            counts, tflops = self.arrays()
            fields["counts"], fields["tflops"] = counts.tolist(), tflops.tolist()

    def __getattr__(self, name: str):
        if name in ("counts", "tflops") and _private(self, "_arrays") is not None:
            self._made_lists()
            return self.__dict__[name]
        return super().__getattr__(name)

    @model_serializer(mode="wrap")
    def _dump_with_lists(self, handler):
        self._made_lists()
        return handler(self)

    def __eq__(self, other):
        self._made_lists()
        if isinstance(other, CompactTable):
            other._made_lists()
        return super().__eq__(other)

    __hash__ = None

    def __iter__(self):
        self._made_lists()
        return super().__iter__()

    def __repr_args__(self):
        self._made_lists()
        return super().__repr_args__()

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(counts, tflops) as read-only numpy arrays (int64, float64), made once."""
        made = _private(self, "_arrays")
        if made is not None:
            return made
        if self._arrays is None:  # a copy made without validation (model_copy, model_construct)
            counts, tflops = np.asarray(self.counts, dtype=np.int64), np.asarray(self.tflops, dtype=float)
            counts.flags.writeable = tflops.flags.writeable = False
            self._arrays = (counts, tflops)
        return self._arrays


def settle_tables(tables: "list[CompactTable]") -> bool:
    """Check the compact tables :meth:`CompactTable._deferred` kept as read and give each its arrays;
    False (and no table changed) unless every table passes every check of the per-entry validation:
    counts integers (not booleans), strictly ascending, in [1, MAX_COMPACT_COUNT]; tflops numbers (not
    booleans), finite, >= 0. An integer among the tflops is made a float, as the per-entry validation
    makes it. Linear: per list a sum (refuses any value but a number) and one read into an array; the
    checks on the arrays of many tables joined (in groups of at most _GROUP entries: buffers the
    allocator reuses, no fresh memory the size of all tables)."""
    if not tables:
        return True
    counts_lists = [t.__dict__["counts"] for t in tables]
    tflops_lists = [t.__dict__["tflops"] for t in tables]
    # Tables the reader gave as arrays (int64 counts, float64 TFLOP/s: no boolean, no float count, every
    # integer TFLOP/s already a float) need only the checks on values; the lists need their types checked.
    listed = [k for k, c in enumerate(counts_lists) if type(c) is not np.ndarray]
    as_read = len(listed) < len(tables)
    try:
        if not all(type(sum(counts_lists[k])) is int for k in listed):  # a float among the counts
            return False
        deque((sum(tflops_lists[k]) for k in listed), maxlen=0)  # refuses a string, null, an array, an object
        counts = [np.asarray(c, dtype=np.int64) for c in counts_lists]
        tflops = [np.asarray(t, dtype=float) for t in tflops_lists]
    except (TypeError, ValueError, OverflowError):
        return False
    # a boolean reads as 0 or 1: only a first count can be 1 (the others are above it)
    if not all(type(counts_lists[k][0]) is int for k in listed):
        return False
    is_listed = np.zeros(len(tables), dtype=bool)
    is_listed[listed] = True
    to_float = set()
    first = 0
    while first < len(tables):
        last, n = first, 0
        while last < len(tables) and (n == 0 or n + len(counts[last]) <= _GROUP):
            n += len(counts[last])
            last += 1
        sizes = np.fromiter(map(len, counts[first:last]), dtype=np.int64, count=last - first)
        off = np.zeros(last - first + 1, dtype=np.int64)
        np.cumsum(sizes, out=off[1:])
        all_c, all_t = np.concatenate(counts[first:last]), np.concatenate(tflops[first:last])
        if not (all_c.min() >= 1 and all_c.max() <= MAX_COMPACT_COUNT):
            return False
        ascending = all_c[1:] > all_c[:-1]
        ascending[off[1:-1] - 1] = True  # the first count of a table follows another table's last
        if not ascending.all():
            return False
        top = all_t.max()
        if not (all_t.min() >= 0 and top < np.inf):
            return False
        if as_read and top >= _WIDE_TFLOPS:  # (read as arrays: the plain reader takes such a document)
            return False
        if not is_listed[first:last].any():
            first = last
            continue
        # a boolean or an integer among the tflops has an integral value: look at those entries' types
        integral = np.flatnonzero(np.trunc(all_t) == all_t)
        if len(integral):
            table_of = np.searchsorted(off, integral, side="right") - 1
            for k, at in zip((table_of + first).tolist(), (integral - off[table_of]).tolist()):
                if not is_listed[k]:
                    continue
                kind = type(tflops_lists[k][at])
                if kind is bool:
                    return False
                if kind is not float:
                    to_float.add(k)
        first = last
    for k, (table, c, t) in enumerate(zip(tables, counts, tflops)):
        c.flags.writeable = t.flags.writeable = False
        _set_private(table, "_arrays", (c, t))
        if not is_listed[k]:  # the lists are made from the arrays when asked for
            del table.__dict__["counts"], table.__dict__["tflops"]
        elif k in to_float:
            table.__dict__["tflops"] = t.tolist()
    return True


_GROUP = 1 << 18  # entries of the tables checked together by settle_tables (2 MiB per array)
_WIDE_TFLOPS = float(2**63)  # a TFLOP/s this large, read as an array, sends the document to the plain reader


def read_tables_once() -> dict:
    """The validation context under which compact tables are kept as read (a new one per
    validation); after the validation, :func:`settle_tables` of its ``compact_tables`` must pass,
    else the document is validated again without it (which names the first bad entry)."""
    return {"compact_tables": []}


def _check_count_table(table: dict[str, float]) -> None:
    """Keys are decimal GPU counts, values are not negative (ValueError naming the key). One pass
    in C over all keys joined: only ASCII digits, none empty, none with a leading zero. An empty table
    is refused (as the compact form's empty arrays are)."""
    if not table:
        raise ValueError("the table is empty: give at least one GPU count")
    joined = ",".join(table)
    if not joined.isascii() or joined.translate(_NOT_DIGITS) or joined.count(",") != len(table) - 1 \
            or ",," in f",{joined}," or ",0" in f",{joined}":
        bad = next((key for key in table if not _COUNT_KEY.fullmatch(key)), joined)
        raise ValueError(f"key {bad!r} is not a decimal GPU count (an integer >= 1)")
    if table and min(table.values()) < 0:
        key, value = next((k, v) for k, v in table.items() if v < 0)
        raise ValueError(f"key {key!r}: {value} is negative")


class Throughput(StrictModel):
    """Achieved aggregate TFLOP/s of a job per allowed GPU count.

    Either a table (`tflops`, keys are decimal GPU counts, or `compact`, the same as two
    arrays) or a model of the model library with its batch shape, from which the table is derived.
    A job that may run on several GPU types gives one table per type (`by_type`)
    or, with a model, the types it may use (`gpu_types`); `gpu_type` is then the
    type it runs on now, and `tflops` is that type's table.
    """

    gpu_type: str = Field(min_length=1, description="GPU type the job runs on (a key of cluster.gpu_types).")
    tflops: Optional[dict[str, float]] = Field(default=None,
        description="Aggregate achieved TFLOP/s of the whole job per allowed GPU count (keys: decimal "
                    "integers >= 1; values >= 0); give this or model.")
    compact: Optional[CompactTable] = Field(default=None,
        description="The same table as tflops in column form ({counts: [...], tflops: [...]}), read "
                    "without a dict per count; give at most one of tflops, compact and model.")
    by_type: Optional[dict[str, dict[str, float]]] = Field(
        default=None, min_length=1, max_length=64,
        description="Mixed fleets: {GPU type: table of the same form as 'tflops'} for every type the job may "
                    "run on, 'gpu_type' among them (the type it runs on now; a queued job may name any). "
                    "'tflops', when also given, must equal by_type[gpu_type]. The plan chooses one type per job.")
    gpu_types: Optional[list[str]] = Field(
        default=None, min_length=1, max_length=64,
        description="Mixed fleets, with 'model': every GPU type the job may run on ('gpu_type' among them); "
                    "one table per type is derived from the performance model.")
    _table: Optional[ArrayTable] = PrivateAttr(default=None)  # table_view(), made once
    _arrays: Optional[tuple] = PrivateAttr(default=None)  # table_arrays(), made once
    _in_order: bool = PrivateAttr(default=True)  # the arrays are the table's entries in its own order
    _order: Optional[np.ndarray] = PrivateAttr(default=None)  # else: the arrays' entries' places in the table
    model: Optional[str] = Field(default=None, min_length=1,
        description="A model of the package's library (`unicron-plan models`); the table is derived "
                    "from the performance model. Give this or tflops.")
    global_batch: Optional[int] = Field(default=None, ge=1, le=MAX_GLOBAL_BATCH,
        description="Sequences per iteration of a model-named job (1 to 2^24).")
    seq_len: Optional[int] = Field(default=None, ge=1, le=MAX_SEQ_LEN,
        description="Tokens per sequence of a model-named job (1 to 2^22).")
    recompute: Optional[Literal["auto", "full", "selective", "none"]] = Field(
        default=None, description="Activation recomputation for model-derived tables: a fixed mode, or "
                                  "'auto' (the default): per GPU count the fastest mode whose layout fits.")

    @field_validator("tflops")
    @classmethod
    def _keys_are_counts(cls, table: Optional[dict[str, float]]) -> Optional[dict[str, float]]:
        if table is None:
            return table
        _check_count_table(table)
        return table

    @field_validator("by_type")
    @classmethod
    def _type_tables(cls, by_type: Optional[dict[str, dict[str, float]]]) -> Optional[dict[str, dict[str, float]]]:
        if by_type is None:
            return by_type
        for gpu_type, table in by_type.items():
            if not gpu_type:
                raise ValueError("a GPU type name is empty")
            try:
                _check_count_table(table)
            except ValueError as exc:
                raise ValueError(f"{gpu_type}: {exc}") from None
        return by_type

    @field_validator("gpu_types")
    @classmethod
    def _type_names(cls, names: Optional[list[str]]) -> Optional[list[str]]:
        if names is None:
            return names
        for k, name in enumerate(names):
            if not name:
                raise ValueError(f"[{k}]: a GPU type name is empty")
            if name in names[:k]:
                raise ValueError(f"[{k}]: {name!r} is listed twice")
        return names

    @model_validator(mode="after")
    def _several_types(self) -> "Throughput":
        """by_type goes with tables, gpu_types with a model; gpu_type is among them; tflops is
        by_type[gpu_type] (filled in when absent, so single-type readers see the current type's table)."""
        if self.by_type is not None:
            if self.model is not None or self.gpu_types is not None:
                raise ValueError("'by_type' (tables per GPU type) goes without 'model' and 'gpu_types'")
            if self.compact is not None:
                raise ValueError("'by_type' (tables per GPU type, each in the 'tflops' form) goes without 'compact'")
            if self.gpu_type not in self.by_type:
                raise ValueError(f"gpu_type {self.gpu_type!r} (the type the job runs on now) is not a key "
                                 f"of 'by_type' ({', '.join(sorted(self.by_type))})")
            if self.tflops is None:
                self.tflops = self.by_type[self.gpu_type]
            elif self.tflops != self.by_type[self.gpu_type]:
                raise ValueError("'tflops' differs from by_type[gpu_type]; give one of them")
        if self.gpu_types is not None:
            if self.model is None:
                raise ValueError("'gpu_types' goes with 'model' (tables per type: 'by_type')")
            if self.gpu_type not in self.gpu_types:
                raise ValueError(f"gpu_type {self.gpu_type!r} (the type the job runs on now) is not in "
                                 f"'gpu_types'")
        return self

    def allowed_types(self) -> list[str]:
        """The GPU types the job may run on: ``gpu_type`` first, then the others as listed."""
        listed = self.by_type if self.by_type is not None else (self.gpu_types or ())
        return [self.gpu_type] + [t for t in listed if t != self.gpu_type]

    def on_type(self, gpu_type: str) -> "Throughput":
        """This throughput with the job running on ``gpu_type`` now (one of :meth:`allowed_types`): what
        a job moved to another type by a plan carries from then on."""
        if gpu_type == self.gpu_type:
            return self
        if gpu_type not in self.allowed_types():
            raise ValueError(f"{gpu_type!r} is not a GPU type the job may run on")
        data = self.model_dump(exclude_none=True)
        data["gpu_type"] = gpu_type
        if self.by_type is not None:
            data.pop("tflops", None)
        return Throughput.model_validate(data)

    def type_table(self, gpu_type: str) -> dict[int, float]:
        """``by_type[gpu_type]`` as {gpu count: TFLOP/s} (counts of more than MAX_COUNT_DIGITS digits left
        out, as in :meth:`table`); the current type's is :meth:`table`."""
        if gpu_type == self.gpu_type:
            return self.table()
        if self.by_type is None or gpu_type not in self.by_type:
            raise ValueError(f"no table for GPU type {gpu_type!r}")
        return {int(k): float(v) for k, v in self.by_type[gpu_type].items() if len(k) <= MAX_COUNT_DIGITS}

    @model_validator(mode="after")
    def _table_or_model(self) -> "Throughput":
        if (self.tflops is not None) + (self.compact is not None) + (self.model is not None) != 1:
            raise ValueError("give exactly one of 'tflops' (a table), 'compact' (the same as arrays) or 'model'")
        if self.model is not None and (self.global_batch is None or self.seq_len is None):
            raise ValueError("a model-derived throughput needs 'global_batch' and 'seq_len'")
        if self.has_table and (self.global_batch or self.seq_len or self.recompute):
            raise ValueError("'global_batch', 'seq_len' and 'recompute' go with 'model', not a table")
        return self

    @property
    def has_table(self) -> bool:
        """Whether the table is given (``tflops`` or ``compact``), not derived from a model."""
        return self.tflops is not None or self.compact is not None

    def table(self) -> dict[int, float]:
        """The table as {gpu count: TFLOP/s} (only for the table form).

        Keys have no upper limit; a count of more than MAX_COUNT_DIGITS digits exceeds any
        cluster this package can hold, can never be chosen and is left out here (so nothing
        downstream converts or multiplies it)."""
        if not self.has_table:
            raise ValueError("throughput names a model; derive its table with unicron_plan.perf")
        return dict(self.table_view())

    def table_view(self) -> Mapping[int, float]:
        """:meth:`table` as a read-only view of the copy converted once per object (a service or a
        simulator asks at every event)."""
        if not self.has_table:
            raise ValueError("throughput names a model; derive its table with unicron_plan.perf")
        made = _private(self, "_table")
        if made is None:
            made = ArrayTable(*self.table_arrays())
            _set_private(self, "_table", made)
        return made

    def table_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(GPU counts ascending, TFLOP/s at them) of :meth:`table`, read-only arrays made once per object."""
        made = _private(self, "_arrays")
        if made is not None:
            return made
        if self.compact is not None:  # already ascending: no dict, no sort
            made = self.compact.arrays()
            _set_private(self, "_arrays", made)
            return made
        table = self.tflops
        # The keys are checked decimal strings without leading zeros: one parse of them all in
        # C. A key of more than MAX_COUNT_DIGITS digits is never chosen and is left out: it is
        # exactly a count of at least 10**MAX_COUNT_DIGITS (one too large for int64 reads as
        # its largest value).
        counts = np.fromstring(",".join(table), dtype=np.int64, sep=",") if table \
            else np.zeros(0, dtype=np.int64)
        tflops = np.fromiter(table.values(), dtype=float, count=len(table))
        if len(counts) and counts.max() > MAX_COMPACT_COUNT:
            fits = counts <= MAX_COMPACT_COUNT
            counts, tflops = counts[fits], tflops[fits]
        in_order = len(counts) == len(table) and bool((counts[1:] > counts[:-1]).all())
        _set_private(self, "_in_order", in_order)
        order = np.argsort(counts, kind="stable")
        if not in_order and len(counts) == len(table):
            order.flags.writeable = False
            _set_private(self, "_order", order)
        counts, tflops = counts[order], tflops[order]
        counts.flags.writeable = tflops.flags.writeable = False
        _set_private(self, "_arrays", (counts, tflops))
        return counts, tflops

    def table_order(self) -> Optional[np.ndarray]:
        """For a ``tflops`` table whose keys are not ascending (every key a count the arrays keep): the
        place in the table of each entry of :meth:`table_arrays`, which with them determines the table;
        else None."""
        self.table_arrays()
        return _private(self, "_order")

    def arrays_in_order(self) -> bool:
        """Whether :meth:`table_arrays` are every entry of the table in the order given (a compact table,
        or ``tflops`` with its keys ascending), so that the arrays determine the table."""
        self.table_arrays()
        return _private(self, "_in_order")


class CurrentAllocation(StrictModel):
    """Where a job runs before the event."""

    gpus: int = Field(ge=0, description="GPUs the job held before the event (0 or a key of its table).")
    nodes: list[str] = Field(default_factory=list,
        description="Nodes the job ran on before the event, each once (none when gpus is 0).")


class Job(StrictModel):
    """A training job with its weight, throughput curve and current allocation."""

    id: str = Field(min_length=1, description="Unique job name.")
    weight: float = Field(ge=0, description="Priority weight of the job's throughput in the objective (>= 0).")
    throughput: Throughput = Field(
        description="The job's throughput per GPU count: a table or a model of the library.")
    current: CurrentAllocation = Field(description="The allocation before the event.")
    transition_seconds: Optional[float] = Field(default=None, ge=0,
        description="D_trans: seconds of work lost when the job is changed (>= 0; default "
                    "cost.default_transition_seconds).")
    # --- node-level and churn constraints (docs/solvers.md) ---
    tp: Optional[int] = Field(
        default=None, ge=1, le=1024,
        description="Tensor-parallel group size: on every node the job uses, its GPU count is a "
                    "multiple of tp (no tensor-parallel group crosses a node). Counts of the "
                    "throughput table that are not multiples of tp are infeasible. The current "
                    "allocation must respect it.")
    pinned: Optional[bool] = Field(
        default=None,
        description="The job keeps exactly its current GPU count and its current per-node split. "
                    "A pinned job on a drained node (or whose split no longer fits) makes the "
                    "instance infeasible.")
    max_nodes: Optional[int] = Field(
        default=None, ge=1,
        description="Locality: the job runs on at most this many nodes. The current allocation "
                    "must respect it.")
    same_rack: Optional[bool] = Field(
        default=None,
        description="Locality: all the job's nodes are in one rack (a node without a rack is a "
                    "rack of its own). The current allocation must respect it.")
    min_gain_fraction: Optional[float] = Field(
        default=None, ge=0,
        description="Hysteresis: a job that was not hit changes (y != current.gpus) only if its own "
                    "term rises by at least this fraction: G(y) >= (1 + f) * G(x), where "
                    "G(x) = F(x) * D_run >= 0 is its term when it stays. Hit jobs always change "
                    "and are exempt.")
    placement_left_to: Optional[str] = Field(
        default=None, min_length=1, max_length=64,
        description="The scheduler that places this job's pods (e.g. Volcano, for a job whose pods select no "
                    "node label the planner can set): its count is planned, its nodes are the scheduler's; "
                    "the plan's nodes for it are what the count needs, not an instruction.")


class FailedGpu(StrictModel):
    """One GPU that failed in the event."""

    node: str = Field(min_length=1, description="Node id of the GPU.")
    gpu: int = Field(ge=0, description="GPU index within the node (0..gpus-1).")


class Event(StrictModel):
    """What changed just before planning."""

    kind: Literal["failure"] = Field(description="The event's kind: failure.")
    failed_nodes: list[str] = Field(default_factory=list, description="Nodes that lose every GPU, each once.")
    failed_gpus: list[FailedGpu] = Field(default_factory=list, description="Single GPUs that fail, each once.")
    expected_repair_seconds: Optional[dict[str, Annotated[float, Field(gt=0, le=MAX_REPAIR_SECONDS)]]] = Field(
        default=None, max_length=100_000,
        description="Expected seconds until each failed node returns, by node id (a node of failed_nodes or of "
                    "failed_gpus); read by cost.horizon 'lifetime' (docs/model.md). A node not listed gets "
                    "cost.expected_repair_seconds.")


# --- Event kinds beyond "failure". The discriminator is `kind`. ---

class RepairEvent(StrictModel):
    """Nodes or GPUs return: each listed GPU was in its node's failed_gpus before and is healthy after.

    `repaired_nodes` repairs every failed GPU of the node. No job is hit by a repair; jobs may grow.
    """

    kind: Literal["repair"] = Field(description="The event's kind: repair.")
    repaired_nodes: list[str] = Field(default_factory=list,
                                      description="Nodes whose failed GPUs all return to service.")
    repaired_gpus: list[FailedGpu] = Field(default_factory=list,
                                           description="Single GPUs (listed in failed_gpus) that return.")


class JobArrivalEvent(StrictModel):
    """Jobs join: each listed job is a job of the instance with current.gpus 0. Nothing is hit."""

    kind: Literal["job_arrival"] = Field(description="The event's kind: job_arrival.")
    jobs: list[str] = Field(min_length=1, description="Ids of the arriving jobs (current.gpus must be 0).")


class JobExitEvent(StrictModel):
    """Jobs leave: each listed job must be planned 0 GPUs, and its term G_i is 0 (no transition charge)."""

    kind: Literal["job_exit"] = Field(description="The event's kind: job_exit.")
    jobs: list[str] = Field(min_length=1, description="Ids of the leaving jobs; their GPUs are freed.")


AnyEvent = Annotated[Union[Event, RepairEvent, JobArrivalEvent, JobExitEvent], Field(discriminator="kind")]

# --- end of event kinds ---


class Cost(StrictModel):
    """Time constants of the objective: D_run (directly or from node MTBF) and D_trans."""

    expected_run_seconds: Optional[float] = Field(default=None, gt=0,
        description="D_run: seconds the plan is expected to run (> 0); give this or node_mtbf_hours.")
    node_mtbf_hours: Optional[float] = Field(default=None, gt=0,
        description="Node MTBF, hours (> 0): D_run = node_mtbf_hours x 3600 / nodes in service; give this "
                    "or expected_run_seconds.")
    default_transition_seconds: Optional[float] = Field(default=None, ge=0,
        description="D_trans of jobs without transition_seconds (>= 0).")
    horizon: Optional[Literal["cluster", "job", "event", "lifetime"]] = Field(
        default=None,
        description="How long a plan's choice for a job is valued against its transition (docs/model.md, "
                    "'Planning horizon'): 'cluster' (the default here, Unicron's objective) the expected time "
                    "to the next failure anywhere in the cluster, D_run, for every job; 'job' the expected "
                    "time to the next failure of the job's own nodes, node MTBF / nodes held, which scales "
                    "the job's transition penalty by nodes held / H; 'event' 'cluster' after a failure or a "
                    "job arrival, 'job' after a repair, a job exit or with no event; 'lifetime' the expected "
                    "time the job's new allocation lasts: until its own nodes fail or, after a failure or a "
                    "job arrival, until the capacity under repair returns (when the change is charged again). "
                    "'job', 'event' and 'lifetime' need node_mtbf_hours.")
    expected_repair_seconds: Optional[float] = Field(
        default=None, gt=0, le=MAX_REPAIR_SECONDS,
        description="Expected seconds until a node that fails in the event returns, when the event gives "
                    "none for it (cost.horizon 'lifetime'; default: the mean of the fault data's repair "
                    "time, 71,225 s).")
    derive_transition_seconds: bool = Field(
        default=False,
        description="When true, jobs that name a model and give no transition_seconds get D_trans from "
                    "the transition model of unicron_plan.perf (docs/perf.md) instead of "
                    "default_transition_seconds. Such jobs also use it when no default is given.")

    @model_validator(mode="after")
    def _exactly_one_horizon(self) -> "Cost":
        if (self.expected_run_seconds is None) == (self.node_mtbf_hours is None):
            raise ValueError("give exactly one of 'expected_run_seconds' or 'node_mtbf_hours'")
        if self.horizon in ("job", "event", "lifetime") and self.node_mtbf_hours is None:
            raise ValueError(f"horizon {self.horizon!r} needs node_mtbf_hours (expected_run_seconds is one "
                             "horizon for every job)")
        return self


class Reference(StrictModel):
    """A recorded optimum of a library instance; solvers ignore it."""

    objective: float = Field(description="A known optimal objective, TFLOP (library instances; solvers ignore it).")
    method: str = Field(description="How the reference objective was found.")


class Instance(StrictModel):
    """A planning problem: the cluster, the jobs, the event and the cost constants."""

    schema_version: Literal["1"] = Field(description="Version of the format: 1.")
    name: str = Field(min_length=1, description="Name of the instance (echoed in the plan).")
    cluster: Cluster = Field(description="GPU types and nodes.")
    jobs: list[Job] = Field(description="Every job, running, queued (current.gpus 0) or leaving.")
    event: Optional[AnyEvent] = Field(default=None,
        description="What changed (failure, repair, job_arrival, job_exit); absent: nothing changed.")
    cost: Cost = Field(description="D_run and the default D_trans.")
    isolation: Literal["node", "gpu"] = Field(
        default="node",
        description="'node': a node that lost a GPU in the event is drained whole (Unicron); "
                    "'gpu': only the failed GPUs are removed.")
    reference: Optional[Reference] = Field(default=None, description="A known optimum, for library instances.")
    efficiency: Optional[dict[str, EfficiencyConstants]] = Field(
        default=None, max_length=64,
        description="Calibrated efficiency constants per GPU type (the 'constants' of one GPU type and stack "
                    "in the file `unicron-plan calibrate` writes), used for the jobs whose throughput names a "
                    "model; GPU types not listed keep the packaged constants.")
    max_changed_jobs: Optional[int] = Field(
        default=None, ge=0,
        description="Churn limit: at most this many jobs are changed (y != x, or hit). Hit jobs "
                    "always count, so more hit jobs than this makes the instance infeasible.")
