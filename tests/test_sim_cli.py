"""`unicron-plan simulate` on the command line, and bad scenarios (exit 2, naming the field)."""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from simfixtures import ROOT, one_job_trace, stressed_128
from unicron_plan.cli import app

runner = CliRunner()
TRACE = [{"time_hours": 1.25, "kind": "failure", "node": "n1", "severity": "sev1"},
         {"time_hours": 3.0, "kind": "repair", "node": "n1"}]


def write(tmp_path, data, name="sc.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return str(p)


def test_json_output_has_the_format_fields(tmp_path):
    path = write(tmp_path, one_job_trace(TRACE))
    res = runner.invoke(app, ["simulate", path, "--policy", "unicron", "--policy", "megatron", "--seed", "4", "--json"])
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["scenario"] == "one-job-trace" and out["seed"] == 4
    assert set(out["policies"]) == {"unicron", "megatron"}
    for r in out["policies"].values():
        assert set(r["downtime_hours"]) == {"detection", "transition", "sub_healthy"}
        assert r["weighted_tflop"] > 0 and isinstance(r["reconfigurations"], int)
    assert out["policies"]["unicron"]["weighted_tflop"] > out["policies"]["megatron"]["weighted_tflop"]


def test_same_seed_same_bytes_on_the_command_line(tmp_path):
    path = write(tmp_path, stressed_128(hours=96.0))
    a = runner.invoke(app, ["simulate", path, "--seed", "9", "--json"])
    b = runner.invoke(app, ["simulate", path, "--seed", "9", "--json"])
    c = runner.invoke(app, ["simulate", path, "--seed", "10", "--json"])
    assert a.exit_code == 0 and a.stdout == b.stdout and a.stdout != c.stdout


def test_seeds_report_intervals_and_plot_writes_a_png(tmp_path):
    path = write(tmp_path, stressed_128(hours=96.0))
    png = tmp_path / "out.png"
    res = runner.invoke(app, ["simulate", path, "--seeds", "3", "--seed", "1", "--json", "--plot", str(png),
                              "-p", "unicron", "-p", "oobleck"])
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["seeds"] == 3
    ci = out["policies"]["oobleck"]["ci95"]["weighted_tflop"]
    assert ci[0] <= out["policies"]["oobleck"]["weighted_tflop"] <= ci[1]
    assert "unicron_ratio" in out["policies"]["oobleck"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_output_without_json(tmp_path):
    res = runner.invoke(app, ["simulate", write(tmp_path, one_job_trace(TRACE))])
    assert res.exit_code == 0
    assert "unicron" in res.stdout and "equal-share" in res.stdout


def test_library_scenarios_load():
    from unicron_plan.simulate import load_scenario

    for stem in ("gpt3-mix-128-a800", "gpt3-mix-1024-a800", "gpt3-mix-16384-a800"):
        sc = load_scenario(ROOT / "scenarios" / f"{stem}.json")
        assert sc.failures is not None and all(j.throughput.tflops for j in sc.jobs)
    trace = load_scenario(ROOT / "scenarios" / "trace-128-a800.json")
    assert trace.trace and trace.failures is None


def _bad(mutate):
    sc = copy.deepcopy(one_job_trace(TRACE))
    mutate(sc)
    return sc


BAD = [
    (lambda s: s.update(colour="red"), "colour"),
    (lambda s: s.pop("duration_hours"), "duration_hours"),
    (lambda s: s.update(duration_hours=-1.0), "duration_hours"),
    (lambda s: s["trace"][0].update(node="zz"), "trace[0].node"),
    (lambda s: s["trace"][0].pop("severity"), "trace[0].severity"),
    (lambda s: s["trace"][0].update(error="task_hang"), "trace[0].error"),  # a SEV2 error on a SEV1 event
    (lambda s: s["trace"][0].update(error="gremlins"), "trace[0].error"),
    (lambda s: s["trace"][1].update(node="n0"), "trace[1].node"),  # n0 is not down: nothing to repair
    (lambda s: s["trace"][1].update(time_hours=99.0), "trace[1].time_hours"),
    (lambda s: s["jobs"][0]["current"].update(gpus=12), "jobs[0].current.gpus"),
    (lambda s: s.update(failures={"node_mtbf_hours": 10.0, "repair_hours": {"median": 1.0, "sigma": 0.5},
                                  "severity_mix": {"sev1": 0.5, "sev2": 0.5, "sev3": 0.0}}), "(top level)"),
    (lambda s: (s.pop("trace"), s.update(failures={"node_mtbf_hours": 10.0, "repair_hours": {"median": 1.0, "sigma": 0.5},
                "severity_mix": {"sev1": 0.5, "sev2": 0.5, "sev3": 0.5}})), "failures.severity_mix"),
    (lambda s: (s.pop("trace"), s.update(failures={"node_mtbf_hours": 0.0, "repair_hours": {"median": 1.0, "sigma": 0.5},
                "severity_mix": {"sev1": 0.5, "sev2": 0.5, "sev3": 0.0}})), "failures.node_mtbf_hours"),
    (lambda s: s.update(event={"kind": "failure", "failed_nodes": []}), "event"),
]


@pytest.mark.parametrize("mutate,field", BAD)
def test_bad_scenario_exits_2_naming_the_field(tmp_path, mutate, field):
    res = runner.invoke(app, ["simulate", write(tmp_path, _bad(mutate)), "--json"])
    assert res.exit_code == 2, res.stdout
    assert res.stderr.startswith(f"error: {field}"), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_unknown_policy_exits_2(tmp_path):
    res = runner.invoke(app, ["simulate", write(tmp_path, one_job_trace(TRACE)), "--policy", "slurm"])
    assert res.exit_code == 2 and "slurm" in res.stderr and "unicron" in res.stderr


def test_scenario_json_schema_is_printed():
    res = runner.invoke(app, ["schema", "scenario"])
    assert res.exit_code == 0 and "severity_mix" in res.stdout and "weibull_shape" in res.stdout


def test_progress_bar_path_on_a_terminal(monkeypatch):
    import sys
    from unittest import mock

    from unicron_plan import cli

    fake = mock.MagicMock()
    fake.stderr.isatty.return_value = True
    fake.stdout = sys.stdout
    monkeypatch.setattr(cli, "sys", fake)
    res = runner.invoke(app, ["simulate", str(ROOT / "scenarios" / "trace-128-a800.json"), "-p", "unicron"])
    assert res.exit_code == 0 and res.exception is None
    assert fake.stderr.isatty.called
