"""Kubernetes exports that the controllers accept.

Every job patch the export writes is applied with the real ``kubectl patch --local`` (no API
server) and the patched object is checked against the controllers' own update rules
(tests/k8s_rules.py, written from Volcano's, the training operator's, DLRover's and Kueue's
sources). The scenarios run on the shipped examples (examples/k8s/) and the round-trip fixtures.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schedfixtures as fx
from k8s_rules import kueue_errors, rule_errors
from schedsim import json_patch, merge_patch
from unicron_plan import api
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.integrations.common import Cost, GpuMap
from unicron_plan.integrations.k8s import export_k8s, import_k8s, render_kubectl

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "k8s"
COST = Cost(expected_run_seconds=36000.0)
KUBECTL = shutil.which("kubectl")


@pytest.fixture
def kubectl():
    """The kubectl binary; outside CI its absence skips the test, in CI it fails it."""
    if KUBECTL is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl is not installed (Debian: apt-get install kubernetes-client)")
        pytest.skip("kubectl is not installed: the patches cannot be checked with kubectl patch --local")
    return KUBECTL


def kubectl_patch(kubectl: str, obj: dict, patch_type: str, patch, tmp_path: Path) -> dict:
    """``kubectl patch --local -f OBJ --type T -p PATCH -o json``: the object as the API server would store it."""
    f = tmp_path / "obj.json"
    f.write_text(json.dumps(obj))
    r = subprocess.run([kubectl, "patch", "--local", "-f", str(f), "--type", patch_type,
                        "-p", json.dumps(patch), "-o", "json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def examples():
    """(nodes, pods, [(jobs doc, source), ...]) of examples/k8s/."""
    load = lambda name: json.loads((EXAMPLES / name).read_text())  # noqa: E731
    jobs = [(load(f), f) for f in ("vcjobs.json", "pytorchjobs.json", "elasticjobs.json")]
    return load("nodes.json"), load("pods.json"), jobs


def all_jobs(jobs) -> list[dict]:
    return [item for doc, _ in jobs for item in doc["items"]] if isinstance(jobs, list) else jobs["items"]


def plan_of(*jobs: tuple[str, int, int, str, dict]) -> object:
    """A plan of (id, previous GPUs, GPUs, action, {node: GPUs}) entries (the fields export reads)."""
    return api.load_plan({
        "schema_version": "1", "instance": "examples", "status": {"termination": "optimal", "solution": "optimal"},
        "objective": 0.0, "bound": 0.0, "d_run_seconds": 36000.0, "waf_tflops": 0.0,
        "solver": {"name": "test", "wall_seconds": 0.0},
        "jobs": [{"id": i, "previous_gpus": prev, "gpus": g, "action": action, "nodes": sorted(place),
                  "placement": [{"node": n, "gpus": c} for n, c in sorted(place.items())],
                  "waf_tflops": 0.0, "transition_penalty": 0.0} for i, prev, g, action, place in jobs]})


def check_with_kubectl(kubectl, changes, jobs, nodes, tmp_path) -> int:
    """Apply every patch with kubectl and with the round-trip simulator; both agree and every
    patched job passes its controller's rules. Returns the number of patches checked."""
    by_id = {(j["kind"], j["metadata"].get("namespace", "default"), j["metadata"]["name"]): j for j in all_jobs(jobs)}
    node_by = {n["metadata"]["name"]: n for n in nodes["items"]}
    checked = 0
    for c in changes:
        if c["patchType"] not in ("merge", "json"):
            continue
        old = node_by[c["name"]] if c["kind"] == "Node" else by_id[(c["kind"], c["namespace"], c["name"])]
        new = kubectl_patch(kubectl, old, c["patchType"], c["patch"], tmp_path)
        mine = merge_patch(old, c["patch"]) if c["patchType"] == "merge" else json_patch(old, c["patch"])
        assert new == mine, c
        if c["kind"] != "Node":
            assert rule_errors(old, new) == [], (c, rule_errors(old, new))
        checked += 1
    return checked


def survivors_hold(changes, pods_doc, jobs, plan) -> None:
    """After the export's deletions, every standing GPU pod of a PyTorchJob or Volcano job has an
    index the controller keeps (< its type's new replicas) and stands where the plan has room."""
    deleted = {(c["namespace"], c["name"]) for c in changes if c["kind"] == "Pod"}
    patched = {(c["namespace"], c["name"]): c for c in changes if c["kind"] in ("PyTorchJob", "Job")}
    planned = {pj.id: {p.node: p.gpus for p in pj.placement} for pj in plan.jobs
               if pj.action not in ("keep", "idle") and pj.gpus > 0}  # a suspended job's controller deletes all
    for job in all_jobs(jobs):
        ns, name = job["metadata"].get("namespace", "default"), job["metadata"]["name"]
        if f"{ns}/{name}" not in planned or (ns, name) not in patched or job["kind"] == "ElasticJob":
            continue
        c = patched[(ns, name)]
        after = merge_patch(job, c["patch"]) if c["patchType"] == "merge" else json_patch(job, c["patch"])
        if job["kind"] == "PyTorchJob":
            reps = {t.lower(): r.get("replicas", 1) for t, r in after["spec"]["pytorchReplicaSpecs"].items()}
            label, tlabel = "training.kubeflow.org/job-name", "training.kubeflow.org/replica-type"
        else:
            reps = {t["name"]: t["replicas"] for t in after["spec"]["tasks"]}
            label, tlabel = "volcano.sh/job-name", "volcano.sh/task-spec"
        room = dict(planned[f"{ns}/{name}"])
        for pod in pods_doc["items"]:
            meta, spec = pod["metadata"], pod["spec"]
            gpus = sum(int(x["resources"].get("limits", {}).get("nvidia.com/gpu", 0)) for x in spec["containers"])
            if meta.get("labels", {}).get(label) != name or meta.get("namespace") != ns or not gpus:
                continue
            if (ns, meta["name"]) in deleted or pod["status"].get("phase") not in ("Running", "Pending"):
                continue
            rtype = meta["labels"][tlabel]
            index = int(meta["name"].rsplit("-", 1)[1])
            assert index < reps[rtype], f"{meta['name']} stands but its index is beyond {reps[rtype]} replicas"
            room[spec["nodeName"]] = room.get(spec["nodeName"], 0) - gpus
            assert room[spec["nodeName"]] >= 0, f"{meta['name']} stands on {spec['nodeName']} beyond the plan"


# --- the shipped examples --------------------------------------------------------------------

def test_examples_import_withheld_and_lost_gpus_never_collide():
    """An unmanaged pod holding every GPU of a failed node, and one holding GPUs that were lost
    (allocatable below capacity), are imported: withheld GPUs are the lowest indices, lost ones the
    highest; a failed node whose GPUs are all withheld has nothing new to fail (not in the event)."""
    nodes, pods, jobs = examples()
    inst = import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap())
    by = {n["id"]: n for n in inst["cluster"]["nodes"]}
    assert set(inst["event"]["failed_nodes"]) == {"gpu-01"}
    assert by["gpu-07"]["failed_gpus"] == list(range(8))
    assert by["gpu-08"]["failed_gpus"] == [0, 1, 2, 3, 4, 5]
    assert inst["event"]["failed_gpus"] == [{"node": "gpu-08", "gpu": 6}, {"node": "gpu-08", "gpu": 7}]
    api.load_instance(inst)


def test_examples_round_trip_through_kubectl(kubectl, tmp_path):
    """import -> solve -> export on the examples: every patch passes kubectl and the rules, the
    Kueue-managed job's suspension is left to Kueue (a note), and standing pods hold the plan."""
    nodes, pods, jobs = examples()
    plan = api.solve(import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap()))
    notes: list[str] = []
    changes = export_k8s(plan, jobs, pods, notes=notes)
    assert check_with_kubectl(kubectl, changes, jobs, nodes, tmp_path) >= 1
    survivors_hold(changes, pods, jobs, plan)
    suspended_kueue = [pj for pj in plan.jobs if pj.id == "team-d/eval" and pj.gpus == 0]
    assert bool(suspended_kueue) == any("team-d/eval" in n and "Kueue" in n for n in notes)
    assert not any(c["namespace"] == "team-d" for c in changes)


def test_volcano_shrink_changes_only_what_an_update_allows(kubectl, tmp_path):
    """llama (CPU master, 3 GPU workers, worker-0 on the failed gpu-01) shrinks to 8 GPUs on gpu-03,
    where worker-2 runs: Volcano keeps index 0 only, so worker-1 and worker-2 are deleted and
    worker-0 is recreated on gpu-03 through the node label; the master task is untouched."""
    nodes, pods, jobs = examples()
    plan = plan_of(("team-a/llama", 24, 8, "shrink", {"gpu-03": 8}))
    changes = export_k8s(plan, jobs, pods)
    vc = [c for c in changes if c["kind"] == "Job"]
    assert len(vc) == 1 and vc[0]["patchType"] == "json"
    paths = {op["path"] for op in vc[0]["patch"] if op["op"] != "test"}
    assert paths == {"/spec/tasks/1/replicas", "/spec/tasks/1/minAvailable", "/spec/minAvailable"}
    old = all_jobs(jobs)[0]
    new = kubectl_patch(kubectl, old, "json", vc[0]["patch"], tmp_path)
    assert rule_errors(old, new) == []
    assert new["spec"]["tasks"][1]["replicas"] == 1 and new["spec"]["tasks"][1]["minAvailable"] == 1
    assert new["spec"]["minAvailable"] == 2 and new["spec"]["tasks"][0] == old["spec"]["tasks"][0]
    deleted = {c["name"] for c in changes if c["kind"] == "Pod"}
    assert deleted == {"llama-worker-0", "llama-worker-1", "llama-worker-2"}  # 1, 2 by index; 0 off its node
    labels = {(c["name"], json.dumps(c["patch"])) for c in changes if c["kind"] == "Node"}
    assert labels == {("gpu-03", '{"metadata": {"labels": {"unicron-plan/llama": "true"}}}'),
                      ("gpu-01", '{"metadata": {"labels": {"unicron-plan/llama": null}}}'),
                      ("gpu-02", '{"metadata": {"labels": {"unicron-plan/llama": null}}}')}
    assert [c["kind"] for c in changes].index("Job") > max(i for i, c in enumerate(changes) if c["kind"] == "Node")
    survivors_hold(changes, pods, jobs, plan)


def test_volcano_move_is_labels_and_deletions_only():
    """llama keeps 24 GPUs but leaves the failed gpu-01 for gpu-04: no job update at all; the label
    moves and worker-0 (the pod off the plan's nodes) is deleted, to be recreated on gpu-04."""
    nodes, pods, jobs = examples()
    changes = export_k8s(plan_of(("team-a/llama", 24, 24, "restart", {"gpu-02": 8, "gpu-03": 8, "gpu-04": 8})),
                         jobs, pods)
    assert [c["kind"] for c in changes] == ["Node"] * 4 + ["Pod"]
    assert changes[-1]["name"] == "llama-worker-0"


def test_volcano_old_merge_patch_is_refused_by_the_rules():
    """The rules can fail: the template affinity and whole-list merge patch the export wrote
    before is refused by Volcano's validateJobUpdate."""
    _, _, jobs = examples()
    old = all_jobs(jobs)[0]
    tasks = copy.deepcopy(old["spec"]["tasks"])
    tasks[1]["replicas"] = 2
    for t in tasks:
        t["template"]["spec"]["affinity"] = {"nodeAffinity": {}}
    new = merge_patch(old, {"spec": {"minAvailable": 3, "tasks": tasks}})
    errs = rule_errors(old, new)
    assert any("may not change fields other than" in e for e in errs)
    assert any("'minAvailable' must be <= 'replicas'" in e for e in errs)  # task minAvailable 3 > 2


def test_pytorchjob_shrink_gang_follows_and_cpu_master_untouched(kubectl, tmp_path):
    """gpt (CPU-only Master, 4 workers of 4 GPUs, schedulingPolicy.minAvailable 5) shrinks to one
    worker on gpu-04: the gang minimum becomes 2, the Master's template is not patched, workers 1-3
    go (index >= 1) and worker-0 stays on gpu-04."""
    nodes, pods, jobs = examples()
    plan = plan_of(("team-b/gpt", 16, 4, "shrink", {"gpu-04": 4}))
    changes = export_k8s(plan, jobs, pods)
    (patch,) = [c for c in changes if c["kind"] == "PyTorchJob"]
    assert set(patch["patch"]["spec"]["pytorchReplicaSpecs"]) == {"Worker"}
    old = next(j for j in all_jobs(jobs) if j["metadata"]["name"] == "gpt")
    new = kubectl_patch(kubectl, old, "merge", patch["patch"], tmp_path)
    assert rule_errors(old, new) == []
    assert new["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2, "queue": "default"}
    assert new["spec"]["pytorchReplicaSpecs"]["Master"] == old["spec"]["pytorchReplicaSpecs"]["Master"]
    assert {c["name"] for c in changes if c["kind"] == "Pod"} == {"gpt-worker-1", "gpt-worker-2", "gpt-worker-3"}
    # Without the gang update, the rules say the gang never starts.
    stale = merge_patch(old, {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}}})
    assert any("the gang never starts" in e for e in rule_errors(old, stale))
    # An elastic range is widened to include the new count (else torchrun's min:max excludes it).
    elastic = merge_patch(old, {"spec": {"elasticPolicy": {"minReplicas": 2, "maxReplicas": 4}}})
    patch = export_k8s(plan, [([{**elastic}], "jobs")], pods)[0]
    assert patch["patch"]["spec"]["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 4}
    assert rule_errors(elastic, kubectl_patch(kubectl, elastic, "merge", patch["patch"], tmp_path)) == []
    assert any("below elasticPolicy.minReplicas" in e for e in rule_errors(elastic, merge_patch(
        elastic, {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}}})))


def test_dlrover_suspension_by_spec_suspend(kubectl, tmp_path):
    """bert suspended: spec.suspend true (a field of DLRover's ElasticJob CRD since v0.5.0) and its
    running worker deleted (a suspended master creates none); resumed: spec.suspend false and a ScalePlan."""
    nodes, pods, jobs = examples()
    changes = export_k8s(plan_of(("team-c/bert", 8, 0, "suspend", {})), jobs, pods)
    assert [(c["kind"], c["patchType"]) for c in changes] == [("ElasticJob", "merge"), ("Pod", "delete")]
    old = all_jobs(jobs)[-1]
    new = kubectl_patch(kubectl, old, "merge", changes[0]["patch"], tmp_path)
    assert new["spec"]["suspend"] is True and rule_errors(old, new) == []
    notes: list[str] = []
    assert export_k8s(plan_of(("team-c/bert", 8, 0, "suspend", {})), jobs, notes=notes) == changes[:1]
    assert len(notes) == 1 and "--pods" in notes[0]  # without the pods file its running worker stays: said
    suspended = copy.deepcopy(jobs)
    suspended[2][0]["items"][0]["spec"]["suspend"] = True
    changes = export_k8s(plan_of(("team-c/bert", 0, 16, "resume", {"gpu-02": 8, "gpu-03": 8})), suspended)
    assert changes[0]["patch"]["spec"]["suspend"] is False
    assert changes[1]["kind"] == "ScalePlan" and changes[1]["patch"]["spec"]["replicaResourceSpecs"]["worker"][
        "replicas"] == 2


def test_pods_without_type_labels_are_typed_by_name():
    """A pod without its replica-type label is typed and indexed by the name its controller gives it."""
    nodes, pods, jobs = examples()
    pods = copy.deepcopy(pods)
    for p in pods["items"]:
        p["metadata"]["labels"].pop("training.kubeflow.org/replica-type", None)
        p["metadata"]["labels"].pop("training.kubeflow.org/replica-index", None)
    plan = plan_of(("team-b/gpt", 16, 8, "shrink", {"gpu-04": 4, "gpu-05": 4}))
    changes = export_k8s(plan, jobs, pods)
    # Indices 2 and 3 go (beyond 2 replicas); 0 stays on gpu-04; 1 moves to gpu-05's room.
    assert {c["name"] for c in changes if c["kind"] == "Pod"} == {"gpt-worker-1", "gpt-worker-2", "gpt-worker-3"}


def test_kueue_job_suspension_is_left_to_kueue():
    nodes, pods, jobs = examples()
    notes: list[str] = []
    changes = export_k8s(plan_of(("team-d/eval", 8, 0, "suspend", {})), jobs, pods, notes=notes)
    assert changes == [] and len(notes) == 1 and "Kueue" in notes[0] and "PyTorchJob team-d/eval" in notes[0]
    old = next(j for j in all_jobs(jobs) if j["metadata"]["name"] == "eval")
    flipped = merge_patch(old, {"spec": {"runPolicy": {"suspend": True}}})
    assert kueue_errors(old, flipped, ("spec", "runPolicy", "suspend"))  # what the export used to write
    script = render_kubectl(changes, notes)
    assert "# note: PyTorchJob team-d/eval" in script and "kubectl" not in script.split("set -e", 1)[1].replace(
        "# note", "")


def test_import_limits_counts_to_what_the_controller_runs():
    """A PyTorchJob whose Master holds 4 GPUs cannot run on 4 (no Worker: the webhook wants >= 1);
    a Volcano task with a partitionPolicy keeps its replicas (an update cannot change it)."""
    nodes, pods, jobs = examples()
    jobs = copy.deepcopy(jobs)
    gpt = jobs[1][0]["items"][0]
    gpt["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"] = "4"
    gpt["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
    llama = jobs[0][0]["items"][0]
    llama["spec"]["tasks"][1]["partitionPolicy"] = {"totalPartitions": 3, "partitionSize": 1}
    pods = copy.deepcopy(pods)
    for p in pods["items"]:
        if p["metadata"]["name"] == "gpt-master-0":
            p["spec"]["nodeName"] = "gpu-04"
            p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
        if p["metadata"]["name"] == "gpt-worker-1":
            p["spec"]["nodeName"] = "gpu-05"
        if p["metadata"]["name"] == "gpt-worker-3":
            p["status"]["phase"] = "Succeeded"
    inst = import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap())
    tables = {j["id"]: sorted(map(int, j["throughput"]["tflops"])) for j in inst["jobs"]}
    assert tables["team-b/gpt"] == [8, 12, 16]
    assert tables["team-a/llama"] == [24]
    with pytest.raises(InvalidInstanceError, match=r"team-b/gpt plan jobs\[0\]\.gpus.*at least 1 'Worker'"):
        export_k8s(plan_of(("team-b/gpt", 16, 4, "shrink", {"gpu-04": 4})), jobs, pods)


# --- the round-trip fixtures -------------------------------------------------------------------

@pytest.mark.parametrize("size", ["small", "medium"])
def test_fixture_patches_pass_kubectl_and_the_rules(size, kubectl, tmp_path):
    nodes, pods, jobs = fx.load("k8s", size)
    plan = api.solve(import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap(),
                                cordon_reasons=["example.com/hw-fault"]))
    changes = export_k8s(plan, jobs, pods)
    assert check_with_kubectl(kubectl, changes, jobs, nodes, tmp_path) >= 2
    survivors_hold(changes, pods, jobs, plan)


def test_walkthrough_of_the_docs():
    """docs/integrations.md's walk-through: what the plan and the script of the example do."""
    nodes, pods, jobs = examples()
    plan = api.solve(import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap()))
    by = {pj.id: pj for pj in plan.jobs}
    assert (by["team-a/llama"].action, by["team-a/llama"].nodes) == ("grow", ["gpu-02", "gpu-03", "gpu-06", "gpu-09"])
    assert [by[j].action for j in ("team-b/gpt", "team-d/eval", "team-c/bert")] == ["keep", "suspend", "suspend"]
    notes: list[str] = []
    changes = export_k8s(plan, jobs, pods, notes=notes)
    labelled = {c["name"]: c["patch"]["metadata"]["labels"]["unicron-plan/llama"] for c in changes if c["kind"] == "Node"}
    assert labelled == {"gpu-02": "true", "gpu-03": "true", "gpu-06": "true", "gpu-09": "true", "gpu-01": None}
    assert {c["name"] for c in changes if c["kind"] == "Pod"} == {"llama-worker-0", "bert-edljob-worker-0"}
    assert [c["patch"] for c in changes if c["kind"] == "ElasticJob"] == [{"spec": {"suspend": True}}]
    assert len(notes) == 1 and "team-d/eval" in notes[0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(allocatable=st.integers(0, 8), unmanaged=st.integers(0, 8), ready=st.booleans(), cordoned=st.booleans())
def test_withheld_and_lost_gpus_never_collide(allocatable, unmanaged, ready, cordoned):
    """Any mix on one node of lost GPUs (allocatable below capacity), GPUs of unmanaged pods, a
    failure and a cordon imports: withheld GPUs and the event's GPUs are disjoint and the instance loads."""
    nodes, pods, jobs = copy.deepcopy(examples())
    node = next(n for n in nodes["items"] if n["metadata"]["name"] == "gpu-08")
    node["status"]["allocatable"]["nvidia.com/gpu"] = str(allocatable)
    node["status"]["conditions"][0]["status"] = "True" if ready else "Unknown"
    node["spec"]["unschedulable"] = cordoned
    infer = next(p for p in pods["items"] if p["metadata"]["name"] == "infer-1")
    for res in ("limits", "requests"):
        infer["spec"]["containers"][0]["resources"][res]["nvidia.com/gpu"] = str(unmanaged)
    inst = import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap())
    withheld = set(next(n for n in inst["cluster"]["nodes"] if n["id"] == "gpu-08")["failed_gpus"])
    lost = {g["gpu"] for g in inst["event"]["failed_gpus"] if g["node"] == "gpu-08"}
    assert not withheld & lost
    if not ready or allocatable == 0:  # failed: in the event unless every GPU is withheld
        assert ("gpu-08" in inst["event"]["failed_nodes"]) == (len(withheld) < 8)
        assert len(withheld) == min(allocatable, unmanaged)  # a failed node is not also "cordoned"
    else:
        # Unmanaged pods keep what is left of their GPUs; a cordoned node withholds all it has left.
        assert len(lost) == 8 - allocatable
        assert len(withheld) == (allocatable if cordoned else min(allocatable, unmanaged))
    api.load_instance(inst)
