"""The speed targets the test suite once asserted, measured here instead (tests never assert time:
tests/test_no_clock_asserts.py), each against its target, in this one process on this machine.

    PYTHONPATH=.:tests python benchmarks/suite_timings.py [--only NAME[,NAME]] [--runs N] [--json OUT]

| name | what | target |
| --- | --- | --- |
| ``import-k8s-2048``, ``import-slurm-2048`` | the 2,048-node scheduler fixtures (tests/schedfixtures.py) imported into an instance | 2 s (median of the runs) |
| ``roundtrip-k8s-2048``, ``roundtrip-slurm-2048`` | the same carried through import, solve, export, apply, import (one run) | 120 s |
| ``parse-json-escaped-quotes`` | an unterminated string of 3,000,000 escaped quotes refused by ``io.parse_json``, against 750,000 (best of 2 each) | 5 s, and at most 8 x the small one + 0.05 s (quadratic would be 16 x) |
| ``dp-16384x128`` | ``dp.solve`` on instances/jagged-16384-128jobs.json (median of the runs) | 0.3 s |
| ``dp-131072x1024`` | ``dp.solve`` and ``api.solve`` on ``generate_instance(2, gpus=131072, jobs=1024)`` (one run each) | 10 s each |
| ``service-body-off-loop`` | ``unicron-plan serve``: ``/healthz`` probed in a loop while a 5.4 MB body of 600,000 objects is posted (the reader runs off the event loop) | the slowest probe under 1 s and under half the post |

The contingency index at 2,048 nodes is timed by contingency_kinds.py, solves under ``--time-limit``
by deadline.py, the Slurm agent's pass on the testbed by ``pytest -m slow
tests/test_slurm_testbed.py::test_time_from_node_down_to_planned_jobs_running`` (printed). Every row
prints wall seconds (``time.perf_counter``) and process CPU seconds (``time.process_time``); on a
loaded machine read the CPU column. The exit status is 0 whatever the figures: a benchmark reports.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(fn) -> tuple[object, float, float]:
    """(fn's value, wall seconds, CPU seconds of this process)."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def _median(fn, runs: int) -> dict:
    walls, cpus = [], []
    for _ in range(runs):
        _, w, c = timed(fn)
        walls.append(w)
        cpus.append(c)
    return {"runs": runs, "wall_s_median": statistics.median(walls), "cpu_s_median": statistics.median(cpus),
            "wall_s": walls}


def imports(kind: str, runs: int) -> dict:
    import schedfixtures as fx
    from test_integrations_roundtrip import _k8s_import, _slurm_import

    docs = fx.load(kind, "large")
    inst = _k8s_import(*docs) if kind == "k8s" else _slurm_import(*docs)
    assert len(inst["cluster"]["nodes"]) == 2048
    row = _median(lambda: _k8s_import(*docs) if kind == "k8s" else _slurm_import(*docs), runs)
    return {**row, "target_s": 2.0, "met": row["wall_s_median"] <= 2.0}


def roundtrip(kind: str, runs: int) -> dict:
    from test_integrations_roundtrip import _k8s_roundtrip, _slurm_roundtrip

    _, w, c = timed(lambda: (_k8s_roundtrip if kind == "k8s" else _slurm_roundtrip)("large"))
    return {"runs": 1, "wall_s": w, "cpu_s": c, "target_s": 120.0, "met": w <= 120.0}


def parse_json_linear(runs: int) -> dict:
    from unicron_plan import io
    from unicron_plan.errors import InvalidInstanceError

    def refuse(text):
        try:
            io.parse_json(text, "x")
        except InvalidInstanceError:
            return
        raise AssertionError("accepted an unterminated string")

    def cost(n):
        text = '{"a": "' + '\\"' * n + "[" * 100
        return min(timed(lambda: refuse(text))[1] for _ in range(2))

    small, big = cost(750_000), cost(3_000_000)
    return {"small_wall_s": small, "big_wall_s": big, "ratio": big / small if small else None,
            "target": "big <= 5 s and big < 8 x small + 0.05 s", "met": big < 5.0 and big < 8 * small + 0.05}


def dp_16384(runs: int) -> dict:
    from unicron_plan import api
    from unicron_plan.core.problem import build_problem
    from unicron_plan.solvers import dp

    inst = api.load_instance(ROOT / "instances" / "jagged-16384-128jobs.json")
    problem = build_problem(inst)
    row = _median(lambda: dp.solve(problem), max(runs, 5))
    return {**row, "target_s": 0.3, "met": row["wall_s_median"] <= 0.3}


def dp_131072(runs: int) -> dict:
    from unicron_plan import api
    from unicron_plan.core.problem import build_problem
    from unicron_plan.solvers import dp
    from unicron_plan.tools.generate import generate_instance

    inst = api.load_instance(generate_instance(2, gpus=131072, jobs=1024))
    problem = build_problem(inst)
    raw, dp_wall, dp_cpu = timed(lambda: dp.solve(problem))
    plan, total_wall, total_cpu = timed(lambda: api.solve(inst))
    assert abs(plan.objective - raw.objective) <= 1e-12 * abs(raw.objective)
    return {"dp_wall_s": dp_wall, "dp_cpu_s": dp_cpu, "solve_wall_s": total_wall, "solve_cpu_s": total_cpu,
            "target_s": 10.0, "met": dp_wall <= 10.0 and total_wall <= 10.0}


def service_body(runs: int) -> dict:
    import tempfile
    import threading

    import httpx
    from servers import Server

    big = '{"kind": "failure", "failed_nodes": [' + ",".join(['{"a": 1}'] * 600_000) + "]}"
    with tempfile.TemporaryDirectory() as tmp, Server(Path(tmp) / "s", "--no-contingency") as srv:
        got: dict = {}

        def post():
            got["r"], got["s"], _ = timed(lambda: httpx.post(srv.url + "/v1/events", content=big, timeout=60,
                                                              headers={"content-type": "application/json"}))

        t = threading.Thread(target=post)
        t.start()
        probes = []
        while t.is_alive():
            probes.append(timed(lambda: httpx.get(srv.url + "/healthz", timeout=30))[1])
        t.join()
    worst = max(probes) if probes else None
    return {"post_wall_s": got["s"], "status": got["r"].status_code, "probes": len(probes), "worst_probe_s": worst,
            "target": "worst probe < 1 s and < half the post",
            "met": worst is not None and worst < 1.0 and worst < got["s"] / 2}


CASES = {
    "import-k8s-2048": lambda runs: imports("k8s", runs),
    "import-slurm-2048": lambda runs: imports("slurm", runs),
    "roundtrip-k8s-2048": lambda runs: roundtrip("k8s", runs),
    "roundtrip-slurm-2048": lambda runs: roundtrip("slurm", runs),
    "parse-json-escaped-quotes": parse_json_linear,
    "dp-16384x128": dp_16384,
    "dp-131072x1024": dp_131072,
    "service-body-off-loop": service_body,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated names (default: all)")
    ap.add_argument("--runs", type=int, default=5, help="runs of the cases that take a median")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    names = args.only.split(",") if args.only else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown: {', '.join(unknown)}; valid: {', '.join(CASES)}")
    sys.path.insert(0, str(ROOT / "tests"))
    results = {"machine": f"{platform.machine()} {platform.python_version()}",
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cases": {}}
    for name in names:
        row = CASES[name](args.runs)
        results["cases"][name] = row
        print(json.dumps({name: row}), flush=True)
    if args.json:
        from unicron_plan.io import dumps, write_atomic

        write_atomic(args.json, dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
