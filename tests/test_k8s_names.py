"""Kubernetes names and input errors: import refuses names Kubernetes itself refuses, the kubectl
script passes every name as one quoted argument after ``--`` (run against a fake kubectl that
records its argv), and bad objects exit 2 naming the Node, Pod or job and the field."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unicron_plan.cli import app
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.integrations.common import Cost, GpuMap
from unicron_plan.integrations.k8s import export_k8s, import_k8s, render_kubectl

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "k8s"
COST = Cost(expected_run_seconds=36000.0)
HOSTILE = ["--all", "-n", "$(touch PWNED)", "`touch PWNED`", "a;touch PWNED", "n[1-2]", "*", "x y", "it's",
           "a\nb", "-o=yaml", "GPU-01"]

FAKE_KUBECTL = """#!{python}
import json, os, sys
with open(os.environ["KUBECTL_LOG"], "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "stdin": sys.stdin.read() if "-" in sys.argv else None}}) + "\\n")
"""


def load(name: str):
    return json.loads((EXAMPLES / name).read_text())


def examples():
    jobs = [(load(f), f) for f in ("vcjobs.json", "pytorchjobs.json", "elasticjobs.json")]
    return load("nodes.json"), load("pods.json"), jobs


def run_script(script: str, tmp_path: Path) -> list[dict]:
    """Run the script with a fake kubectl first on PATH, in a directory whose files a glob would
    match; return the recorded calls. Nothing the names say may run, no glob may expand."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kubectl"
    fake.write_text(FAKE_KUBECTL.format(python=sys.executable))
    fake.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    for name in ("n1", "n2", "a", "x"):
        (work / name).write_text("")
    (tmp_path / "apply.sh").write_text(script)
    log = tmp_path / "calls.jsonl"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "KUBECTL_LOG": str(log)}
    r = subprocess.run(["sh", str(tmp_path / "apply.sh")], cwd=work, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert not (work / "PWNED").exists() and not (tmp_path / "PWNED").exists()
    assert sorted(os.listdir(work)) == ["a", "n1", "n2", "x"]
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def positional(argv: list[str]) -> list[str]:
    assert "--" in argv, argv
    return argv[argv.index("--") + 1:]


def test_hostile_names_reach_kubectl_as_single_arguments_after_the_separator(tmp_path):
    """Defence in depth: even names import would refuse are one argument each, after ``--``."""
    changes = []
    for name in HOSTILE:
        changes.append({"apiVersion": "v1", "kind": "Pod", "namespace": name, "name": name,
                        "patchType": "delete", "patch": None})
        changes.append({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "namespace": name, "name": name,
                        "patchType": "merge", "patch": {"metadata": {"labels": {"k": name}}}})
        changes.append({"apiVersion": "v1", "kind": "Node", "namespace": "", "name": name,
                        "patchType": "merge", "patch": {"metadata": {"labels": {name: None}}}})
    calls = run_script(render_kubectl(changes, notes=["a note\nrm -rf / ; $(touch PWNED)"]), tmp_path)
    assert len(calls) == len(changes)
    for call, c in zip(calls, changes):
        argv = call["argv"]
        assert positional(argv)[1:] == [c["name"]]
        before = argv[:argv.index("--")]
        if c["namespace"]:
            assert before[before.index("-n") + 1] == c["namespace"]
        else:
            assert "-n" not in before
        if c["patchType"] == "merge":
            assert json.loads(before[before.index("-p") + 1]) == c["patch"]


def test_exported_script_runs_exactly_the_change_list(tmp_path):
    """The examples' export as a script: every call is the change's verb, namespace, type, patch
    and name, created objects arrive on stdin unchanged."""
    from unicron_plan import api

    nodes, pods, jobs = examples()
    plan = api.solve(import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap()))
    notes: list[str] = []
    changes = export_k8s(plan, jobs, pods, notes=notes)
    calls = run_script(render_kubectl(changes, notes), tmp_path)
    assert len(calls) == len(changes) and changes
    for call, c in zip(calls, changes):
        argv = call["argv"]
        if c["patchType"] == "create":
            assert argv == ["create", "-f", "-"] and json.loads(call["stdin"]) == c["patch"]
            continue
        assert argv[0] == ("delete" if c["patchType"] == "delete" else "patch")
        assert positional(argv)[1] == c["name"]
        if c["patchType"] != "delete":
            before = argv[:argv.index("--")]
            assert before[before.index("--type") + 1] == c["patchType"]
            assert json.loads(before[before.index("-p") + 1]) == c["patch"]


@pytest.mark.parametrize("bad", ["--all", "$(touch PWNED)", "n[1-2]", "*", "Gpu-01", "a" * 254, "a_b",
                                 "gpu-01\n"])
@pytest.mark.parametrize("what", ["pod", "node", "job", "namespace"])
def test_import_refuses_names_kubernetes_refuses(bad, what):
    nodes, pods, jobs = copy.deepcopy(examples())
    if what == "pod":
        obj, label = pods["items"][1], "Pod team-a/"
    elif what == "node":
        obj, label = nodes["items"][1], "Node "
    elif what == "job":
        obj, label = jobs[0][0]["items"][0], "Job team-a/"
    else:
        obj, label = pods["items"][1], "Pod "
    field = "namespace" if what == "namespace" else "name"
    if what == "namespace" and len(bad) > 63:
        bad = "a" * 64
    obj["metadata"][field] = bad
    with pytest.raises(InvalidInstanceError) as exc:
        import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap())
    assert str(exc.value).startswith(label) and f"metadata.{field}" in str(exc.value), str(exc.value)


def test_export_refuses_a_plan_node_name_kubernetes_refuses():
    from test_k8s_controllers import plan_of

    nodes, pods, jobs = examples()
    with pytest.raises(InvalidInstanceError, match=r"plan jobs\[0\]\.placement\[0\]\.node.*DNS-1123"):
        export_k8s(plan_of(("team-a/llama", 24, 8, "shrink", {"--all": 8})), jobs, pods)


def test_volcano_task_names_and_placement_label_are_checked():
    nodes, pods, jobs = copy.deepcopy(examples())
    jobs[0][0]["items"][0]["spec"]["tasks"][0]["name"] = "Master;x"
    with pytest.raises(InvalidInstanceError, match=r"Job team-a/llama spec\.tasks\[0\]\.name"):
        import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap())
    nodes, pods, jobs = copy.deepcopy(examples())
    sel = jobs[0][0]["items"][0]["spec"]["tasks"][1]["template"]["spec"]["nodeSelector"]
    sel["unicron-plan/other"] = "true"  # two placement labels: which one places it is unclear
    with pytest.raises(InvalidInstanceError, match=r"nodeSelector.*several 'unicron-plan/' node label"):
        import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap())
    del sel["unicron-plan/other"]
    sel["unicron-plan/llama"] = "$(x)"
    with pytest.raises(InvalidInstanceError, match=r"label value"):
        import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap())
    nodes, pods, jobs = copy.deepcopy(examples())
    twin = copy.deepcopy(jobs[0][0]["items"][0])
    twin["metadata"]["name"] = "llama-2"
    jobs[0][0]["items"].append(twin)
    with pytest.raises(InvalidInstanceError, match=r"Job team-a/llama-2 .*unicron-plan/llama is also Job team-a/llama"):
        import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap())


# --- the command line: exit 2 naming the object and the field ----------------------------------

def _import(tmp_path: Path, nodes, pods, jobs_docs: list) -> object:
    args = ["import", "k8s", "--expected-run-seconds", "36000"]
    for name, doc in (("nodes", nodes), ("pods", pods)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
        args += [f"--{name}", str(tmp_path / f"{name}.json")]
    for i, doc in enumerate(jobs_docs):
        (tmp_path / f"jobs{i}.json").write_text(json.dumps(doc))
        args += ["--jobs", str(tmp_path / f"jobs{i}.json")]
    return CliRunner().invoke(app, args)


def test_several_jobs_files_equal_one_list(tmp_path):
    nodes, pods, jobs = examples()
    r = _import(tmp_path, nodes, pods, [doc for doc, _ in jobs])
    assert r.exit_code == 0, r.output
    merged = {"apiVersion": "v1", "kind": "List", "items": [i for doc, _ in jobs for i in doc["items"]]}
    r2 = _import(tmp_path, nodes, pods, [merged])
    assert r2.exit_code == 0 and json.loads(r.stdout) == json.loads(r2.stdout)
    # The same job in two files is named.
    r3 = _import(tmp_path, nodes, pods, [jobs[0][0], jobs[0][0]])
    assert r3.exit_code == 2 and "Job team-a/llama metadata.name" in r3.stderr


@pytest.mark.parametrize("kind", [{"x": 1}, ["Job"], 7, None])
def test_kind_that_is_not_a_string_exits_2(tmp_path, kind):
    nodes, pods, jobs = copy.deepcopy(examples())
    jobs[0][0]["items"][0]["kind"] = kind
    r = _import(tmp_path, nodes, pods, [doc for doc, _ in jobs])
    assert r.exit_code == 2, r.output
    assert "team-a/llama kind: must be a string" in r.stderr and "Traceback" not in r.output


def test_errors_name_the_node_or_the_pod(tmp_path):
    nodes, pods, jobs = copy.deepcopy(examples())
    pods["items"][-1]["spec"]["nodeName"] = "cpu-01"  # a GPU pod on a node without GPUs
    r = _import(tmp_path, nodes, pods, [doc for doc, _ in jobs])
    assert r.exit_code == 2 and "Pod serving/infer-1 spec.nodeName" in r.stderr, r.stderr
    nodes, pods, jobs = copy.deepcopy(examples())
    pods["items"][-1]["spec"]["nodeName"] = "gpu-02"  # 8 more GPUs on a full node
    r = _import(tmp_path, nodes, pods, [doc for doc, _ in jobs])
    assert r.exit_code == 2 and "Node gpu-02 " in r.stderr, r.stderr
    nodes, pods, jobs = copy.deepcopy(examples())
    pods["items"][1]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "eight"
    r = _import(tmp_path, nodes, pods, [doc for doc, _ in jobs])
    assert r.exit_code == 2 and "Pod team-a/llama-worker-0 spec.containers[0].resources.limits" in r.stderr, r.stderr


def test_export_cli_takes_several_jobs_files_and_prints_notes(tmp_path):
    nodes, pods, jobs = examples()
    r = _import(tmp_path, nodes, pods, [doc for doc, _ in jobs])
    assert r.exit_code == 0, r.output
    (tmp_path / "inst.json").write_text(r.stdout)
    assert CliRunner().invoke(app, ["solve", str(tmp_path / "inst.json"), "--out", str(tmp_path / "plan.json")]
                              ).exit_code == 0
    args = ["export", "k8s", str(tmp_path / "plan.json"), "--pods", str(tmp_path / "pods.json"), "--format", "kubectl"]
    for i in range(len(jobs)):
        args += ["--jobs", str(tmp_path / f"jobs{i}.json")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("#!/bin/sh\n") and "# note: PyTorchJob team-d/eval" in r.stdout
    assert "note: PyTorchJob team-d/eval" in r.stderr
    from unicron_plan import api

    notes: list[str] = []
    changes = export_k8s(api.load_plan(tmp_path / "plan.json"), jobs, pods, notes=notes)
    assert r.stdout == render_kubectl(changes, notes)


# --- the real kubectl against a fake API server on 127.0.0.1 --------------------------------------

def _run_real_kubectl(script: str, tmp_path: Path) -> list[dict]:
    from fake_apiserver import fake_apiserver
    from test_k8s_controllers import KUBECTL

    if KUBECTL is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl is not installed (Debian: apt-get install kubernetes-client)")
        pytest.skip("kubectl is not installed")
    work = tmp_path / "work"
    work.mkdir()
    for name in ("n1", "n2", "a", "x"):
        (work / name).write_text("")
    with fake_apiserver(tmp_path) as (config, requests):
        env = {"PATH": f"{Path(KUBECTL).parent}:/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(config)}
        r = subprocess.run(["sh", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    assert not (work / "PWNED").exists() and sorted(os.listdir(work)) == ["a", "n1", "n2", "x"]
    return list(requests)


def test_real_kubectl_sends_each_hostile_name_as_that_object(tmp_path):
    """kubectl itself parses the script: a pod named ``--all`` is deleted as the pod ``--all`` (not
    every pod), a node named ``-n`` is patched as that node, ``$(...)``, globs and quotes stay names."""
    names = [n for n in HOSTILE if "\n" not in n]
    changes = []
    for name in names:
        changes.append({"apiVersion": "v1", "kind": "Pod", "namespace": name, "name": name,
                        "patchType": "delete", "patch": None})
        changes.append({"apiVersion": "v1", "kind": "Node", "namespace": "", "name": name,
                        "patchType": "merge", "patch": {"metadata": {"labels": {"k": None}}}})
    requests = _run_real_kubectl(render_kubectl(changes), tmp_path)
    assert [(q["method"], q["path"]) for q in requests] == [
        (("DELETE", ["api", "v1", "namespaces", n, "pods", n]), ("PATCH", ["api", "v1", "nodes", n]))[k]
        for n in names for k in (0, 1)]


def test_real_kubectl_carries_the_examples_script(tmp_path):
    """The examples' exported patches and deletions, run by kubectl: each reaches its object with its
    patch type and body."""
    from unicron_plan import api

    nodes, pods, jobs = examples()
    plan = api.solve(import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap()))
    changes = [c for c in export_k8s(plan, jobs, pods) if c["patchType"] != "create"]
    requests = _run_real_kubectl(render_kubectl(changes), tmp_path)
    assert len(requests) == len(changes)
    types = {"merge": "application/merge-patch+json", "json": "application/json-patch+json"}
    for q, c in zip(requests, changes):
        assert q["path"][-1] == c["name"]
        assert ("namespaces" not in q["path"] and not c["namespace"]) or \
            q["path"][q["path"].index("namespaces") + 1] == c["namespace"]
        if c["patchType"] == "delete":
            assert q["method"] == "DELETE" and q["path"][-2] == "pods"
        else:
            assert q["method"] == "PATCH" and q["content_type"] == types[c["patchType"]]
            assert json.loads(q["body"]) == c["patch"]


def test_mutated_kubernetes_objects_are_bad_input_never_a_crash():
    """Seeded mutations of the examples (any field set to an object, a list, a huge number, an
    option-like or over-long string...): import and export either work or raise bad input."""
    import random

    from test_k8s_controllers import plan_of
    from unicron_plan.errors import InfeasibleError

    values = [None, {}, [], {"x": 1}, ["a"], 0, -1, 10**30, 1.5, 1e308, True, "", "--all", "8", "-8", "a" * 300]
    base = examples()
    plan = plan_of(("team-a/llama", 24, 16, "shrink", {"gpu-02": 8, "gpu-03": 8}),
                   ("team-c/bert", 8, 0, "suspend", {}))

    def paths(doc, pre=()):
        yield pre
        items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
        for k, v in items:
            yield from paths(v, pre + (k,))

    rng = random.Random(7)
    for _ in range(150):
        docs = copy.deepcopy(base)
        which = rng.randrange(3)
        target = docs[which] if which < 2 else docs[2][rng.randrange(3)][0]
        *parents, last = rng.choice(list(paths(target))[1:])
        node = target
        for k in parents:
            node = node[k]
        node[last] = copy.deepcopy(rng.choice(values))
        try:
            import_k8s(*docs, cost=COST, gpu_map=GpuMap())
            render_kubectl(export_k8s(plan, docs[2], docs[1]))
        except (InvalidInstanceError, InfeasibleError):
            pass
