"""Fuzz every reader (instance, plan, scenario, calibration points, contingency index) within a
time budget: no input may crash (exit 3), print a traceback, or run longer than a few seconds.

Two kinds of mutations of valid documents, drawn from a seeded numpy Generator:

* structural (a value replaced by an odd one, a key dropped or added): the command must exit
  0, 1 or 2, never 3;
* textual (truncation, NaN, nesting deeper than allowed, a duplicate key, invalid UTF-8): the
  text is not valid input, so the command must exit exactly 2.

Set UNICRON_FUZZ_SECONDS to fuzz longer and UNICRON_FUZZ_SEED to draw other inputs (the default
run takes about BUDGET seconds per reader).
"""

from __future__ import annotations

import copy
import json
import os
import signal
from contextlib import contextmanager

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import ROOT
from unicron_plan import api
from unicron_plan.cli import full_app
from unicron_plan.plan.contingency import build_contingency, write_contingency
from unicron_plan.errors import InvalidInstanceError

pytestmark = pytest.mark.long  # (each fuzzer runs for its time budget: in the long run, out of the default one)

BUDGET = float(os.environ.get("UNICRON_FUZZ_SECONDS", "2.0"))  # seconds per reader
SEED = int(os.environ.get("UNICRON_FUZZ_SEED", "0"))  # added to each reader's seed
CASE_SECONDS = 20  # one input taking longer than this is a hang
ODD = [-1, 0, 1, -0.0, 0.5, 1e308, -1e308, 10 ** 30, 2 ** 63, "", "x", "a\nb\x1b", "x" * 100_000,
       [], {}, None, True, False, [[[[[[[[[[]]]]]]]]]], {"zz": 1}, [1, 2, 3], ["n0"], 8]
SMALL_INSTANCES = sorted(p for p in (ROOT / "instances").glob("*.json")
                         if p.name.startswith(("tiny-", "ip-", "small-")))
APP = full_app()


class Hang(Exception):
    pass


@contextmanager
def deadline(seconds: int):
    def fire(signum, frame):
        raise Hang()
    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for k, v in enumerate(doc[:4]):
            yield from _paths(v, prefix + (k,))


def mutate_structure(rng, doc):
    doc = copy.deepcopy(doc)
    for _ in range(int(rng.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        path = paths[int(rng.integers(len(paths)))]
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        key = path[-1]
        op = rng.random()
        if op < 0.7:
            parent[key] = copy.deepcopy(ODD[int(rng.integers(len(ODD)))])
        elif op < 0.85 and isinstance(parent, dict):
            del parent[key]
        elif isinstance(parent, dict):
            parent["unknown\nfield" if rng.random() < 0.5 else "zz"] = 1
        else:
            parent.append(copy.deepcopy(ODD[int(rng.integers(len(ODD)))]))
    return json.dumps(doc)


def mutate_text(rng, doc) -> bytes:
    text = json.dumps(doc)
    op = int(rng.integers(5))
    if op == 0:
        return text[: int(rng.integers(1, len(text) - 1))].encode()
    if op == 1:
        return text.replace(":", ": NaN, \"_nan\":", 1).encode()
    if op == 2:
        return ("[" * 100_000 + text + "]" * 100_000).encode()
    if op == 3:
        key = next(iter(doc))
        return ("{" + json.dumps(key) + ": 1, " + text[1:]).encode()
    return text.encode()[:-1] + b"\xff\xfe}"


def run(args) -> tuple[int, str]:
    with deadline(CASE_SECONDS):
        result = CliRunner().invoke(APP, [str(a) for a in args])
    out = (result.output or "") + (result.stderr if result.stderr_bytes is not None else "")
    return result.exit_code, out


def fuzz(tmp_path, corpus, command, reader, seed):
    """Mutate documents of ``corpus`` until the budget is spent; ``command(path)`` is the CLI call."""
    import time

    seed += SEED
    rng = np.random.default_rng(seed)
    start, cases = time.perf_counter(), 0
    path = tmp_path / "input.json"
    while time.perf_counter() - start < BUDGET or cases < 10:
        doc = corpus[int(rng.integers(len(corpus)))]
        textual = rng.random() < 0.3
        data = mutate_text(rng, doc) if textual else mutate_structure(rng, doc).encode()
        path.write_bytes(data)
        if reader is not None:  # the reader alone (commands that would go on to simulate or fit)
            try:
                with deadline(CASE_SECONDS):
                    reader(path)
                code = 0
            except InvalidInstanceError:
                code = 2
            detail = ""
        else:
            code, detail = run(command(path))
        case = f"case {cases} (seed {seed}): {data[:300]!r}"
        assert code != 3 and "Traceback" not in detail, f"{case}\n{detail[:2000]}"
        if textual:
            assert code == 2, f"{case}\nexit {code}\n{detail[:2000]}"
        else:
            assert code in (0, 1, 2), f"{case}\nexit {code}\n{detail[:2000]}"
        cases += 1
    return cases


def test_fuzz_instances(tmp_path):
    corpus = [json.loads(p.read_text()) for p in SMALL_INSTANCES]
    fuzz(tmp_path, corpus, lambda p: ("solve", p), None, seed=1)


def test_fuzz_instances_with_ip_solvers(tmp_path):
    corpus = [json.loads(p.read_text()) for p in SMALL_INSTANCES]
    fuzz(tmp_path, corpus, lambda p: ("solve", p, "--solver", "auto"), None, seed=2)


def test_fuzz_plans(tmp_path):
    inst = ROOT / "instances" / "ip-max-nodes.json"
    corpus = [api.solve(api.load_instance(inst)).model_dump(mode="json", exclude_none=True)]
    fuzz(tmp_path, corpus, lambda p: ("validate", inst, p), None, seed=3)


def test_fuzz_contingency_index(tmp_path):
    inst = ROOT / "instances" / "tiny-one-job-two-nodes.json"
    index = build_contingency(api.load_instance(inst))
    fuzz(tmp_path, [index], lambda p: ("solve", inst, "--contingency", p, "--contingency-use", "always"), None, seed=4)


def test_fuzz_scenarios(tmp_path):
    from unicron_plan.simulate.run import load_scenario

    corpus = [json.loads((ROOT / "scenarios" / n).read_text())
              for n in ("trace-128-a800.json", "gpt3-mix-128-a800.json")]
    fuzz(tmp_path, corpus, None, load_scenario, seed=5)


def test_fuzz_points_files_text(tmp_path):
    """Calibration points: text that is not valid JSON input (the fit itself is not run)."""
    points = {"gpu_type": "a100", "stack": "megatron-sc21", "fit": ["gemm_efficiency"],
              "points": [{"model": "gpt3-1.3b", "global_batch": 256, "seq_len": 2048, "recompute": "full",
                          "tp": 1, "pp": 1, "dp": 16, "micro_batch": 4, "virtual_stages": 1,
                          "iteration_seconds": 1.5}]}
    rng = np.random.default_rng(6)
    out = tmp_path / "eff.json"
    for k in range(40):
        data = mutate_text(rng, points)
        path = tmp_path / "points.json"
        path.write_bytes(data)
        code, detail = run(("calibrate", path, "--out", out))
        assert code == 2 and "Traceback" not in detail, f"case {k}: {data[:300]!r}\n{detail[:2000]}"


def test_fuzz_efficiency_files(tmp_path):
    """`curve --efficiency`: a mutated efficiency file is a valid curve or a named field (exit 2)."""
    corpus = [json.loads((ROOT / "models" / "efficiency.json").read_text())]
    fuzz(tmp_path, corpus, lambda p: ("curve", "gpt3-1.3b", "--gpu-type", "a100", "--global-batch", "256",
                                      "--seq-len", "2048", "--gpus", "16,32", "--efficiency", p), None, seed=7)


def test_fuzz_sweep_yaml(tmp_path):
    """The sweep reader on YAML: every mutation of a sweep file is read or refused by name."""
    import yaml

    from unicron_plan.simulate.sweep import load_sweep

    sweep = {"scenario": str(ROOT / "scenarios" / "trace-128-a800.json"), "policies": ["unicron", "megatron"],
             "grid": {"horizon_hours": [24, 48]}, "seed": 1}
    rng = np.random.default_rng(8 + SEED)
    start, cases = __import__("time").perf_counter(), 0
    path = tmp_path / "s.yaml"
    while __import__("time").perf_counter() - start < BUDGET or cases < 10:
        if rng.random() < 0.3:
            text = mutate_text(rng, sweep).decode("utf-8", "replace")
        else:
            text = yaml.safe_dump(json.loads(mutate_structure(rng, sweep)))
        path.write_text(text)
        try:
            with deadline(CASE_SECONDS):
                load_sweep(path)
        except InvalidInstanceError:
            pass
        cases += 1


def test_fuzz_bench_baseline(tmp_path):
    """`bench --check`: a mutated baseline is compared or refused by field name, never a crash."""
    inst = str(ROOT / "instances" / "tiny-one-job-two-nodes.json")
    from unicron_plan.tools import bench

    baseline = bench.run_bench([inst], ["dp"], runs=1)
    fuzz(tmp_path, [json.loads(json.dumps(baseline))],
         lambda p: ("bench", inst, "--runs", "1", "-q", "--check", p), None, seed=9)


def test_fuzz_gpu_maps(tmp_path):
    """`import --gpu-map`: a mutated map is used or refused by field name, never a crash."""
    d = ROOT / "tests" / "fixtures" / "k8s-small"
    fuzz(tmp_path, [{"NVIDIA-A100-SXM4-80GB": "a100", "NVIDIA-H100-80GB-HBM3": "h100"}],
         lambda p: ("import", "k8s", "--nodes", d / "nodes.json", "--pods", d / "pods.json", "--jobs",
                    d / "jobs.json", "--expected-run-seconds", "3600", "--gpu-map", p), None, seed=10)


_IMPORTS = ROOT / "tests" / "fixtures"
_S, _K = _IMPORTS / "slurm-small", _IMPORTS / "k8s-small"
IMPORT_READERS = {
    "slurm-nodes": (_S / "nodes.json", lambda p: ("import", "slurm", "--nodes", p, "--jobs", _S / "jobs.json")),
    "slurm-jobs": (_S / "jobs.json", lambda p: ("import", "slurm", "--nodes", _S / "nodes.json", "--jobs", p)),
    "k8s-nodes": (_K / "nodes.json", lambda p: ("import", "k8s", "--nodes", p, "--pods", _K / "pods.json",
                                                "--jobs", _K / "jobs.json")),
    "k8s-pods": (_K / "pods.json", lambda p: ("import", "k8s", "--nodes", _K / "nodes.json", "--pods", p,
                                              "--jobs", _K / "jobs.json")),
    "k8s-jobs": (_K / "jobs.json", lambda p: ("import", "k8s", "--nodes", _K / "nodes.json", "--pods",
                                              _K / "pods.json", "--jobs", p)),
}


@pytest.mark.parametrize("name", sorted(IMPORT_READERS))
def test_fuzz_scheduler_imports(tmp_path, name):
    """`import slurm|k8s`: every mutation of a scheduler's JSON is imported or refused by name."""
    source, command = IMPORT_READERS[name]
    fuzz(tmp_path, [json.loads(source.read_text())],
         lambda p: (*command(p), "--expected-run-seconds", "3600"), None,
         seed=11 + sorted(IMPORT_READERS).index(name))
