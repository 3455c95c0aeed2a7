"""Wall time of api.solve under --time-limit T, per backend, on generated constrained instances.

Run from the repository root:

    PYTHONPATH=$PWD python benchmarks/deadline.py [--gpus 8192,16384] [--limits 0.2,1,2,5] [--json out.json]

The instances are tests/randgen_ip.py's large_instance (tp, max_nodes, hysteresis, a churn
limit; 32 nodes of 8 GPUs per rack, 64 jobs) for the IP backends and ``auto``, and the
generator's queued-near-linear curves (the DP's slowest kind) for ``dp``. The wall time runs
from the call (reading, building, solving, placing and validating). Each row also shows the
plan's gap and whether it is the keep-or-suspend fallback. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from randgen_ip import large_instance  # noqa: E402
from unicron_plan import api  # noqa: E402
from unicron_plan.tools.generate import generate_instance  # noqa: E402

BACKENDS = ("dp", "milp", "milp-cbc", "cpsat", "auto")


def main() -> None:
    """Measure and print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="8192,16384")
    ap.add_argument("--limits", default="0.2,1,2,5")
    ap.add_argument("--solvers", default=",".join(BACKENDS))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    for name in args.solvers.split(","):  # warm-up: lazy imports and solver start-up
        api.solve(ROOT / "instances" / "tiny-one-job-two-nodes.json", solver=name, threads=1)
    rows = []
    print(f"{'GPUs':>6} {'solver':9} {'limit s':>7} {'wall s':>7} {'over s':>7} {'gap':>9} fallback")
    for gpus in (int(g) for g in args.gpus.split(",")):
        constrained = large_instance(np.random.default_rng(0), racks=gpus // 256, nodes_per_rack=32, jobs=64)
        queued = generate_instance(1, gpus=gpus, jobs=128, curves="queued-near-linear")
        for name in args.solvers.split(","):
            inst = queued if name == "dp" else constrained
            for limit in (float(t) for t in args.limits.split(",")):
                start = time.perf_counter()
                plan = api.solve(inst, solver=name, time_limit_seconds=limit, threads=1)
                wall = time.perf_counter() - start
                fb = (plan.solver.options or {}).get("fallback") or ""
                rows.append({"gpus": gpus, "solver": name, "limit": limit, "wall": wall, "gap": plan.gap,
                             "solution": plan.status.solution, "fallback": fb})
                print(f"{gpus:>6} {name:9} {limit:>7.1f} {wall:>7.2f} {wall - limit:>+7.2f} {plan.gap:>9.2e} {fb}",
                      flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
