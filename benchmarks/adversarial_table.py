"""Project DP vs compiled plain DP (vs HiGHS and CP-SAT, bounded) on the adversarial curve kinds.

    PYTHONPATH=. python benchmarks/adversarial_table.py --scale 16384x128 --runs 3 --ip 20 \\
        --json benchmarks/results-adversarial-16384.json

Builds benchmarks/plain_dp.c with ``gcc -O3`` (the hardware reference: the
plain DP over the same Pareto counts, no bounds, no windows), generates each
kind with ``unicron_plan.tools.generate`` (seed 1), and reports median solve seconds
of ``dp.solve_type`` over the GPU types against the plain DP's own clock, with
their ratio; the two objectives must agree (rel. 1e-9). ``--ip T`` also runs
``api.solve(solver=milp|cpsat, time_limit_seconds=T)`` in a child process
killed after 3 T + 30 s (reported as no answer).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from dp_speed import build_plain, write_options  # this folder: the plain DP and its inputs

from unicron_plan import api
from unicron_plan.tools.adversarial import KINDS
from unicron_plan.tools.generate import generate_instance
from unicron_plan.core.problem import build_problem
from unicron_plan.solvers import dp


def plain_dp(exe: Path, problem, tmp: Path) -> tuple[float, float]:
    """(objective, seconds of the DP loops) of the compiled plain DP, summed over GPU types."""
    obj, secs = 0.0, 0.0
    for path in write_options(problem, tmp):
        out = subprocess.run([str(exe), str(path)], check=True, capture_output=True, text=True).stdout.split()
        obj += float(out[0])
        secs += float(out[1])
    return obj, secs


def project_dp(problem, runs: int) -> tuple[float, float]:
    """(objective, median seconds) of the project's DP over the GPU types."""
    times, obj = [], 0.0
    for _ in range(runs):
        start = time.perf_counter()
        obj = 0.0
        for gtype, cap in problem.capacity.items():
            jobs = problem.jobs_of_type(gtype)
            if jobs:
                obj += dp.solve_type(jobs, cap)[1]
        times.append(time.perf_counter() - start)
    return obj, statistics.median(times)


def _ip_child(doc, solver, limit, q):
    start = time.perf_counter()
    plan = api.solve(doc, solver=solver, time_limit_seconds=limit)
    q.put((plan.objective, plan.bound, plan.status.solution, time.perf_counter() - start))


def ip_run(doc: dict, solver: str, limit: float) -> dict:
    """Wall seconds and result of one bounded IP run (child process, killed when it overruns)."""
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=_ip_child, args=(doc, solver, limit, q))
    start = time.perf_counter()
    p.start()
    p.join(3 * limit + 30)
    if p.is_alive():
        p.kill()
        p.join()
        return {"status": "no answer", "wall_seconds": time.perf_counter() - start}
    if q.empty():
        return {"status": "error", "wall_seconds": time.perf_counter() - start}
    obj, bound, sol, secs = q.get()
    return {"status": sol, "objective": obj, "bound": bound, "wall_seconds": secs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", default="16384x128", help="GPUSxJOBS")
    ap.add_argument("--kinds", default=",".join(("synthetic",) + KINDS))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ip", type=float, default=0.0, help="time limit of the HiGHS and CP-SAT runs (0: skip)")
    ap.add_argument("--json")
    a = ap.parse_args()
    gpus, jobs = map(int, a.scale.split("x"))
    rows = []
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        exe = build_plain(tmp)
        for kind in a.kinds.split(","):
            doc = generate_instance(1, gpus=gpus, jobs=jobs, curves=kind)
            problem = build_problem(api.load_instance(doc))
            obj, secs = project_dp(problem, a.runs)
            pobj, psecs = plain_dp(exe, problem, tmp)
            assert math.isclose(obj, pobj, rel_tol=1e-9), (kind, obj, pobj)
            row = {"kind": kind, "gpus": gpus, "jobs": jobs, "objective": obj, "dp_seconds": secs,
                   "plain_dp_seconds": psecs, "ratio_plain_over_dp": psecs / secs,
                   "dp_native": dp.NATIVE is not None}
            if a.ip:
                for solver in ("milp", "cpsat"):
                    r = ip_run(doc, solver, a.ip)
                    if "objective" in r:
                        r["gap_to_dp"] = (obj - r["objective"]) / abs(obj)
                    row[solver] = r
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"scale": a.scale, "runs": a.runs, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
