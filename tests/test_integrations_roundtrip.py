"""Round trips: scheduler objects -> import -> solve -> export -> the changes applied
back onto the objects (tests/schedsim.py) -> import again == the plan."""

from __future__ import annotations

import json
import re

import pytest

import schedfixtures as fx
from schedsim import apply_k8s, apply_slurm
from unicron_plan import api
from unicron_plan.integrations.common import Cost, GpuMap
from unicron_plan.integrations.k8s import export_k8s, import_k8s, render_kubectl
from unicron_plan.integrations.slurm import export_slurm, import_slurm

COST = Cost(expected_run_seconds=36000.0)
REASON = ["example.com/hw-fault"]


def _k8s_import(nodes, pods, jobs):
    return import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap(), cordon_reasons=REASON)


def _assert_plan_carried_out(plan, instance):
    after = {j["id"]: j["current"] for j in instance["jobs"]}
    for pj in plan.jobs:
        assert after[pj.id]["gpus"] == pj.gpus, (pj.id, pj.action, after[pj.id], pj.placement)
        assert sorted(after[pj.id]["nodes"]) == sorted(pj.nodes), (pj.id, pj.action, after[pj.id], pj.nodes)


def _k8s_roundtrip(size: str):
    nodes, pods, jobs = fx.load("k8s", size)
    inst = _k8s_import(nodes, pods, jobs)
    plan = api.solve(inst)
    assert plan.status.solution == "optimal"
    changes = export_k8s(plan, jobs, pods)
    new_pods, new_jobs = apply_k8s(changes, nodes, pods, jobs)
    _assert_plan_carried_out(plan, _k8s_import(nodes, new_pods, new_jobs))
    return inst, plan, changes


def _slurm_import(nodes, jobs, own_holds=frozenset()):
    return import_slurm(nodes, jobs, cost=COST, gpu_map=GpuMap(), rack_feature="rack", own_holds=own_holds)


def _slurm_roundtrip(size: str):
    nodes, jobs = fx.load("slurm", size)
    inst = _slurm_import(nodes, jobs)
    plan = api.solve(inst)
    assert plan.status.solution == "optimal"
    steps = export_slurm(plan, jobs, nodes)
    new_nodes, new_jobs = apply_slurm(steps, nodes, jobs)
    # the jobs the plan keeps idle are held by the export: the planner's own holds (as the agent reads them)
    _assert_plan_carried_out(plan, _slurm_import(new_nodes, new_jobs, {pj.id for pj in plan.jobs if not pj.gpus}))
    return inst, plan, steps


@pytest.mark.parametrize("size", ["small", "medium"])
def test_k8s_roundtrip(size):
    inst, plan, changes = _k8s_roundtrip(size)
    actions = {j.action for j in plan.jobs}
    assert {"grow", "suspend"} <= actions or {"shrink", "restart"} & actions
    kinds = {(c["kind"], c["patchType"]) for c in changes}
    assert ("Pod", "delete") in kinds  # pods on failed nodes go
    assert inst["event"]["failed_nodes"]  # the fixtures carry failures


@pytest.mark.parametrize("size", ["small", "medium"])
def test_slurm_roundtrip(size):
    inst, plan, steps = _slurm_roundtrip(size)
    assert inst["event"]["failed_nodes"]
    assert any(st.kind == "drain" for st in steps)  # the DOWN node gets drained


def test_k8s_import_reads_the_fixture():
    nodes, pods, jobs = fx.load("k8s", "small")
    inst = _k8s_import(nodes, pods, jobs)
    by = {j["id"]: j for j in inst["jobs"]}
    ids = {item["metadata"]["namespace"] + "/" + item["metadata"]["name"] for item in jobs["items"]}
    assert set(by) == ids
    # GPUs of a job are the GPU limits of its live pods; its nodes their nodeName.
    for item in jobs["items"]:
        key = item["metadata"]["namespace"] + "/" + item["metadata"]["name"]
        label = {"PyTorchJob": "training.kubeflow.org/job-name", "Job": "volcano.sh/job-name",
                 "ElasticJob": "elasticjob.dlrover/name"}[item["kind"]]
        live = [p for p in pods["items"] if p["metadata"]["labels"].get(label) == item["metadata"]["name"]
                and p["status"]["phase"] == "Running"]
        gpus = sum(int(c["resources"]["limits"].get("nvidia.com/gpu", 0)) for p in live for c in p["spec"]["containers"])
        assert by[key]["current"]["gpus"] == gpus
        assert set(by[key]["current"]["nodes"]) == {p["spec"]["nodeName"] for p in live
                                                    if any("nvidia.com/gpu" in c["resources"]["limits"]
                                                           for c in p["spec"]["containers"])}
    node_ids = {n["id"] for n in inst["cluster"]["nodes"]}
    assert "cpu-0000" not in node_ids  # a node without GPUs is not planned
    failed = set(inst["event"]["failed_nodes"])
    notready = {n["metadata"]["name"] for n in nodes["items"]
                if any(c["type"] == "Ready" and c["status"] != "True" for c in n["status"]["conditions"])}
    cordoned = {n["metadata"]["name"] for n in nodes["items"] if n["spec"].get("unschedulable")}
    assert notready | cordoned <= failed
    lost = [g["node"] for g in inst["event"]["failed_gpus"]]
    assert len(lost) == 1  # the node whose allocatable dropped to 7
    reserved = {n["id"]: n["failed_gpus"] for n in inst["cluster"]["nodes"] if n["failed_gpus"]}
    assert [len(v) for v in reserved.values()] == [2]  # the unmanaged inference pod keeps its 2 GPUs
    model_job = next(j for j in inst["jobs"] if "model" in j["throughput"])
    assert model_job["current"] == {"gpus": 0, "nodes": []} and model_job["throughput"]["gpu_type"] == "h100"


def test_slurm_import_reads_the_fixture():
    nodes, jobs = fx.load("slurm", "small")
    inst = _slurm_import(nodes, jobs)
    failed = {n["name"] for n in nodes["nodes"] if {"DOWN", "DRAIN", "FAIL"} & set(n["state"])}
    assert set(inst["event"]["failed_nodes"]) == failed
    planned = {str(j["job_id"]) for j in jobs["jobs"] if j["comment"].startswith("unicron-plan:")}
    assert {j["id"] for j in inst["jobs"]} == planned
    for j in inst["jobs"]:
        assert j["tp"] == 8  # whole nodes
    racks = {n["rack"] for n in inst["cluster"]["nodes"]}
    assert racks == {"rack00"}


def test_kubectl_rendering_and_yaml_cli(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from unicron_plan.cli import app

    d = fx.FIXTURES / "k8s-small"
    runner = CliRunner()
    inst = tmp_path / "inst.json"
    r = runner.invoke(app, ["import", "k8s", "--nodes", str(d / "nodes.json"), "--pods", str(d / "pods.json"),
                            "--jobs", str(d / "jobs.json"), "--expected-run-seconds", "36000",
                            "--cordon-reason", "example.com/hw-fault", "--out", str(inst)])
    assert r.exit_code == 0, r.output
    plan = tmp_path / "plan.json"
    assert runner.invoke(app, ["solve", str(inst), "--out", str(plan)]).exit_code == 0
    r = runner.invoke(app, ["export", "k8s", str(plan), "--jobs", str(d / "jobs.json"), "--pods",
                            str(d / "pods.json"), "--format", "yaml"])
    assert r.exit_code == 0, r.output
    changes = yaml.safe_load(r.stdout)
    assert changes == export_k8s(api.load_plan(plan), json.loads((d / "jobs.json").read_text()),
                                 json.loads((d / "pods.json").read_text()))
    script = render_kubectl(changes)
    patches = [c for c in changes if c["patchType"] in ("merge", "json")]
    assert script.count("kubectl patch ") == len(patches)
    assert len(re.findall(r"^kubectl delete .* -- pods ", script, re.M)) == sum(c["kind"] == "Pod" for c in changes)
    assert all(set(c) == {"apiVersion", "kind", "namespace", "name", "patchType", "patch"} for c in changes)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["k8s", "slurm"])
def test_large_roundtrip(kind):
    """The 2,048-node fixtures carried through import -> solve -> export -> apply -> import (its
    time: benchmarks/suite_timings.py)."""
    (_k8s_roundtrip if kind == "k8s" else _slurm_roundtrip)("large")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["k8s", "slurm"])
def test_large_import(kind):
    """The 2,048-node import (solving that tp-constrained instance takes far longer, so no export
    here; its time: benchmarks/suite_timings.py)."""
    docs = fx.load(kind, "large")
    inst = _k8s_import(*docs) if kind == "k8s" else _slurm_import(*docs)
    assert len(inst["cluster"]["nodes"]) == 2048


def test_slurm_commands_through_the_cli(tmp_path):
    from typer.testing import CliRunner

    from unicron_plan.cli import app
    import shlex

    from unicron_plan.integrations.slurm import export_slurm, render_script

    d = fx.FIXTURES / "slurm-small"
    runner = CliRunner()
    inst = tmp_path / "inst.json"
    r = runner.invoke(app, ["import", "slurm", "--nodes", str(d / "nodes.json"), "--jobs", str(d / "jobs.json"),
                            "--expected-run-seconds", "36000", "--out", str(inst)])
    assert r.exit_code == 0, r.output
    plan = tmp_path / "plan.json"
    assert runner.invoke(app, ["solve", str(inst), "--out", str(plan)]).exit_code == 0
    r = runner.invoke(app, ["export", "slurm", str(plan), "--jobs", str(d / "jobs.json"),
                            "--nodes", str(d / "nodes.json")])
    assert r.exit_code == 0, r.output
    steps = export_slurm(api.load_plan(plan), json.loads((d / "jobs.json").read_text()),
                         json.loads((d / "nodes.json").read_text()))
    assert r.stdout == render_script(steps)
    assert r.stdout.startswith("#!/bin/sh\n")
    assert steps and all(shlex.join(argv) in r.stdout for st in steps for argv in st.commands())


def _k8s_cli(tmp_path, nodes, pods, jobs):
    import subprocess
    import sys

    paths = []
    for name, doc in (("nodes", nodes), ("pods", pods), ("jobs", jobs)):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(doc))
        paths.append(str(p))
    return subprocess.run([sys.executable, "-m", "unicron_plan.cli", "import", "k8s", "--nodes", paths[0],
                           "--pods", paths[1], "--jobs", paths[2], "--expected-run-seconds", "36000"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("breakage,names", [
    ("unknown product", ("Node ", "nvidia.com/gpu.product")),
    ("no weight", ("PyTorchJob ", "unicron-plan/weight")),
    ("bad weight", ("PyTorchJob ", "unicron-plan/weight")),
    ("bad throughput", ("PyTorchJob ", "unicron-plan/throughput")),
    ("unknown key", ("PyTorchJob ", "unicron-plan/colour")),
])
def test_k8s_import_errors_name_the_object_and_field(tmp_path, breakage, names):
    nodes, pods, jobs = (json.loads(json.dumps(d)) for d in fx.load("k8s", "small"))
    job = next(j for j in jobs["items"] if j["kind"] == "PyTorchJob")
    ann = job["metadata"]["annotations"]
    if breakage == "unknown product":
        nodes["items"][0]["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-B9000"
    elif breakage == "no weight":
        del ann["unicron-plan/weight"]
    elif breakage == "bad weight":
        ann["unicron-plan/weight"] = "heavy"
    elif breakage == "bad throughput":
        ann["unicron-plan/throughput"] = "{not json"
    else:
        ann["unicron-plan/colour"] = "blue"
    r = _k8s_cli(tmp_path, nodes, pods, jobs)
    assert r.returncode == 2, (r.returncode, r.stderr)
    line = r.stderr.strip().splitlines()
    assert len(line) == 1 and "Traceback" not in r.stderr
    assert all(n in line[0] for n in names), line[0]


@pytest.mark.parametrize("breakage,names", [
    ("unknown key", ("colour",)),
    ("bad weight", ("weight",)),
    ("unknown gres", ("gpu0000", "gres")),
])
def test_slurm_import_errors_name_the_object_and_field(tmp_path, breakage, names):
    import subprocess
    import sys

    nodes, jobs = (json.loads(json.dumps(d)) for d in fx.load("slurm", "small"))
    job = next(j for j in jobs["jobs"] if (j.get("comment") or "").startswith("unicron-plan:"))
    if breakage == "unknown key":
        job["comment"] += " colour=blue"
    elif breakage == "bad weight":
        job["comment"] = job["comment"].replace("weight=3", "weight=heavy")
    else:
        nodes["nodes"][0]["gres"] = "gpu:b9000:8(S:0-1)"
    np_, jp = tmp_path / "nodes.json", tmp_path / "jobs.json"
    np_.write_text(json.dumps(nodes))
    jp.write_text(json.dumps(jobs))
    r = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "import", "slurm", "--nodes", str(np_),
                        "--jobs", str(jp), "--expected-run-seconds", "36000"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    line = r.stderr.strip().splitlines()
    assert len(line) == 1 and "Traceback" not in r.stderr
    assert all(n in line[0] for n in names), line[0]
