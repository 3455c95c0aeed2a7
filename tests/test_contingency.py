"""Contingency plans equal full re-solves of every failure, and `solve --contingency` uses them."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from randgen import random_instance
from unicron_plan import api
from unicron_plan.cli import app
from unicron_plan.plan.contingency import build_contingency, read_contingency, write_contingency
from unicron_plan.tools.adversarial import KINDS
from unicron_plan.tools.generate import generate_instance
from unicron_plan.io import dumps, read_json
from unicron_plan.core.problem import build_problem
from unicron_plan.solvers import brute, dp

ROOT = Path(__file__).resolve().parent.parent


def _with_failure(doc: dict, failed: list[str]) -> dict:
    d = copy.deepcopy(doc)
    d["event"] = {"kind": "failure", "failed_nodes": failed, "failed_gpus": []}
    return d


def test_every_failure_equals_brute_force_resolve_on_tiny_instances():
    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(150):
        doc = random_instance(rng, max_nodes=6, max_jobs=4, gpu_types=int(rng.integers(1, 3)),
                              mtbf=bool(rng.integers(0, 2)))
        inst = api.load_instance(doc)
        index = build_contingency(inst, racks=True)
        assert set(index["failures"]) >= {f"node:{n['id']}" for n in doc["cluster"]["nodes"]}
        for key, entry in index["failures"].items():
            problem = build_problem(api.load_instance(_with_failure(doc, entry["failed_nodes"])))
            expected = brute.solve(problem).objective
            counts = index["plans"][entry["plan"]]["counts"]
            assert entry["objective"] == pytest.approx(expected, rel=1e-12, abs=1e-6)
            assert problem.objective(counts) == pytest.approx(expected, rel=1e-12, abs=1e-6)
            checked += 1
    assert checked > 500


@pytest.mark.parametrize("seed", range(3))
def test_every_node_and_rack_equals_dp_resolve_on_generated_instances(seed):
    doc = generate_instance(seed, gpus=512, jobs=10, nodes_per_rack=8, demand=1.4)
    inst = api.load_instance(doc)
    index = build_contingency(inst, racks=True)
    assert len(index["failures"]) == 64 + 8
    assert index["stats"]["groups"] < len(index["failures"])  # grouping shares work
    for key, entry in index["failures"].items():
        problem = build_problem(api.load_instance(_with_failure(doc, entry["failed_nodes"])))
        expected = dp.solve(problem).objective
        assert entry["objective"] == pytest.approx(expected, rel=1e-12)
        assert problem.objective(index["plans"][entry["plan"]]["counts"]) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("kind", ("synthetic",) + KINDS)
def test_every_failure_equals_dp_resolve_on_each_adversarial_kind(kind):
    # The tables are built on Lagrangian cores of the options; every answer must still be the optimum.
    doc = generate_instance(3, gpus=512, jobs=12, nodes_per_rack=8, demand=1.3, curves=kind)
    inst = api.load_instance(doc)
    index = build_contingency(inst, racks=True)
    assert index["stats"]["options_in_cores"] <= index["stats"]["options"]
    for key, entry in index["failures"].items():
        problem = build_problem(api.load_instance(_with_failure(doc, entry["failed_nodes"])))
        expected = dp.solve(problem).objective
        assert entry["objective"] == pytest.approx(expected, rel=1e-12), (kind, key)
        assert problem.objective(index["plans"][entry["plan"]]["counts"]) == pytest.approx(expected, rel=1e-12)


def test_the_cores_cut_options_on_near_linear_curves():
    doc = generate_instance(1, gpus=1024, jobs=16, nodes_per_rack=8, curves="near-linear")
    stats = build_contingency(api.load_instance(doc), racks=True)["stats"]
    assert stats["options_in_cores"] < stats["options"], stats  # the cut path is exercised


def test_cli_contingency_then_solve_uses_the_precomputed_plan(tmp_path):
    doc = generate_instance(4, gpus=256, jobs=6, failed_nodes=0)
    base = tmp_path / "base.json"
    base.write_text(dumps(doc))
    runner = CliRunner()
    res = runner.invoke(app, ["contingency", str(base), "--out", str(tmp_path / "cont"), "--racks", "-q"])
    assert res.exit_code == 0, res.output
    index = read_contingency(tmp_path / "cont")
    assert index["fingerprint"] and len(index["failures"]) == 32 + 1
    failed = _with_failure(doc, ["n00005"])
    path = tmp_path / "failed.json"
    path.write_text(dumps(failed))
    out = tmp_path / "plan.json"
    res = runner.invoke(app, ["solve", str(path), "--contingency", str(tmp_path / "cont"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    plan = read_json(out)
    assert plan["solver"]["name"] == "contingency"
    assert plan["solver"]["options"]["contingency_key"] == "node:n00005"
    fresh = api.solve(api.load_instance(failed))
    assert plan["objective"] == pytest.approx(fresh.objective, rel=1e-12)
    assert api.validate_plan(failed, plan).valid


def test_solve_falls_back_when_the_index_does_not_match(tmp_path):
    doc = generate_instance(4, gpus=256, jobs=6, failed_nodes=0)
    index = build_contingency(api.load_instance(doc))
    write_contingency(index, tmp_path)
    other = _with_failure(doc, ["n00003"])
    other["jobs"][0]["weight"] = other["jobs"][0]["weight"] + 1.0  # a different instance
    plan = api.solve(api.load_instance(other), contingency=tmp_path)
    assert plan.solver.name == "dp"
    gpu_event = copy.deepcopy(doc)
    gpu_event["event"] = {"kind": "failure", "failed_nodes": [], "failed_gpus": [{"node": "n00001", "gpu": 0}]}
    assert api.solve(api.load_instance(gpu_event), contingency=tmp_path).solver.name == "dp"


@pytest.mark.slow
def test_2048_nodes_within_10_s():
    inst = api.load_instance(ROOT / "instances" / "jagged-16384-128jobs.json")
    start = time.perf_counter()
    index = build_contingency(inst, racks=True)
    assert time.perf_counter() - start <= 10.0
    assert len(index["failures"]) == 2048 + 64
