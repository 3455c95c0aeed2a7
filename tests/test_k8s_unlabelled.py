"""Kubernetes jobs people already run: a Volcano job whose GPU tasks select no ``unicron-plan/`` node label
is imported with its count planned and its placement left to Volcano (the plan says so per job), a
warning names the label, and the export writes only what Volcano allows for it (checked with the real
``kubectl patch --local`` and Volcano's update rules)."""

from __future__ import annotations

import copy
import json

from typer.testing import CliRunner

from k8s_rules import rule_errors
from test_k8s_controllers import COST, all_jobs, examples, kubectl, kubectl_patch, plan_of  # noqa: F401 (fixture)
from unicron_plan import api
from unicron_plan.cli import app
from unicron_plan.integrations.common import GpuMap
from unicron_plan.integrations.k8s import export_k8s, import_k8s


def _unlabelled():
    nodes, pods, jobs = copy.deepcopy(examples())
    del jobs[0][0]["items"][0]["spec"]["tasks"][1]["template"]["spec"]["nodeSelector"]["unicron-plan/llama"]
    return nodes, pods, jobs


def test_unlabelled_volcano_job_is_imported_with_its_placement_left_to_volcano():
    nodes, pods, jobs = _unlabelled()
    warnings: list[str] = []
    inst = import_k8s(nodes, pods, jobs, cost=COST, gpu_map=GpuMap(), warnings=warnings)
    llama = next(j for j in inst["jobs"] if j["id"] == "team-a/llama")
    assert llama["placement_left_to"] == "Volcano"
    assert all("placement_left_to" not in j for j in inst["jobs"] if j["id"] != "team-a/llama")
    assert len(warnings) == 1 and "Job team-a/llama" in warnings[0]
    assert '{"unicron-plan/llama": "true"}' in warnings[0]
    plan = api.solve(inst)
    pj = next(j for j in plan.jobs if j.id == "team-a/llama")
    assert pj.placement_left_to == "Volcano"
    assert api.validate_plan(inst, plan).valid
    tampered = plan.model_dump(mode="json", exclude_none=True)
    next(j for j in tampered["jobs"] if j["id"] == "team-a/llama")["placement_left_to"] = "Kueue"
    assert any("placement_left_to" in p for p in api.validate_plan(inst, tampered).problems)


def test_export_of_an_unlabelled_volcano_job_sets_only_its_count(kubectl, tmp_path):
    nodes, pods, jobs = _unlabelled()
    notes: list[str] = []
    changes = export_k8s(plan_of(("team-a/llama", 24, 8, "shrink", {"gpu-03": 8})), jobs, pods, notes=notes)
    assert [c["kind"] for c in changes] == ["Job"]  # no node label, no pod deletion: Volcano places its pods
    old = all_jobs(jobs)[0]
    new = kubectl_patch(kubectl, old, "json", changes[0]["patch"], tmp_path)
    assert rule_errors(old, new) == []
    assert new["spec"]["tasks"][1]["replicas"] == 1
    assert any("left to Volcano" in n for n in notes)
    # a move within its count changes nothing: the nodes are Volcano's
    notes = []
    moved = export_k8s(plan_of(("team-a/llama", 24, 24, "restart", {"gpu-02": 8, "gpu-03": 8, "gpu-04": 8})),
                       jobs, pods, notes=notes)
    assert moved == [] and any("nothing is changed" in n for n in notes)


def test_import_command_warns_in_one_line_naming_the_label(tmp_path):
    nodes, pods, jobs = _unlabelled()
    paths = []
    for name, doc in (("nodes", nodes), ("pods", pods), *((f"jobs{k}", d) for k, (d, _) in enumerate(jobs))):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(doc))
        paths.append(p)
    args = ["import", "k8s", "--expected-run-seconds", "36000", "--nodes", str(paths[0]), "--pods", str(paths[1])]
    for p in paths[2:]:
        args += ["--jobs", str(p)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(lines) == 1 and "unicron-plan/llama" in lines[0] and "left to Volcano" in lines[0]
    assert json.loads(r.stdout)["jobs"][0]["placement_left_to"] == "Volcano"
