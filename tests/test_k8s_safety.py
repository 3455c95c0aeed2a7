"""The Kubernetes adapter never makes things worse than doing nothing: a job that has ended is not planned,
a pods file that lacks a running job's pods (one namespace, one page) is not read as idle GPUs, a pod is a
job's only when the job owns it, and an export carries out only a plan the planner could have made."""

from __future__ import annotations

import copy
import json

import pytest

from test_k8s_controllers import COST, examples, plan_of
from unicron_plan import api
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.integrations.common import GpuMap
from unicron_plan.integrations.k8s import export_k8s, import_k8s


def _import(nodes, pods, jobs, warnings=None):
    return import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap(), warnings=warnings)


def _item(jobs, name):
    return next(item for doc, _ in jobs for item in doc["items"] if item["metadata"]["name"] == name)


@pytest.mark.parametrize("name,status", [
    ("gpt", {"conditions": [{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}]}),
    ("gpt", {"conditions": [{"type": "Failed", "status": "True"}]}),
    ("llama", {"state": {"phase": "Completed"}}),
    ("llama", {"state": {"phase": "Failed"}}),
    ("bert", {"phase": "Succeeded"})])
def test_a_job_that_has_ended_is_left_out_and_its_live_pods_keep_their_gpus(name, status):
    nodes, pods, jobs = examples()
    before = _import(nodes, pods, jobs)
    _item(jobs, name)["status"] = status
    warnings = []
    inst = _import(nodes, pods, jobs, warnings)
    ended = next(j["id"] for j in before["jobs"] if j["id"].endswith("/" + name))
    assert ended not in {j["id"] for j in inst["jobs"]}
    assert any(f"/{name}: left out, it has ended" in w for w in warnings), warnings
    # its pods still on their nodes (phase Running) are work the planner does not manage: not free GPUs
    held = next(j for j in before["jobs"] if j["id"] == ended)["current"]
    assert held["gpus"] > 0
    free = {n["id"]: n["gpus"] - len(n.get("failed_gpus", [])) for n in inst["cluster"]["nodes"]}
    free_before = {n["id"]: n["gpus"] - len(n.get("failed_gpus", [])) for n in before["cluster"]["nodes"]}
    taken = sum(free_before[n] - free[n] for n in held["nodes"])
    assert taken == held["gpus"]


def test_a_plan_that_changes_a_job_that_has_ended_is_not_carried_out():
    nodes, pods, jobs = examples()
    plan = api.solve(_import(nodes, pods, jobs))
    changed = next(pj for pj in plan.jobs if pj.action not in ("keep", "idle"))
    _item(jobs, changed.id.split("/")[1])["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}],
                                                         "state": {"phase": "Completed"}, "phase": "Succeeded"}
    with pytest.raises(InvalidInstanceError, match="it has ended"):
        export_k8s(plan, jobs, pods)


@pytest.mark.parametrize("cut", ["one namespace", "empty", "a page"])
def test_a_pods_file_that_lacks_a_running_jobs_pods_is_refused(cut):
    nodes, pods, jobs = examples()
    if cut == "one namespace":
        pods["items"] = [p for p in pods["items"] if p["metadata"]["namespace"] == "team-a"]
    elif cut == "empty":
        pods["items"] = []
    else:
        pods["metadata"] = {"continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MX0", "remainingItemCount": 5}
    with pytest.raises(InvalidInstanceError, match="kubectl get pods -A|a page of a longer list"):
        _import(nodes, pods, jobs)


def test_a_pod_another_kind_of_job_owns_is_not_the_jobs():
    # The training operator labels every job kind's pods alike: a TFJob named gpt beside PyTorchJob gpt.
    nodes, pods, jobs = examples()
    before = _import(nodes, pods, jobs)
    gpt = _item(jobs, "gpt")
    gpt["metadata"]["uid"] = "uid-ptj-gpt"
    for p in pods["items"]:
        if p["metadata"]["namespace"] == "team-b":
            p["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "gpt",
                                                 "uid": "uid-ptj-gpt", "controller": True}]
    ps = copy.deepcopy(next(p for p in pods["items"] if p["metadata"]["name"] == "eval-worker-0"))
    ps["metadata"].update(name="gpt-ps-0", namespace="team-b", labels={
        "training.kubeflow.org/job-name": "gpt", "training.kubeflow.org/operator-name": "tfjob-controller"},
        ownerReferences=[{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "gpt", "uid": "uid-tfjob-gpt",
                          "controller": True}])
    eval_node = ps["spec"]["nodeName"]
    pods["items"] = [p for p in pods["items"] if p["metadata"]["name"] != "eval-worker-0"] + [ps]
    eval_job = _item(jobs, "eval")
    eval_job["status"] = {}  # (eval's pod is gone: its status says nothing)
    inst = _import(nodes, pods, jobs)
    gpt_now = next(j for j in inst["jobs"] if j["id"] == "team-b/gpt")["current"]
    gpt_before = next(j for j in before["jobs"] if j["id"] == "team-b/gpt")["current"]
    assert gpt_now == gpt_before and eval_node not in gpt_now["nodes"]
    node = next(n for n in inst["cluster"]["nodes"] if n["id"] == eval_node)
    assert len(node.get("failed_gpus", [])) >= 1  # the TFJob's GPUs are held, not free
    plan = api.solve(inst)
    deleted = {c["name"] for c in export_k8s(plan, jobs, pods) if c["patchType"] == "delete"}
    assert "gpt-ps-0" not in deleted


def _plan():
    nodes, pods, jobs = examples()
    return nodes, pods, jobs, api.solve(_import(nodes, pods, jobs))


def test_an_export_refuses_a_plan_the_planner_could_not_have_made():
    nodes, pods, jobs, plan = _plan()
    assert export_k8s(plan, jobs, pods, nodes_doc=nodes) is not None  # the plan as made
    grown = next(pj for pj in plan.jobs if pj.gpus)
    cases = {
        "placed for a count": lambda p: setattr(next(j for j in p.jobs if j.id == grown.id), "gpus", grown.gpus + 8),
        "listed twice": lambda p: p.jobs.append(copy.deepcopy(next(j for j in p.jobs if j.id == grown.id))),
        "is drained, yet": lambda p: setattr(p, "drained_nodes", [grown.placement[0].node]),
    }
    for says, edit in cases.items():
        bad = copy.deepcopy(plan)
        edit(bad)
        with pytest.raises(InvalidInstanceError, match=says):
            export_k8s(bad, jobs, pods, nodes_doc=nodes)
    bad = copy.deepcopy(plan)
    job = next(j for j in bad.jobs if j.gpus > 8)
    job.placement = [type(job.placement[0])(node=job.placement[0].node, gpus=job.gpus)]  # all on one 8-GPU node
    job.nodes = [job.placement[0].node]
    with pytest.raises(InvalidInstanceError, match=f"{job.gpus} GPUs placed on node .*, which has 8"):
        export_k8s(bad, jobs, pods, nodes_doc=nodes)


def test_a_stream_longer_than_the_limit_is_refused_after_the_limit(monkeypatch):
    from unicron_plan import io

    monkeypatch.setattr(io, "MAX_BYTES", 4096)
    with pytest.raises(InvalidInstanceError, match="larger than 4096 bytes"):
        io.read_json("/dev/zero")
