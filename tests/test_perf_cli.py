"""The curve and calibrate commands, registered in a local typer app as the CLI does."""

import json

import pytest
import typer
from typer.testing import CliRunner

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.perf.cli import calibrate, curve

app = typer.Typer()
app.command("curve")(curve)
app.command("calibrate")(calibrate)
runner = CliRunner()

FORMAT_POINT_KEYS = {"gpus", "tp", "pp", "dp", "micro_batch", "hardware_tflops_per_gpu",
                     "model_tflops_per_gpu", "mfu", "tokens_per_second", "memory_gib_per_gpu"}
ADDED_POINT_KEYS = {"virtual_stages", "recompute", "ep", "cp"}  # additions to the contract
BASE = ["curve", "gpt3-175b", "--gpu-type", "a100", "--global-batch", "1536", "--seq-len", "2048"]


def test_curve_json_has_exactly_the_format_fields():
    r = runner.invoke(app, BASE + ["--gpus", "384,768", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert set(doc) == {"model", "gpu_type", "global_batch", "seq_len", "recompute", "points"}
    assert (doc["model"], doc["gpu_type"], doc["global_batch"], doc["seq_len"]) == ("gpt3-175b", "a100", 1536, 2048)
    assert [p["gpus"] for p in doc["points"]] == [384, 768]
    for p in doc["points"]:
        assert set(p) == FORMAT_POINT_KEYS | ADDED_POINT_KEYS
        assert p["tp"] * p["pp"] * p["dp"] == p["gpus"]
        assert p["mfu"] == pytest.approx(p["model_tflops_per_gpu"] / 312.0, abs=1e-4)
        assert p["recompute"] in ("none", "selective", "full")
        assert p["hardware_tflops_per_gpu"] >= p["model_tflops_per_gpu"] > 0
        assert (p["hardware_tflops_per_gpu"] > p["model_tflops_per_gpu"]) == (p["recompute"] != "none")
        for k in ("tp", "pp", "dp", "micro_batch", "gpus"):
            assert isinstance(p[k], int)


def test_curve_table_and_recompute_option():
    r = runner.invoke(app, BASE + ["--gpus", "384", "--recompute", "selective"])
    assert r.exit_code == 0, r.output
    assert "384" in r.output and "recompute selective" in r.output


def test_curve_plot_written(tmp_path):
    out = tmp_path / "curve.png"
    r = runner.invoke(app, ["curve", "llama2-7b", "--gpu-type", "h100", "--global-batch", "512",
                            "--seq-len", "4096", "--max-gpus", "64", "--plot", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["curve.png"]  # no temp file left


@pytest.mark.parametrize("args,field", [
    (["curve", "gpt9", "--gpu-type", "a100", "--global-batch", "8", "--seq-len", "8"], "model"),
    (["curve", "gpt3-13b", "--gpu-type", "v100", "--global-batch", "8", "--seq-len", "8"], "gpu_type"),
    (BASE + ["--gpus", "8,x"], "--gpus"),
    (BASE + ["--recompute", "half"], "recompute"),
])
def test_bad_input_raises_invalid_instance(args, field):
    r = runner.invoke(app, args)
    assert r.exit_code != 0
    assert isinstance(r.exception, InvalidInstanceError)
    assert r.exception.field == field


def test_calibrate_command(tmp_path):
    pts = tmp_path / "points.json"
    pts.write_text(json.dumps({"gpu_type": "a100", "fit": ["gemm_efficiency"], "points": [
        {"model": "gpt3-1.3b", "global_batch": 256, "seq_len": 2048, "tp": 1, "pp": 1, "dp": 8,
         "micro_batch": 4, "virtual_stages": 1, "hardware_tflops_per_gpu": 120.0}]}))
    out = tmp_path / "eff.json"
    r = runner.invoke(app, ["calibrate", str(pts), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert 0.3 <= json.loads(r.output)["gemm_efficiency"] <= 0.95
    assert "a100" in json.loads(out.read_text())["constants"]
