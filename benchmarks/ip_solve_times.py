"""Solve time per backend on the library's largest instance and on generated 2,048-GPU instances.

Run from the repository root:

    PYTHONPATH=$PWD python benchmarks/ip_solve_times.py [--seed 0] [--threads 2] [--time-limit 120]

Prints a table (wall seconds of api.solve, build + solve + placement + validation,
imports excluded). A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from randgen_ip import large_instance  # noqa: E402
from unicron_plan import api  # noqa: E402
from unicron_plan.errors import SolverUnavailableError  # noqa: E402
from unicron_plan.io import parse_model  # noqa: E402
from unicron_plan.schema import Instance  # noqa: E402

BACKENDS = ("dp", "milp", "milp-cbc", "cpsat", "auto")


def largest_library_instance() -> Path:
    """The instances/ file with the most GPUs."""
    def gpus(p):
        return sum(n.gpus for n in api.load_instance(p).cluster.nodes)
    return max(sorted((ROOT / "instances").glob("*.json")), key=gpus)


def main() -> None:
    """Measure and print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell; the median is shown")
    ap.add_argument("--only", default=None, help="run only cases whose label contains this text")
    args = ap.parse_args()
    lib = largest_library_instance()
    cases = [(f"library: {lib.stem}", api.load_instance(lib))]
    for label, cons in (("separable", False), ("tp only", True), ("constrained", True)):
        data = large_instance(np.random.default_rng(args.seed), constraints=cons)
        if label == "tp only":
            data.pop("max_changed_jobs")
            for job in data["jobs"]:
                job.pop("max_nodes", None)
                job.pop("min_gain_fraction", None)
        cases.append((f"generated 2048 GPUs, {label}, seed {args.seed}", parse_model(Instance, data)))
    for name in BACKENDS:  # warm-up: first calls pay lazy imports and solver start-up
        try:
            api.solve(ROOT / "instances" / "tiny-one-job-two-nodes.json", solver=name, threads=args.threads)
        except SolverUnavailableError:
            pass
    if args.only:
        cases = [c for c in cases if args.only in c[0]]
    print(f"threads={args.threads} time_limit={args.time_limit}s repeat={args.repeat} (median, min-max)")
    print(f"{'instance':48s} {'solver':9s} {'median s':>8s} {'status':18s} {'objective':>16s} {'bound':>16s}")
    for label, inst in cases:
        for name in BACKENDS:
            times = []
            try:
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    plan = api.solve(inst, solver=name, time_limit_seconds=args.time_limit, threads=args.threads)
                    times.append(time.perf_counter() - t)
            except SolverUnavailableError:
                print(f"{label:48s} {name:9s} {'-':>8s} {'not applicable':18s}")
                continue
            dt = float(np.median(times))
            st = f"{plan.status.termination}/{plan.status.solution}"
            backend = (plan.solver.options or {}).get("backend", "")
            print(f"{label:48s} {name:9s} {dt:8.2f} {st:18s} {plan.objective:16.1f} {plan.bound:16.1f} "
                  f"{backend} ({min(times):.2f}-{max(times):.2f})")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
