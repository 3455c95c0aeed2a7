"""Committed simulator results match what their scripts produce now, on a small fixed case: the first
seeds of a table (benchmarks/sim_tables.py) and the first run of a scenario family
(scenarios/sweeps/families.py). A change to the simulator or the planner that moves these numbers
fails here until the files (and docs/simulation.md's tables, printed from them) are regenerated."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _module(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)


@pytest.mark.parametrize("case", ["gpt3-mix-128-a800", "gpt3-mix-128-a800-dense"])
def test_a_sim_table_file_matches_its_script_on_its_first_seeds(case):
    tables = _module("benchmarks/sim_tables.py")
    committed = json.loads(tables.result_path(case).read_text())
    seeds = len(committed["per_seed"]["unicron"])
    assert seeds == tables.CASES[case][1] == committed["seeds"]
    for policy, values in committed["per_seed"].items():  # the summary is the mean of the seeds it holds
        assert _close(committed["policies"][policy]["weighted_tflop"], sum(values) / seeds), policy
    now = tables.run_case(case, seeds=2, workers=1)
    for policy, values in committed["per_seed"].items():
        assert all(_close(a, b) for a, b in zip(now["per_seed"][policy], values[:2])), policy


def test_the_families_file_matches_its_script_on_one_run():
    families = _module("scenarios/sweeps/families.py")
    lines = families.read_lines([ROOT / "benchmarks" / "results-families-1024.jsonl"])
    first = min(lines, key=lambda r: (r["family"], r["seed"]))
    now = families.run_one(first["family"], first["gpus"], first["seed"], first["duration_hours"])
    assert now["failures"] == first["failures"]
    assert set(now["weighted_tflop"]) == set(first["weighted_tflop"]) == set(families.COLUMNS)
    for column, value in first["weighted_tflop"].items():
        assert _close(now["weighted_tflop"][column], value), column


def test_the_side_by_side_file_matches_its_script_on_its_smallest_cell(tmp_path):
    """benchmarks/results-side-by-side.json: its flags agree with its objectives, and its first
    16,384-GPU cell's instance and DP optimum are what the script's instance gives now."""
    from unicron_plan import api

    side = _module("benchmarks/side_by_side.py")
    cells = json.loads((ROOT / "benchmarks" / "results-side-by-side.json").read_text())["cells"]
    for c in cells:
        if "dp" not in c:
            assert c["not_run"].startswith("not run: "), c["kind"]
            continue
        optimum = c["dp"]["objective"] if c["dp"]["solution"] == "optimal" else None
        for name in ("plain", "milp", "cpsat"):
            other = c.get(name, {})
            if "equals_dp" in other:
                assert other["equals_dp"] == side.same(other["objective"], optimum), (c["gpus"], c["kind"], name)
    first = next(c for c in cells if c["gpus"] == 16384 and "dp" in c)
    path = tmp_path / "instance.json"
    assert side.make_instance(first["gpus"], first["jobs"], first["kind"], first["seed"], path) == first["instance"]
    plan = api.solve(str(path))
    assert plan.status.solution == "optimal"
    assert _close(plan.objective, first["dp"]["objective"])
