"""Apply exported changes back onto fixture objects, as the schedulers would.

Kubernetes: merge patches (RFC 7386), JSON patches (RFC 6902) and created
objects change the job objects, node label patches the nodes' labels; then
each job's controller deletes pods beyond its replicas (by replica index) and
creates the missing ones, which a scheduler binds to the nodes its
hostname affinity and node selector allow, most free GPUs first (kube-scheduler's default
LeastAllocated scoring), never to a failed, cordoned or full node.

Slurm: ``scontrol`` drains nodes, shrinks a running job to a node list,
requeues and holds, updates a pending job's node count and list and releases
it; then a pending, released job with a required node list starts there when
all those nodes are free.
"""

from __future__ import annotations

import copy
import re
import shlex

import hostlist

GPU = "nvidia.com/gpu"


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def json_patch(target, ops):
    """RFC 6902 JSON patch (the ops the export writes: test, replace, add, remove); a failed test raises."""
    doc = copy.deepcopy(target)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key = int(last) if isinstance(node, list) else last
        if op["op"] == "test":
            assert node[key] == op["value"], f"test {op['path']} failed"
        elif op["op"] == "replace":
            assert (0 <= key < len(node)) if isinstance(node, list) else key in node, f"replace {op['path']}: absent"
            node[key] = copy.deepcopy(op["value"])
        elif op["op"] == "add":
            if isinstance(node, list):
                node.insert(key, copy.deepcopy(op["value"]))
            else:
                node[key] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del node[key]
        else:
            raise AssertionError(f"unexpected op {op['op']}")
    return doc


def _pod_gpus(pod_or_template_spec) -> int:
    return sum(int(c.get("resources", {}).get("limits", {}).get(GPU, 0)) for c in pod_or_template_spec["containers"])


def _replica_sets(job) -> list[tuple[str, int, dict, dict]]:
    """(type, replicas, template, pod labels) of a job, after its suspension state."""
    kind, name, ns = job["kind"], job["metadata"]["name"], job["metadata"].get("namespace", "default")
    spec = job["spec"]
    if kind == "PyTorchJob":
        off = spec.get("runPolicy", {}).get("suspend", False)
        return [(t, 0 if off else r.get("replicas", 1), r["template"],
                 {"training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": t.lower()})
                for t, r in spec["pytorchReplicaSpecs"].items()]
    if kind == "Job":
        off = job.get("status", {}).get("state", {}).get("phase") == "Aborted"
        return [(t["name"], 0 if off else t["replicas"], t["template"],
                 {"volcano.sh/job-name": name, "volcano.sh/job-namespace": ns, "volcano.sh/task-spec": t["name"]})
                for t in spec["tasks"]]
    if spec.get("suspend"):
        return []  # a suspended ElasticJob's master neither creates nor removes workers
    return [(t, r["replicas"], r["template"],
             {"elasticjob.dlrover/name": name, "elasticjob.dlrover/replica-type": t})
            for t, r in spec["replicaSpecs"].items()]


def _pod_name(job, rtype: str, index: int) -> str:
    name = job["metadata"]["name"]
    if job["kind"] == "ElasticJob":
        return f"{name}-edljob-{rtype}-{index}"
    return f"{name}-{rtype.lower()}-{index}"


def _node_ok(node) -> bool:
    ready = next((c for c in node["status"]["conditions"] if c["type"] == "Ready"), None)
    taints = {t["key"] for t in node["spec"].get("taints", [])}
    return (ready is not None and ready["status"] == "True" and not node["spec"].get("unschedulable")
            and not taints & {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"})


def apply_k8s(changes: list[dict], nodes_doc: dict, pods_doc: dict, jobs_doc: dict) -> tuple[dict, dict]:
    """The (pods, jobs) documents after the changes and the controllers' reaction."""
    jobs = copy.deepcopy(jobs_doc)
    pods = [copy.deepcopy(p) for p in pods_doc["items"]]
    by_id = {(j["kind"], j["metadata"].get("namespace", "default"), j["metadata"]["name"]): j for j in jobs["items"]}
    node_labels = {n["metadata"]["name"]: dict(n["metadata"].get("labels", {})) for n in nodes_doc["items"]}
    for c in changes:
        if c["kind"] == "Node":
            assert c["patchType"] == "merge" and set(c["patch"]) == {"metadata"}, c
            node_labels[c["name"]] = merge_patch(node_labels[c["name"]], c["patch"]["metadata"]["labels"])
        elif c["patchType"] == "merge":
            j = by_id[(c["kind"], c["namespace"], c["name"])]
            j.update(merge_patch(j, c["patch"]))
        elif c["patchType"] == "json":
            j = by_id[(c["kind"], c["namespace"], c["name"])]
            j.update(json_patch(j, c["patch"]))
        elif c["patchType"] == "delete":
            assert c["kind"] == "Pod"
            pods = [p for p in pods if not (p["metadata"]["name"] == c["name"]
                                            and p["metadata"]["namespace"] == c["namespace"])]
        elif c["kind"] == "ScalePlan":
            spec = c["patch"]["spec"]
            j = by_id[("ElasticJob", c["namespace"], spec["ownerJob"])]
            for rtype, rs in spec["replicaResourceSpecs"].items():
                j["spec"]["replicaSpecs"][rtype]["replicas"] = rs["replicas"]
            gone = {p["name"] for p in spec.get("removePods", [])}
            pods = [p for p in pods if not (p["metadata"]["name"] in gone and p["metadata"]["namespace"] == c["namespace"])]
        elif c["kind"] == "Command":
            body = c["patch"]
            j = by_id[("Job", c["namespace"], body["target"]["name"])]
            j.setdefault("status", {}).setdefault("state", {})["phase"] = (
                "Aborted" if body["action"] == "AbortJob" else "Running")
        else:
            raise AssertionError(f"unexpected change {c['kind']} {c['patchType']}")

    nodes = {n["metadata"]["name"]: n for n in nodes_doc["items"] if GPU in n["status"].get("allocatable", {})}
    free = {n: int(v["status"]["allocatable"][GPU]) for n, v in nodes.items()}
    for p in pods:
        if p["spec"].get("nodeName") in free and p["status"].get("phase") in ("Running", "Pending"):
            free[p["spec"]["nodeName"]] -= _pod_gpus(p["spec"])

    def owned(job, rtype, labels):
        ns = job["metadata"].get("namespace", "default")
        return [p for p in pods if p["metadata"].get("namespace") == ns
                and all(p["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())]

    # Controllers first remove pods beyond the replicas (every job), then create the missing ones.
    wanted = []
    for job in jobs["items"]:
        for rtype, replicas, template, labels in _replica_sets(job):
            mine = owned(job, rtype, labels)
            names = {_pod_name(job, rtype, i) for i in range(replicas)}
            for p in mine:
                if p["metadata"]["name"] not in names:
                    pods.remove(p)
                    if p["spec"].get("nodeName") in free:
                        free[p["spec"]["nodeName"]] += _pod_gpus(p["spec"])
            have = {p["metadata"]["name"] for p in owned(job, rtype, labels)}
            wanted += [(job, rtype, template, labels, n) for n in sorted(names - have)]
    for job, rtype, template, labels, pname in wanted:
        g = _pod_gpus(template["spec"])
        allowed = None
        aff = template["spec"].get("affinity", {}).get("nodeAffinity", {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution")
        if aff:
            allowed = set(aff["nodeSelectorTerms"][0]["matchExpressions"][0]["values"])
        selector = template["spec"].get("nodeSelector", {})
        choices = [n for n in free if (allowed is None or n in allowed) and _node_ok(nodes[n]) and free[n] >= g
                   and all(node_labels[n].get(k) == v for k, v in selector.items())]
        node = max(choices, key=lambda n: (free[n], [-ord(ch) for ch in n])) if choices else None
        if g == 0:
            node = None  # pods without GPUs do not matter to the planner
        if node is not None:
            free[node] -= g
        owner = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": job["metadata"]["name"],
                 "controller": True, **({"uid": job["metadata"]["uid"]} if "uid" in job["metadata"] else {})}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": pname, "namespace": job["metadata"].get("namespace", "default"),
                            "labels": dict(labels), "ownerReferences": [owner]},
               "spec": {"containers": copy.deepcopy(template["spec"]["containers"]),
                        **({"nodeName": node} if node else {})},
               "status": {"phase": "Running" if node else "Pending"}}
        pods.append(pod)
    for job in jobs["items"]:  # and each controller's status of its job, from the pods it has now
        _job_status(job, [p for rtype, _, _, labels in _replica_sets(job) for p in owned(job, rtype, labels)])
    return {"apiVersion": "v1", "kind": "List", "items": pods}, jobs


def _job_status(job: dict, pods: list[dict]) -> None:
    """Set ``job``'s status as its controller does from its pods: Volcano's ``running`` count, the training
    operator's (and DLRover's) active replicas and its Running condition (true while a pod runs)."""
    running = sum(p["status"].get("phase") == "Running" for p in pods)
    status = job.setdefault("status", {})
    if job["kind"] == "Job":
        status["running"] = running
        return
    active = sum(p["status"].get("phase") in ("Running", "Pending") for p in pods)
    status["replicaStatuses"] = {"Worker": {"active": active}} if active else {}
    conditions = [c for c in status.get("conditions", []) if c.get("type") != "Running"]
    status["conditions"] = conditions + [{"type": "Running", "status": "True" if running else "False"}]


_SET = re.compile(r"^(\w+)=(.*)$")


def apply_slurm(steps, nodes_doc: dict, jobs_doc: dict) -> tuple[dict, dict]:
    """The (nodes, jobs) documents after the export's steps (their scontrol commands, parsed
    back from the argument vectors) and the scheduler's reaction."""
    nodes = copy.deepcopy(nodes_doc)
    jobs = copy.deepcopy(jobs_doc)
    node_by = {n["name"]: n for n in nodes["nodes"]}
    job_by = {j["job_id"]: j for j in jobs["jobs"]}
    required: dict[int, list[str]] = {}

    def gres_type(job):
        m = re.search(r"gres/gpu:([^=,]+)=", job["tres_alloc_str"]) or re.search(r"gpu:([^:]+):", job["gres_detail"][0])
        return m.group(1)

    def run_on(job, names, gtype):
        n = len(names)
        job["nodes"] = hostlist.collect_hostlist(names) if names else ""
        job["job_state"] = ["RUNNING"] if names else ["PENDING"]
        job["tres_alloc_str"] = f"cpu={192 * n},node={n},gres/gpu={8 * n},gres/gpu:{gtype}={8 * n}" if n else ""
        job["gres_detail"] = [f"gpu:{gtype}:8(IDX:0-7)"] * n

    for words in (argv for st in steps for argv in st.commands()):
        assert words[0] == "scontrol", words
        if words[1] == "update":
            kv = dict(_SET.match(w).groups() for w in words[2:])
            if "NodeName" in kv:
                for n in hostlist.expand_hostlist(kv["NodeName"]):
                    if kv.get("State") == "DRAIN" and "DRAIN" not in node_by[n]["state"]:
                        node_by[n]["state"].append("DRAIN")
                        node_by[n]["reason"] = kv.get("Reason", "")
            elif "NodeList" in kv:
                job = job_by[int(kv["JobId"])]
                assert job["job_state"] == ["RUNNING"], words
                names = hostlist.expand_hostlist(kv["NodeList"])
                assert set(names) <= set(hostlist.expand_hostlist(job["nodes"])), "NodeList may only shrink"
                run_on(job, names, gres_type(job))
            elif "ReqNodeList" in kv:
                job = job_by[int(kv["JobId"])]
                assert job["job_state"] == ["PENDING"], words
                names = hostlist.expand_hostlist(kv["ReqNodeList"])
                lo, _, hi = kv["NumNodes"].partition("-")
                assert int(lo) == int(hi) == len(names), "NumNodes=N-N: a fixed count (sbatch -N fixed the maximum)"
                required[job["job_id"]] = names
            else:
                assert set(kv) == {"JobId", "StartTime"}, words
        elif words[1] == "requeuehold":
            job = job_by[int(words[2])]
            job["_gtype"] = gres_type(job) if job["nodes"] else None
            run_on(job, [], "")
            # as Slurm shows a job requeued held
            job.update(hold=True, state_reason="JobHeldUser", state_description="job requeued in held state")
        elif words[1] == "hold":
            assert job_by[int(words[2])]["job_state"] == ["PENDING"], words
            job_by[int(words[2])].update(hold=True, state_reason="JobHeldAdmin", state_description="")
        elif words[1] == "release":
            job_by[int(words[2])].update(hold=False, state_reason="None", state_description="")
        else:
            raise AssertionError(words)
    busy = {n for j in jobs["jobs"] if j["job_state"] == ["RUNNING"] for n in hostlist.expand_hostlist(j["nodes"])}
    bad = {n["name"] for n in nodes["nodes"] if {"DOWN", "DRAIN", "FAIL"} & set(n["state"])}
    for jid, names in required.items():
        job = job_by[jid]
        if job["hold"] or busy & set(names) or bad & set(names):
            continue
        gtype = node_by[names[0]]["gres"].split(":")[1]
        run_on(job, names, gtype)
        busy |= set(names)
    for j in jobs["jobs"]:
        j.pop("_gtype", None)
    return nodes, jobs
