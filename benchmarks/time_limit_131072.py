"""`api.solve` under a 2 s time limit at 131,072 GPUs x 1,024 jobs, per adversarial curve kind.

    PYTHONPATH=. python benchmarks/time_limit_131072.py [--kinds a,b] [--limit 2.0] [--json OUT]

Each kind is generated as a dict (seed 1, outside the clock), then solved with
``api.solve(doc, time_limit_seconds=LIMIT)`` from the dict, so validation and
building count against the limit, as they do for a caller. Prints the wall
time around the call, the status and the gap. ``near-linear`` is left out by
default: its instance alone takes minutes to build (benchmarks/near_linear_131072.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import time


def main() -> None:
    from unicron_plan import api
    from unicron_plan.tools.adversarial import KINDS
    from unicron_plan.tools.generate import generate_instance

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default=",".join(k for k in ("synthetic",) + KINDS if k != "near-linear"))
    ap.add_argument("--limit", type=float, default=2.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for kind in a.kinds.split(","):
        doc = generate_instance(1, gpus=131072, jobs=1024, curves=kind)
        gc.collect()
        start = time.perf_counter()
        plan = api.solve(doc, time_limit_seconds=a.limit)
        wall = time.perf_counter() - start
        row = {"kind": kind, "limit_seconds": a.limit, "wall_seconds": wall,
               "termination": plan.status.termination, "solution": plan.status.solution, "gap": plan.gap}
        rows.append(row)
        print(json.dumps(row), flush=True)
        del doc, plan
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpus": 131072, "jobs": 1024, "seed": 1, "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
