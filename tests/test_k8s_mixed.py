"""Mixed fleets on Kubernetes: a job's GPU types come from its pod templates' node selection on
``nvidia.com/gpu.product`` (nodeSelector, required node affinity In / NotIn), its tables from
``unicron-plan/throughput.TYPE``; a plan that moves it to another type is carried out by patches
that kubectl applies and the controllers accept, with the template's other affinity terms intact.
The scenarios run on examples/k8s/mixed/ (H100, A100 and B200 nodes)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from k8s_rules import rule_errors
from schedsim import merge_patch
from test_k8s_controllers import check_with_kubectl, kubectl  # noqa: F401  (the kubectl fixture)
from unicron_plan import api
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.integrations.common import BUILTIN_GPU_PRODUCTS, Cost, GpuMap, normalize_product
from unicron_plan.integrations.k8s import export_k8s, import_k8s, render_kubectl

MIXED = Path(__file__).resolve().parents[1] / "examples" / "k8s" / "mixed"
COST = Cost(expected_run_seconds=36000.0)
H, A, B = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-B200"
PRODUCT = "nvidia.com/gpu.product"


def load():
    """(nodes, pods, [(jobs doc, source)]) of examples/k8s/mixed/."""
    read = lambda name: json.loads((MIXED / name).read_text())  # noqa: E731
    return read("nodes.json"), read("pods.json"), [(read(f), f) for f in ("pytorchjobs.json", "vcjobs.json")]


def job_of(jobs, name):
    return next(item for doc, _ in jobs for item in doc["items"] if item["metadata"]["name"] == name)


def imported(nodes=None, pods=None, jobs=None):
    n, p, j = load()
    return import_k8s(nodes or n, pods or p, jobs or j, cost=COST, gpu_map=GpuMap())


def by_id(inst):
    return {j["id"]: j for j in inst["jobs"]}


def plan_moving(job_id: str, gpu_type: str, placement: dict[str, int], previous: int = 16):
    return api.load_plan({
        "schema_version": "1", "instance": "mixed", "status": {"termination": "optimal", "solution": "optimal"},
        "objective": 0.0, "bound": 0.0, "d_run_seconds": 36000.0, "waf_tflops": 0.0,
        "solver": {"name": "test", "wall_seconds": 0.0},
        "jobs": [{"id": job_id, "previous_gpus": previous, "gpus": sum(placement.values()), "action": "restart",
                  "nodes": sorted(placement), "gpu_type": gpu_type,
                  "placement": [{"node": n, "gpus": g} for n, g in sorted(placement.items())],
                  "waf_tflops": 0.0, "transition_penalty": 0.0}]})


def test_product_labels_map_through_one_table():
    """GPU feature discovery's values (NVML names, spaces as '-'; '-SHARED' when time-sliced) and
    the library's names: B200 among them."""
    gm = GpuMap()
    for value, gtype in ((H, "h100"), (A, "a100"), (B, "b200"), ("NVIDIA-B200-SHARED", "b200"),
                         ("NVIDIA-H200", "h200"), ("b200", "b200")):
        assert gm.resolve(value, "Node x", "label") == gtype
    assert all(k == normalize_product(k) for k in BUILTIN_GPU_PRODUCTS)
    with pytest.raises(InvalidInstanceError, match="unknown GPU product"):
        gm.resolve("NVIDIA-A100-SXM4-40GB", "Node x", "label")


def test_affinity_lists_the_types_and_the_instance_gets_a_table_per_type():
    inst = imported()
    jobs = by_id(inst)
    llama = jobs["team-a/llama"]["throughput"]
    assert llama["gpu_type"] == "h100" and set(llama["by_type"]) == {"h100", "a100"}   # runs on H100 now
    assert llama["by_type"]["a100"]["32"] == 1230.0
    ev = jobs["team-c/eval"]["throughput"]   # queued: its gpu-type names which of its types is current
    assert ev["gpu_type"] == "b200" and set(ev["by_type"]) == {"b200", "h100"}
    assert jobs["team-b/bert"]["throughput"] == {"gpu_type": "h100", "tflops": {"8": 1000.0, "16": 1950.0}}
    assert set(inst["cluster"]["gpu_types"]) == {"h100", "a100", "b200"}
    api.load_instance(inst)


def test_h100_failure_moves_the_job_onto_idle_a100_nodes(kubectl, tmp_path):
    """The walk-through: h100-01 fails; the optimal plan moves llama (H100 or A100) onto the four
    idle A100 nodes (4 x 8 A100 GPUs beat 8 H100 GPUs, one restart), keeps the H100-only bert,
    starts eval on B200. The patch pins the hostnames, keeps the product and arch expressions and
    the preferred terms, passes kubectl and the training operator's rules; the H100 pods go."""
    nodes, pods, jobs = load()
    inst = imported()
    plan = api.solve(inst)
    assert plan.status.termination == "optimal" and plan.bound == plan.objective
    entry = {pj.id: pj for pj in plan.jobs}
    assert entry["team-a/llama"].gpu_type == "a100" and entry["team-a/llama"].gpus == 32
    assert entry["team-b/bert"].action == "keep"
    assert entry["team-c/eval"].gpu_type == "b200"
    changes = export_k8s(plan, jobs, pods, nodes_doc=nodes)
    assert check_with_kubectl(kubectl, changes, [d for d, _ in jobs][0], nodes, tmp_path) >= 2
    patch = next(c for c in changes if c["name"] == "llama")
    after = merge_patch(job_of(jobs, "llama"), patch["patch"])
    spec = after["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [
        {"key": PRODUCT, "operator": "In", "values": [H, A]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a100-01", "a100-02", "a100-03", "a100-04"]}]}]
    assert spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 10
    assert after["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
    deleted = {c["name"] for c in changes if c["patchType"] == "delete"}
    assert deleted == {"llama-worker-0", "llama-worker-1"}       # the controller recreates them on A100
    script = render_kubectl(changes)
    assert "a100-04" in script and "TresPerNode" not in script


def test_a_second_export_replaces_its_own_hostname_expression(kubectl, tmp_path):
    """The export owns the kubernetes.io/hostname expression: exporting again onto other nodes
    replaces it (the term does not grow), every other expression stays."""
    nodes, pods, jobs = load()
    first = export_k8s(plan_moving("team-a/llama", "a100", {"a100-01": 8, "a100-02": 8}), jobs, pods)
    llama = merge_patch(job_of(jobs, "llama"), next(c for c in first if c["name"] == "llama")["patch"])
    doc = {"apiVersion": "v1", "kind": "List", "items": [llama]}
    again = export_k8s(plan_moving("team-a/llama", "h100", {"h100-02": 8, "h100-03": 8}), doc)
    patch = next(c for c in again if c["name"] == "llama")
    assert check_with_kubectl(kubectl, [patch], doc, nodes, tmp_path) == 1
    terms = merge_patch(llama, patch["patch"])["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [e["key"] for e in terms[0]["matchExpressions"]] == [PRODUCT, "kubernetes.io/arch", "kubernetes.io/hostname"]
    assert terms[0]["matchExpressions"][-1]["values"] == ["h100-02", "h100-03"]


def test_a_type_the_templates_do_not_admit_is_refused_at_export():
    nodes, pods, jobs = load()
    with pytest.raises(InvalidInstanceError, match="admit h100, a100"):   # llama: H100 or A100, not B200
        export_k8s(plan_moving("team-a/llama", "b200", {"b200-01": 8, "b200-02": 8}), jobs, pods)
    with pytest.raises(InvalidInstanceError, match="admit h100"):         # bert: nodeSelector H100
        export_k8s(plan_moving("team-b/bert", "a100", {"a100-01": 8, "a100-02": 8}), jobs, pods)
    # with the nodes file each plan node's label is checked as Kubernetes matches it
    plan = plan_moving("team-a/llama", "a100", {"a100-01": 8, "b200-01": 8})
    with pytest.raises(InvalidInstanceError, match="b200-01"):
        export_k8s(plan, jobs, pods, nodes_doc=nodes)


def test_volcano_moves_by_labels_and_nodes_file_clears_stale_labels(kubectl, tmp_path):
    """Volcano cannot change a template on update: bert (affinity H100 or A100) moves to A100 by its
    placement label alone; with the nodes file the label also leaves a node no pod of it stands on."""
    nodes, pods, jobs = load()
    vc = job_of(jobs, "bert")
    spec = vc["spec"]["tasks"][0]["template"]["spec"]
    del spec["nodeSelector"][PRODUCT]
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": [H, A]}]}]}}}
    vc["metadata"]["annotations"].pop("unicron-plan/throughput")
    vc["metadata"]["annotations"]["unicron-plan/throughput.h100"] = "8:1000,16:1950"
    vc["metadata"]["annotations"]["unicron-plan/throughput.a100"] = "8:330,16:640"
    assert set(by_id(imported(jobs=jobs))["team-b/bert"]["throughput"]["by_type"]) == {"h100", "a100"}
    stale = next(n for n in nodes["items"] if n["metadata"]["name"] == "h100-02")
    stale["metadata"]["labels"]["unicron-plan/bert"] = "true"      # left from an earlier placement
    plan = plan_moving("team-b/bert", "a100", {"a100-01": 8, "a100-02": 8})
    changes = export_k8s(plan, jobs, pods, nodes_doc=nodes)
    labels = {c["name"]: c["patch"]["metadata"]["labels"]["unicron-plan/bert"] for c in changes if c["kind"] == "Node"}
    assert labels == {"a100-01": "true", "a100-02": "true", "h100-03": None, "h100-04": None, "h100-02": None}
    assert not any(c["kind"] == "Job" for c in changes)             # a move keeps the counts: no job patch
    assert {c["name"] for c in changes if c["patchType"] == "delete"} == {"bert-worker-0", "bert-worker-1"}
    assert check_with_kubectl(kubectl, changes, jobs, nodes, tmp_path) == 5
    without = export_k8s(plan, jobs, pods)
    assert "h100-02" not in {c["name"] for c in without if c["kind"] == "Node"}


def _with_affinity(expressions_per_term, selector=None, annotations=None):
    nodes, pods, jobs = load()
    llama = job_of(jobs, "llama")
    spec = llama["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = [
        {"matchExpressions": exprs} for exprs in expressions_per_term]
    if selector:
        spec["nodeSelector"] = {PRODUCT: selector}
    if annotations is not None:
        llama["metadata"]["annotations"] = annotations
    return nodes, pods, jobs


def test_notin_several_terms_and_selectors():
    tables = {"unicron-plan/weight": "1", "unicron-plan/throughput.h100": "8:1000,16:1950",
              "unicron-plan/throughput.a100": "8:330,16:640", "unicron-plan/throughput.b200": "8:2300,16:4500"}
    types = lambda *a, **k: by_id(imported(*_with_affinity(*a, **k)))["team-a/llama"]["throughput"]  # noqa: E731
    # NotIn: every type of the cluster but B200, H100 (the current one) first
    no_b200 = {k: v for k, v in tables.items() if "b200" not in k}
    tp = types([[{"key": PRODUCT, "operator": "NotIn", "values": [B]}]], annotations=no_b200)
    assert tp["gpu_type"] == "h100" and set(tp["by_type"]) == {"h100", "a100"}
    # two terms (ORed): H100 in one, B200 in the other
    tp = types([[{"key": PRODUCT, "operator": "In", "values": [H]}], [{"key": PRODUCT, "operator": "In", "values": [B]}]],
               annotations={k: v for k, v in tables.items() if "a100" not in k})
    assert set(tp["by_type"]) == {"h100", "b200"}
    # a term without a product expression: the template does not restrict the type; the job keeps its own
    tp = types([[{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]],
               annotations={"unicron-plan/weight": "1", "unicron-plan/throughput": "8:1000,16:1950"})
    assert tp == {"gpu_type": "h100", "tflops": {"8": 1000.0, "16": 1950.0}}
    # nodeSelector pins one product whatever the affinity lists
    tp = types([[{"key": PRODUCT, "operator": "In", "values": [H, A]}]], selector=H,
               annotations={"unicron-plan/weight": "1", "unicron-plan/throughput.h100": "8:1000,16:1950"})
    assert tp == {"gpu_type": "h100", "tflops": {"8": 1000.0, "16": 1950.0}}
    # a product no node carries (and the library does not know) is skipped: no node matches it
    tp = types([[{"key": PRODUCT, "operator": "In", "values": ["NVIDIA-A100-SXM4-40GB", H]}]],
               annotations={"unicron-plan/weight": "1", "unicron-plan/throughput": "8:1000,16:1950"})
    assert tp["gpu_type"] == "h100" and "by_type" not in tp


@pytest.mark.parametrize("exprs, annotations, field, message", [
    ([{"key": PRODUCT, "operator": "Gt", "values": ["1"]}], None, "operator", "'Gt'"),
    ([{"key": PRODUCT, "operator": "In", "values": [B]}], None, "affinity", "the job runs on h100"),
    ([{"key": PRODUCT, "operator": "DoesNotExist"}], None, "affinity", "admit no GPU type"),
    (None, {"unicron-plan/weight": "1", "unicron-plan/throughput": "8:1000,16:1950"}, "throughput",
     "throughput.TYPE"),
    (None, {"unicron-plan/weight": "1", "unicron-plan/throughput.h100": "8:1000,16:1950"},
     "throughput.a100", "missing"),
    (None, {"unicron-plan/weight": "1", "unicron-plan/throughput.h100": "8:1", "unicron-plan/throughput.a100": "8:1",
            "unicron-plan/throughput.b200": "8:1"}, "throughput.b200", "not a GPU type the job may run on"),
    (None, {"unicron-plan/weight": "1", "unicron-plan/throughput.h100": "8:1", "unicron-plan/throughput.a100": "8:1",
            "unicron-plan/throughput.NVIDIA-A100-SXM4-80GB": "8:1"}, "throughput.NVIDIA-A100-SXM4-80GB",
     "second table"),
    (None, {"unicron-plan/weight": "1", "unicron-plan/throughput.h100": "8:1", "unicron-plan/throughput.a100": "8:x"},
     "throughput.a100", "GPUS:TFLOPS"),
    (None, {"unicron-plan/weight": "1", "unicron-plan/throughput.h1$0": "8:1"}, "throughput.h1$0", "throughput.TYPE"),
    (None, {"unicron-plan/weight": "1", "unicron-plan/gpu-types": "h100,a100", "unicron-plan/throughput": "8:1"},
     "gpu-types", "node affinity"),
])
def test_bad_type_declarations_name_the_job_and_field(exprs, annotations, field, message):
    terms = [exprs] if exprs is not None else [[{"key": PRODUCT, "operator": "In", "values": [H, A]}]]
    args = _with_affinity(terms, annotations=annotations)
    with pytest.raises(InvalidInstanceError) as err:
        imported(*args)
    assert "PyTorchJob team-a/llama" in err.value.field and field in err.value.field, err.value
    assert message in err.value.message, err.value.message


def test_old_plans_without_gpu_type_still_export():
    nodes, pods, jobs = load()
    plan = plan_moving("team-a/llama", "a100", {"a100-01": 8, "a100-02": 8})
    data = json.loads(plan.model_dump_json())
    del data["jobs"][0]["gpu_type"]
    changes = export_k8s(api.load_plan(data), jobs, pods)
    assert any(c["name"] == "llama" for c in changes)
    assert rule_errors(job_of(jobs, "llama"), merge_patch(copy.deepcopy(job_of(jobs, "llama")),
                                                          next(c for c in changes if c["name"] == "llama")["patch"])) == []


def test_hostile_affinity_values_reach_kubectl_inside_the_one_patch_argument(tmp_path):
    """A template's other expressions are copied into the patch: whatever they hold, the script
    passes the patch to kubectl as one argument, unchanged (a fake kubectl records it)."""
    from test_k8s_names import run_script

    hostile = ["$(touch PWNED)", "`touch PWNED`", "a'b\"c", "x; rm -rf /", "\n--all"]
    nodes, pods, jobs = _with_affinity([[{"key": PRODUCT, "operator": "In", "values": [H, A]},
                                         {"key": "example.com/pool", "operator": "NotIn", "values": hostile}]])
    changes = export_k8s(plan_moving("team-a/llama", "a100", {"a100-01": 8, "a100-02": 8}), jobs, pods)
    calls = run_script(render_kubectl(changes), tmp_path)
    patch = next(c for c in changes if c["name"] == "llama")
    argv = next(call["argv"] for call in calls if call["argv"][-1] == "llama")
    sent = json.loads(argv[argv.index("-p") + 1])
    assert sent == patch["patch"]
    terms = sent["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][1]["values"] == hostile


def test_cli_export_with_nodes_and_a_refused_type(tmp_path):
    from typer.testing import CliRunner

    from unicron_plan.cli import app

    plan = plan_moving("team-a/llama", "a100", {"a100-01": 8, "a100-02": 8})
    (tmp_path / "plan.json").write_text(plan.model_dump_json())
    args = ["export", "k8s", str(tmp_path / "plan.json"), "--jobs", str(MIXED / "pytorchjobs.json"),
            "--jobs", str(MIXED / "vcjobs.json"), "--pods", str(MIXED / "pods.json"),
            "--nodes", str(MIXED / "nodes.json"), "--format", "kubectl"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert '"values":["a100-01","a100-02"]' in r.output
    bad = plan_moving("team-a/llama", "b200", {"b200-01": 8, "b200-02": 8})
    (tmp_path / "plan.json").write_text(bad.model_dump_json())
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "PyTorchJob team-a/llama plan jobs[0].gpu_type" in r.output, r.output
