"""Kubernetes: ``kubectl get nodes/pods/<jobs> -o json`` in; out, the changes each job's controller
accepts (merge or JSON patches, node labels, new objects, pod deletions).

Job kinds: Kubeflow ``PyTorchJob`` (kubeflow.org/v1), Volcano ``Job``
(batch.volcano.sh/v1alpha1) and DLRover ``ElasticJob`` (elastic.iml.github.io/v1alpha1).
A job's GPUs move in pods: every pod of its scaled replica type asks for the
same GPUs, so the instance gives the job ``tp`` = a multiple of that count and
the plan splits it into whole pods, and its table keeps only the counts its controller
can run. Names are checked against Kubernetes' own rules, since they reach kubectl command
lines. docs/integrations.md lists every field.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from pydantic import Field, field_validator

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.integrations.common import (MAX_OBJECTS, Cost, GpuMap, JobState, Lenient, NodeState,
                                              build_instance, check_plan_shape, items_of, normalize_product, object_error,
                                              parse_object, parse_plan_fields)

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
#: A job with this label is admitted (unsuspended) and suspended by Kueue, not by its own controller.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Pod labels naming the replica index (the controllers' own; the pod name ends with it too).
INDEX_LABELS = {PYTORCH: "training.kubeflow.org/replica-index", VOLCANO: "volcano.sh/task-index",
                DLROVER: "elasticjob.dlrover/replica-index"}
#: Volcano job phases after which its controller never runs it again.
VOLCANO_ENDED = ("Completing", "Completed", "Terminating", "Terminated", "Failed")
#: Prefix of the node label a Volcano GPU task's template selects: its pods are placed through it.
PLACEMENT_PREFIX = "unicron-plan/"


# --- Kubernetes' own name rules (k8s.io/apimachinery/pkg/util/validation) ------------------------

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(rf"{_LABEL}")
_DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def dns1123_subdomain(value: str) -> str:
    """An object name (Node, Pod, job): lowercase letters, digits, '-' and '.', at most 253."""
    if len(value) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(value):
        raise ValueError("must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and "
                         "ending with a letter or digit, at most 253 characters)")
    return value


def dns1123_label(value: str) -> str:
    """A namespace or a Volcano task name: lowercase letters, digits and '-', at most 63."""
    if len(value) > 63 or not _DNS1123_LABEL.fullmatch(value):
        raise ValueError("must be a DNS-1123 label (lowercase letters, digits and '-', starting and ending "
                         "with a letter or digit, at most 63 characters)")
    return value


def label_value(value: str) -> str:
    """A label value: at most 63 of letters, digits, '-', '_' and '.', alphanumeric at both ends (or empty)."""
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise ValueError("must be a label value (at most 63 letters, digits, '-', '_' or '.', starting and "
                         "ending with a letter or digit)")
    return value


def label_key(value: str) -> str:
    """A label key: an optional DNS-1123 subdomain prefix and '/', then a name of at most 63 characters."""
    prefix, _, name = value.rpartition("/")
    if (prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix))) or \
            len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        raise ValueError("must be a label key ([DNS-1123 subdomain/]name, the name at most 63 letters, digits, "
                         "'-', '_' or '.', alphanumeric at both ends)")
    return value


# --- the objects, as far as the adapter reads them ---------------------------------------------

class OwnerReference(Lenient):
    """An object's owner (the controller that made a pod: its job)."""

    apiVersion: str = ""
    kind: str = ""
    name: str = ""
    uid: Optional[str] = None


class Meta(Lenient):
    """Object metadata; names reach kubectl command lines, so they must follow Kubernetes' own rules."""

    name: str = Field(min_length=1)
    namespace: Optional[str] = None
    uid: Optional[str] = None
    ownerReferences: list[OwnerReference] = Field(default_factory=list, max_length=64)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    deletionTimestamp: Optional[str] = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return dns1123_subdomain(value)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: Optional[str]) -> Optional[str]:
        return value if value is None else dns1123_label(value)


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


class SelectorRequirement(Lenient):
    """One ``matchExpressions`` entry of a node selector term."""

    key: str
    operator: str
    values: list[str] = Field(default_factory=list, max_length=1024)


class SelectorTerm(Lenient):
    matchExpressions: list[SelectorRequirement] = Field(default_factory=list, max_length=256)


class RequiredNodeSelector(Lenient):
    nodeSelectorTerms: list[SelectorTerm] = Field(default_factory=list, max_length=256)


class NodeAffinity(Lenient):
    requiredDuringSchedulingIgnoredDuringExecution: Optional[RequiredNodeSelector] = None


class Affinity(Lenient):
    nodeAffinity: Optional[NodeAffinity] = None


class TemplateSpec(PodSpec):
    """A job template's pod spec: also its required node affinity (where GPU types are allowed)."""

    affinity: Optional[Affinity] = None


class PodTemplate(Lenient):
    spec: TemplateSpec


class ReplicaSpec(Lenient):
    replicas: int = Field(default=1, ge=0)
    template: PodTemplate


class ElasticPolicy(Lenient):
    minReplicas: Optional[int] = Field(default=None, ge=0)
    maxReplicas: Optional[int] = Field(default=None, ge=0)


class SchedulingPolicy(Lenient):
    minAvailable: Optional[int] = Field(default=None, ge=0)


class RunPolicy(Lenient):
    suspend: bool = False
    schedulingPolicy: Optional[SchedulingPolicy] = None


class ReplicaStatus(Lenient):
    active: Optional[int] = None


class JobStatus(Lenient):
    """The training operator's job status (PyTorchJob, and DLRover's ElasticJob, which reuses it)."""

    conditions: list[Condition] = Field(default_factory=list, max_length=256)
    replicaStatuses: dict[str, ReplicaStatus] = Field(default_factory=dict, max_length=64)
    phase: Optional[str] = None  # (DLRover)


class PyTorchJobSpec(Lenient):
    pytorchReplicaSpecs: dict[str, ReplicaSpec] = Field(min_length=1)
    elasticPolicy: Optional[ElasticPolicy] = None
    runPolicy: RunPolicy = Field(default_factory=RunPolicy)


class PyTorchJob(Lenient):
    apiVersion: str
    kind: str
    metadata: Meta
    spec: PyTorchJobSpec
    status: JobStatus = Field(default_factory=JobStatus)


class PartitionPolicy(Lenient):
    totalPartitions: Optional[int] = None


class VolcanoTask(Lenient):
    name: str = Field(min_length=1)
    replicas: int = Field(ge=0)
    minAvailable: Optional[int] = Field(default=None, ge=0)
    partitionPolicy: Optional[PartitionPolicy] = None
    template: PodTemplate

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return dns1123_label(value)


class VolcanoState(Lenient):
    phase: Optional[str] = None


class VolcanoStatus(Lenient):
    state: VolcanoState = Field(default_factory=VolcanoState)
    running: Optional[int] = None


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
    suspend: bool = False


class ElasticJob(Lenient):
    apiVersion: str
    kind: str
    metadata: Meta
    spec: ElasticJobSpec
    status: JobStatus = Field(default_factory=JobStatus)


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
    replicas: int = 0             # the scaled type's replicas in the spec
    gpu_types: tuple[str, ...] = ()  # replica types / tasks whose pods hold GPUs (the scaled one included)
    min_replicas: int = 1         # fewest replicas of the scaled type a plan may give (PyTorchJob's webhook
    #                               wants Worker >= 1; a Volcano or DLRover job needs its workers too)
    fixed_replicas: bool = False  # the controller cannot change the scaled type's replicas at all
    placement_label: Optional[tuple[str, str]] = None  # Volcano: the node label (key, value) its GPU tasks select
    placement_left_to: Optional[str] = None  # the scheduler that places its pods (no label the export can set)
    products: list["ProductRule"] = field(default_factory=list)  # each GPU template's rule on the GPU product
    pods: list[Pod] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"

    def finished(self) -> Optional[str]:
        """Why the job has ended for good (its controller never runs it again), or None: a PyTorchJob or
        ElasticJob with a condition Succeeded or Failed true (the training operator's IsFinished), a
        DLRover phase Succeeded or Failed, a Volcano job Completing, Completed, Terminating, Terminated or
        Failed (Aborted is a suspension: ResumeJob runs it again)."""
        if self.key == VOLCANO:
            phase = self.obj.status.state.phase
            return f"status.state.phase {phase}" if phase in VOLCANO_ENDED else None
        status = self.obj.status
        ended = next((c.type for c in status.conditions if c.type in ("Succeeded", "Failed") and c.status == "True"),
                     None)
        if ended is not None:
            return f"condition {ended}"
        return f"status.phase {status.phase}" if status.phase in ("Succeeded", "Failed") else None

    def reported_running(self) -> int:
        """Pods its own status says are active (a PyTorchJob's or ElasticJob's replicaStatuses, at least 1
        under a condition Running true; a Volcano job's ``running``); 0 when it does not say."""
        if self.key == VOLCANO:
            return max(self.obj.status.running or 0, 0)
        status = self.obj.status
        active = sum(max(r.active or 0, 0) for r in status.replicaStatuses.values())
        running = any(c.type == "Running" and c.status == "True" for c in status.conditions)
        return max(active, 1) if running else active

    def owns(self, pod: "Pod") -> bool:
        """Whether ``pod`` (labelled with this job's name) is this job's: a pod that names its owners is
        this job's only when one of them is this job (same kind and group; same uid when both have one),
        since the training operator labels the pods of every job kind it runs alike (a TFJob's pods carry
        the same job-name label as a PyTorchJob of that name)."""
        refs = pod.metadata.ownerReferences
        if not refs:
            return True
        uid = self.obj.metadata.uid
        return any(r.kind == self.key[1] and _group(r.apiVersion) == self.key[0] and r.name == self.name
                   and (uid is None or r.uid is None or r.uid == uid) for r in refs)

    @property
    def kueue(self) -> bool:
        """Kueue admits and suspends this job: a PyTorchJob (a kind Kueue integrates; Volcano and
        DLRover jobs it does not) carrying Kueue's queue-name label."""
        return self.key == PYTORCH and KUEUE_QUEUE_LABEL in self.obj.metadata.labels

    def counts_rule(self) -> str:
        """The counts :meth:`allowed_gpus` accepts, in words."""
        pods = str(self.replicas) if self.fixed_replicas else f"at least {self.min_replicas}"
        return (f"{self.fixed_gpus} GPUs of fixed replicas and {pods} {self.scaled!r} pod(s) of "
                f"{self.gpus_per_pod} GPUs, or 0 (suspended)")

    def allowed_gpus(self, count: int) -> bool:
        """Whether the job's controller can run it on ``count`` GPUs (0, suspended, is always possible)."""
        extra = count - self.fixed_gpus
        if count == 0:
            return True
        if extra % self.gpus_per_pod or extra // self.gpus_per_pod < self.min_replicas:
            return False
        return not self.fixed_replicas or extra // self.gpus_per_pod == self.replicas


@dataclass
class ProductRule:
    """What one pod template says about the GPU product of its nodes: its ``nodeSelector`` value
    and, per term of its required node affinity, the ``In`` and ``NotIn`` values on
    ``nvidia.com/gpu.product`` (``ins`` None: the term has no ``In`` on it). ``declared``: the
    template restricts the product (a nodeSelector value, or every term an In or NotIn on it)."""

    path: str
    selector: Optional[str] = None
    terms: list[tuple[Optional[list[str]], list[str]]] = field(default_factory=list)
    declared: bool = False


def product_rule(spec: TemplateSpec, path: str, label: str) -> ProductRule:
    """The template's rule on ``nvidia.com/gpu.product`` (Gt/Lt on it are bad input)."""
    rule = ProductRule(path=path, selector=spec.nodeSelector.get(PRODUCT_LABEL))
    required = spec.affinity and spec.affinity.nodeAffinity and \
        spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    restricted = bool(required and required.nodeSelectorTerms)
    for t, term in enumerate(required.nodeSelectorTerms if required else []):
        ins: Optional[list[str]] = None
        notins: list[str] = []
        constrained = False
        for e, req in enumerate(term.matchExpressions):
            if req.key != PRODUCT_LABEL:
                continue
            where = f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution" \
                    f".nodeSelectorTerms[{t}].matchExpressions[{e}]"
            if req.operator == "In":
                ins = [v for v in req.values if ins is None or v in ins]
                constrained = True
            elif req.operator == "NotIn":
                notins += req.values
                constrained = True
            elif req.operator == "DoesNotExist":
                ins, constrained = [], True
            elif req.operator != "Exists":
                raise object_error(label, f"{where}.operator", f"{req.operator!r} on {PRODUCT_LABEL}: the GPU "
                                                               "types are read from In, NotIn, Exists, DoesNotExist")
        restricted = restricted and constrained
        rule.terms.append((ins, notins))
    rule.declared = rule.selector is not None or restricted
    return rule


def allowed_types(rules: list[ProductRule], cluster: set[str], gpu_map: GpuMap, label: str) -> Optional[list[str]]:
    """The library GPU types every GPU template of a job admits, in the order written (the first
    template's), or None when no template restricts the product. A product no node of the cluster
    carries (every node's label is mapped at import) is skipped: no node matches it."""
    def known(value: str) -> Optional[str]:
        return gpu_map.table.get(normalize_product(value))

    out: Optional[list[str]] = None
    for rule in rules:
        if not rule.declared:
            continue
        types: list[str] = []
        for ins, notins in rule.terms or [(None, [])]:
            base = [known(v) for v in ins] if ins is not None else sorted(cluster)
            out_of = {known(v) for v in notins}
            types += [t for t in base if t is not None and t not in out_of and t not in types]
        if rule.selector is not None:
            sel = gpu_map.resolve(rule.selector, label, f'{rule.path}.nodeSelector["{PRODUCT_LABEL}"]')
            types = [sel] if sel in types or not rule.terms else []
        out = types if out is None else [t for t in out if t in types]
    if out is not None and not out:
        raise object_error(label, f"{rules[0].path}.affinity", f"the pod templates admit no GPU type of the "
                                                               f"library on {PRODUCT_LABEL}")
    return out


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


def _placement_label(label: str, sets, gpu_types: list[str]) -> Optional[tuple[str, str]]:
    """The ``unicron-plan/...`` node label every GPU task of a Volcano job selects; None when none selects
    one (its placement is then left to Volcano)."""
    found = None
    if not any(k.startswith(PLACEMENT_PREFIX) for name, _, spec, _ in sets if name in gpu_types
               for k in spec.nodeSelector):
        return None
    for name, _, spec, path in sets:
        if name not in gpu_types:
            continue
        keys = sorted(k for k in spec.nodeSelector if k.startswith(PLACEMENT_PREFIX))
        if len(keys) != 1:
            raise object_error(label, f"{path}.nodeSelector", (
                f"{'several' if keys else 'no'} '{PLACEMENT_PREFIX}' node label(s): Volcano does not let a job "
                f"update change its pod templates, so its GPU pods are placed through a node label their template "
                f"selects; give each GPU task one, e.g. nodeSelector {{\"{PLACEMENT_PREFIX}JOB\": \"true\"}} "
                f"with a key of its own per job"))
        pair = (keys[0], spec.nodeSelector[keys[0]])
        for what, value, check in (("key", pair[0], label_key), ("value", pair[1], label_value)):
            try:
                check(value)
            except ValueError as exc:
                raise object_error(label, f'{path}.nodeSelector["{pair[0]}"]', f"{value!r}: label {what} {exc}") \
                    from None
        if found is not None and found != pair:
            raise object_error(label, f'{path}.nodeSelector["{pair[0]}"]',
                               f"every GPU task must select the same placement label {found[0]}={found[1]}")
        found = pair
    assert found is not None
    return found


def parse_job(raw: Any, index: int, source: str) -> K8sJob:
    """Parse one job object of a supported kind; the scaled replica type is PyTorchJob's
    ``Worker``, DLRover's ``worker`` and Volcano's GPU task with the most replicas."""
    if not isinstance(raw, dict):
        raise InvalidInstanceError(f"{source} items[{index}]", "must be a JSON object")
    kind, api = raw.get("kind"), raw.get("apiVersion")
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    name = meta.get("name") if isinstance(meta.get("name"), str) else f"items[{index}]"
    ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else "default"
    label = f"{kind if isinstance(kind, str) else 'object'} {ns}/{name}"
    if not isinstance(kind, str) or not isinstance(api, str):
        what = "kind" if not isinstance(kind, str) else "apiVersion"
        raise object_error(label, what, f"must be a string, not {type(raw.get(what)).__name__}")
    key = (_group(api), kind)
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
    path, template, replicas = next((p, spec, r) for n, r, spec, p in sets if n == scaled)
    if g == 0:
        raise object_error(label, f'{path}.containers[*].resources.limits["{GPU}"]',
                           "the scaled replica type asks for no GPU")
    fixed = 0
    for name, n_replicas, _, p in sets:
        if name != scaled and per_pod[name]:
            if per_pod[name] != g:
                raise object_error(label, f'{p}.containers[*].resources.limits["{GPU}"]',
                                   f"{per_pod[name]} GPUs per pod; the plan moves whole pods, so every GPU "
                                   f"replica type needs the same count as {scaled!r} ({g})")
            fixed += n_replicas * g
    gpu_types = tuple(n for n, _, _, _ in sets if per_pod[n])
    k8s_job = K8sJob(key=key, raw=raw, obj=job, name=job.metadata.name,
                     namespace=job.metadata.namespace or "default", label=label, scaled=scaled,
                     gpus_per_pod=g, fixed_gpus=fixed, replicas=replicas, gpu_types=gpu_types,
                     products=[product_rule(spec, p, label) for n, _, spec, p in sorted(
                         sets, key=lambda s: s[0] != scaled) if per_pod[n]])
    if key == VOLCANO:
        k8s_job.placement_label = _placement_label(label, sets, list(gpu_types))
        if k8s_job.placement_label is None:
            k8s_job.placement_left_to = "Volcano"
        task = next(t for t in job.spec.tasks if t.name == scaled)
        # A partitioned task's replicas must equal totalPartitions x partitionSize, which an update cannot change.
        k8s_job.fixed_replicas = task.partitionPolicy is not None
    return k8s_job


def parse_jobs(docs: Any, source: str = "jobs") -> list[K8sJob]:
    """The jobs of one ``kubectl get -o json`` document, or of several given as ``[(doc, source), ...]``."""
    pairs = docs if isinstance(docs, list) and docs and all(
        isinstance(d, tuple) and len(d) == 2 for d in docs) else [(docs, source)]
    jobs: list[K8sJob] = []
    for doc, src in pairs:
        jobs += [parse_job(raw, i, src) for i, raw in enumerate(items_of(doc, src))]
        if len(jobs) > MAX_OBJECTS:
            raise InvalidInstanceError(src, f"{len(jobs)} jobs in all; at most {MAX_OBJECTS} are accepted")
    seen: dict[str, str] = {}
    keys: dict[str, str] = {}
    for j in jobs:
        if j.id in seen:
            raise object_error(j.label, "metadata.name", f"{j.id!r} is also {seen[j.id]}; job ids are namespace/name")
        seen[j.id] = j.label
        if j.placement_label is not None:
            key = j.placement_label[0]
            if key in keys:
                raise object_error(j.label, "spec.tasks[*].template.spec.nodeSelector",
                                   f"the placement label {key} is also {keys[key]}'s: each job needs a key of its own")
            keys[key] = j.label
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


def _pods_with_jobs(pods_doc: Any, jobs):
    """(label, pod, its job or None, live) of every pod of ``kubectl get pods -o json`` (parsed, errors
    naming the pod): its job is the one of ``jobs`` whose name label it carries in its namespace and
    that owns it (:meth:`K8sJob.owns`)."""
    by_label = {(JOB_LABELS[j.key], j.namespace, j.name): j for j in jobs}
    for i, raw in enumerate(items_of(pods_doc, "pods")):
        meta = raw.get("metadata") if isinstance(raw, dict) and isinstance(raw.get("metadata"), dict) else {}
        name = meta.get("name") if isinstance(meta.get("name"), str) else f"items[{i}]"
        ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else "default"
        label = f"Pod {ns}/{name}"
        pod = parse_object(Pod, raw, label)
        ns = pod.metadata.namespace or "default"
        owner = next((j for lab in JOB_LABELS.values() if lab in pod.metadata.labels
                      for j in [by_label.get((lab, ns, pod.metadata.labels[lab]))] if j is not None and j.owns(pod)),
                     None)
        yield label, pod, owner, _live(pod)


# --- import -----------------------------------------------------------------------------------

def import_k8s(nodes_doc: Any, pods_doc: Any, jobs_doc: Any, *, cost: Cost, gpu_map: GpuMap,
               rack_label: str = "topology.kubernetes.io/zone",
               cordon_reasons: Optional[list[str]] = None, name: str = "kubernetes",
               warnings: Optional[list[str]] = None) -> dict:
    """Build the v1 instance from the three ``kubectl get -o json`` documents. A job whose placement the
    export cannot write (a Volcano job whose GPU tasks select no ``unicron-plan/`` node label) is imported
    with ``placement_left_to``: its count is planned, its nodes are its scheduler's; ``warnings`` gets a
    line for it naming the label that would let the planner place it."""
    reasons = [(r.split("=", 1)[0], r.split("=", 1)[1] if "=" in r else None) for r in (cordon_reasons or [])]
    states: dict[str, NodeState] = {}
    cordoned: set[str] = set()
    for i, raw in enumerate(items_of(nodes_doc, "nodes")):
        meta = raw.get("metadata") if isinstance(raw, dict) and isinstance(raw.get("metadata"), dict) else {}
        label = f"Node {meta['name'] if isinstance(meta.get('name'), str) else f'items[{i}]'}"
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

    jobs = []
    for j in parse_jobs(jobs_doc, "jobs"):
        ended = j.finished()
        if ended is None:
            jobs.append(j)
        elif warnings is not None:  # (its pods that still hold GPUs keep them, as unmanaged work's)
            warnings.append(f"{j.label}: left out, it has ended ({ended})")
    cluster_types = {st.gpu_type for st in states.values()}
    used: dict[str, int] = {n: 0 for n in states}
    job_state: dict[str, JobState] = {}
    for j in jobs:
        ann = j.obj.metadata.annotations
        raw = {k[len(ANNOTATION_PREFIX):]: v for k, v in ann.items() if k.startswith(ANNOTATION_PREFIX)}
        where = (lambda key: f'metadata.annotations["{ANNOTATION_PREFIX}{key}"]')
        fields = parse_plan_fields(raw, j.label, where)
        if fields.gpu_types is not None:
            raise object_error(j.label, where("gpu-types"), "not read on Kubernetes: the GPU types a job may run "
                                                            f"on are its pod template's node affinity on {PRODUCT_LABEL}")
        js = JobState(id=j.id, obj=j.label, fields=fields, where=where, granularity=j.gpus_per_pod)
        js.allowed = allowed_types(j.products, cluster_types, gpu_map, j.label)
        if js.allowed is not None:
            rule = next(r for r in j.products if r.declared)
            js.allowed_where = (f'{rule.path}.nodeSelector["{PRODUCT_LABEL}"]' if rule.selector is not None else
                                f"{rule.path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
        job_state[j.id] = js
    listed: set[str] = set()  # jobs with a pod in the pods file, live or not
    for label, pod, owner, live in _pods_with_jobs(pods_doc, jobs):
        if owner is not None:
            listed.add(owner.id)
        if not live:
            continue
        g = pod_gpus(pod.spec, label, "spec")
        node = pod.spec.nodeName
        if g == 0 or node not in states:
            if g and node not in states:
                raise object_error(label, "spec.nodeName", f"{node!r} is not a GPU node of the nodes file")
            continue
        used[node] += g
        if owner is None:
            states[node].reserved_gpus += g  # work the planner does not manage keeps its GPUs
            continue
        owner.pods.append(pod)
        js = job_state[owner.id]
        js.gpus += g
        if node not in js.nodes:
            js.nodes.append(node)
    for j in jobs:  # a pods file that lacks a running job's pods (one namespace, one page) is not read as idle
        if j.id not in listed and j.reported_running():
            raise object_error(j.label, "status", f"it reports {j.reported_running()} running pod(s) and the pods "
                                                  "file has none of its pods: give every pod (kubectl get pods -A "
                                                  "-o json)")
    for n in cordoned:  # cordoned, not failed: nothing new may land there
        states[n].reserved_gpus += max(0, states[n].gpus - states[n].lost_gpus - used[n])
    for n, st in states.items():
        if used[n] > st.gpus:
            raise object_error(f"Node {n}", f'status.capacity["{GPU}"]',
                               f"its live pods hold {used[n]} GPUs, more than its {st.gpus}")
    for j in jobs:
        _limit_counts(j, job_state[j.id])
    doc = build_instance(name, list(states.values()), [job_state[j.id] for j in jobs], cost, gpu_map)
    for j, entry in zip(jobs, doc["jobs"]):
        if j.placement_left_to is not None:
            entry["placement_left_to"] = j.placement_left_to
            if warnings is not None:
                warnings.append(_left_to_warning(j))
    return doc


def _left_to_warning(job: K8sJob) -> str:
    """Why the planner does not place ``job``, and the node label that would let it."""
    key = PLACEMENT_PREFIX + (job.name[:63].rstrip("-._") or "JOB")
    return (f"{job.label}: its GPU tasks select no '{PLACEMENT_PREFIX}' node label, so its count is planned and "
            f"its placement is left to {job.placement_left_to}; give each GPU task nodeSelector "
            f"{{\"{key}\": \"true\"}} to let the planner place it")


def _limit_counts(job: K8sJob, state: JobState) -> None:
    """Tell the planner what the job's controller can run: each throughput table (one per GPU type
    when it has several) keeps only the counts made of its fixed replicas and at least
    ``min_replicas`` pods of the scaled type (all of them when the controller cannot change that
    count), and the count it runs now."""
    def limit(table: dict[str, float], key: str) -> dict[str, float]:
        kept = {k: v for k, v in table.items() if int(k) == state.gpus or job.allowed_gpus(int(k))}
        if not kept:
            raise object_error(job.label, state.where(key),
                               f"no GPU count of the table can run on this job's controller ({job.counts_rule()})")
        return kept

    if state.fields.throughput is not None:
        state.fields.throughput = limit(state.fields.throughput, "throughput")
    state.fields.type_tables = {t: limit(table, f"throughput.{t}") for t, table in state.fields.type_tables.items()}
    # a model-named job: its counts come from the model (docs/integrations.md)


# --- export -----------------------------------------------------------------------------------
#
# What each controller accepts, from its own sources (docs/integrations.md cites them):
# - Volcano (volcano-sh/volcano, pkg/webhooks/admission/jobs/validate/admit_job.go, validateJobUpdate):
#   an update may change only spec.minAvailable, spec.priorityClassName, tasks[*].replicas and
#   tasks[*].minAvailable, never add or remove a task; every task's minAvailable <= its replicas and
#   the job's minAvailable <= the sum of replicas. Pods are named JOB-TASK-INDEX and the controller
#   deletes those with INDEX >= replicas (pkg/controllers/job/job_controller_actions.go, syncJob).
# - Kubeflow training-operator v1 (kubeflow/training-operator, pkg/webhooks/pytorch/pytorchjob_webhook.go):
#   Master replicas must be 1, Worker replicas at least 1; the pods of a replica type whose
#   replica-index >= replicas are deleted (pkg/controller.v1/common/pod.go, ReconcilePods); the gang's
#   PodGroup takes runPolicy.schedulingPolicy.minAvailable (pkg/controller.v1/common/job.go).
# - DLRover (intelligent-machine-learning/dlrover, go/elasticjob/api/v1alpha1/elasticjob_types.go):
#   spec.suspend (since v0.5.0) stops the master creating workers; a ScalePlan with scale-type
#   manual sets the replicas and names the pods to remove (dlrover/python/master/watcher/k8s_watcher.py).
# - Kueue (kubernetes-sigs/kueue, pkg/controller/jobframework): a job labelled
#   kueue.x-k8s.io/queue-name is suspended and admitted by Kueue alone.

def _raw_template_spec(job: K8sJob, rtype: str) -> dict:
    """The pod spec of one replica type's template, as the job object holds it."""
    specs = job.raw["spec"]["pytorchReplicaSpecs" if job.key == PYTORCH else "replicaSpecs"]
    return specs[rtype]["template"]["spec"]


def _affinity(template_spec: dict, nodes: list[str]) -> dict:
    """The template's node affinity pinned to ``nodes``: every required term keeps its expressions
    (the GPU product's among them) and its matchFields, its ``kubernetes.io/hostname`` expression
    becomes ``In`` the plan's nodes (a merge patch replaces the term list as a whole, so it is
    written whole). Preferred terms and pod (anti-)affinity are left to the merge."""
    aff = template_spec.get("affinity") or {}
    required = (aff.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    pin = {"key": HOSTNAME, "operator": "In", "values": sorted(nodes)}
    terms = []
    for term in required.get("nodeSelectorTerms") or [{}]:
        kept = [e for e in term.get("matchExpressions") or [] if e.get("key") != HOSTNAME]
        terms.append({**term, "matchExpressions": kept + [pin]})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def _admits(rule: ProductRule, value: str) -> bool:
    """Whether a template with ``rule`` lets a pod onto a node whose product label is ``value``
    (as Kubernetes matches it: exact values; a term's other expressions are not judged here)."""
    if rule.selector is not None and rule.selector != value:
        return False
    return not rule.terms or any((ins is None or value in ins) and value not in notins for ins, notins in rule.terms)


def _entry(api: str, kind: str, namespace: str, name: str, patch_type: str, patch: Any) -> dict:
    return {"apiVersion": api, "kind": kind, "namespace": namespace, "name": name,
            "patchType": patch_type, "patch": patch}


def _delete(job: K8sJob, pod: Pod) -> dict:
    return _entry("v1", "Pod", job.namespace, pod.metadata.name, "delete", None)


def _pod_type(job: K8sJob, pod: Pod) -> Optional[str]:
    """The replica type / task of one of the job's pods (as the job spells it), or None."""
    labels = pod.metadata.labels
    value = (labels.get("training.kubeflow.org/replica-type") if job.key == PYTORCH else
             labels.get("volcano.sh/task-spec") if job.key == VOLCANO else
             labels.get("elasticjob.dlrover/replica-type"))
    found = next((t for t in job.gpu_types if value is not None and t.lower() == value.lower()), None)
    if found is None and value is None:  # no type label: the name the controller gives (JOB-TYPE-INDEX)
        found = next((t for t in job.gpu_types if _pod_index(job, pod, t, by_name_only=True) is not None), None)
    return found


def _pod_index(job: K8sJob, pod: Pod, rtype: str, by_name_only: bool = False) -> Optional[int]:
    """The replica index of a pod: the name the controller gives it (JOB-TYPE-INDEX), else its index label."""
    prefix = f"{job.name}-{rtype.lower() if job.key == PYTORCH else rtype}-"
    name = pod.metadata.name
    if name.startswith(prefix) and name[len(prefix):].isdigit():
        return int(name[len(prefix):])
    if by_name_only:
        return None
    value = pod.metadata.labels.get(INDEX_LABELS[job.key], "")
    return int(value) if value.isdigit() else None


def _pods_to_delete(job: K8sJob, placement: dict[str, int], replicas: dict[str, int]) -> list[Pod]:
    """The pods to delete so that the job ends on the plan's nodes, given that the controller keeps
    exactly the pods of index < replicas of each type: every pod at or beyond its type's new
    replicas (the controller deletes those; deleting them here says so), and every kept index
    standing where the plan has no room for it (the controller recreates it under the new placement)."""
    room = dict(placement)
    out = []
    indexed = [(_pod_type(job, p), p) for p in job.pods]
    for rtype, pod in sorted(indexed, key=lambda tp: (tp[0] == job.scaled, tp[0] or "",
                                                      _pod_index(job, tp[1], tp[0] or "") or 0, tp[1].metadata.name)):
        index = _pod_index(job, pod, rtype) if rtype is not None else None
        if rtype is None or index is None or index >= replicas.get(rtype, 0):
            out.append(pod)
        elif room.get(pod.spec.nodeName, 0) >= job.gpus_per_pod:
            room[pod.spec.nodeName] -= job.gpus_per_pod
        else:
            out.append(pod)
    return out


def _pods_to_remove_dlrover(job: K8sJob, placement: dict[str, int]) -> list[Pod]:
    """DLRover's ScalePlan names the pods it removes: those standing where the plan has no room."""
    room = dict(placement)
    out = []
    for pod in sorted(job.pods, key=lambda p: p.metadata.name):
        if room.get(pod.spec.nodeName, 0) >= job.gpus_per_pod:
            room[pod.spec.nodeName] -= job.gpus_per_pod
        else:
            out.append(pod)
    return out


def _follow(old_min: Optional[int], old_total: int, new_total: int) -> Optional[int]:
    """A gang minimum after a resize: all of the gang when it was all of it, else never above the new size."""
    if old_min is None:
        return None
    return new_total if old_min >= old_total else min(old_min, new_total)


def _object_name(base: str, suffix: str) -> str:
    """``BASE-SUFFIX`` cut to a valid object name (at most 253 characters)."""
    return f"{base[: 253 - len(suffix) - 1].rstrip('-.')}-{suffix}"


def _node_name(name: str, where: str) -> str:
    try:
        return dns1123_subdomain(name)
    except ValueError as exc:
        raise InvalidInstanceError(where, f"{name!r}: a node name {exc}") from None


class NodeFacts(NamedTuple):
    """What an export reads of a node of ``kubectl get nodes -o json``."""

    label: str
    product: Optional[str]  # its GPU product label's value
    labels: dict[str, str]
    gpus: int  # its allocatable GPUs (its capacity when it gives none)


def _node_products(nodes_doc: Any) -> dict[str, NodeFacts]:
    """Node name -> :class:`NodeFacts` of ``kubectl get nodes -o json``."""
    out = {}
    for i, raw in enumerate(items_of(nodes_doc, "nodes")):
        meta = raw.get("metadata") if isinstance(raw, dict) and isinstance(raw.get("metadata"), dict) else {}
        label = f"Node {meta['name'] if isinstance(meta.get('name'), str) else f'items[{i}]'}"
        node = parse_object(Node, raw, label)
        cap, alloc = node.status.capacity, node.status.allocatable
        gpus = _count(alloc.get(GPU, cap.get(GPU, 0)), label, f'status.allocatable["{GPU}"]')
        out[node.metadata.name] = NodeFacts(label, node.metadata.labels.get(PRODUCT_LABEL), node.metadata.labels, gpus)
    return out


def _check_node_totals(plan, nodes: dict[str, NodeFacts]) -> None:
    """No node of the nodes file gets more GPUs from the plan's jobs together than it has."""
    total: dict[str, int] = {}
    for pj in plan.jobs:
        for p in pj.placement:
            total[p.node] = total.get(p.node, 0) + p.gpus
    for name, g in total.items():
        facts = nodes.get(name)
        if facts is not None and g > facts.gpus:
            raise InvalidInstanceError("plan jobs[*].placement", f"{g} GPUs placed on node {name}, which has "
                                                                 f"{facts.gpus}")


def _check_type(job: K8sJob, pj, k: int, placement: dict[str, int], gpu_map: GpuMap,
                nodes: Optional[dict[str, NodeFacts]]) -> None:
    """The plan's GPU type of the job is one its templates admit (the export never changes which
    types a job allows, and Volcano does not let an update change its templates); with the nodes
    file, every plan node's product label is one each GPU template admits, exactly as Kubernetes
    matches it, so the controller's new pods can land there."""
    if pj.gpu_type is not None:
        allowed = allowed_types(job.products, set(gpu_map.types), gpu_map, job.label)
        if allowed is not None and pj.gpu_type not in allowed:
            raise object_error(job.label, f"plan jobs[{k}].gpu_type", (
                f"{pj.gpu_type!r}: its pod templates admit {', '.join(allowed)} on {PRODUCT_LABEL}"))
    for node in placement if nodes is not None else ():
        if node not in nodes:
            raise object_error(job.label, f"plan jobs[{k}].placement", f"node {node!r} is not in the nodes file")
        value = nodes[node].product
        for rule in job.products:
            if rule.declared and (value is None or not _admits(rule, value)):
                raise object_error(job.label, f"plan jobs[{k}].placement", (
                    f"node {node} ({PRODUCT_LABEL}={value}) is not admitted by {rule.path}'s node selection"))


def export_k8s(plan, jobs_doc: Any, pods_doc: Any = None, notes: Optional[list[str]] = None,
               nodes_doc: Any = None, gpu_map: Optional[GpuMap] = None) -> list[dict]:
    """The changes of every job whose allocation the plan changes, in the order to apply them:
    node labels, patches and new objects first, then pod deletions (so replacements see the new
    placement). What the export leaves to another controller (Kueue) is appended to ``notes``.
    With ``nodes_doc`` (``kubectl get nodes -o json``) every plan node's GPU product is checked
    against the job's templates, and a Volcano job's placement label is removed from every node
    outside the plan that carries it (not only from the nodes its pods leave)."""
    notes = notes if notes is not None else []
    gpu_map = gpu_map or GpuMap()
    nodes = _node_products(nodes_doc) if nodes_doc is not None else None
    check_plan_shape(plan)
    if nodes is not None:
        _check_node_totals(plan, nodes)
    jobs = {j.id: j for j in parse_jobs(jobs_doc, "jobs")}
    if pods_doc is not None:
        for label, pod, owner, live in _pods_with_jobs(pods_doc, jobs.values()):
            if owner is not None and live and pod_gpus(pod.spec, label, "spec"):
                owner.pods.append(pod)
    labels, changes, deletions = [], [], []
    for k, pj in enumerate(plan.jobs):
        job = jobs.get(pj.id)
        if job is None:
            raise InvalidInstanceError(f"plan jobs[{k}].id", f"{pj.id!r} is not a job of the jobs file")
        if pj.action in ("keep", "idle"):
            continue
        ended = job.finished()
        if ended is not None:  # (the plan was made before it ended: nothing of it can be carried out)
            raise object_error(job.label, "status", f"it has ended ({ended}); the plan changes it: import the "
                                                    "cluster again and plan afresh")
        placement = {_node_name(p.node, f"plan jobs[{k}].placement[{i}].node"): p.gpus
                     for i, p in enumerate(pj.placement)}
        if job.placement_left_to is not None and pj.gpus and pj.gpus == pj.previous_gpus \
                and not _suspended(job):
            notes.append(f"{job.label}: the plan restarts it at {pj.gpus} GPUs on other nodes; its placement is "
                         f"left to {job.placement_left_to}, so nothing is changed here")
            continue
        if pj.gpus == 0:
            if job.kueue:
                notes.append(f"{job.label}: the plan suspends it, and Kueue suspends it (label "
                             f"{KUEUE_QUEUE_LABEL}={job.obj.metadata.labels[KUEUE_QUEUE_LABEL]}): deactivate "
                             f"its Workload (spec.active: false) or let Kueue preempt it; nothing is changed here")
                continue
            changes += _suspend(job)
            if job.key == DLROVER:
                deletions += [_delete(job, p) for p in job.pods]
                if pods_doc is None:
                    notes.append(f"{job.label}: suspended by spec.suspend, which stops new workers only; its "
                                 f"running workers are deleted when the export is given --pods")
            continue
        if not job.allowed_gpus(pj.gpus):
            raise object_error(job.label, f"plan jobs[{k}].gpus", f"{pj.gpus} GPUs: its controller runs "
                                                                  f"{job.counts_rule()} (import k8s allows only those)")
        replicas = (pj.gpus - job.fixed_gpus) // job.gpus_per_pod
        for node, g in placement.items():
            if g % job.gpus_per_pod:
                raise object_error(job.label, f"plan jobs[{k}].placement", f"{g} GPUs on node {node} are not "
                                                                           f"whole pods of {job.gpus_per_pod} GPUs")
        _check_type(job, pj, k, placement, gpu_map, nodes)
        resumed = False
        if job.kueue and _suspended(job):
            notes.append(f"{job.label}: the plan resumes it, and Kueue admits it (label {KUEUE_QUEUE_LABEL}="
                         f"{job.obj.metadata.labels[KUEUE_QUEUE_LABEL]}): its suspend flag is left to Kueue")
        else:
            resumed = _suspended(job)
        if job.kueue and replicas != job.replicas:
            notes.append(f"{job.label}: Kueue re-admits it with {replicas} {job.scaled} replicas "
                         f"(it suspends the job until the new size is admitted)")
        if job.key == PYTORCH:
            changes.append(_pytorch_patch(job, placement, replicas, resumed))
            deletions += [_delete(job, p) for p in _pods_to_delete(job, placement, _replicas_of(job, replicas))]
        elif job.key == VOLCANO:
            free = job.placement_left_to is not None  # only the count: Volcano places (and removes) its pods
            if free:
                notes.append(f"{job.label}: {job.scaled} replicas set to {replicas}; its pods' nodes are left to "
                             f"{job.placement_left_to} (its GPU tasks select no '{PLACEMENT_PREFIX}' node label)")
            else:
                labels += _placement_labels(job, placement, nodes)
            if resumed:
                changes.append(_command(job, "ResumeJob"))
            patch = _volcano_patch(job, replicas)
            if patch["patch"]:  # a move keeps the counts: the labels and deletions carry it
                changes.append(patch)
            if not free:
                deletions += [_delete(job, p) for p in _pods_to_delete(job, placement,
                                                                       _replicas_of(job, replicas))]
        else:
            changes += _dlrover_changes(job, placement, replicas, resumed)
    return labels + changes + deletions


def _suspended(job: K8sJob) -> bool:
    if job.key == PYTORCH:
        return job.obj.spec.runPolicy.suspend
    if job.key == VOLCANO:
        return job.obj.status.state.phase in ("Aborted", "Aborting")
    return job.obj.spec.suspend


def _replicas_of(job: K8sJob, replicas: int) -> dict[str, int]:
    """The replicas of every GPU replica type after the change (only the scaled one changes)."""
    return {name: replicas if name == job.scaled else n for name, n, _, _ in _replica_sets(job.obj)}


def _pytorch_patch(job: K8sJob, placement: dict[str, int], replicas: int, resumed: bool) -> dict:
    """Worker replicas, the GPU replica types' node affinity (CPU-only types untouched), the
    elastic range widened to the new count, the gang minimum following it, and the resumption."""
    specs: dict[str, Any] = {}
    old_total = new_total = 0
    for rtype, rs in job.obj.spec.pytorchReplicaSpecs.items():
        new = replicas if rtype == job.scaled else rs.replicas
        old_total, new_total = old_total + rs.replicas, new_total + new
        if rtype in job.gpu_types:
            specs[rtype] = {"template": {"spec": {"affinity": _affinity(_raw_template_spec(job, rtype),
                                                                        list(placement))}}}
            if rtype == job.scaled:
                specs[rtype]["replicas"] = replicas
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    ep = job.obj.spec.elasticPolicy
    if ep is not None and (ep.minReplicas is not None or ep.maxReplicas is not None):
        spec["elasticPolicy"] = {}
        if ep.minReplicas is not None:
            spec["elasticPolicy"]["minReplicas"] = min(ep.minReplicas, replicas)
        if ep.maxReplicas is not None:
            spec["elasticPolicy"]["maxReplicas"] = max(ep.maxReplicas, replicas)
    run: dict[str, Any] = {}
    sp = job.obj.spec.runPolicy.schedulingPolicy
    if sp is not None and sp.minAvailable is not None:
        run["schedulingPolicy"] = {"minAvailable": _follow(sp.minAvailable, old_total, new_total)}
    if resumed:
        run["suspend"] = False
    if run:
        spec["runPolicy"] = run
    return _entry(job.raw["apiVersion"], job.key[1], job.namespace, job.name, "merge", {"spec": spec})


def _volcano_patch(job: K8sJob, replicas: int) -> dict:
    """A JSON patch of only what Volcano's job update allows: the scaled task's replicas and
    minAvailable, and the job's minAvailable (each gang minimum follows the new count). Each
    task is addressed by index after a test of its name, so a reordered job fails the patch."""
    ops: list[dict] = []
    old_total = new_total = 0
    for i, task in enumerate(job.obj.spec.tasks):
        new = replicas if task.name == job.scaled else task.replicas
        old_total, new_total = old_total + task.replicas, new_total + new
        if task.name != job.scaled or new == task.replicas:
            continue
        ops.append({"op": "test", "path": f"/spec/tasks/{i}/name", "value": task.name})
        ops.append({"op": "replace", "path": f"/spec/tasks/{i}/replicas", "value": new})
        if task.minAvailable is not None:
            ops.append({"op": "replace", "path": f"/spec/tasks/{i}/minAvailable",
                        "value": _follow(task.minAvailable, task.replicas, new)})
    job_min = job.obj.spec.minAvailable
    if job_min is not None and new_total != old_total:
        ops.append({"op": "replace", "path": "/spec/minAvailable", "value": _follow(job_min, old_total, new_total)})
    return _entry(job.raw["apiVersion"], "Job", job.namespace, job.name, "json", ops)


def _placement_labels(job: K8sJob, placement: dict[str, int], nodes: Optional[dict] = None) -> list[dict]:
    """Node label patches that place a Volcano job's GPU pods: its placement label on the plan's
    nodes, and off the nodes its pods leave, and with the nodes file off every other node that
    carries it (Volcano does not let an update change the templates)."""
    assert job.placement_label is not None
    key, value = job.placement_label
    out = [_entry("v1", "Node", "", node, "merge", {"metadata": {"labels": {key: value}}})
           for node in sorted(placement)]
    left = {p.spec.nodeName for p in job.pods if p.spec.nodeName}
    left |= {n for n, facts in (nodes or {}).items() if key in facts.labels}
    left = sorted(left - set(placement))
    out += [_entry("v1", "Node", "", node, "merge", {"metadata": {"labels": {key: None}}}) for node in left]
    return out


def _dlrover_changes(job: K8sJob, placement: dict[str, int], replicas: int, resumed: bool) -> list[dict]:
    """The worker template's affinity (and the resumption), then a manual ScalePlan."""
    api = job.raw["apiVersion"]
    rtype = job.scaled
    aff = _affinity(_raw_template_spec(job, rtype), list(placement))
    spec: dict[str, Any] = {"replicaSpecs": {rtype: {"template": {"spec": {"affinity": aff}}}}}
    if resumed:
        spec["suspend"] = False
    out = [_entry(api, "ElasticJob", job.namespace, job.name, "merge", {"spec": spec})]
    sp_spec: dict[str, Any] = {"ownerJob": job.name, "replicaResourceSpecs": {
        rtype: {"replicas": replicas, "resource": {GPU: str(job.gpus_per_pod)}}}}
    remove = _pods_to_remove_dlrover(job, placement)
    if remove:
        sp_spec["removePods"] = [{"name": p.metadata.name, "type": (_pod_type(job, p) or rtype).lower()}
                                 for p in remove]
    digest = hashlib.sha1(json.dumps(sp_spec, sort_keys=True).encode()).hexdigest()[:8]
    sp_name = _object_name(job.name, f"unicron-plan-{digest}")
    out.append(_entry(api, "ScalePlan", job.namespace, sp_name, "create", {
        "apiVersion": api, "kind": "ScalePlan",
        "metadata": {"name": sp_name, "namespace": job.namespace,
                     "labels": {"elasticjob.dlrover/name": job.name[:63].rstrip("-."), "scale-type": "manual"}},
        "spec": sp_spec}))
    return out


def _command(job: K8sJob, action: str) -> dict:
    """A Volcano bus Command, as ``vcctl job suspend/resume`` creates it."""
    name = _object_name(job.name, f"{action.lower()}-unicron-plan")
    target = {"apiVersion": job.raw["apiVersion"], "kind": "Job", "name": job.name}
    if job.obj.metadata.uid:
        target["uid"] = job.obj.metadata.uid
    return _entry("bus.volcano.sh/v1alpha1", "Command", job.namespace, name, "create", {
        "apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
        "metadata": {"name": name, "namespace": job.namespace, "ownerReferences": [
            {**target, "controller": True, "blockOwnerDeletion": True}] if "uid" in target else []},
        "action": action, "target": target})


def _suspend(job: K8sJob) -> list[dict]:
    """PyTorchJob runPolicy.suspend; Volcano an AbortJob Command (``vcctl job suspend``); DLRover
    spec.suspend (its master then creates no worker; the export deletes the running ones)."""
    if job.key == PYTORCH:
        return [_entry(job.raw["apiVersion"], "PyTorchJob", job.namespace, job.name, "merge",
                       {"spec": {"runPolicy": {"suspend": True}}})]
    if job.key == VOLCANO:
        return [_command(job, "AbortJob")]
    return [_entry(job.raw["apiVersion"], "ElasticJob", job.namespace, job.name, "merge",
                   {"spec": {"suspend": True}})]


def _resource(change: dict) -> str:
    group = change["apiVersion"].split("/", 1)[0] if "/" in change["apiVersion"] else ""
    return change["kind"].lower() + "s" + (f".{group}" if group else "")


def render_kubectl(changes: list[dict], notes: Optional[list[str]] = None) -> str:
    """The changes as a POSIX shell script of kubectl commands, in order. Every argument is
    quoted and object names come after ``--``, so no name can become an option."""
    lines = ["#!/bin/sh", "# Generated by unicron-plan export k8s: apply in this order.", "set -e"]
    for note in notes or []:
        lines.append("# note: " + " ".join(note.split()))  # one comment line, whatever the text holds
    for c in changes:
        ns = ["-n", c["namespace"]] if c["namespace"] else []
        target = ["--", _resource(c), c["name"]]
        if c["patchType"] in ("merge", "json"):
            body = json.dumps(c["patch"], sort_keys=True, separators=(",", ":"))
            argv = ["kubectl", "patch", *ns, "--type", c["patchType"], "-p", body, *target]
        elif c["patchType"] == "create":
            argv = ["kubectl", "create", "-f", "-"]
        else:
            argv = ["kubectl", "delete", *ns, "--wait=false", *target]
        line = " ".join(shlex.quote(a) for a in argv)
        if c["patchType"] == "create":
            lines += [line + " <<'EOF'", json.dumps(c["patch"], sort_keys=True), "EOF"]
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"
