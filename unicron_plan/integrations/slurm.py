"""Slurm: ``scontrol show nodes --json`` and ``squeue --json`` (data_parser
v0.0.40 and later) in, ``scontrol`` commands out.

Slurm gives a job the same GPUs on every node it runs on, and training jobs
take whole nodes, so each planned job gets ``tp`` = the GPUs of its nodes and
the plan moves whole nodes. A job is planned when its comment starts with
``unicron-plan:``; other jobs keep their GPUs. docs/integrations.md lists every field.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Optional

import hostlist
from pydantic import Field, field_validator

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.integrations.common import (Cost, GpuMap, JobState, Lenient, NodeState, build_instance,
                                              items_of, object_error, parse_object, parse_plan_fields)

FAILED_FLAGS = frozenset({"DOWN", "DRAIN", "FAIL", "NOT_RESPONDING"})
HOLDING = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED", "RESIZING"})
PLANNED = frozenset({"RUNNING", "SUSPENDED", "CONFIGURING", "PENDING"})
COMMENT_PREFIX = "unicron-plan:"
MAX_HOSTS = 100_000


def _as_list(value: Any) -> Any:
    """Slurm before data_parser v0.0.40 printed some lists as one comma-separated string."""
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    return value


class SlurmNode(Lenient):
    name: str = Field(min_length=1)
    state: list[str]
    gres: str = ""
    features: list[str] = Field(default_factory=list)
    reason: str = ""

    @field_validator("state", "features", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _as_list(value)


class SlurmJob(Lenient):
    job_id: int = Field(ge=0)
    name: str = ""
    job_state: list[str]
    nodes: str = ""
    comment: str = ""
    tres_alloc_str: str = ""
    gres_detail: list[str] = Field(default_factory=list)
    tres_per_node: str = ""
    hold: bool = False

    @field_validator("job_state", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _as_list(value)


_GRES_ITEM = re.compile(r"([^,(]+)(\([^)]*\))?")
_GPU = re.compile(r"^gpu(?::([^:]+))?:(\d+)$")
_TRES_GPU = re.compile(r"^gres[/:]gpu:([^:,]+):\d+$")  # tres_per_node of a typed request


def gpu_gres(text: str, obj: str, path: str) -> tuple[Optional[str], int]:
    """``gpu:h100:8(S:0-1),tmpsize:7T`` -> ("h100", 8); no GPU -> (None, 0)."""
    gtype, count = None, 0
    for m in _GRES_ITEM.finditer(text or ""):
        item = m.group(1).strip().strip(",")
        if not item.startswith("gpu"):
            continue
        g = _GPU.match(item)
        if not g:
            raise object_error(obj, path, f"{item!r} is not gpu:TYPE:COUNT")
        if g.group(1) is None:
            raise object_error(obj, path, f"{item!r} names no GPU type (expected gpu:TYPE:COUNT, "
                                          "e.g. gpu:h100:8)")
        if gtype is not None and gtype != g.group(1):
            raise object_error(obj, path, f"GPU types {gtype!r} and {g.group(1)!r} on one node are not supported")
        gtype, count = g.group(1), count + int(g.group(2))
    return gtype, count


def expand(text: str, obj: str, path: str) -> list[str]:
    """A Slurm hostlist (``gpu[001-004,007]``) as names."""
    try:
        names = hostlist.expand_hostlist(text) if text else []
    except hostlist.BadHostlist as exc:
        raise object_error(obj, path, f"{text!r} is not a hostlist: {exc}") from None
    if len(names) > MAX_HOSTS:
        raise object_error(obj, path, f"{len(names)} hosts; at most {MAX_HOSTS}")
    return names


def compress(names: list[str]) -> str:
    """Names as the compressed hostlist Slurm prints."""
    return hostlist.collect_hostlist(list(names))


def job_gpus(job: SlurmJob, obj: str) -> int:
    """GPUs allocated to the job: ``gres/gpu=N`` of ``tres_alloc_str``."""
    for part in job.tres_alloc_str.split(","):
        key, _, value = part.partition("=")
        if key.strip() == "gres/gpu":
            if not value.strip().isdigit():
                raise object_error(obj, "tres_alloc_str", f"gres/gpu={value!r} is not a whole number")
            return int(value)
    return 0


def plan_comment(comment: str, obj: str) -> Optional[dict[str, str]]:
    """``unicron-plan: weight=2 model=gpt3-13b ...`` -> the fields; another comment -> None."""
    text = comment.strip()
    if not text.startswith(COMMENT_PREFIX):
        return None
    try:
        tokens = shlex.split(text[len(COMMENT_PREFIX):])
    except ValueError as exc:
        raise object_error(obj, "comment", f"cannot split: {exc}") from None
    out: dict[str, str] = {}
    for tok in tokens:
        key, sep, value = tok.partition("=")
        if not sep or not key:
            raise object_error(obj, "comment", f"{tok!r} is not KEY=VALUE")
        if key in out:
            raise object_error(obj, f"comment ({key})", "given twice")
        out[key] = value
    return out


def _parse_jobs(doc: Any) -> list[tuple[SlurmJob, str]]:
    out = []
    for i, raw in enumerate(items_of(doc, "jobs", key="jobs")):
        jid = raw.get("job_id", f"jobs[{i}]") if isinstance(raw, dict) else f"jobs[{i}]"
        obj = f"Job {jid}"
        out.append((parse_object(SlurmJob, raw, obj), obj))
    return out


def import_slurm(nodes_doc: Any, jobs_doc: Any, *, cost: Cost, gpu_map: GpuMap,
                 rack_feature: Optional[str] = None, name: str = "slurm") -> dict:
    """Build the v1 instance from ``scontrol show nodes --json`` and ``squeue --json``."""
    states: dict[str, NodeState] = {}
    for i, raw in enumerate(items_of(nodes_doc, "nodes", key="nodes")):
        nm = raw.get("name", f"nodes[{i}]") if isinstance(raw, dict) else f"nodes[{i}]"
        obj = f"Node {nm}"
        node = parse_object(SlurmNode, raw, obj)
        product, gpus = gpu_gres(node.gres, obj, "gres")
        if gpus == 0:
            continue
        if node.name in states:
            raise object_error(obj, "name", "listed twice")
        rack = None
        if rack_feature:
            rack = next((f for f in node.features if f.startswith(rack_feature)), None)
        states[node.name] = NodeState(id=node.name, gpu_type=gpu_map.resolve(product, obj, "gres"), gpus=gpus,
                                      rack=rack, failed=bool(FAILED_FLAGS & {s.upper() for s in node.state}))
    node_size: dict[str, set[int]] = {}
    for st in states.values():
        node_size.setdefault(st.gpu_type, set()).add(st.gpus)

    jobs: list[JobState] = []
    seen: set[str] = set()
    for job, obj in _parse_jobs(jobs_doc):
        flags = {s.upper() for s in job.job_state}
        fields = plan_comment(job.comment, obj)
        holds = bool(flags & HOLDING)
        names = expand(job.nodes, obj, "nodes") if holds else []
        for n in names:
            if n not in states:
                if job_gpus(job, obj):
                    raise object_error(obj, "nodes", f"{n!r} is not a GPU node of the nodes file")
        names = [n for n in names if n in states]
        total = job_gpus(job, obj) if holds else 0
        if fields is None or not flags & PLANNED:
            if holds and total:  # work the planner does not manage keeps its GPUs
                per = _per_node(job, names, total, obj)
                for n, g in zip(names, per):
                    states[n].reserved_gpus += g
            continue
        jid = str(job.job_id)
        if jid in seen:
            raise object_error(obj, "job_id", "listed twice")
        seen.add(jid)
        where = (lambda key: f"comment ({key})")
        pf = parse_plan_fields(fields, obj, where)
        js = JobState(id=jid, obj=obj, fields=pf, where=where, gpus=total, nodes=list(names))
        if holds and total:
            per = _per_node(job, names, total, obj)
            for n, g in zip(names, per):
                if g != states[n].gpus:
                    raise object_error(obj, "tres_alloc_str", f"{g} of node {n}'s {states[n].gpus} GPUs: "
                                                              "planned Slurm jobs use whole nodes")
        elif holds:
            raise object_error(obj, "tres_alloc_str", "no gres/gpu: a planned job holds GPUs")
        asked = _TRES_GPU.match(job.tres_per_node.strip())
        if asked:
            js.requested_type = (asked.group(1), "tres_per_node")
        gtype = (gpu_map.resolve(pf.gpu_type, obj, where("gpu-type")) if pf.gpu_type else
                 states[names[0]].gpu_type if names else
                 gpu_map.resolve(asked.group(1), obj, "tres_per_node") if asked else
                 next(iter(node_size)) if len(node_size) == 1 else None)
        if gtype in node_size:
            sizes = node_size[gtype]
            if len(sizes) > 1:
                raise object_error(obj, "nodes", f"the {gtype} nodes have {sorted(sizes)} GPUs; whole-node "
                                                 "planning needs one size per GPU type")
            js.granularity = next(iter(sizes))
        jobs.append(js)
    return build_instance(name, list(states.values()), jobs, cost, gpu_map)


def _per_node(job: SlurmJob, names: list[str], total: int, obj: str) -> list[int]:
    """GPUs of the job on each of its nodes: ``gres_detail`` when it has one entry per node,
    else an even split."""
    if len(job.gres_detail) == len(names) and names:
        per = [gpu_gres(d, obj, f"gres_detail[{k}]")[1] for k, d in enumerate(job.gres_detail)]
        if sum(per) == total:
            return per
    if not names or total % len(names):
        raise object_error(obj, "tres_alloc_str", f"{total} GPUs do not split evenly over {len(names)} nodes")
    return [total // len(names)] * len(names)


def export_slurm(plan, jobs_doc: Any, nodes_doc: Any = None,
                 reason: str = "unicron-plan: failed") -> list[str]:
    """``scontrol`` commands that carry out the plan, in order: drain the plan's drained
    nodes, then free GPUs (shrink, requeue, suspend), then take them (grow, resume)."""
    jobs = {str(j.job_id): (j, obj) for j, obj in _parse_jobs(jobs_doc)}
    drained_already: set[str] = set()
    if nodes_doc is not None:
        for i, raw in enumerate(items_of(nodes_doc, "nodes", key="nodes")):
            nm = raw.get("name", f"nodes[{i}]") if isinstance(raw, dict) else f"nodes[{i}]"
            node = parse_object(SlurmNode, raw, f"Node {nm}")
            if "DRAIN" in {s.upper() for s in node.state}:
                drained_already.add(node.name)
    first: list[str] = []
    then: list[str] = []
    to_drain = [n for n in (plan.drained_nodes or []) if n not in drained_already]
    if to_drain:
        first.append(f"scontrol update NodeName={compress(to_drain)} State=DRAIN Reason={shlex.quote(reason)}")
    for k, pj in enumerate(plan.jobs):
        if pj.id not in jobs:
            raise InvalidInstanceError(f"plan jobs[{k}].id", f"{pj.id!r} is not a job of the jobs file")
        if pj.action in ("keep", "idle"):
            continue
        job, obj = jobs[pj.id]
        current = set(expand(job.nodes, obj, "nodes")) if {s.upper() for s in job.job_state} & HOLDING else set()
        planned = [p.node for p in pj.placement]
        per = {p.gpus for p in pj.placement}
        if len(per) > 1:
            raise object_error(obj, "plan", f"per-node GPUs {sorted(per)} differ; Slurm gives a job the same "
                                            "GPUs on every node (import gives planned jobs whole nodes)")
        jid = job.job_id
        if pj.gpus == 0:
            first.append(f"scontrol requeuehold {jid}")
        elif current and set(planned) <= current:
            first.append(f"scontrol update JobId={jid} NodeList={compress(planned)}")
        else:
            if current:
                first.append(f"scontrol requeuehold {jid}")
            then.append(f"scontrol update JobId={jid} NumNodes={len(planned)} ReqNodeList={compress(planned)}")
            if current or job.hold:
                then.append(f"scontrol release {jid}")
    return first + then
