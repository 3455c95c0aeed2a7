"""The bench harness: side-by-side results, unavailable solvers reported, regressions caught."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unicron_plan.tools import bench
from unicron_plan.cli import app
from unicron_plan.core.problem import RawSolution
from unicron_plan.solvers import dp

ROOT = Path(__file__).resolve().parent.parent
TINY = [str(ROOT / "instances" / "tiny-one-job-two-nodes.json"), str(ROOT / "instances" / "jagged-128-4jobs.json")]


def test_side_by_side_with_unavailable_solver_reported():
    res = bench.run_bench(TINY, ["dp", "brute", "no-such-solver"], runs=2)
    for e in res["instances"].values():
        assert e["solvers"]["dp"]["status"] == "ok" and e["solvers"]["brute"]["status"] == "ok"
        assert e["solvers"]["dp"]["gap"] == pytest.approx(0.0, abs=1e-12)
        assert e["solvers"]["dp"]["objective"] == pytest.approx(e["reference"], rel=1e-12)
        assert len(e["solvers"]["dp"]["solve_seconds"]) == 2
        assert e["solvers"]["no-such-solver"]["status"] == "unavailable"
        assert "valid solvers" in e["solvers"]["no-such-solver"]["message"]
    assert any("no-such-solver" in line for line in bench.notes(res))


def test_check_catches_an_injected_slowdown(monkeypatch):
    baseline = bench.run_bench(TINY[1:], ["dp"], runs=3)
    assert bench.check(baseline, baseline, tolerance=0.5) == []
    fast = dp.solve

    def slow(problem, options=None):
        time.sleep(0.05)
        return fast(problem, options)

    monkeypatch.setattr(dp, "solve", slow)
    now = bench.run_bench(TINY[1:], ["dp"], runs=3)  # every solve sleeps 0.05 s: at least that long
    fast = copy.deepcopy(baseline)  # a baseline below the floor: no comparison of two measured times
    for e in fast["instances"].values():
        e["solvers"]["dp"]["median_solve_seconds"] = 0.001
    problems = bench.check(now, fast, tolerance=0.5, floor_seconds=0.01)
    assert len(problems) == 1 and "median_solve_seconds" in problems[0] and "baseline" in problems[0]


def test_check_catches_an_injected_optimality_loss(monkeypatch):
    baseline = bench.run_bench(TINY[1:], ["dp"], runs=1)

    def worse(problem, options=None):  # feasible, valid, but everyone suspended
        counts = {j.id: 0 for j in problem.jobs}
        value = problem.objective(counts)
        return RawSolution(counts=counts, objective=value, bound=value)

    monkeypatch.setattr(dp, "solve", worse)
    now = bench.run_bench(TINY[1:], ["dp"], runs=1)
    problems = bench.check(now, baseline, tolerance=100.0)
    assert any("lost optimality" in p for p in problems)
    assert any("below baseline" in p for p in problems)


def test_cli_bench_json_and_check_exit_codes(tmp_path):
    runner = CliRunner()
    out = tmp_path / "res.json"
    res = runner.invoke(app, ["bench", *TINY, "-s", "dp", "-s", "milp", "--runs", "1", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert set(data["instances"]) == set(TINY)
    res = runner.invoke(app, ["bench", *TINY, "-s", "dp", "--runs", "1", "-q", "--check", str(out)])
    assert res.exit_code == 0, res.output
    doctored = copy.deepcopy(data)
    for e in doctored["instances"].values():
        e["solvers"]["dp"]["objective"] *= 1.5 if e["solvers"]["dp"]["objective"] > 0 else 0.5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doctored))
    res = runner.invoke(app, ["bench", *TINY, "-s", "dp", "--runs", "1", "-q", "--check", str(bad)])
    assert res.exit_code == 1
    assert "regression" in res.output


def test_generate_spec_instances():
    res = bench.run_bench(["generate:gpus=256,jobs=4,seed=1"], ["dp"], runs=1)
    e = res["instances"]["generate:gpus=256,jobs=4,seed=1"]
    assert e["gpus"] == 256 and e["jobs"] == 4 and e["solvers"]["dp"]["status"] == "ok"


def test_solve_path_keeps_heavy_imports_lazy(tmp_path):
    """`solve` on a cluster without shared nodes must not import networkx, rich, scipy or matplotlib."""
    import subprocess
    import sys

    code = (
        "import os, runpy, sys\n"
        "os._exit = sys.exit  # solve ends its process with os._exit: keep it alive to list its modules\n"
        f"sys.argv = ['unicron-plan', 'solve', {str(ROOT / 'instances' / 'jagged-2048-32jobs.json')!r}, '--out', {str(tmp_path / 'p.json')!r}]\n"
        "try:\n"
        "    runpy.run_module('unicron_plan.cli', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print(sorted(m for m in ('networkx', 'rich', 'scipy', 'matplotlib') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert (tmp_path / "p.json").exists()


def test_check_fails_on_an_unmatched_instance_and_matches_absolute_paths(tmp_path, monkeypatch):
    """Keys of the baseline are relative to the repository; a run given absolute paths matches
    them, and a run whose instance (or solver) the baseline lacks fails instead of passing."""
    runner = CliRunner()
    monkeypatch.chdir(ROOT)
    rel = "instances/jagged-128-4jobs.json"
    out = tmp_path / "res.json"
    assert runner.invoke(app, ["bench", rel, "--runs", "1", "-q", "--out", str(out)]).exit_code == 0
    bench_dir = tmp_path / "benchmarks"
    bench_dir.mkdir()
    base = bench_dir / "baseline.json"
    data = json.loads(out.read_text())
    assert set(data["instances"]) == {rel}
    for e in data["instances"].values():  # matching is tested here, not speed: a baseline no run exceeds
        e["solvers"]["dp"]["median_solve_seconds"] = 1e9
    base.write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path)  # the relative key no longer resolves from here...
    res = runner.invoke(app, ["bench", str(ROOT / rel), "--runs", "1", "-q", "--check", str(base)])
    assert res.exit_code == 1 and "no baseline entry" in res.output, res.output
    monkeypatch.chdir(ROOT)  # ...but it does from the repository
    res = runner.invoke(app, ["bench", str(ROOT / rel), "--runs", "1", "-q", "--check", str(base)])
    assert res.exit_code == 0, res.output
    slow = copy.deepcopy(data)
    for e in slow["instances"].values():
        e["solvers"]["dp"]["median_solve_seconds"] = 1e-9
    base.write_text(json.dumps(slow))
    res = runner.invoke(app, ["bench", str(ROOT / rel), "--runs", "1", "-q", "--check", str(base),
                              "--floor", "1e-9", "--tolerance", "0.5"])
    assert res.exit_code == 1 and "median_solve_seconds" in res.output, res.output
    other = str(ROOT / "instances" / "tiny-one-job-two-nodes.json")
    res = runner.invoke(app, ["bench", other, "--runs", "1", "-q", "--check", str(base)])
    assert res.exit_code == 1 and "no baseline entry" in res.output, res.output
    res = runner.invoke(app, ["bench", rel, "-s", "dp", "-s", "brute", "--runs", "1", "-q", "--check", str(base)])
    assert res.exit_code == 1 and "no baseline entry for this solver" in res.output, res.output


def test_bench_json_is_a_flag_printing_the_results():
    res = CliRunner().invoke(app, ["bench", TINY[0], "--runs", "1", "-q", "--json"])
    assert res.exit_code == 0, res.output
    assert set(json.loads(res.stdout)["instances"]) == {TINY[0]}
