"""The controllers' own rules for an updated job object, written from their sources, so the
exported patches are checked against what the admission webhooks and controllers accept.

Each function takes the object before and after a patch (plain JSON, as ``kubectl get -o json``
and ``kubectl patch --local -o json`` print them) and returns the violations (empty: accepted).

Sources (repository, file, function):

- Volcano: volcano-sh/volcano, pkg/webhooks/admission/jobs/validate/admit_job.go, ``validateJobUpdate``
  and ``validatePartitionPolicy``.
- Kubeflow training-operator v1.9: kubeflow/training-operator (tag v1.9.0),
  pkg/webhooks/pytorch/pytorchjob_webhook.go (``validatePyTorchJob``, ``validatePyTorchReplicaSpecs``),
  pkg/common/util/webhooks.go (``ValidateRunPolicy``, ``ValidateRunPolicyUpdate``), the CRD's CEL rule
  on ``spec.runPolicy.schedulingPolicy.queue`` (pkg/apis/kubeflow.org/v1/common_types.go), the gang
  of pkg/controller.v1/common/job.go (the PodGroup's minMember is ``schedulingPolicy.minAvailable``) and
  the elastic range (pkg/controller.v1/pytorch/elastic.go gives torchrun ``PET_NNODES=min:max``,
  hpa.go the HPA's range: the Worker replicas must lie in it). On update ``validatePyTorchJob`` checks
  the run policy's changes and the new spec as on create, nothing of the pod templates against the
  old ones: a template's node affinity (where the export pins a job's nodes and so its GPU type)
  may change; the controller applies it to the pods it creates from then on.
- DLRover: intelligent-machine-learning/dlrover, go/elasticjob/api/v1alpha1/elasticjob_types.go (the
  fields of ``ElasticJobSpec``; the structural CRD prunes any other) and
  go/elasticjob/config/crd/bases/elastic.iml.github.io_elasticjobs.yaml.
- Kueue: kubernetes-sigs/kueue, pkg/controller/jobframework (a job labelled
  ``kueue.x-k8s.io/queue-name`` is suspended and admitted by Kueue; nobody else flips it).
"""

from __future__ import annotations

import copy
import re

KUEUE = "kueue.x-k8s.io/queue-name"
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def volcano_update_errors(old: dict, new: dict) -> list[str]:
    """Volcano's ``validateJobUpdate``."""
    errs = []
    total = 0
    for task in new["spec"]["tasks"]:
        name, replicas = task["name"], task.get("replicas", 0)
        if replicas < 0:
            errs.append(f"'replicas' must be >= 0 in task: {name}")
        if task.get("minAvailable") is not None:
            if task["minAvailable"] < 0:
                errs.append(f"'minAvailable' must be >= 0 in task: {name}")
            elif task["minAvailable"] > replicas:
                errs.append(f"'minAvailable' must be <= 'replicas' in task: {name}")
        pp = task.get("partitionPolicy")
        if pp is not None:
            if pp.get("totalPartitions", 0) <= 0 or pp.get("partitionSize", 0) <= 0:
                errs.append(f"partition sizes must be > 0 in task: {name}")
            elif replicas != pp["totalPartitions"] * pp["partitionSize"]:
                errs.append(f"'Replicas' are not equal to TotalPartitions*PartitionSize in task: {name}")
        total += replicas
    job_min = new["spec"].get("minAvailable", 0)
    if job_min > total:
        errs.append("job 'minAvailable' must not be greater than total replicas")
    if job_min < 0:
        errs.append("job 'minAvailable' must be >= 0")
    if len(old["spec"]["tasks"]) != len(new["spec"]["tasks"]):
        errs.append("job updates may not add or remove tasks")
        return errs
    a, b = copy.deepcopy(old["spec"]), copy.deepcopy(new["spec"])
    for spec in (a, b):  # the fields an update may change
        spec.pop("minAvailable", None)
        spec.pop("priorityClassName", None)
        for task in spec["tasks"]:
            task.pop("replicas", None)
            task.pop("minAvailable", None)
        for vol in spec.get("volumes", []):
            if vol.get("volumeClaim") is not None:
                vol.pop("volumeClaimName", None)
    if a != b:
        errs.append("job updates may not change fields other than `minAvailable`, `tasks[*].replicas under spec` "
                    "and `PriorityClassName`")
    return errs


def pytorchjob_errors(old: dict, new: dict) -> list[str]:
    """training-operator's PyTorchJob webhook on update, the CRD's CEL rule, and a gang that can start."""
    errs = []
    if not _DNS1035.match(new["metadata"]["name"]) or len(new["metadata"]["name"]) > 63:
        errs.append("metadata.name: should match a DNS-1035 label")
    spec, old_spec = new["spec"], old["spec"]
    run, old_run = spec.get("runPolicy", {}), old_spec.get("runPolicy", {})
    if run.get("managedBy") != old_run.get("managedBy"):
        errs.append("spec.runPolicy.managedBy: field is immutable")
    if run.get("managedBy") not in (None, "kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"):
        errs.append("spec.runPolicy.managedBy: Unsupported value")
    if (run.get("schedulingPolicy") or {}).get("queue") != (old_run.get("schedulingPolicy") or {}).get("queue"):
        errs.append("spec.runPolicy.schedulingPolicy.queue is immutable")
    specs = spec.get("pytorchReplicaSpecs") or {}
    if not specs:
        errs.append("spec.pytorchReplicaSpecs: must be required")
    if spec.get("elasticPolicy") is not None and "Worker" not in specs:
        errs.append("spec.pytorchReplicaSpecs[Worker]: must be configured if elastic policy is used")
    total = 0
    for rtype, rs in specs.items():
        path = f"spec.pytorchReplicaSpecs[{rtype}]"
        if rtype not in ("Master", "Worker"):
            errs.append(f"{path}: Unsupported value")
        containers = rs.get("template", {}).get("spec", {}).get("containers") or []
        if not containers:
            errs.append(f"{path}.template.spec.containers: must be specified")
        if any(not c.get("image") for c in containers):
            errs.append(f"{path}.template.spec.containers: image must be required")
        if not any(c.get("name") == "pytorch" for c in containers):
            errs.append(f"{path}.template.spec.containers: must have at least one container with name pytorch")
        replicas = rs.get("replicas")
        if rtype == "Master" and replicas != 1:
            errs.append(f"{path}.replicas: must be 1")
        elif rtype != "Master" and replicas is not None and replicas < 1:
            errs.append(f"{path}.replicas: must be at least 1")
        total += 1 if replicas is None else replicas
    elastic = spec.get("elasticPolicy") or {}
    workers = (specs.get("Worker") or {}).get("replicas", 1)
    if elastic.get("minReplicas") is not None and workers < elastic["minReplicas"]:
        errs.append(f"Worker replicas {workers} below elasticPolicy.minReplicas {elastic['minReplicas']}")
    if elastic.get("maxReplicas") is not None and workers > elastic["maxReplicas"]:
        errs.append(f"Worker replicas {workers} above elasticPolicy.maxReplicas {elastic['maxReplicas']}")
    gang = (run.get("schedulingPolicy") or {}).get("minAvailable")
    if gang is not None and gang > total:
        errs.append(f"spec.runPolicy.schedulingPolicy.minAvailable {gang} > {total} replicas: the gang never starts")
    errs += kueue_errors(old, new, ("spec", "runPolicy", "suspend"))
    return errs


#: ElasticJobSpec's fields (json tags of go/elasticjob/api/v1alpha1/elasticjob_types.go).
ELASTICJOB_SPEC_FIELDS = {"distributionStrategy", "resourceLimits", "optimizeMode", "brainService",
                          "replicaSpecs", "envs", "suspend"}


def elasticjob_errors(old: dict, new: dict) -> list[str]:
    """DLRover's ElasticJob CRD: only its spec fields (others are pruned), suspend a boolean, replicaSpecs given."""
    errs = [f"spec.{k}: unknown field (pruned by the CRD)" for k in sorted(set(new["spec"]) - ELASTICJOB_SPEC_FIELDS)]
    if "suspend" in new["spec"] and not isinstance(new["spec"]["suspend"], bool):
        errs.append("spec.suspend: must be a boolean")
    if not new["spec"].get("replicaSpecs"):
        errs.append("spec.replicaSpecs: Required value")
    return errs


def kueue_errors(old: dict, new: dict, suspend_path: tuple[str, ...]) -> list[str]:
    """A Kueue-managed job's suspend flag belongs to Kueue, and its queue-name label is immutable
    while it runs (jobframework/validation.go, validateUpdateForQueueName)."""
    if KUEUE not in old["metadata"].get("labels", {}):
        return []
    errs = [] if new["metadata"].get("labels", {}).get(KUEUE) == old["metadata"]["labels"][KUEUE] else [
        f"metadata.labels[{KUEUE}]: field is immutable"]

    def get(doc):
        for part in suspend_path:
            doc = doc.get(part, {}) if isinstance(doc, dict) else {}
        return doc if doc != {} else None

    return errs + ([] if get(old) == get(new) else [f"{'.'.join(suspend_path)}: managed by Kueue, changed"])


def rule_errors(old: dict, new: dict) -> list[str]:
    """The rules of the job's own kind."""
    if old["kind"] == "Job":
        return volcano_update_errors(old, new)
    if old["kind"] == "PyTorchJob":
        return pytorchjob_errors(old, new)
    if old["kind"] == "ElasticJob":
        return elasticjob_errors(old, new)
    raise AssertionError(f"no rules for {old['kind']}")
