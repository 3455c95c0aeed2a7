"""Kubernetes: ``kubectl get nodes/pods/<jobs> -o json`` in, merge patches out.

Job kinds: Kubeflow ``PyTorchJob`` (kubeflow.org/v1), Volcano ``Job``
(batch.volcano.sh/v1alpha1) and DLRover ``ElasticJob`` (elastic.iml.github.io/v1alpha1).
A job's GPUs move in pods: every pod of its scaled replica type asks for the
same GPUs, so the instance gives the job ``tp`` = a multiple of that count and
the plan splits it into whole pods. docs/integrations.md lists every field.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import Field

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.integrations.common import (Cost, GpuMap, JobState, Lenient, NodeState, build_instance,
                                              items_of, object_error, parse_object, parse_plan_fields)

GPU = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
HOSTNAME = "kubernetes.io/hostname"
ANNOTATION_PREFIX = "unicron-plan/"
FAILED_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")

PYTORCH = ("kubeflow.org", "PyTorchJob")
VOLCANO = ("batch.volcano.sh", "Job")
DLROVER = ("elastic.iml.github.io", "ElasticJob")
JOB_LABELS = {PYTORCH: "training.kubeflow.org/job-name", VOLCANO: "volcano.sh/job-name",
              DLROVER: "elasticjob.dlrover/name"}
RESOURCE = {PYTORCH: "pytorchjobs.kubeflow.org", VOLCANO: "jobs.batch.volcano.sh",
            DLROVER: "elasticjobs.elastic.iml.github.io"}


# --- the objects, as far as the adapter reads them ---------------------------------------------

class Meta(Lenient):
    name: str = Field(min_length=1)
    namespace: Optional[str] = None
    uid: Optional[str] = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    deletionTimestamp: Optional[str] = None


class Taint(Lenient):
    key: str
    value: Optional[str] = None
    effect: str


class NodeSpec(Lenient):
    unschedulable: bool = False
    taints: list[Taint] = Field(default_factory=list)


class Condition(Lenient):
    type: str
    status: str


class NodeStatus(Lenient):
    capacity: dict[str, str] = Field(default_factory=dict)
    allocatable: dict[str, str] = Field(default_factory=dict)
    conditions: list[Condition] = Field(default_factory=list)


class Node(Lenient):
    metadata: Meta
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)


class Resources(Lenient):
    limits: dict[str, str | int] = Field(default_factory=dict)
    requests: dict[str, str | int] = Field(default_factory=dict)


class Container(Lenient):
    name: str
    resources: Resources = Field(default_factory=Resources)


class PodSpec(Lenient):
    nodeName: Optional[str] = None
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    containers: list[Container] = Field(min_length=1)
    initContainers: list[Container] = Field(default_factory=list)


class PodStatus(Lenient):
    phase: Optional[str] = None


class Pod(Lenient):
    metadata: Meta
    spec: PodSpec
    status: PodStatus = Field(default_factory=PodStatus)


class PodTemplate(Lenient):
    spec: PodSpec


class ReplicaSpec(Lenient):
    replicas: int = Field(default=1, ge=0)
    template: PodTemplate


class ElasticPolicy(Lenient):
    minReplicas: Optional[int] = Field(default=None, ge=0)
    maxReplicas: Optional[int] = Field(default=None, ge=0)


class RunPolicy(Lenient):
    suspend: bool = False


class PyTorchJobSpec(Lenient):
    pytorchReplicaSpecs: dict[str, ReplicaSpec] = Field(min_length=1)
    elasticPolicy: Optional[ElasticPolicy] = None
    runPolicy: RunPolicy = Field(default_factory=RunPolicy)


class PyTorchJob(Lenient):
    apiVersion: str
    kind: str
    metadata: Meta
    spec: PyTorchJobSpec


class VolcanoTask(Lenient):
    name: str = Field(min_length=1)
    replicas: int = Field(ge=0)
    template: PodTemplate


class VolcanoState(Lenient):
    phase: Optional[str] = None


class VolcanoStatus(Lenient):
    state: VolcanoState = Field(default_factory=VolcanoState)


class VolcanoJobSpec(Lenient):
    minAvailable: Optional[int] = Field(default=None, ge=0)
    tasks: list[VolcanoTask] = Field(min_length=1)


class VolcanoJob(Lenient):
    apiVersion: str
    kind: str
    metadata: Meta
    spec: VolcanoJobSpec
    status: VolcanoStatus = Field(default_factory=VolcanoStatus)


class ElasticJobSpec(Lenient):
    replicaSpecs: dict[str, ReplicaSpec] = Field(min_length=1)


class ElasticJob(Lenient):
    apiVersion: str
    kind: str
    metadata: Meta
    spec: ElasticJobSpec


MODELS = {PYTORCH: PyTorchJob, VOLCANO: VolcanoJob, DLROVER: ElasticJob}


# --- helpers ----------------------------------------------------------------------------------

def _count(value: Any, obj: str, path: str) -> int:
    """A GPU quantity ("8" or 8): a whole, non-negative number."""
    text = str(value).strip()
    if not text.isdigit() or len(text) > 6:
        raise object_error(obj, path, f"{value!r} is not a whole number of GPUs")
    return int(text)


def pod_gpus(spec: PodSpec, obj: str, prefix: str) -> int:
    """GPUs a pod holds: the sum over containers of the GPU limit (the larger of that
    and any init container's, as Kubernetes computes a pod's effective request)."""
    def one(c: Container, path: str) -> int:
        if GPU in c.resources.limits:
            return _count(c.resources.limits[GPU], obj, f'{path}.resources.limits["{GPU}"]')
        if GPU in c.resources.requests:
            raise object_error(obj, f'{path}.resources.limits["{GPU}"]',
                               "missing: a GPU request needs an equal limit (extended resource)")
        return 0

    main = sum(one(c, f"{prefix}.containers[{i}]") for i, c in enumerate(spec.containers))
    init = max((one(c, f"{prefix}.initContainers[{i}]") for i, c in enumerate(spec.initContainers)), default=0)
    return max(main, init)


def _group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


@dataclass
class K8sJob:
    """One job object with what the adapter derived from it."""

    key: tuple[str, str]          # (group, kind)
    raw: dict
    obj: Any                      # the parsed model
    name: str
    namespace: str
    label: str                    # "PyTorchJob ns/name"
    scaled: str                   # the replica type / task that scales
    gpus_per_pod: int
    fixed_gpus: int               # GPUs of the replica types that do not scale
    product: Optional[tuple[str, str]] = None  # the scaled template's nodeSelector GPU product, and its path
    pods: list[Pod] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"


def _replica_sets(job) -> list[tuple[str, int, PodSpec, str]]:
    """(name, replicas, pod spec, path of the template spec) of every replica type or task."""
    if isinstance(job, PyTorchJob):
        return [(k, r.replicas, r.template.spec, f"spec.pytorchReplicaSpecs.{k}.template.spec")
                for k, r in job.spec.pytorchReplicaSpecs.items()]
    if isinstance(job, VolcanoJob):
        return [(t.name, t.replicas, t.template.spec, f"spec.tasks[{i}].template.spec")
                for i, t in enumerate(job.spec.tasks)]
    return [(k, r.replicas, r.template.spec, f"spec.replicaSpecs.{k}.template.spec")
            for k, r in job.spec.replicaSpecs.items()]


def parse_job(raw: Any, index: int, source: str) -> K8sJob:
    """Parse one job object of a supported kind; the scaled replica type is PyTorchJob's
    ``Worker``, DLRover's ``worker`` and Volcano's GPU task with the most replicas."""
    if not isinstance(raw, dict):
        raise InvalidInstanceError(f"{source} items[{index}]", "must be a JSON object")
    kind, api = raw.get("kind"), raw.get("apiVersion")
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    label = f"{kind} {meta.get('namespace', 'default')}/{meta.get('name', '?')}"
    key = (_group(api) if isinstance(api, str) else "", kind)
    if key not in MODELS:
        raise object_error(label, "kind", f"{api}/{kind} is not a supported job kind (kubeflow.org/v1 PyTorchJob, "
                                          "batch.volcano.sh/v1alpha1 Job, elastic.iml.github.io/v1alpha1 ElasticJob)")
    job = parse_object(MODELS[key], raw, label)
    sets = _replica_sets(job)
    per_pod = {name: pod_gpus(spec, label, path) for name, _, spec, path in sets}
    if key == PYTORCH:
        scaled = "Worker"
    elif key == DLROVER:
        scaled = next((k for k in per_pod if k.lower() == "worker"), "worker")
    else:
        gpu_tasks = [(r, i, n) for i, (n, r, _, _) in enumerate(sets) if per_pod[n] > 0]
        scaled = max(gpu_tasks)[2] if gpu_tasks else sets[-1][0]
    if scaled not in per_pod:
        where = "spec.pytorchReplicaSpecs" if key == PYTORCH else "spec.replicaSpecs"
        raise object_error(label, f"{where}.{scaled}", "missing: the replica type that scales")
    g = per_pod[scaled]
    path, template = next((p, spec) for n, _, spec, p in sets if n == scaled)
    product = template.nodeSelector.get(PRODUCT_LABEL)
    if g == 0:
        raise object_error(label, f'{path}.containers[*].resources.limits["{GPU}"]',
                           "the scaled replica type asks for no GPU")
    fixed = 0
    for name, replicas, _, p in sets:
        if name != scaled and per_pod[name]:
            if per_pod[name] != g:
                raise object_error(label, f'{p}.containers[*].resources.limits["{GPU}"]',
                                   f"{per_pod[name]} GPUs per pod; the plan moves whole pods, so every GPU "
                                   f"replica type needs the same count as {scaled!r} ({g})")
            fixed += replicas * g
    return K8sJob(key=key, raw=raw, obj=job, name=job.metadata.name,
                  namespace=job.metadata.namespace or "default", label=label, scaled=scaled,
                  gpus_per_pod=g, fixed_gpus=fixed,
                  product=(product, f'{path}.nodeSelector["{PRODUCT_LABEL}"]') if product else None)


def parse_jobs(doc: Any, source: str) -> list[K8sJob]:
    jobs = [parse_job(raw, i, source) for i, raw in enumerate(items_of(doc, source))]
    seen: dict[str, str] = {}
    for j in jobs:
        if j.id in seen:
            raise object_error(j.label, "metadata.name", f"{j.id!r} is also {seen[j.id]}; job ids are namespace/name")
        seen[j.id] = j.label
    return jobs


def _failed(node: Node, cordon_reasons: list[tuple[str, Optional[str]]]) -> Optional[str]:
    """Why the node is out, or None."""
    ready = next((c for c in node.status.conditions if c.type == "Ready"), None)
    if ready is None or ready.status != "True":
        return f"Ready is {ready.status if ready else 'missing'}"
    for t in node.spec.taints:
        if t.key in FAILED_TAINTS:
            return f"taint {t.key}"
    if node.spec.unschedulable:
        marks = dict(node.metadata.labels)
        marks.update(node.metadata.annotations)
        marks.update({t.key: t.value or "" for t in node.spec.taints})
        for key, value in cordon_reasons:
            if key in marks and (value is None or marks[key] == value):
                return f"cordoned ({key})"
    return None


def _live(pod: Pod) -> bool:
    """A pod that holds its node's GPUs: bound, not finished, not being deleted."""
    return (pod.spec.nodeName is not None and pod.metadata.deletionTimestamp is None
            and pod.status.phase in ("Running", "Pending", None))


def _live_pods(pods_doc: Any):
    """(label, pod) of every live pod of ``kubectl get pods -o json`` (parsed, errors naming the pod)."""
    for i, raw in enumerate(items_of(pods_doc, "pods")):
        meta = raw.get("metadata") if isinstance(raw, dict) and isinstance(raw.get("metadata"), dict) else {}
        label = f"Pod {meta.get('namespace', 'default')}/{meta.get('name', f'items[{i}]')}"
        pod = parse_object(Pod, raw, label)
        if _live(pod):
            yield label, pod


# --- import -----------------------------------------------------------------------------------

def import_k8s(nodes_doc: Any, pods_doc: Any, jobs_doc: Any, *, cost: Cost, gpu_map: GpuMap,
               rack_label: str = "topology.kubernetes.io/zone",
               cordon_reasons: Optional[list[str]] = None, name: str = "kubernetes") -> dict:
    """Build the v1 instance from the three ``kubectl get -o json`` documents."""
    reasons = [(r.split("=", 1)[0], r.split("=", 1)[1] if "=" in r else None) for r in (cordon_reasons or [])]
    states: dict[str, NodeState] = {}
    cordoned: set[str] = set()
    for i, raw in enumerate(items_of(nodes_doc, "nodes")):
        meta = raw.get("metadata") if isinstance(raw, dict) and isinstance(raw.get("metadata"), dict) else {}
        label = f"Node {meta.get('name', f'items[{i}]')}"
        node = parse_object(Node, raw, label)
        cap, alloc = node.status.capacity, node.status.allocatable
        if GPU not in cap and GPU not in alloc:
            continue  # not a GPU node
        total = _count(cap.get(GPU, alloc.get(GPU)), label, f'status.capacity["{GPU}"]')
        usable = _count(alloc.get(GPU, cap.get(GPU)), label, f'status.allocatable["{GPU}"]')
        if total == 0:
            continue
        if usable > total:
            raise object_error(label, f'status.allocatable["{GPU}"]', f"{usable} exceeds the capacity {total}")
        product = node.metadata.labels.get(PRODUCT_LABEL)
        if product is None:
            raise object_error(label, f'metadata.labels["{PRODUCT_LABEL}"]',
                               "missing (GPU feature discovery sets it); the GPU type comes from it")
        gtype = gpu_map.resolve(product, label, f'metadata.labels["{PRODUCT_LABEL}"]')
        if node.metadata.name in states:
            raise object_error(label, "metadata.name", "listed twice")
        why = _failed(node, reasons)
        st = NodeState(id=node.metadata.name, gpu_type=gtype, gpus=total, rack=node.metadata.labels.get(rack_label),
                       failed=why is not None or usable == 0, lost_gpus=total - usable)
        if node.spec.unschedulable and not st.failed:
            cordoned.add(st.id)
        states[st.id] = st

    jobs = parse_jobs(jobs_doc, "jobs")
    by_label: dict[tuple[str, str, str], K8sJob] = {}
    for j in jobs:
        by_label[(JOB_LABELS[j.key], j.namespace, j.name)] = j
    used: dict[str, int] = {n: 0 for n in states}
    job_state: dict[str, JobState] = {}
    for j in jobs:
        ann = j.obj.metadata.annotations
        raw = {k[len(ANNOTATION_PREFIX):]: v for k, v in ann.items() if k.startswith(ANNOTATION_PREFIX)}
        where = (lambda key: f'metadata.annotations["{ANNOTATION_PREFIX}{key}"]')
        job_state[j.id] = JobState(id=j.id, obj=j.label, fields=parse_plan_fields(raw, j.label, where),
                                   where=where, granularity=j.gpus_per_pod, requested_type=j.product)
    for label, pod in _live_pods(pods_doc):
        g = pod_gpus(pod.spec, label, "spec")
        node = pod.spec.nodeName
        if g == 0 or node not in states:
            if g and node not in states:
                raise object_error(label, "spec.nodeName", f"{node!r} is not a GPU node of the nodes file")
            continue
        ns = pod.metadata.namespace or "default"
        owner = next((by_label[(lab, ns, pod.metadata.labels[lab])] for lab in JOB_LABELS.values()
                      if lab in pod.metadata.labels and (lab, ns, pod.metadata.labels[lab]) in by_label), None)
        used[node] += g
        if owner is None:
            states[node].reserved_gpus += g  # work the planner does not manage keeps its GPUs
            continue
        owner.pods.append(pod)
        js = job_state[owner.id]
        js.gpus += g
        if node not in js.nodes:
            js.nodes.append(node)
    for n in cordoned:  # cordoned, not failed: nothing new may land there
        states[n].reserved_gpus += max(0, states[n].gpus - states[n].lost_gpus - used[n])
    for n, st in states.items():
        if used[n] > st.gpus:
            raise object_error(f"Node {n}", f'status.capacity["{GPU}"]',
                               f"its live pods hold {used[n]} GPUs, more than its {st.gpus}")
    return build_instance(name, list(states.values()), [job_state[j.id] for j in jobs], cost, gpu_map)


# --- export -----------------------------------------------------------------------------------

def _affinity(nodes: list[str]) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": sorted(nodes)}]}]}}}


def _entry(api: str, kind: str, namespace: str, name: str, patch_type: str, patch: Any) -> dict:
    return {"apiVersion": api, "kind": kind, "namespace": namespace, "name": name,
            "patchType": patch_type, "patch": patch}


def _pods_to_remove(job: K8sJob, placement: dict[str, int]) -> list[Pod]:
    """Pods of the scaled replica type standing where the plan does not keep them: on a
    node the job leaves, or beyond the planned GPUs of a node it keeps."""
    keep = dict(placement)
    out = []
    # Pods of the fixed replica types first (they stay where they can), then the scaled ones.
    for pod in sorted(job.pods, key=lambda p: (_pod_type(job, p) == job.scaled.lower(), p.metadata.name)):
        node = pod.spec.nodeName
        if keep.get(node, 0) >= job.gpus_per_pod:
            keep[node] -= job.gpus_per_pod
        else:
            out.append(pod)
    return out


def export_k8s(plan, jobs_doc: Any, pods_doc: Any = None) -> list[dict]:
    """The changes of every job whose allocation the plan changes, in the order to apply them:
    patches and new objects first, then pod deletions (so replacements see the new affinity)."""
    jobs = {j.id: j for j in parse_jobs(jobs_doc, "jobs")}
    if pods_doc is not None:
        by_label = {(JOB_LABELS[j.key], j.namespace, j.name): j for j in jobs.values()}
        for label, pod in _live_pods(pods_doc):
            ns = pod.metadata.namespace or "default"
            for lab in JOB_LABELS.values():
                owner = by_label.get((lab, ns, pod.metadata.labels.get(lab)))
                if owner is not None and pod_gpus(pod.spec, label, "spec"):
                    owner.pods.append(pod)
                    break
    changes, deletions = [], []
    for k, pj in enumerate(plan.jobs):
        job = jobs.get(pj.id)
        if job is None:
            raise InvalidInstanceError(f"plan jobs[{k}].id", f"{pj.id!r} is not a job of the jobs file")
        if pj.action in ("keep", "idle"):
            continue
        placement = {p.node: p.gpus for p in pj.placement}
        api = job.raw["apiVersion"]
        if pj.gpus == 0:
            changes += _suspend(job)
            continue
        extra = pj.gpus - job.fixed_gpus
        if extra <= 0 or extra % job.gpus_per_pod:
            raise object_error(job.label, "plan", f"{pj.gpus} GPUs cannot be made of its fixed replicas "
                                                  f"({job.fixed_gpus} GPUs) and pods of {job.gpus_per_pod} GPUs")
        replicas = extra // job.gpus_per_pod
        for node, g in placement.items():
            if g % job.gpus_per_pod:
                raise object_error(job.label, "plan", f"{g} GPUs on node {node} are not whole pods of "
                                                      f"{job.gpus_per_pod} GPUs")
        aff = _affinity(list(placement))
        remove = _pods_to_remove(job, placement)
        if job.key == PYTORCH:
            specs = {}
            for rtype, rs in job.obj.spec.pytorchReplicaSpecs.items():
                entry: dict[str, Any] = {"template": {"spec": {"affinity": aff}}}
                if rtype == job.scaled:
                    entry["replicas"] = replicas
                specs[rtype] = entry
            spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
            ep = job.obj.spec.elasticPolicy
            if ep is not None and (ep.minReplicas is not None or ep.maxReplicas is not None):
                spec["elasticPolicy"] = {}
                if ep.minReplicas is not None:
                    spec["elasticPolicy"]["minReplicas"] = min(ep.minReplicas, replicas)
                if ep.maxReplicas is not None:
                    spec["elasticPolicy"]["maxReplicas"] = max(ep.maxReplicas, replicas)
            if job.obj.spec.runPolicy.suspend:
                spec["runPolicy"] = {"suspend": False}
            changes.append(_entry(api, job.key[1], job.namespace, job.name, "merge", {"spec": spec}))
            deletions += [_entry("v1", "Pod", job.namespace, p.metadata.name, "delete", None) for p in remove]
        elif job.key == VOLCANO:
            tasks = json.loads(json.dumps(job.raw["spec"]["tasks"]))  # a merge patch replaces lists whole
            total = 0
            for t in tasks:
                if t["name"] == job.scaled:
                    t["replicas"] = replicas
                t.setdefault("template", {}).setdefault("spec", {})["affinity"] = aff
                total += t["replicas"]
            if job.obj.status.state.phase in ("Aborted", "Aborting"):
                changes.append(_command(job, "ResumeJob"))
            changes.append(_entry(api, "Job", job.namespace, job.name, "merge",
                                  {"spec": {"minAvailable": total, "tasks": tasks}}))
            deletions += [_entry("v1", "Pod", job.namespace, p.metadata.name, "delete", None) for p in remove]
        else:
            rtype = job.scaled
            changes.append(_entry(api, "ElasticJob", job.namespace, job.name, "merge",
                                  {"spec": {"replicaSpecs": {rtype: {"template": {"spec": {"affinity": aff}}}}}}))
            sp_spec = {"ownerJob": job.name,
                       "replicaResourceSpecs": {rtype: {"replicas": replicas,
                                                        "resource": {GPU: str(job.gpus_per_pod)}}}}
            if remove:
                sp_spec["removePods"] = [{"name": p.metadata.name, "type": _pod_type(job, p) or rtype}
                                         for p in remove]
            digest = hashlib.sha1(json.dumps(sp_spec, sort_keys=True).encode()).hexdigest()[:8]
            sp_name = f"{job.name}-unicron-plan-{digest}"
            changes.append(_entry(api, "ScalePlan", job.namespace, sp_name, "create", {
                "apiVersion": api, "kind": "ScalePlan",
                "metadata": {"name": sp_name, "namespace": job.namespace,
                             "labels": {"elasticjob.dlrover/name": job.name, "scale-type": "manual"}},
                "spec": sp_spec}))
    return changes + deletions


def _pod_type(job: K8sJob, pod: Pod) -> str:
    labels = pod.metadata.labels
    value = (labels.get("training.kubeflow.org/replica-type") if job.key == PYTORCH else
             labels.get("volcano.sh/task-spec") if job.key == VOLCANO else
             labels.get("elasticjob.dlrover/replica-type"))
    return (value or "").lower()


def _command(job: K8sJob, action: str) -> dict:
    """A Volcano bus Command, as ``vcctl job suspend/resume`` creates it."""
    name = f"{job.name}-{action.lower()}-unicron-plan"
    target = {"apiVersion": job.raw["apiVersion"], "kind": "Job", "name": job.name}
    if job.obj.metadata.uid:
        target["uid"] = job.obj.metadata.uid
    return _entry("bus.volcano.sh/v1alpha1", "Command", job.namespace, name, "create", {
        "apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
        "metadata": {"name": name, "namespace": job.namespace, "ownerReferences": [
            {**target, "controller": True, "blockOwnerDeletion": True}] if "uid" in target else []},
        "action": action, "target": target})


def _suspend(job: K8sJob) -> list[dict]:
    if job.key == PYTORCH:
        return [_entry(job.raw["apiVersion"], "PyTorchJob", job.namespace, job.name, "merge",
                       {"spec": {"runPolicy": {"suspend": True}}})]
    if job.key == VOLCANO:
        return [_command(job, "AbortJob")]
    raise object_error(job.label, "plan", "the plan suspends the job, and a DLRover ElasticJob cannot be "
                                          "suspended (a ScalePlan cannot ask for 0 replicas); mark it "
                                          "unicron-plan/pinned or raise its weight, or delete it by hand")


def render_kubectl(changes: list[dict]) -> str:
    """The changes as a POSIX shell script of kubectl commands, in order."""
    lines = ["#!/bin/sh", "# Generated by unicron-plan export k8s: apply in this order.", "set -e"]
    for c in changes:
        ns, name = shlex.quote(c["namespace"]), shlex.quote(c["name"])
        group = c["apiVersion"].split("/", 1)[0] if "/" in c["apiVersion"] else ""
        resource = (c["kind"].lower() + "s") + (f".{group}" if group else "")
        if c["patchType"] == "merge":
            lines.append(f"kubectl patch {resource} {name} -n {ns} --type merge "
                         f"-p {shlex.quote(json.dumps(c['patch'], sort_keys=True, separators=(',', ':')))}")
        elif c["patchType"] == "create":
            lines.append("kubectl create -f - <<'EOF'")
            lines.append(json.dumps(c["patch"], sort_keys=True))
            lines.append("EOF")
        else:
            lines.append(f"kubectl delete {resource} {name} -n {ns} --wait=false")
    return "\n".join(lines) + "\n"
