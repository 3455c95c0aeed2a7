"""One test per claim of docs/security.md."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from unicron_plan import io
from unicron_plan.cli import app
from unicron_plan.errors import InvalidInstanceError

FIX = ROOT / "tests" / "fixtures"
TINY = ROOT / "instances" / "tiny-one-job-two-nodes.json"


def test_security_doc_names_only_tests_that_exist():
    import re

    text = (ROOT / "docs" / "security.md").read_text()
    here = (ROOT / "tests" / "test_security.py").read_text()
    for name in re.findall(r"`(test_[a-z0-9_]+)`", text):
        assert f"def {name}(" in here, name
    for path, name in re.findall(r"`(tests/[a-z_]+\.py)::(test_[a-z0-9_]+)`", text):
        assert f"def {name}(" in (ROOT / path).read_text(), (path, name)


def test_an_oversized_file_is_refused_before_reading(tmp_path, monkeypatch):
    big = tmp_path / "big.json"
    big.write_text('{"a": 1}' + " " * 2000)
    monkeypatch.setattr(io, "MAX_BYTES", 1000)
    read = []
    monkeypatch.setattr(type(big), "read_bytes", lambda self, *a, **k: read.append(self) or b"")
    with pytest.raises(InvalidInstanceError, match="larger than 1000 bytes"):
        io.read_json(big)
    assert read == []


def test_the_documented_limits_are_the_code_s():
    assert io.MAX_BYTES == 512 * 1024 * 1024 and io.MAX_DEPTH == 64 and io.MAX_NUMBER_CHARS == 100


def test_depth_limit_is_the_same_for_json_and_yaml():
    d = io.MAX_DEPTH
    assert io.parse_json("[" * d + "]" * d) is not None
    assert io.parse_yaml("[" * d + "]" * d) is not None
    for parse in (io.parse_json, io.parse_yaml):
        with pytest.raises(InvalidInstanceError, match="nested"):
            parse("[" * (d + 1) + "]" * (d + 1))


def test_number_size_limit_is_the_same_for_json_and_yaml():
    n = io.MAX_NUMBER_CHARS
    assert io.parse_json("[" + "9" * n + "]") == [int("9" * n)]
    assert io.parse_yaml("[" + "9" * n + "]") == [int("9" * n)]
    for parse in (io.parse_json, io.parse_yaml):
        with pytest.raises(InvalidInstanceError, match="characters"):
            parse("[" + "9" * (n + 1) + "]")
        long_float = "[0." + "1" * 1_000_000 + "]"  # read in linear time, to the nearest float
        assert parse(long_float) == [0.1111111111111111]


def test_duplicate_keys_are_refused_in_json_and_yaml():
    with pytest.raises(InvalidInstanceError, match="duplicate key 'a'"):
        io.parse_json('{"b": {"a": 1, "a": 1}}')
    with pytest.raises(InvalidInstanceError, match="duplicate key 'a'"):
        io.parse_yaml("b:\n  a: 1\n  a: 1\n")


def test_non_finite_numbers_never_reach_a_plan(tmp_path):
    for token in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(InvalidInstanceError, match="not a finite number"):
            io.parse_json(f'{{"a": {token}}}')
    for token in (".inf", "-.inf", ".nan", ".NaN"):
        with pytest.raises(InvalidInstanceError, match="not a finite number"):
            io.parse_yaml(f"a: {token}\n")
    bad = tmp_path / "in.json"
    bad.write_text(TINY.read_text().replace('"weight": 1.0', '"weight": 1e999', 1))
    assert "1e999" in bad.read_text()
    r = CliRunner().invoke(app, ["solve", str(bad)])
    assert r.exit_code == 2 and "jobs[0].weight" in r.stderr, r.stderr


def test_yaml_aliases_are_refused():
    with pytest.raises(InvalidInstanceError, match="alias"):
        io.parse_yaml("a: &x [1, 2]\nb: *x\n")
    with pytest.raises(InvalidInstanceError, match="alias"):
        io.parse_yaml("base: &b {x: 1}\nc:\n  <<: *b\n")


def test_export_runs_no_command(tmp_path):
    """A PATH of fake scheduler commands and shells that record any call: export calls none."""
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "called"
    for name in ("scontrol", "kubectl", "sh", "bash", "squeue", "sbatch", "scancel"):
        p = fake / name
        p.write_text(f"#!/bin/sh\necho {name} \"$@\" >> {log}\n")
        p.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ.get('PATH', '')}"}
    runner = CliRunner()
    s, k = FIX / "slurm-small", FIX / "k8s-small"
    for kind, args in (("slurm", ["--nodes", s / "nodes.json", "--jobs", s / "jobs.json"]),
                       ("k8s", ["--nodes", k / "nodes.json", "--pods", k / "pods.json", "--jobs", k / "jobs.json"])):
        inst, plan = tmp_path / f"{kind}.json", tmp_path / f"{kind}-plan.json"
        r = runner.invoke(app, ["import", kind, *map(str, args), "--expected-run-seconds", "36000", "-o", str(inst)])
        assert r.exit_code == 0, r.output
        assert runner.invoke(app, ["solve", str(inst), "-o", str(plan)]).exit_code == 0
        jobs = s / "jobs.json" if kind == "slurm" else k / "jobs.json"
        extra = ["--nodes", str(s / "nodes.json")] if kind == "slurm" else ["--format", "kubectl"]
        r = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "export", kind, str(plan), "--jobs", str(jobs),
                            *extra, "-o", str(tmp_path / f"{kind}.out")], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / f"{kind}.out").read_text().strip()
    assert not log.exists(), log.read_text()


def test_outputs_get_the_umask_mode_and_appear_whole(tmp_path):
    old = os.umask(0o027)
    try:
        out = tmp_path / "plan.json"
        r = CliRunner().invoke(app, ["solve", str(TINY), "-o", str(out)])
        assert r.exit_code == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o640
    finally:
        os.umask(old)
    assert list(tmp_path.iterdir()) == [out]  # no temporary file left beside it
    seen = []
    real_replace = os.replace

    def spy(src, dst):  # the file appears by a rename of a complete temporary file
        seen.append((src, dst, open(src).read()))
        return real_replace(src, dst)
    import unicron_plan.io as uio

    orig = uio.os.replace
    uio.os.replace = spy
    try:
        uio.write_atomic(tmp_path / "x.json", "complete\n")
    finally:
        uio.os.replace = orig
    assert len(seen) == 1 and seen[0][2] == "complete\n" and str(seen[0][1]).endswith("x.json")


def test_serve_binds_loopback_by_default():
    import inspect

    from unicron_plan.service.cli import serve

    assert inspect.signature(serve).parameters["host"].default.default == "127.0.0.1"


def test_the_token_guards_every_path(tmp_path):
    from fastapi.testclient import TestClient

    from unicron_plan.service.app import create_app

    with TestClient(create_app(tmp_path / "s", token="s3cret"), base_url="http://127.0.0.1") as c:
        for method, path in (("GET", "/healthz"), ("GET", "/metrics"), ("GET", "/v1/state"),
                             ("GET", "/v1/history"), ("PUT", "/v1/cluster"), ("POST", "/v1/events"),
                             ("GET", "/openapi.json"), ("POST", "/v1/jobs"), ("DELETE", "/v1/jobs/j"),
                             ("POST", "/v1/plans/p1/apply"), ("GET", "/v1/plans/p1"), ("POST", "/docs"),
                             ("GET", "/console/other.js"), ("GET", "/nope")):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                r = c.request(method, path, headers=headers)
                assert r.status_code == 401 and "error" in r.json(), (method, path, headers)
        assert c.get("/healthz", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        # the console's page and files are public: fixed files of the package, no state in them
        for path in ("/", "/docs", "/console/console.js", "/console/console.css"):
            r = c.get(path)
            assert r.status_code == 200, path
            name = "index.html" if path == "/" else "docs.html" if path == "/docs" else path.split("/")[-1]
            assert r.content == (ROOT / "unicron_plan" / "service" / "console" / name).read_bytes(), path
    src = (ROOT / "unicron_plan" / "service" / "app.py").read_text()
    assert "hmac.compare_digest" in src
