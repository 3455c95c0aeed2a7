"""What the Kubernetes and Slurm adapters share: error messages that name the
scheduler object, the planning fields a job carries, the GPU type mapping and
the assembly of the v1 instance (checked by the package's own loader)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import validation_error_to_invalid

#: Most objects (nodes, pods, jobs) one input file may hold: bounds the work of any input.
MAX_OBJECTS = 200_000


def check_plan_shape(plan) -> None:
    """A plan is one the planner could have made, as far as the plan alone tells (an export acts on it, and
    its scripts run as root): each job once; each job's placement on distinct nodes, its GPUs summing to
    the job's count, every entry at least one GPU; no job placed on a node the plan drains. InvalidInstanceError
    naming the plan's field otherwise (``unicron-plan validate`` checks the rest against the instance)."""
    seen: dict[str, int] = {}
    placed: dict[str, str] = {}
    for k, pj in enumerate(plan.jobs):
        if pj.id in seen:
            raise InvalidInstanceError(f"plan jobs[{k}].id", f"{pj.id!r} is listed twice (also jobs[{seen[pj.id]}])")
        seen[pj.id] = k
        nodes: set[str] = set()
        for i, p in enumerate(pj.placement):
            if p.node in nodes:
                raise InvalidInstanceError(f"plan jobs[{k}].placement[{i}].node", f"{p.node!r} is listed twice")
            if p.gpus < 1:
                raise InvalidInstanceError(f"plan jobs[{k}].placement[{i}].gpus", f"{p.gpus}: at least 1")
            nodes.add(p.node)
            placed.setdefault(p.node, pj.id)
        total = sum(p.gpus for p in pj.placement)
        if total != pj.gpus:
            raise InvalidInstanceError(f"plan jobs[{k}].placement", f"{total} GPUs placed for a count of {pj.gpus}")
    for k, name in enumerate(plan.drained_nodes or []):
        if name in placed:
            raise InvalidInstanceError(f"plan drained_nodes[{k}]", f"{name!r} is drained, yet the plan places "
                                                                   f"job {placed[name]!r} on it")


def object_error(obj: str, path: str, message: str) -> InvalidInstanceError:
    """An error naming the scheduler object (``Node gpu-017``) and its field path."""
    return InvalidInstanceError(f"{obj} {path}" if path else obj, message)


class Lenient(BaseModel):
    """Base of the models of scheduler objects: fields the adapter does not read
    are ignored (the tools print many); those it reads are validated."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, populate_by_name=True)


def parse_object(model: type[BaseModel], data: Any, obj: str) -> Any:
    """Validate one scheduler object, raising an error that names it and the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = validation_error_to_invalid(exc)
        path = err.field if err.field != "(top level)" else ""
        raise object_error(obj, path, err.message) from None


def items_of(doc: Any, source: str, key: str = "items") -> list:
    """The object list of a ``kubectl get -o json`` List (or of ``squeue --json``'s ``jobs``)."""
    if isinstance(doc, list):
        items = doc
    elif isinstance(doc, dict) and isinstance(doc.get(key), list):
        meta = doc.get("metadata")
        if isinstance(meta, dict) and (meta.get("continue") or meta.get("remainingItemCount")):
            raise InvalidInstanceError(f"{source} metadata.continue", "a page of a longer list: give the whole "
                                                                      "list (kubectl get ... -o json, no --chunk-size)")
        items = doc[key]
    elif isinstance(doc, dict) and "kind" in doc and "metadata" in doc:
        items = [doc]  # a single object (kubectl get KIND NAME -o json)
    else:
        raise InvalidInstanceError(source, f"expected a JSON object with a list {key!r} (or a list)")
    if len(items) > MAX_OBJECTS:
        raise InvalidInstanceError(source, f"{len(items)} objects; at most {MAX_OBJECTS} are accepted")
    return items


# --- GPU types -------------------------------------------------------------------------------

#: The one table from GPU product names to the library's GPU types (models/gpus.json), for
#: both adapters: GPU feature discovery's ``nvidia.com/gpu.product`` label values and Slurm
#: gres type names, normalised (:func:`normalize_product`). GPU feature discovery writes the
#: NVML device name with every space replaced by '-' and '-SHARED' appended when the GPU is
#: time-sliced (NVIDIA/k8s-device-plugin, internal/lm/resource.go, ``productLabel``): NVML's
#: "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200" become
#: NVIDIA-A100-SXM4-80GB, NVIDIA-H100-80GB-HBM3, NVIDIA-H200, NVIDIA-B200. Only products whose
#: memory and interconnect match the library's entry are listed (an A100 40GB or a PCIe H100 is
#: not an ``a100``/``h100`` of the library: map it with --gpu-type after checking).
BUILTIN_GPU_PRODUCTS: dict[str, str] = {
    "nvidia-a100-sxm4-80gb": "a100",
    "a100-sxm4-80gb": "a100",
    "nvidia-a800-sxm4-80gb": "a800",
    "a800-sxm4-80gb": "a800",
    "nvidia-h100-80gb-hbm3": "h100",
    "h100-80gb-hbm3": "h100",
    "nvidia-h100-sxm5-80gb": "h100",
    "nvidia-h800": "h800",
    "nvidia-h800-80gb-hbm3": "h800",
    "nvidia-h200": "h200",
    "nvidia-h200-141gb-hbm3e": "h200",
    "nvidia-b200": "b200",
}


def normalize_product(value: str) -> str:
    """``NVIDIA H100 80GB HBM3`` / ``nvidia_h100_80gb_hbm3`` -> ``nvidia-h100-80gb-hbm3``;
    GPU feature discovery's ``-SHARED`` suffix (time-slicing) is dropped."""
    out = re.sub(r"[\s_]+", "-", value.strip().lower())
    return out[: -len("-shared")] if out.endswith("-shared") else out


class GpuMap:
    """Maps product names to the library's GPU types; user overrides win.

    Library type names (``a100``, ``h100``...) map to themselves. An unknown
    product is bad input naming the object and the field it came from.
    """

    def __init__(self, overrides: Optional[dict[str, str]] = None):
        from unicron_plan.perf.library import gpu_names

        self.types = set(gpu_names())
        self.table = dict(BUILTIN_GPU_PRODUCTS)
        self.table.update({t: t for t in self.types})
        for product, gtype in (overrides or {}).items():
            if gtype not in self.types:
                raise InvalidInstanceError(f"gpu map {product!r}",
                                           f"unknown GPU type {gtype!r}; valid GPU types: {', '.join(sorted(self.types))}")
            self.table[normalize_product(product)] = gtype

    def resolve(self, product: str, obj: str, path: str) -> str:
        gtype = self.table.get(normalize_product(product))
        if gtype is None:
            raise object_error(obj, path, f"unknown GPU product {product!r}; map it with "
                                          f"--gpu-type '{product}=TYPE' or --gpu-map FILE "
                                          f"(types: {', '.join(sorted(self.types))})")
        return gtype


def load_gpu_map(pairs: Iterable[str] = (), path: Optional[str] = None) -> GpuMap:
    """A GpuMap from ``PRODUCT=TYPE`` options and/or a JSON file ``{"PRODUCT": "TYPE"}``."""
    overrides: dict[str, str] = {}
    if path is not None:
        from unicron_plan.io import read_json

        doc = read_json(path)
        if not isinstance(doc, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
            raise InvalidInstanceError(str(path), 'expected a JSON object {"PRODUCT": "TYPE", ...}')
        overrides.update(doc)
    for pair in pairs:
        product, sep, gtype = pair.rpartition("=")
        if not sep or not product or not gtype:
            raise InvalidInstanceError("--gpu-type", f"{pair!r} is not PRODUCT=TYPE")
        overrides[product] = gtype
    return GpuMap(overrides)


def gpu_type_entry(name: str) -> dict[str, float]:
    """The instance's ``cluster.gpu_types`` entry of a library GPU type."""
    from unicron_plan.perf.library import get_gpu

    g = get_gpu(name)
    return {"peak_tflops": g.peak_tflops, "memory_gib": g.memory_gib,
            "intra_node_gbps": g.nvlink_gb_per_s, "inter_node_gbps": g.network_gb_per_s}


# --- planning fields -------------------------------------------------------------------------

_TABLE_PAIR = re.compile(r"^\s*([1-9][0-9]{0,7})\s*:\s*([0-9.eE+-]+)\s*$")
#: A GPU product or type name as the planning fields write it (``h100``, ``NVIDIA-A100-SXM4-80GB``).
_TYPE_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"
#: Most GPU types one job may list (``gpu-types``, ``throughput.TYPE`` keys).
MAX_JOB_TYPES = 16
_TYPE_LIST = re.compile(rf"{_TYPE_NAME}(,{_TYPE_NAME}){{0,{MAX_JOB_TYPES - 1}}}")
_TYPE_TABLE_KEY = re.compile(rf"throughput\.({_TYPE_NAME})")


def _parse_table(value: Any) -> Any:
    """A JSON object ``{"8": 1100, ...}`` or the short form ``8:1100,16:2150``."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("{"):
        from unicron_plan.io import parse_json

        try:
            return parse_json(text, "throughput")
        except InvalidInstanceError as exc:
            raise ValueError(exc.message) from None
    table = {}
    for part in text.split(","):
        m = _TABLE_PAIR.match(part)
        if not m:
            raise ValueError(f"{part!r} is not GPUS:TFLOPS (e.g. 8:1100,16:2150)")
        table[m.group(1)] = float(m.group(2))
    return table


class _Table(BaseModel):
    """One throughput table (the form of ``throughput``), for the per-type keys."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    table: dict[str, float]

    @field_validator("table", mode="before")
    @classmethod
    def _form(cls, value: Any) -> Any:
        return _parse_table(value)


class PlanFields(BaseModel):
    """The planning fields of one job (Kubernetes annotations ``unicron-plan/KEY``,
    Slurm comment ``unicron-plan: KEY=VALUE ...``). Values arrive as strings."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)

    weight: float = Field(ge=0)
    throughput: Optional[dict[str, float]] = None
    model: Optional[str] = Field(default=None, min_length=1)
    global_batch: Optional[int] = Field(default=None, ge=1, alias="global-batch")
    seq_len: Optional[int] = Field(default=None, ge=1, alias="seq-len")
    recompute: Optional[str] = None
    gpu_type: Optional[str] = Field(default=None, alias="gpu-type")
    gpu_types: Optional[list[str]] = Field(default=None, alias="gpu-types")
    tp: Optional[int] = Field(default=None, ge=1)
    pinned: Optional[bool] = None
    same_rack: Optional[bool] = Field(default=None, alias="same-rack")
    max_nodes: Optional[int] = Field(default=None, ge=1, alias="max-nodes")
    min_gain_fraction: Optional[float] = Field(default=None, ge=0, alias="min-gain-fraction")
    transition_seconds: Optional[float] = Field(default=None, ge=0, alias="transition-seconds")

    #: ``throughput.TYPE`` keys: the table of each GPU type (a product or type name, as written)
    type_tables: dict[str, dict[str, float]] = Field(default_factory=dict, exclude=True)

    @field_validator("throughput", mode="before")
    @classmethod
    def _table(cls, value: Any) -> Any:
        return _parse_table(value)

    @field_validator("gpu_types", mode="before")
    @classmethod
    def _types(cls, value: Any) -> Any:
        """``h100,a100``: at most MAX_JOB_TYPES names of letters, digits, '_', '.', '-', each once."""
        if not isinstance(value, str):
            return value
        if not _TYPE_LIST.fullmatch(value):
            raise ValueError(f"not a comma-separated list of at most {MAX_JOB_TYPES} GPU type names "
                             "(letters, digits, '_', '.', '-'; e.g. h100,a100)")
        names = value.split(",")
        if len(set(names)) != len(names):
            raise ValueError("a GPU type is listed twice")
        return names


PLAN_KEYS = tuple(f.alias or name for name, f in PlanFields.model_fields.items() if name != "type_tables")


def parse_plan_fields(raw: dict[str, str], obj: str, where: str) -> PlanFields:
    """Validate a job's planning fields; ``where(key)`` renders the field path of a key."""
    if "weight" not in raw:
        raise object_error(obj, where("weight"), "missing (every planned job needs a weight)")
    raw = dict(raw)
    tables: dict[str, dict[str, float]] = {}
    for key in [k for k in raw if k.startswith("throughput.")]:
        m = _TYPE_TABLE_KEY.fullmatch(key)
        if m is None:
            raise object_error(obj, where(key), "not throughput.TYPE (TYPE: letters, digits, '_', '.', '-')")
        if len(tables) == MAX_JOB_TYPES:
            raise object_error(obj, where(key), f"more than {MAX_JOB_TYPES} per-type throughput tables")
        try:
            tables[m.group(1)] = _Table.model_validate({"table": raw.pop(key)}).table
        except ValidationError as exc:
            msg = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
            raise object_error(obj, where(key), msg) from None
    for key in raw:
        if key not in PLAN_KEYS:
            raise object_error(obj, where(key), f"unknown planning field; known: {', '.join(PLAN_KEYS)}, "
                                                "throughput.TYPE")
    try:
        pf = PlanFields.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = str(err["loc"][0]) if err["loc"] else ""
        name = PlanFields.model_fields[key].alias or key if key in PlanFields.model_fields else key
        msg = err["msg"].removeprefix("Value error, ")
        raise object_error(obj, where(name), f"{raw.get(name, '')!r}: {msg}") from None
    pf.type_tables = tables
    if (pf.throughput is None and not tables) == (pf.model is None):
        raise object_error(obj, where("throughput"), "give exactly one of 'throughput' (a table; or one "
                                                     "'throughput.TYPE' per GPU type) or 'model' "
                                                     "(with 'global-batch' and 'seq-len')")
    if pf.model is not None and (pf.global_batch is None or pf.seq_len is None):
        raise object_error(obj, where("model"), "a model needs 'global-batch' and 'seq-len' too")
    return pf


# --- the instance ------------------------------------------------------------------------------

@dataclass
class NodeState:
    """One GPU node as the adapters see it."""

    id: str
    gpu_type: str
    gpus: int
    rack: Optional[str] = None
    failed: bool = False          # the whole node is out (event.failed_nodes)
    lost_gpus: int = 0            # GPUs gone since the node joined (event.failed_gpus)
    reserved_gpus: int = 0        # held by work the planner does not manage (failed_gpus)


@dataclass
class JobState:
    """One planned job: its object, planning fields and current allocation."""

    id: str
    obj: str                      # "PyTorchJob team-a/llama", for messages
    fields: PlanFields
    where: Any                    # key -> field path of a planning field
    gpus: int = 0
    nodes: list[str] = field(default_factory=list)
    granularity: int = 1          # GPUs that move together on a node (a pod's, a Slurm node's)
    #: The library GPU types the job may run on, in the order given (its pod template's node affinity,
    #: its Slurm comment or typed gres request), and the field they came from; None: any type.
    allowed: Optional[list[str]] = None
    allowed_where: str = ""


@dataclass
class Cost:
    """The instance's cost constants (docs/format.md, ``cost``)."""

    expected_run_seconds: Optional[float] = None
    node_mtbf_hours: Optional[float] = None
    default_transition_seconds: Optional[float] = 600.0

    def to_json(self) -> dict:
        if (self.expected_run_seconds is None) == (self.node_mtbf_hours is None):
            raise InvalidInstanceError("--expected-run-seconds", "give exactly one of --expected-run-seconds "
                                                                 "or --node-mtbf-hours")
        out = {k: v for k, v in (("expected_run_seconds", self.expected_run_seconds),
                                 ("node_mtbf_hours", self.node_mtbf_hours),
                                 ("default_transition_seconds", self.default_transition_seconds)) if v is not None}
        return out


def job_types(job: JobState, node_types: dict[str, str], all_types: set[str], gpu_map: GpuMap) -> list[str]:
    """The GPU types the job may be planned on, the one it runs on now first: a running job's is
    the type of its nodes (one: a job never mixes types), a queued job's its ``gpu-type``, else the
    first type it allows that the cluster has. The others are the types it allows that the cluster
    has nodes of (none when ``allowed`` is None: then the job keeps its type)."""
    allowed = job.allowed
    types = {node_types[n] for n in job.nodes}
    if len(types) > 1:
        raise object_error(job.obj, "current nodes", f"the job runs on GPU types {sorted(types)}; a job uses one type")
    named = (gpu_map.resolve(job.fields.gpu_type, job.obj, job.where("gpu-type"))
             if job.fields.gpu_type is not None else None)
    if types:
        current = types.pop()
        if named is not None and named != current:
            raise object_error(job.obj, job.where("gpu-type"), f"{job.fields.gpu_type!r}: the job runs on "
                                                               f"{current} nodes")
    elif named is not None:
        current = named
    elif allowed:
        current = next((t for t in allowed if t in all_types), allowed[0])
    elif len(all_types) == 1:
        current = next(iter(all_types))
    else:
        raise object_error(job.obj, job.where("gpu-type"), "missing: the job runs nowhere and the cluster has "
                                                           f"several GPU types ({', '.join(sorted(all_types))})")
    if allowed is None:
        return [current]
    if current not in allowed:
        raise object_error(job.obj, job.allowed_where, f"the job {'runs on' if job.nodes else 'names'} {current}, "
                                                       f"which it does not allow ({', '.join(allowed)})")
    return [current] + [t for t in allowed if t != current and t in all_types]


def _throughput(job: JobState, types: list[str], gpu_map: GpuMap) -> dict:
    """The instance's ``throughput`` of a job planned on ``types`` (the current one first): one
    table, or ``by_type`` with a table per type (``throughput.TYPE``), or a model (``gpu_types``)."""
    f = job.fields
    current = types[0]
    if f.model is not None:
        if f.type_tables:
            key = next(iter(f.type_tables))
            raise object_error(job.obj, job.where(f"throughput.{key}"), "goes without 'model'")
        out = {"gpu_type": current, "model": f.model, "global_batch": f.global_batch, "seq_len": f.seq_len,
               **({"recompute": f.recompute} if f.recompute is not None else {})}
        if len(types) > 1:
            out["gpu_types"] = list(types)
        return out
    tables: dict[str, dict[str, float]] = {}
    for key, table in f.type_tables.items():
        gtype = gpu_map.resolve(key, job.obj, job.where(f"throughput.{key}"))
        if gtype in tables:
            raise object_error(job.obj, job.where(f"throughput.{key}"), f"a second table of GPU type {gtype}")
        if job.allowed is not None and gtype not in job.allowed:
            raise object_error(job.obj, job.where(f"throughput.{key}"),
                               f"{gtype} is not a GPU type the job may run on ({', '.join(job.allowed)}; "
                               f"from {job.allowed_where})")
        tables[gtype] = table
    if len(types) == 1:
        if f.throughput is not None and current in tables:
            raise object_error(job.obj, job.where(f"throughput.{current}"), "give 'throughput' or "
                                                                            f"'throughput.{current}', not both")
        table = f.throughput if f.throughput is not None else tables.get(current)
        if table is None:
            raise object_error(job.obj, job.where(f"throughput.{current}"), f"missing: the job runs on {current}")
        return {"gpu_type": current, "tflops": table}
    if f.throughput is not None:
        raise object_error(job.obj, job.where("throughput"), f"the job may run on {', '.join(types)}: give one "
                                                             "'throughput.TYPE' table per type instead")
    missing = [t for t in types if t not in tables]
    if missing:
        raise object_error(job.obj, job.where(f"throughput.{missing[0]}"),
                           f"missing: the job may run on {', '.join(types)} ({job.allowed_where}), "
                           f"so it needs a table per type")
    return {"gpu_type": current, "by_type": {t: tables[t] for t in types}}


def build_instance(name: str, nodes: list[NodeState], jobs: list[JobState], cost: Cost,
                   gpu_map: GpuMap, isolation: str = "node") -> dict:
    """Assemble the v1 instance and check it with the package's loader; an error about
    ``jobs[i]`` or ``cluster.nodes[k]`` is re-worded to name the scheduler object."""
    if not nodes:
        raise InvalidInstanceError("nodes", "no GPU node found")
    node_types = {n.id: n.gpu_type for n in nodes}
    all_types = set(node_types.values())
    inst_nodes, failed_nodes, failed_gpus = [], [], []
    for n in nodes:
        # Withheld GPUs (lowest indices) and GPUs lost in the event (highest) never overlap: work the
        # planner does not manage keeps only GPUs that are still there. A failed node whose GPUs are
        # all withheld has nothing new to lose, so it is not part of the event.
        reserved = list(range(min(n.reserved_gpus, n.gpus - n.lost_gpus)))
        inst_nodes.append({"id": n.id, "gpu_type": n.gpu_type, "gpus": n.gpus, "failed_gpus": reserved,
                           **({"rack": n.rack} if n.rack is not None else {})})
        if n.failed:
            if len(reserved) < n.gpus:
                failed_nodes.append(n.id)
        elif n.lost_gpus:
            failed_gpus += [{"node": n.id, "gpu": g} for g in range(n.gpus - n.lost_gpus, n.gpus)]
    inst_jobs = []
    declared = set(all_types)
    for job in jobs:
        f = job.fields
        tp = _throughput(job, job_types(job, node_types, all_types, gpu_map), gpu_map)
        declared.add(tp["gpu_type"])  # a queued job's type may have no node yet
        tensor = math.lcm(f.tp or 1, job.granularity)
        entry = {"id": job.id, "weight": f.weight, "throughput": tp,
                 "current": {"gpus": job.gpus, "nodes": sorted(job.nodes)}}
        if tensor > 1:
            entry["tp"] = tensor
        for key in ("pinned", "same_rack", "max_nodes", "min_gain_fraction", "transition_seconds"):
            value = getattr(f, key)
            if value is not None:
                entry[key] = value
        inst_jobs.append(entry)
    doc = {"schema_version": "1", "name": name,
           "cluster": {"gpu_types": {t: gpu_type_entry(t) for t in sorted(declared)}, "nodes": inst_nodes},
           "jobs": inst_jobs, "cost": cost.to_json()}
    if isolation != "node":
        doc["isolation"] = isolation
    if failed_nodes or failed_gpus:
        doc["event"] = {"kind": "failure", "failed_nodes": failed_nodes, "failed_gpus": failed_gpus}
    check_built(doc, nodes, jobs)
    return doc


_PATH = re.compile(r"(jobs|cluster\.nodes|event\.failed_nodes|event\.failed_gpus)\[(\d+)\](.*)")


def check_built(doc: dict, nodes: list[NodeState], jobs: list[JobState]) -> None:
    """Run the package's instance checks; name the scheduler object on failure."""
    from unicron_plan.api import load_instance

    try:
        load_instance(doc)
    except InvalidInstanceError as exc:
        m = _PATH.fullmatch(exc.field or "")
        if m:
            k, where = int(m.group(2)), m.group(1)
            if where == "jobs":
                obj = jobs[k].obj
            elif where == "cluster.nodes":
                obj = f"Node {nodes[k].id}"
            elif where == "event.failed_nodes":
                obj = f"Node {doc['event']['failed_nodes'][k]}"
            else:
                obj = f"Node {doc['event']['failed_gpus'][k]['node']}"
            raise object_error(obj, f"(instance {exc.field})", exc.message) from None
        raise
