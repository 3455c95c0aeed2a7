"""Scheduler fixtures in the tools' own formats, generated deterministically.

``kubectl get nodes/pods/<jobs> -o json`` (Kubernetes v1 Node and Pod, Kubeflow
PyTorchJob v1, Volcano batch.volcano.sh/v1alpha1 Job, DLRover ElasticJob) and
``scontrol show nodes --json`` / ``squeue --json`` (Slurm data_parser v0.0.40),
with the fields the adapters ignore as the tools print them. The small and
medium sizes are committed under tests/fixtures/ (``python tests/schedfixtures.py``
rewrites them); the 2,048-node size is generated at test time.

Every cluster has failures to plan around: a NotReady node carrying a job, an
unreachable one, a cordoned one with a named reason, a node that lost a GPU,
work the planner does not manage, a suspended job and jobs of every kind.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SIZES = {"small": 16, "medium": 64, "large": 2048}
PRODUCTS = {"h100": "NVIDIA-H100-80GB-HBM3", "a100": "NVIDIA-A100-SXM4-80GB"}
PEAK = {"h100": 989.0, "a100": 312.0}
STAMP = "2026-11-30T08:00:00Z"


def _table(rng: random.Random, gtype: str, start: int, step: int, count: int) -> dict[str, float]:
    """A concave-ish throughput table over start, start+step, ... (TFLOP/s of the whole job)."""
    per_gpu = PEAK[gtype] * rng.uniform(0.38, 0.52)
    out = {}
    for k in range(count):
        n = start + k * step
        out[str(n)] = round(per_gpu * n * (1.0 - 0.04 * k / max(1, count)), 1)
    return out


def _types(n_nodes: int) -> list[str]:
    """The first quarter of the nodes are A100, the rest H100."""
    cut = max(4, n_nodes // 4)
    return ["a100" if i < cut else "h100" for i in range(n_nodes)]


# --- Kubernetes --------------------------------------------------------------------------------

def _k8s_node(name: str, gtype: str, zone: str, ready: bool = True, taints=(), unschedulable=False,
              labels=None, allocatable_gpus: int = 8) -> dict:
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "uid": f"uid-node-{name}", "resourceVersion": "918273", "creationTimestamp": STAMP,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                            "nfd.node.kubernetes.io/feature-labels": "nvidia.com/gpu.product,nvidia.com/gpu.count"},
            "labels": {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "node.kubernetes.io/instance-type": f"{gtype}-8x",
                       "topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": zone,
                       "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8",
                       "nvidia.com/gpu.product": PRODUCTS[gtype], "nvidia.com/gpu.memory": "81559",
                       "nvidia.com/gpu.family": "hopper" if gtype == "h100" else "ampere",
                       "nvidia.com/cuda.driver.major": "550", **(labels or {})},
        },
        "spec": {"podCIDR": "10.244.0.0/24", "providerID": f"baremetal://{name}",
                 **({"taints": list(taints)} if taints else {}),
                 **({"unschedulable": True} if unschedulable else {})},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": name}],
            "allocatable": {"cpu": "190", "ephemeral-storage": "1699337894420", "hugepages-1Gi": "0",
                            "memory": "2011514384Ki", "nvidia.com/gpu": str(allocatable_gpus), "pods": "110"},
            "capacity": {"cpu": "192", "ephemeral-storage": "1843900440Ki", "hugepages-1Gi": "0",
                         "memory": "2113814544Ki", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP, "message": "kubelet has sufficient memory"},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                 "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP, "message": "kubelet has no disk pressure"},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                 "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP, "message": "kubelet has sufficient PID"},
                {"type": "Ready", "status": "True" if ready else "Unknown",
                 "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                 "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP,
                 "message": "kubelet is posting ready status" if ready else "Kubelet stopped posting node status."}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.13",
                         "kernelVersion": "5.15.0-105-generic", "kubeProxyVersion": "v1.29.4",
                         "kubeletVersion": "v1.29.4", "operatingSystem": "linux",
                         "osImage": "Ubuntu 22.04.4 LTS", "machineID": "0f3c", "systemUUID": "4c4c", "bootID": "b00t"},
        },
    }
    return node


def _container(gpus: int, image: str = "nvcr.io/nvidia/pytorch:24.05-py3") -> dict:
    res = {"limits": {"cpu": "96", "memory": "1000Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})},
           "requests": {"cpu": "90", "memory": "900Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}}
    return {"name": "pytorch", "image": image, "imagePullPolicy": "IfNotPresent",
            "command": ["torchrun"], "args": ["--nnodes=$(PET_NNODES)", "train.py"],
            "env": [{"name": "NCCL_DEBUG", "value": "WARN"}], "resources": res,
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}


def _template(gpus: int, gtype: str = "h100") -> dict:
    return {"metadata": {"labels": {"app": "llm-train"}},
            "spec": {"containers": [_container(gpus)], "restartPolicy": "OnFailure",
                     **({"nodeSelector": {"nvidia.com/gpu.product": PRODUCTS[gtype]}} if gpus else {}),
                     "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Gi"}}],
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}


def _owner(obj: dict) -> dict:
    """The ownerReference a controller puts on the pods it makes for ``obj``."""
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def _pod(name: str, ns: str, labels: dict, node: str | None, gpus: int, phase: str = "Running",
         owner: dict | None = None) -> dict:
    spec = {"containers": [_container(gpus)], "restartPolicy": "OnFailure", "schedulerName": "default-scheduler",
            "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-pod-{ns}-{name}", "labels": labels,
                         "resourceVersion": "1234", "creationTimestamp": STAMP,
                         **({"ownerReferences": [owner]} if owner is not None else {})},
            "spec": spec,
            "status": {"phase": phase, "hostIP": "10.0.0.1", "podIP": "10.244.1.7", "qosClass": "Burstable",
                       "startTime": STAMP,
                       "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": STAMP}],
                       "containerStatuses": [{"name": "pytorch", "ready": True, "restartCount": 0,
                                              "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                              "state": {"running": {"startedAt": STAMP}}}]}}


def _annotations(plan: dict[str, str]) -> dict[str, str]:
    return {"kubectl.kubernetes.io/last-applied-configuration": "{}",
            **{f"unicron-plan/{k}": v for k, v in plan.items()}}


def pytorchjob(name: str, ns: str, workers: int, gpus: int, plan: dict, master_gpus: int = 0,
               elastic: tuple[int, int] | None = None, suspend: bool = False, gtype: str = "h100") -> dict:
    specs = {"Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": _template(gpus, gtype)}}
    if master_gpus:
        specs["Master"] = {"replicas": 1, "restartPolicy": "OnFailure", "template": _template(master_gpus, gtype)}
    spec = {"pytorchReplicaSpecs": specs, "runPolicy": {"cleanPodPolicy": "None", "suspend": suspend}}
    if elastic:
        spec["elasticPolicy"] = {"rdzvBackend": "c10d", "minReplicas": elastic[0], "maxReplicas": elastic[1],
                                 "nProcPerNode": gpus}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-ptj-{name}", "generation": 3,
                         "resourceVersion": "55501", "creationTimestamp": STAMP, "annotations": _annotations(plan)},
            "spec": spec,
            "status": {"conditions": [{"type": "Suspended" if suspend else "Running", "status": "True",
                                       "reason": "PyTorchJobRunning", "lastUpdateTime": STAMP}],
                       "replicaStatuses": {"Worker": {"active": 0 if suspend else workers}}, "startTime": STAMP}}


def volcanojob(name: str, ns: str, workers: int, gpus: int, plan: dict, gtype: str = "h100") -> dict:
    worker = _template(gpus, gtype)
    worker["spec"]["nodeSelector"][f"unicron-plan/{name}"] = "true"  # the node label that places its GPU pods
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-vcjob-{name}", "generation": 1,
                         "resourceVersion": "777", "creationTimestamp": STAMP, "annotations": _annotations(plan)},
            "spec": {"schedulerName": "volcano", "queue": "training", "minAvailable": workers + 1,
                     "maxRetry": 3, "plugins": {"pytorch": ["--master=master", "--worker=worker", "--port=23456"],
                                                "svc": []},
                     "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
                     "tasks": [{"name": "master", "replicas": 1, "template": _template(0)},
                               {"name": "worker", "replicas": workers, "minAvailable": workers,
                                "template": worker}]},
            "status": {"state": {"phase": "Running", "lastTransitionTime": STAMP}, "minAvailable": workers + 1,
                       "running": workers + 1, "version": 1}}


def elasticjob(name: str, ns: str, workers: int, gpus: int, plan: dict, gtype: str = "h100") -> dict:
    return {"apiVersion": "elastic.iml.github.io/v1alpha1", "kind": "ElasticJob",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-edl-{name}",
                         "resourceVersion": "4242", "creationTimestamp": STAMP, "annotations": _annotations(plan)},
            "spec": {"distributionStrategy": "AllreduceStrategy", "optimizeMode": "single-job",
                     "replicaSpecs": {"worker": {"replicas": workers, "restartCount": 3, "template": _template(gpus, gtype)}}},
            "status": {"phase": "Running", "startTime": STAMP}}


def k8s_cluster(n_nodes: int, seed: int = 0) -> tuple[dict, dict, dict]:
    """(nodes, pods, jobs) List documents of a cluster of ``n_nodes`` 8-GPU nodes."""
    rng = random.Random(seed)
    types = _types(n_nodes)
    names = [f"gpu-{i:04d}" for i in range(n_nodes)]
    free = {n: 8 for n in names}
    type_of = dict(zip(names, types))
    nodes, pods, jobs = {}, [], []
    for i, n in enumerate(names):
        nodes[n] = _k8s_node(n, types[i], f"zone-{i // 16:02d}")

    def place(job_pods: int, gpus: int, gtype: str) -> list[str] | None:
        """First-fit nodes of ``gtype`` for ``job_pods`` pods of ``gpus`` GPUs."""
        out, trial = [], dict(free)
        for n in names:
            while type_of[n] == gtype and trial[n] >= gpus and len(out) < job_pods:
                trial[n] -= gpus
                out.append(n)
        if len(out) < job_pods:
            return None
        free.update(trial)
        return out

    k = 0
    budget = {"a100": sum(t == "a100" for t in types) * 8, "h100": sum(t == "h100" for t in types) * 8}
    for gtype in ("a100", "h100"):
        left = budget[gtype] - (8 if gtype == "a100" else 16)  # keep a little free
        while left >= 8:
            kind = ("ptj", "vc", "edl", "ptj4", "ptjm")[k % 5]
            gpus = 4 if kind == "ptj4" else 8
            pods_n = max(1, min(left // gpus, rng.choice([1, 2, 2, 4, 4, 8, 16])))
            if kind == "ptjm" and pods_n < 2:
                kind = "ptj"
            ns = f"team-{k % 3}"
            name = f"{kind}-{gtype}-{k:03d}"
            placed = place(pods_n, gpus, gtype)
            if placed is None:
                break
            start = gpus
            count = max(pods_n * 2, 4)
            plan = {"weight": f"{rng.choice([1, 1, 2, 3])}", "throughput": json.dumps(
                _table(rng, gtype, start, gpus, count), separators=(",", ":")),
                "transition-seconds": str(rng.choice([300, 600, 900]))}
            if kind == "ptj":
                jobs.append(pytorchjob(name, ns, pods_n, gpus, plan, elastic=(1, count) if k % 2 else None,
                                       gtype=gtype))
                lab = "training.kubeflow.org/job-name"
                pods += [_pod(f"{name}-worker-{r}", ns, {lab: name, "training.kubeflow.org/replica-type": "worker",
                                                         "training.kubeflow.org/replica-index": str(r),
                                                         "training.kubeflow.org/operator-name": "pytorchjob-controller"},
                              node, gpus, owner=_owner(jobs[-1])) for r, node in enumerate(placed)]
            elif kind == "ptj4":
                jobs.append(pytorchjob(name, ns, pods_n, gpus, plan, gtype=gtype))
                lab = "training.kubeflow.org/job-name"
                pods += [_pod(f"{name}-worker-{r}", ns, {lab: name, "training.kubeflow.org/replica-type": "worker",
                                                         "training.kubeflow.org/replica-index": str(r)},
                              node, gpus, owner=_owner(jobs[-1])) for r, node in enumerate(placed)]
            elif kind == "ptjm":  # a Master with GPUs and Workers: counts 8 + 8k
                jobs.append(pytorchjob(name, ns, pods_n - 1, gpus, plan, master_gpus=gpus, gtype=gtype))
                lab = "training.kubeflow.org/job-name"
                pods.append(_pod(f"{name}-master-0", ns, {lab: name, "training.kubeflow.org/replica-type": "master",
                                                          "training.kubeflow.org/job-role": "master"},
                                 placed[0], gpus, owner=_owner(jobs[-1])))
                pods += [_pod(f"{name}-worker-{r}", ns, {lab: name, "training.kubeflow.org/replica-type": "worker"},
                              node, gpus, owner=_owner(jobs[-1])) for r, node in enumerate(placed[1:])]
            elif kind == "vc":
                jobs.append(volcanojob(name, ns, pods_n, gpus, plan, gtype=gtype))
                lab = {"volcano.sh/job-name": name, "volcano.sh/job-namespace": ns, "volcano.sh/queue-name": "training"}
                pods.append(_pod(f"{name}-master-0", ns, {**lab, "volcano.sh/task-spec": "master"}, placed[0], 0,
                                 owner=_owner(jobs[-1])))
                pods += [_pod(f"{name}-worker-{r}", ns, {**lab, "volcano.sh/task-spec": "worker"}, node, gpus,
                              owner=_owner(jobs[-1])) for r, node in enumerate(placed)]
            else:
                jobs.append(elasticjob(name, ns, pods_n, gpus, plan, gtype=gtype))
                lab = {"elasticjob.dlrover/name": name, "app": "dlrover"}
                pods.append(_pod(f"elasticjob-{name}-dlrover-master", ns,
                                 {**lab, "elasticjob.dlrover/replica-type": "dlrover-master"}, placed[0], 0,
                                 owner=_owner(jobs[-1])))
                pods += [_pod(f"{name}-edljob-worker-{r}", ns, {**lab, "elasticjob.dlrover/replica-type": "worker",
                                                                "elasticjob.dlrover/replica-index": str(r)},
                              node, gpus, owner=_owner(jobs[-1])) for r, node in enumerate(placed)]
            left -= pods_n * gpus
            k += 1
    # A model-named job, suspended (no pods), and work the planner does not manage.
    jobs.append(pytorchjob(f"ptj-h100-model-{k:03d}", "team-0", 2, 8,
                           {"weight": "1.5", "model": "gpt3-1.3b", "global-batch": "512", "seq-len": "2048",
                            "gpu-type": PRODUCTS["h100"]}, suspend=True))
    spare = next(n for n in reversed(names) if free[n] >= 2 and type_of[n] == "h100")
    free[spare] -= 2
    pods.append(_pod("inference-0", "serving", {"app": "inference"}, spare, 2))
    pods.append(_pod("finished-0", "team-0", {"app": "eval"}, spare, 4, phase="Succeeded"))
    # Failures: NotReady under a job, unreachable taint, cordoned with a reason, a lost GPU.
    busy = [n for n in names if free[n] == 0]
    notready, unreachable, cordoned, lost = busy[1], busy[len(busy) // 2], busy[-3], busy[len(busy) // 3]
    nodes[notready] = _k8s_node(notready, type_of[notready], nodes[notready]["metadata"]["labels"][
        "topology.kubernetes.io/zone"], ready=False, taints=[
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": STAMP}])
    z = nodes[unreachable]["metadata"]["labels"]["topology.kubernetes.io/zone"]
    nodes[unreachable] = _k8s_node(unreachable, type_of[unreachable], z, taints=[
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": STAMP}])
    z = nodes[cordoned]["metadata"]["labels"]["topology.kubernetes.io/zone"]
    nodes[cordoned] = _k8s_node(cordoned, type_of[cordoned], z, unschedulable=True,
                                labels={"example.com/hw-fault": "xid-79"},
                                taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])
    z = nodes[lost]["metadata"]["labels"]["topology.kubernetes.io/zone"]
    nodes[lost] = _k8s_node(lost, type_of[lost], z, allocatable_gpus=7)
    # A CPU-only node, ignored.
    cpu = _k8s_node("cpu-0000", "h100", "zone-00")
    for key in ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.present"):
        del cpu["metadata"]["labels"][key]
    del cpu["status"]["capacity"]["nvidia.com/gpu"], cpu["status"]["allocatable"]["nvidia.com/gpu"]
    node_list = [nodes[n] for n in names] + [cpu]
    meta = {"resourceVersion": ""}
    return ({"apiVersion": "v1", "kind": "List", "items": node_list, "metadata": meta},
            {"apiVersion": "v1", "kind": "List", "items": pods, "metadata": meta},
            {"apiVersion": "v1", "kind": "List", "items": jobs, "metadata": meta})


# --- Slurm -------------------------------------------------------------------------------------

def _noval(n, set_=True) -> dict:
    return {"set": set_, "infinite": False, "number": n}


META = {"plugin": {"type": "", "name": "", "data_parser": "data_parser/v0.0.40", "accounting_storage": ""},
        "client": {"source": "/dev/pts/0", "user": "root", "group": "root"},
        "command": [], "slurm": {"version": {"major": "24", "micro": "3", "minor": "05"},
                                 "release": "24.05.3", "cluster": "gpu-cluster"}}


def _slurm_node(name: str, gtype: str, rack: str, state: list[str], used: int, reason: str = "") -> dict:
    return {"architecture": "x86_64", "burstbuffer_network_address": "", "boards": 1,
            "boot_time": _noval(1732953600), "cluster_name": "", "cores": 48, "specialized_cores": 0,
            "cpu_binding": 0, "cpu_load": 1210, "free_mem": _noval(1800000), "cpus": 192, "effective_cpus": 192,
            "specialized_cpus": "", "energy": {"average_watts": 0, "base_consumed_energy": 0,
                                               "consumed_energy": 0, "current_watts": _noval(0),
                                               "previous_consumed_energy": 0, "last_collected": 0},
            "external_sensors": {}, "extra": "", "power": {}, "features": [rack, "ib", gtype],
            "active_features": [rack, "ib", gtype], "gpu_spec": "",
            "gres": f"gpu:{gtype}:8(S:0-1)", "gres_drained": "N/A",
            "gres_used": f"gpu:{gtype}:{used}(IDX:{'0-' + str(used - 1) if used else 'N/A'})",
            "instance_id": "", "instance_type": "", "last_busy": _noval(1732953600), "mcs_label": "",
            "specialized_memory": 0, "name": name, "next_state_after_reboot": ["INVALID"], "address": name,
            "hostname": name, "state": state, "operating_system": "Linux 5.15.0-105-generic", "owner": "",
            "partitions": ["gpu"], "port": 6818, "real_memory": 2000000, "res_cores_per_gpu": 0, "comment": "",
            "reason": reason, "reason_changed_at": _noval(1732953600 if reason else 0),
            "reason_set_by_user": "root" if reason else "", "resume_after": _noval(0, False), "reservation": "",
            "alloc_memory": 0, "alloc_cpus": 24 * used, "alloc_idle_cpus": 192 - 24 * used,
            "tres_used": f"cpu={24 * used},gres/gpu={used}", "tres_weighted": 0.0, "slurmd_start_time": _noval(0),
            "sockets": 2, "threads": 2, "temporary_disk": 0, "weight": 1,
            "tres": "cpu=192,mem=2000000M,billing=192,gres/gpu=8", "version": "24.05.3"}


def _slurm_job(job_id: int, name: str, nodes: list[str], gtype: str, comment: str, state: str = "RUNNING",
               hold: bool = False, gpn: int = 8) -> dict:
    import hostlist

    n = len(nodes)
    return {"account": "llm", "accrue_time": _noval(1732953000), "admin_comment": "", "allocating_node": "login01",
            "array_job_id": _noval(0), "array_task_id": _noval(0, False), "array_max_tasks": _noval(0),
            "array_task_string": "", "association_id": 7, "batch_features": "", "batch_flag": True,
            "batch_host": nodes[0] if nodes else "", "flags": ["EXACT_TASK_COUNT_REQUESTED", "JOB_WAS_RUNNING"],
            "burst_buffer": "", "cluster": "gpu-cluster", "command": "/home/llm/train.sbatch", "comment": comment,
            "contiguous": False, "cpus": _noval(24 * gpn * max(n, 1)), "cpus_per_task": _noval(24),
            "current_working_directory": "/home/llm", "deadline": _noval(0), "dependency": "",
            "derived_exit_code": {"status": ["SUCCESS"], "return_code": _noval(0), "signal": {"id": _noval(0, False),
                                                                                              "name": ""}},
            "eligible_time": _noval(1732953000), "end_time": _noval(1733557800),
            "exit_code": {"status": ["SUCCESS"], "return_code": _noval(0), "signal": {"id": _noval(0, False),
                                                                                     "name": ""}},
            "features": "", "group_id": 1000, "group_name": "llm", "hold": hold, "job_id": job_id,
            "job_resources": {}, "job_state": [state], "last_sched_evaluation": _noval(1732953000),
            "licenses": "", "max_cpus": _noval(0), "max_nodes": _noval(0), "mcs_label": "", "name": name,
            "nodes": hostlist.collect_hostlist(nodes) if nodes else "", "nice": 0,
            "tasks_per_node": _noval(gpn), "node_count": _noval(max(n, 1)), "partition": "gpu",
            "priority": _noval(0 if hold else 4294901700), "qos": "normal", "requeue": True,
            "restart_cnt": 0, "shared": [], "exclusive": ["true"], "start_time": _noval(1732953600),
            # a held job is one the planner suspended (scontrol requeuehold): its hold is the planner's own
            "state_description": "job requeued in held state" if hold else "", "state_reason": "JobHeldUser" if hold else "None",
            "submit_time": _noval(1732953000), "tasks": _noval(gpn * max(n, 1)), "time_limit": _noval(10080),
            "tres_req_str": f"cpu={24 * gpn * max(n, 1)},node={max(n, 1)},billing=1,gres/gpu={gpn * max(n, 1)}",
            "tres_alloc_str": (f"cpu={24 * gpn * n},mem={250 * n}G,node={n},billing={24 * gpn * n},"
                               f"gres/gpu={gpn * n},gres/gpu:{gtype}={gpn * n}") if nodes else "",
            "tres_per_node": f"gres/gpu:{gtype}:{gpn}", "user_id": 1000, "user_name": "llm", "wckey": "",
            "gres_detail": [f"gpu:{gtype}:{gpn}(IDX:0-{gpn - 1})" for _ in nodes]}


def slurm_cluster(n_nodes: int, seed: int = 0) -> tuple[dict, dict]:
    """(scontrol show nodes --json, squeue --json) of ``n_nodes`` 8-GPU nodes."""
    rng = random.Random(seed)
    types = _types(n_nodes)
    names = [f"gpu{i:04d}" for i in range(n_nodes)]
    owner: dict[str, int] = {}
    jobs = []
    jid = 1000
    i = 0
    for gtype in ("a100", "h100"):
        pool = [n for n, t in zip(names, types) if t == gtype][:-1]  # one node of each type stays idle
        i = 0
        while i < len(pool):
            size = min(len(pool) - i, rng.choice([1, 2, 2, 4, 4, 8, 16]))
            mine = pool[i:i + size]
            table = _table(rng, gtype, 8, 8, max(size * 2, 4))
            short = ",".join(f"{k}:{v}" for k, v in table.items())
            comment = (f"unicron-plan: weight={rng.choice([1, 1, 2, 3])} throughput={short} "
                       f"transition-seconds={rng.choice([300, 600, 900])}")
            if jid % 7 == 3:
                comment = "nightly eval, not planned"  # work the planner does not manage
            jobs.append(_slurm_job(jid, f"train-{jid}", mine, gtype, comment))
            for n in mine:
                owner[n] = jid
            jid += 1
            i += size
    jobs.append(_slurm_job(jid, "train-held", [], "h100", "unicron-plan: weight=1 model=gpt3-1.3b "
                                                          "global-batch=512 seq-len=2048 gpu-type=h100",
                           state="PENDING", hold=True))
    jobs.append(_slurm_job(jid + 1, "done", [], "h100", "", state="COMPLETED"))
    busy = [n for n in names if n in owner]
    down, drain, fail = busy[1], busy[len(busy) // 2], busy[-2]
    nodes = []
    for idx, (n, t) in enumerate(zip(names, types)):
        state, reason = (["ALLOCATED"] if n in owner else ["IDLE"]), ""
        if n == down:
            state, reason = ["DOWN", "NOT_RESPONDING"], "Not responding"
        elif n == drain:
            state, reason = ["ALLOCATED", "DRAIN"], "xid 79: GPU fell off the bus"
        elif n == fail:
            state, reason = ["ALLOCATED", "FAIL"], "ECC errors"
        nodes.append(_slurm_node(n, t, f"rack{idx // 16:02d}", state, 8 if n in owner else 0, reason))
    return ({"nodes": nodes, "last_update": _noval(1733000000), "meta": META, "errors": [], "warnings": []},
            {"jobs": jobs, "last_backfill": _noval(1733000000), "last_update": _noval(1733000000),
             "meta": META, "errors": [], "warnings": []})


def load(kind: str, size: str) -> tuple:
    """The documents of a fixture: read from tests/fixtures/ (small, medium) or generated (large)."""
    if size == "large":
        return k8s_cluster(SIZES[size]) if kind == "k8s" else slurm_cluster(SIZES[size])
    files = ("nodes", "pods", "jobs") if kind == "k8s" else ("nodes", "jobs")
    return tuple(json.loads((FIXTURES / f"{kind}-{size}" / f"{f}.json").read_text()) for f in files)


def write_committed() -> None:
    """Rewrite the committed small and medium fixtures (the medium ones compact, to keep the repository small)."""
    for size in ("small", "medium"):
        for kind, docs, files in (("k8s", k8s_cluster(SIZES[size]), ("nodes", "pods", "jobs")),
                                  ("slurm", slurm_cluster(SIZES[size]), ("nodes", "jobs"))):
            d = FIXTURES / f"{kind}-{size}"
            d.mkdir(parents=True, exist_ok=True)
            for f, doc in zip(files, docs):
                text = json.dumps(doc, indent=1) if size == "small" else json.dumps(doc, separators=(",", ":"))
                (d / f"{f}.json").write_text(text + "\n")


if __name__ == "__main__":
    write_committed()
