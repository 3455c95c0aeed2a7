"""The tests touch only what they created: on a host whose Slurm is not the testbed, no test talks to
it, and the Slurm tests cancel only the jobs they submitted (never every job of a user or a name)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import slurmbed

TESTS = Path(__file__).resolve().parent


def _scancel_calls() -> list[tuple[str, int, list[str]]]:
    """(file, line, the literal arguments) of every call in tests/ whose arguments name ``scancel``."""
    out = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.Call):
                continue
            words = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            for a in node.args:   # sh(*["scancel", ...]) and run(["scancel", ...]) alike
                if isinstance(a, (ast.List, ast.Tuple)):
                    words += [e.value for e in a.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if "scancel" in words:
                out.append((path.name, node.lineno, words))
    return out


def test_no_test_cancels_jobs_by_user_or_name():
    calls = _scancel_calls()
    assert len(calls) >= 3   # the walk finds the suite's scancel calls
    wide = [(f, line, w) for f, line, w in calls
            if any(x in ("-u", "--user", "-n", "--name", "-A", "--account", "-p", "--partition")
                   or x.startswith(("--user=", "--name=", "--account=", "--partition=")) for x in w)]
    assert not wide, wide


def test_the_jobs_cancelled_are_the_ones_submitted(monkeypatch):
    ran = []
    monkeypatch.setattr(slurmbed, "SUBMITTED", {17, 5})
    monkeypatch.setattr(slurmbed, "sh", lambda *argv, **kw: ran.append(argv) or "")
    slurmbed.cancel_ours()
    assert ran == [("scancel", "5", "17")]
    monkeypatch.setattr(slurmbed, "SUBMITTED", set())
    ran.clear()
    slurmbed.cancel_ours()
    assert ran == []


def test_a_slurm_that_is_not_the_testbed_is_never_asked(monkeypatch, tmp_path):
    """No testbed configuration and no SLURM_CONF: the Slurm tests skip without running a Slurm
    command (a README ``pytest`` on a Slurm host leaves its jobs alone)."""
    ran = []
    monkeypatch.setattr(slurmbed, "TESTBED", tmp_path / "no-testbed")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: ran.append(a) or subprocess.CompletedProcess(a, 0))
    assert slurmbed.testbed_up() is False
    assert ran == []
