"""The lean core: with every optional package unimportable, solve / validate / contingency run on
the DP, and each command that needs an extra exits 2 with one line naming it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

OPTIONAL = ("ortools", "pulp", "highspy", "fastapi", "starlette", "uvicorn", "prometheus_client", "httpx",
            "matplotlib", "scipy", "hostlist", "ray")
TINY = str(ROOT / "instances" / "tiny-one-job-two-nodes.json")

# An import hook that makes the optional packages unimportable, as in a core-only install.
_RUNNER = f"""
import sys, importlib.abc
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in {OPTIONAL!r}:
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, _Block())
from unicron_plan.cli import main
main(sys.argv[1:])
"""


def core_only(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _RUNNER, *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_core_commands_need_no_extra(tmp_path):
    plan = tmp_path / "plan.json"
    r = core_only("solve", TINY, "--out", plan)
    assert r.returncode == 0, r.stderr
    assert core_only("validate", TINY, plan).returncode == 0
    r = core_only("contingency", TINY, "-o", tmp_path / "c", "-q")
    assert r.returncode == 0, r.stderr
    r = core_only("solve", TINY, "--contingency", tmp_path / "c", "--contingency-use", "always")
    assert r.returncode == 0, r.stderr
    for args in (("--version",), ("--help",), ("solvers",), ("schema", "plan")):
        r = core_only(*args)
        assert r.returncode == 0, (args, r.stderr)


@pytest.mark.parametrize("args,extra", [
    (("solve", ROOT / "instances" / "ip-max-changed-jobs.json"), "ip"),
    (("solve", ROOT / "instances" / "mixed-h100-failure-a100-idle.json"), "ip"),
    (("solve", TINY, "--solver", "milp"), "ip"),
    (("solve", TINY, "--solver", "cpsat"), "ip"),
    (("serve", "--state", "{tmp}/state", "--port", "0"), "service"),
    (("curve", "gpt3-1.3b", "--gpu-type", "a100", "--global-batch", "256", "--seq-len", "2048", "--gpus", "16",
      "--plot", "{tmp}/c.png"), "sim"),
    (("import", "slurm", "--nodes", ROOT / "tests" / "fixtures" / "slurm-small" / "nodes.json",
      "--jobs", ROOT / "tests" / "fixtures" / "slurm-small" / "jobs.json", "--expected-run-seconds", "3600"),
     "adapters"),
])
def test_a_missing_extra_is_one_line_naming_it(tmp_path, args, extra):
    r = core_only(*(str(a).replace("{tmp}", str(tmp_path)) for a in args))
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"unicron-plan[{extra}]" in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_calibrate_and_the_client_name_their_extra(tmp_path):
    code = _RUNNER.replace("from unicron_plan.cli import main\nmain(sys.argv[1:])",
                           "try:\n    import unicron_plan.client\nexcept Exception as exc:\n    print(exc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "unicron-plan[service]" in r.stdout, r.stdout + r.stderr
    points = tmp_path / "points.json"
    points.write_text('{"gpu_type": "a100", "fit": ["gemm_efficiency"], "points": [{"model": "gpt3-1.3b", '
                      '"global_batch": 256, "seq_len": 2048, "tp": 1, "pp": 1, "dp": 16, '
                      '"iteration_seconds": 1.5}]}')
    r = core_only("calibrate", points, "--out", tmp_path / "eff.json")
    assert r.returncode == 2 and "unicron-plan[sim]" in r.stderr, r.stderr
