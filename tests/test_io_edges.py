"""Edges of input and output: nesting, echoed values, output paths and modes, contingency
indexes that are stale or edited, and the human summary."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
import sys

import pytest

from conftest import ROOT
from unicron_plan.plan.contingency import build_contingency, write_contingency
from unicron_plan import api

TINY = ROOT / "instances" / "tiny-one-job-two-nodes.json"


def cli(*args, cwd=None, umask=None):
    """The installed command line in a child process (run from tests/, so that `-m` imports the
    installed package and not the source tree beside it)."""
    def pre():
        if umask is not None:
            os.umask(umask)
    return subprocess.run([sys.executable, "-m", "unicron_plan.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd or Path(__file__).resolve().parent, preexec_fn=pre)


# --- nesting ---------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [65, 5000, 200000])
def test_deeply_nested_json_is_bad_input(tmp_path, depth):
    path = tmp_path / "deep.json"
    path.write_text('{"schema_version": "1", "name": ' + "[" * depth + "]" * depth + "}")
    for args in (("solve", path), ("validate", TINY, path), ("simulate", path),
                 ("solve", TINY, "--contingency", path, "--contingency-use", "always"), ("calibrate", path, "--out", tmp_path / "e.json")):
        r = cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "nested more than 64 levels" in r.stderr and "Traceback" not in r.stderr


# --- echoed values -----------------------------------------------------------------------------

def test_field_names_with_newlines_stay_on_one_line(tmp_path):
    doc = json.loads(TINY.read_text())
    doc["jobs"][0]["bad\nfield\x1b[31m"] = 1
    path = tmp_path / "i.json"
    path.write_text(json.dumps(doc))
    r = cli("solve", path)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "\x1b" not in r.stderr and "bad\\nfield" in r.stderr


def test_a_megabyte_id_is_cut(tmp_path):
    doc = json.loads(TINY.read_text())
    doc["event"]["failed_nodes"] = ["x" * 1_000_000]
    path = tmp_path / "i.json"
    path.write_text(json.dumps(doc))
    r = cli("solve", path)
    assert r.returncode == 2 and len(r.stderr) < 1000 and "characters cut" in r.stderr, r.stderr[:300]
    plan = json.loads(cli("solve", TINY).stdout)
    plan["jobs"][0]["id"] = "y\n" * 500_000
    ppath = tmp_path / "p.json"
    ppath.write_text(json.dumps(plan))
    r = cli("validate", TINY, ppath)
    assert r.returncode == 1 and len(r.stderr) < 10_000 and "y\ny" not in r.stderr


# --- output paths ------------------------------------------------------------------------------

def test_out_is_a_directory_or_under_a_file(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    for out in (tmp_path / "d", tmp_path / "f" / "plan.json"):
        r = cli("solve", TINY, "--out", out)
        assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    r = cli("contingency", TINY, "--out", tmp_path / "f", "-q")
    assert r.returncode == 2, r.stderr


def test_out_onto_a_fifo_writes_into_it_and_keeps_it(tmp_path):
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    r = cli("solve", TINY, "--out", fifo)
    got = reader.communicate(timeout=60)[0]
    assert r.returncode == 0, r.stderr
    assert json.loads(got)["instance"] == "tiny-one-job-two-nodes"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_respect_the_umask(tmp_path, umask, mode):
    out = tmp_path / "plan.json"
    r = cli("solve", TINY, "--out", out, umask=umask)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == mode
    r = cli("contingency", TINY, "--out", tmp_path / "c", "-q", umask=umask)
    assert stat.S_IMODE(os.stat(tmp_path / "c" / "contingency.json").st_mode) == mode
    assert stat.S_IMODE(os.stat(tmp_path / "c" / "contingency.sqlite").st_mode) == mode


# --- contingency indexes -----------------------------------------------------------------------

@pytest.fixture
def index_dir(tmp_path):
    write_contingency(build_contingency(api.load_instance(TINY)), tmp_path / "c")
    return tmp_path / "c"


def _edit(index_dir, change):
    path = index_dir / "contingency.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _plan_id(d):
    return next(iter(d["plans"]))


@pytest.mark.parametrize("change", [
    lambda d: d.update(failures=[]),
    lambda d: d.update(plans="x"),
    lambda d: d["failures"]["node:n1"].update(plan="nope"),
    lambda d: d["failures"]["node:n1"].pop("plan"),
    lambda d: d["plans"][_plan_id(d)]["counts"].update({"gpt3-13b": 8.0}),
    lambda d: d["plans"][_plan_id(d)]["counts"].update({"gpt3-13b": [8]}),
    lambda d: d["plans"][_plan_id(d)]["counts"].update({"gpt3-13b": True}),
    lambda d: d["plans"][_plan_id(d)]["counts"].update({"gpt3-13b": -8}),
    lambda d: d["failures"]["node:n1"].update(objective="1"),
    lambda d: d.pop("fingerprint"),
], ids=["failures-list", "plans-str", "unknown-plan", "no-plan", "float", "list", "bool", "negative",
        "objective-str", "no-fingerprint"])
def test_malformed_index_is_bad_input(index_dir, change):
    _edit(index_dir, change)
    r = cli("solve", TINY, "--contingency", index_dir, "--contingency-use", "always")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("change", [
    lambda d: d["plans"][_plan_id(d)]["counts"].update({"gpt3-13b": 10 ** 40}),
    lambda d: d["plans"][_plan_id(d)]["counts"].update({"gpt3-13b": 16}),
    lambda d: d["plans"][_plan_id(d)]["counts"].pop("gpt3-13b"),
    lambda d: d["plans"][_plan_id(d)]["counts"].update({"other": 8}),
    lambda d: d["failures"]["node:n1"].update(objective=1.0),
], ids=["huge", "over-capacity", "missing-job", "unknown-job", "wrong-objective"])
def test_stored_plan_that_does_not_check_out_falls_back(index_dir, change):
    fresh = json.loads(cli("solve", TINY).stdout)
    _edit(index_dir, change)
    r = cli("solve", TINY, "--contingency", index_dir, "--contingency-use", "always")
    assert r.returncode == 0, r.stderr
    assert "contingency not used" in r.stderr and "solved from scratch" in r.stderr
    plan = json.loads(r.stdout)
    assert plan["solver"]["name"] == "dp" and plan["objective"] == pytest.approx(fresh["objective"])


def test_library_pinned_instance_after_contingency(tmp_path):
    inst = ROOT / "instances" / "ip-pinned.json"
    assert cli("contingency", inst, "--out", tmp_path / "c", "-q").returncode == 0
    r = cli("solve", inst, "--contingency", tmp_path / "c", "--contingency-use", "always")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["objective"] == pytest.approx(json.loads(inst.read_text())["reference"]["objective"])


def test_matching_index_is_used_silently(index_dir):
    r = cli("solve", TINY, "--contingency", index_dir, "--contingency-use", "always")
    assert r.returncode == 0 and r.stderr == "" and json.loads(r.stdout)["solver"]["name"] == "contingency"


# --- what the command line says --------------------------------------------------------------

def test_summary_table_on_stderr_beside_the_json():
    r = cli("solve", TINY, "--summary")
    assert r.returncode == 0
    assert json.loads(r.stdout)["jobs"][0]["action"] == "shrink"
    for word in ("job", "action", "GPUs before", "GPUs after", "nodes", "WAF", "penalty", "gpt3-13b", "shrink"):
        assert word in r.stderr


def test_version():
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("unicron-plan ") and r.stdout.strip().split()[-1][0].isdigit()
