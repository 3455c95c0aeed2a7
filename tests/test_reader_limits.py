"""Every reader (JSON and YAML, every command that reads a file, and the service's bodies) refuses
the pathological shapes: exit 2 / HTTP 4xx with a JSON error.

The shapes: an unterminated string of escaped quotes (1 MB), nesting 100,000 deep, a 5,000-digit
integer, a duplicate key, an overflowing float; for YAML also 3,000-deep flow nesting, 200-deep
block nesting, an alias bomb, ``.inf``. Reading is linear, so each case takes milliseconds (the
quadratic reader this replaces took hours on the first shape); no test here asserts a time: the
linear-time ratio is measured by benchmarks/suite_timings.py (``parse-json-escaped-quotes``).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from unicron_plan import io
from unicron_plan.cli import full_app
from unicron_plan.errors import InvalidInstanceError

APP = full_app()
FIX = ROOT / "tests" / "fixtures"
TINY = ROOT / "instances" / "tiny-one-job-two-nodes.json"

JSON_SHAPES = {
    "unterminated-escaped-quotes-1MB": '{"a": "' + '\\"' * 500_000,
    "escaped-backslashes-then-deep": '{"a": "\\\\\\\\", "b": ' + "[" * 100 + "]" * 100 + "}",
    "deep-arrays-100k": "[" * 100_000 + "]" * 100_000,
    "deep-objects-100k": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "int-5000-digits": '{"a": ' + "9" * 5000 + "}",
    "int-5000-digits-in-a-list": '{"a": [1, -' + "1" * 5000 + "]}",
    "duplicate-key": '{"a": 1, "a": 1}',
    "nan": '{"a": NaN}',
    "infinity": '{"a": -Infinity}',
}

_LOL = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
YAML_SHAPES = {
    "unterminated-escaped-quotes-1MB": 'a: "' + '\\"' * 500_000,
    "flow-deep-3000": "a: " + "[" * 3000 + "]" * 3000,
    "block-deep-200": "".join("  " * i + "a:\n" for i in range(200)) + "  " * 200 + "1\n",
    "int-5000-digits": "seed: " + "9" * 5000 + "\n",
    "duplicate-key": "scenario: a.json\nscenario: b.json\n",
    "inf": "seed: .inf\n",
    "alias-bomb": _LOL,
    "not-utf8": b"seed: \xff\xfe\n",
}


@pytest.mark.parametrize("name", sorted(JSON_SHAPES))
def test_parse_json_refuses_each_shape_fast(name):
    with pytest.raises(InvalidInstanceError) as err:
        io.parse_json(JSON_SHAPES[name], "x")
    assert err.value.field == "x"


def test_nesting_ignores_brackets_in_strings_and_counts_escapes():
    assert io.parse_json('{"a": "' + "[" * 1000 + '"}') == {"a": "[" * 1000}
    assert io.parse_json('{"a": "\\"[[[[' + "{" * 100 + '"}')["a"].startswith('"[[[[')
    deep = "[" * io.MAX_DEPTH + "]" * io.MAX_DEPTH
    assert io.parse_json(deep) is not None
    with pytest.raises(InvalidInstanceError, match="nested"):
        io.parse_json("[" + deep + "]")
    with pytest.raises(InvalidInstanceError, match="nested"):  # \\ ends the string before the brackets
        io.parse_json('{"a": "\\\\", "b": ' + "[" * 65 + "]" * 65 + "}")
    assert io.parse_json('{"a": 12345678901234567890, "b": 1.5e300}') == {"a": 12345678901234567890, "b": 1.5e300}


@pytest.mark.parametrize("name", sorted(YAML_SHAPES))
def test_parse_yaml_refuses_each_shape_fast(name):
    with pytest.raises(InvalidInstanceError) as err:
        io.parse_yaml(YAML_SHAPES[name], "s.yaml")
    assert err.value.field == "s.yaml"


def test_parse_yaml_reads_plain_documents():
    assert io.parse_yaml("scenario: x.json\nseeds: [1, 2]\ngrid: {a.b: [0.5, 2]}\n") == {
        "scenario": "x.json", "seeds": [1, 2], "grid": {"a.b": [0.5, 2]}}


def test_parse_document_async_reads_off_the_loop():
    import asyncio

    assert asyncio.run(io.parse_document_async('{"a": [1]}', "body")) == {"a": [1]}
    with pytest.raises(InvalidInstanceError, match="duplicate"):
        asyncio.run(io.parse_document_async('{"a": 1, "a": 2}', "body"))


def _readers(tmp_path):
    """(name, file suffix, args with {} for the bad file) for every command that reads a file."""
    plan = tmp_path / "plan.json"
    from unicron_plan import api
    from unicron_plan.plan.contingency import build_contingency, write_contingency

    plan.write_text(io.dumps(api.solve(TINY)))

    index = write_contingency(build_contingency(api.load_instance(TINY)), tmp_path / "cont")
    points = tmp_path / "points.json"
    points.write_text(json.dumps({
        "gpu_type": "a100", "fit": ["gemm_efficiency"],
        "points": [{"model": "gpt3-1.3b", "global_batch": 256, "seq_len": 2048, "tp": 1, "pp": 1, "dp": 16,
                    "iteration_seconds": 1.5}]}))
    out = tmp_path / "out.json"
    s, k = FIX / "slurm-small", FIX / "k8s-small"
    curve = ["curve", "gpt3-1.3b", "--gpu-type", "a100", "--global-batch", "256", "--seq-len", "2048",
             "--gpus", "16"]
    return [
        ("solve", ".json", ["solve", "{}"]),
        ("validate-plan", ".json", ["validate", TINY, "{}"]),
        ("validate-instance", ".json", ["validate", "{}", plan]),
        ("contingency-index", ".json", ["solve", TINY, "--contingency", "{}", "--contingency-use", "always"]),
        ("contingency-instance", ".json", ["contingency", "{}", "-o", tmp_path / "c2", "-q"]),
        ("simulate", ".json", ["simulate", "{}"]),
        ("sweep-json", ".json", ["sweep", "{}", "-o", tmp_path / "sw"]),
        ("sweep-yaml", ".yaml", ["sweep", "{}", "-o", tmp_path / "sw"]),
        ("calibrate-points", ".json", ["calibrate", "{}", "--out", out]),
        ("calibrate-base", ".json", ["calibrate", points, "--base", "{}",
                                     "--out", out]),
        ("curve-efficiency", ".json", curve + ["--efficiency", "{}"]),
        ("import-slurm-nodes", ".json", ["import", "slurm", "--nodes", "{}", "--jobs", s / "jobs.json",
                                         "--expected-run-seconds", "3600"]),
        ("import-slurm-jobs", ".json", ["import", "slurm", "--nodes", s / "nodes.json", "--jobs", "{}",
                                        "--expected-run-seconds", "3600"]),
        ("import-slurm-gpu-map", ".json", ["import", "slurm", "--nodes", s / "nodes.json", "--jobs", s / "jobs.json",
                                           "--expected-run-seconds", "3600", "--gpu-map", "{}"]),
        ("import-k8s-nodes", ".json", ["import", "k8s", "--nodes", "{}", "--pods", k / "pods.json",
                                       "--jobs", k / "jobs.json", "--expected-run-seconds", "3600"]),
        ("import-k8s-pods", ".json", ["import", "k8s", "--nodes", k / "nodes.json", "--pods", "{}",
                                      "--jobs", k / "jobs.json", "--expected-run-seconds", "3600"]),
        ("import-k8s-jobs", ".json", ["import", "k8s", "--nodes", k / "nodes.json", "--pods", k / "pods.json",
                                      "--jobs", "{}", "--expected-run-seconds", "3600"]),
        ("export-slurm-plan", ".json", ["export", "slurm", "{}", "--jobs", s / "jobs.json"]),
        ("export-slurm-jobs", ".json", ["export", "slurm", plan, "--jobs", "{}"]),
        ("export-k8s-jobs", ".json", ["export", "k8s", plan, "--jobs", "{}"]),
        ("bench-check", ".json", ["bench", TINY, "--runs", "1", "-q", "--check", "{}"]),
        ("index-dir", ".json", ["solve", TINY, "--contingency", index, "--contingency-use", "always"]),  # a good one, as a control
    ]


def test_every_cli_reader_refuses_every_shape_with_exit_2_fast(tmp_path):
    runner = CliRunner()
    for name, suffix, args in _readers(tmp_path):
        if name == "index-dir":
            result = runner.invoke(APP, [str(a) for a in args])
            assert result.exit_code == 0, result.output
            continue
        shapes = YAML_SHAPES if suffix == ".yaml" else JSON_SHAPES
        for shape, text in shapes.items():
            bad = tmp_path / f"bad{suffix}"
            bad.write_bytes(text if isinstance(text, bytes) else text.encode())
            argv = [str(bad) if a == "{}" else str(a) for a in args]
            result = runner.invoke(APP, argv)
            out = (result.output or "") + (result.stderr if result.stderr_bytes is not None else "")
            assert result.exit_code == 2 and "Traceback" not in out, f"{name} / {shape}: exit {result.exit_code}\n{out[:800]}"


def test_the_service_refuses_every_shape_with_a_json_4xx_fast(tmp_path):
    from fastapi.testclient import TestClient

    from unicron_plan.service.app import create_app

    with TestClient(create_app(tmp_path / "state"), base_url="http://127.0.0.1") as client:
        for shape, text in JSON_SHAPES.items():
            for method, url in (("PUT", "/v1/cluster"), ("POST", "/v1/events"), ("POST", "/v1/jobs")):
                resp = client.request(method, url, content=text.encode(), headers={"Content-Type": "application/json"})
                assert 400 <= resp.status_code < 500, (shape, url, resp.status_code, resp.text[:300])
                assert "error" in resp.json(), (shape, url, resp.text[:300])
