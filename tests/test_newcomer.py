"""What a new user meets first: units on numbers, the model list, whole error messages, flags that
look like flags, shell completion, progress, the typed API and client."""

from __future__ import annotations

import inspect
import io as _io
import json
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from unicron_plan import api
from unicron_plan.cli import app, full_app

TINY = str(ROOT / "instances" / "tiny-one-job-two-nodes.json")


def _cli(*args, env=None):
    import os

    return subprocess.run([sys.executable, "-m", "unicron_plan.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def test_summary_and_validate_give_units(tmp_path):
    r = CliRunner().invoke(app, ["solve", TINY, "--summary", "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    err = " ".join(r.stderr.split())
    assert "objective 3.8697e+07 TFLOP" in err and "bound 3.8697e+07 TFLOP" in err
    assert "penalty TFLOP" in err and "WAF TFLOP/s" in err
    r = CliRunner().invoke(app, ["validate", TINY, str(tmp_path / "p.json")])
    assert r.exit_code == 0 and "objective 3.8697e+07 TFLOP" in r.stdout


def test_models_lists_every_model_and_gpu_type():
    from unicron_plan.perf.library import gpu_names, model_names

    r = CliRunner().invoke(app, ["models"])
    assert r.exit_code == 0, r.output
    for name in model_names() + gpu_names():
        assert f"  {name} " in r.stdout
    data = json.loads(CliRunner().invoke(app, ["models", "--json"]).stdout)
    assert [m["name"] for m in data["models"]] == model_names()
    assert [g["name"] for g in data["gpu_types"]] == gpu_names()


def test_unknown_model_error_lists_every_name_whole():
    from unicron_plan.perf.library import model_names

    r = CliRunner().invoke(full_app(), ["curve", "gpt3-175", "--gpu-type", "a100", "--global-batch", "8",
                                        "--seq-len", "128"])
    assert r.exit_code == 2
    line = r.stderr.strip()
    assert "characters cut" not in line and line.endswith(model_names()[-1]), line
    listed = line.split("): ", 1)[1].split(", ")
    assert listed == model_names()
    r = CliRunner().invoke(full_app(), ["curve", "x" * 5000, "--gpu-type", "a100", "--global-batch", "8",
                                        "--seq-len", "128"])
    assert r.exit_code == 2 and len(r.stderr) < 1000 and r.stderr.strip().endswith(model_names()[-1])


def test_flags_show_no_value_placeholder_and_completion_works():
    r = _cli("solve", "--help")
    lines = [ln for ln in r.stdout.splitlines() if "--summary" in ln or "--help" in ln or "--quiet" in ln]
    assert len(lines) == 3 and not any("<bool>" in ln for ln in lines), r.stdout
    assert "<int range>" in r.stdout and "<float range>" in r.stdout  # options that take a value still say which
    r = _cli(env={"_UNICRON_PLAN_COMPLETE": "complete_bash", "COMP_WORDS": "unicron-plan so", "COMP_CWORD": "1"})
    assert r.stdout.split() == ["solve", "solvers"], r.stdout + r.stderr
    # --show-completion names the shell it runs under (found among its parent processes), so the
    # command runs under bash here whatever started the tests
    r = subprocess.run(["bash", "-c", '"$0" -m unicron_plan.cli --show-completion; exit $?', sys.executable],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "_UNICRON_PLAN_COMPLETE" in r.stdout, r.stderr


def test_json_is_a_flag_in_every_command():
    """No command takes --json with a value (a path is --out)."""
    import typer.main

    def walk(cmd, path=()):
        for p in cmd.params:
            if "--json" in getattr(p, "opts", []):
                yield path, p
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, path + (name,))
    found = list(walk(typer.main.get_command(full_app())))
    assert len(found) >= 6
    for path, p in found:
        assert p.is_flag, path


def test_long_work_shows_a_spinner_on_stderr_after_two_seconds(monkeypatch):
    from unicron_plan.progress import working

    class Tty(_io.StringIO):
        def isatty(self):
            return True
    err = Tty()
    monkeypatch.setattr(sys, "stderr", err)
    with working("crunching", after=0.05):
        time.sleep(0.5)
    assert "crunching" in err.getvalue()
    err2 = Tty()
    monkeypatch.setattr(sys, "stderr", err2)
    with working("quick", after=0.5):
        pass
    with working("quiet", quiet=True, after=0.0):
        time.sleep(0.2)
    assert err2.getvalue() == ""


def test_simulate_seeds_table_shows_the_95_percent_intervals():
    r = CliRunner().invoke(app, ["simulate", str(ROOT / "scenarios" / "trace-128-a800.json"), "--seeds", "2",
                                 "-p", "unicron", "-p", "megatron", "-q"])
    assert r.exit_code == 0, r.output
    assert "95% CI" in r.stdout and r.stdout.count("[") >= 4, r.stdout


def test_import_help_cites_only_files_of_the_repository():
    for kind in ("k8s", "slurm"):
        r = CliRunner().invoke(app, ["import", kind, "--help"], env={"COLUMNS": "300"})
        assert r.exit_code == 0 and "FORMAT.md" not in r.stdout and "docs/format.md" in r.stdout


def test_api_solve_has_the_cli_default_time_limit(monkeypatch):
    from unicron_plan import solvers
    from unicron_plan.cli import DEFAULT_TIME_LIMIT_SECONDS

    assert inspect.signature(api.solve).parameters["time_limit_seconds"].default == DEFAULT_TIME_LIMIT_SECONDS == 60.0
    seen = []
    real = solvers.get_solver

    def spy(name):
        fn = real(name)

        def run(problem, options):
            seen.append(options.time_limit_seconds)
            return fn(problem, options)
        return run
    monkeypatch.setattr("unicron_plan.api.get_solver", spy)
    api.solve(TINY)
    assert seen == [60.0]


def test_package_is_typed():
    import tomllib

    assert (ROOT / "unicron_plan" / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["unicron_plan"]


def test_client_replies_are_pydantic_models():
    import httpx

    from unicron_plan.client import PlannerClient
    from unicron_plan.schema.service import HealthReply, HistoryEntry, PlanReply, RevisionReply, StateReply

    plan = api.solve(TINY).model_dump(mode="json", exclude_none=True)
    replies = {
        ("PUT", "/v1/cluster"): {"revision": 1},
        ("POST", "/v1/events"): {**plan, "plan_id": "p2", "revision": 1},
        ("GET", "/v1/plans/p2"): {**plan, "plan_id": "p2", "revision": 1},
        ("POST", "/v1/plans/p2/apply"): {"revision": 3},
        ("GET", "/v1/state"): {"revision": 3, "instance": None},
        ("GET", "/v1/history"): {"entries": [{"revision": 1, "type": "cluster", "at": "2026-01-01T00:00:00Z",
                                              "body": {}}]},
        ("GET", "/healthz"): {"status": "ok", "contingency": "off", "revision": 3},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=replies[(request.method, request.url.path)])
    with PlannerClient("http://planner.invalid", transport=httpx.MockTransport(handler)) as c:
        assert c.put_cluster({}) == RevisionReply(revision=1)
        got = c.post_event({"kind": "failure", "failed_nodes": ["n1"]})
        assert isinstance(got, PlanReply) and got.plan_id == "p2" and got.objective == plan["objective"]
        assert c.get_plan("p2") == got
        assert c.apply("p2").revision == 3
        assert isinstance(c.state(), StateReply)
        assert all(isinstance(e, HistoryEntry) for e in c.history())
        assert isinstance(c.health(), HealthReply)


def test_a_source_tree_without_the_compiled_dp_says_so(monkeypatch, tmp_path):
    from unicron_plan.solvers import dp

    monkeypatch.setattr(dp, "NATIVE", None)
    # as if imported from this checkout (an installed copy has no pyproject.toml two levels up)
    monkeypatch.setattr(dp, "__file__", str(ROOT / "unicron_plan" / "solvers" / "dp.py"))
    r = CliRunner().invoke(app, ["solve", TINY, "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 0 and "numpy loop" in r.stderr and "pip install -e ." in r.stderr
    r = CliRunner().invoke(app, ["solve", TINY, "-o", str(tmp_path / "p.json"), "-q"])
    assert r.exit_code == 0 and r.stderr == ""
    monkeypatch.setattr(dp, "NATIVE", None)
    monkeypatch.setattr(dp, "__file__", str(tmp_path / "site-packages" / "unicron_plan" / "solvers" / "dp.py"))
    r = CliRunner().invoke(app, ["solve", TINY, "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 0 and "numpy loop" not in r.stderr  # an installed copy: nothing to build


def test_the_calibration_example_of_docs_perf_runs(tmp_path):
    import re

    text = (ROOT / "docs" / "perf.md").read_text()
    section = text[text.index("## Calibration (`calibrate`)"):]
    example = re.search(r"```json\n(.*?)```", section, re.S).group(1)
    points = tmp_path / "points.json"
    points.write_text(example)
    r = CliRunner().invoke(full_app(), ["calibrate", str(points), "--out", str(tmp_path / "eff.json")])
    assert r.exit_code == 0, r.output
    eff = json.loads((tmp_path / "eff.json").read_text())
    assert "RMS log error" in eff["constants"]["a800"]["megatron-sc21"]["source"]


@pytest.mark.parametrize("kind", ["instance", "plan", "scenario", "points", "sweep", "efficiency", "signals",
                                  "action"])
def test_every_schema_field_is_described(kind):
    r = CliRunner().invoke(app, ["schema", kind])
    assert r.exit_code == 0
    schema = json.loads(r.stdout)
    bare = [f"{name}.{field}" for name, d in [*schema.get("$defs", {}).items(), ("(top)", schema)]
            for field, prop in d.get("properties", {}).items() if not prop.get("description")]
    assert not bare, bare
