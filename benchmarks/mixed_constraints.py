"""Mixed fleets with node-level constraints and a churn limit: plan quality and time per backend.

    PYTHONPATH=. python benchmarks/mixed_constraints.py --quick        # about 2 minutes
    PYTHONPATH=. python benchmarks/mixed_constraints.py [--sizes 1024x16,4096x64] [--limits 5,20]
        [--solvers default,milp,cpsat] [--seeds 1] [--json OUT]

Instances: :func:`unicron_plan.tools.mixedgen.large_mixed` (2 GPU types, 16 counts per job and
type), then every third job limited to max(2, its current nodes) nodes, every fourth job from the
second given tp 8 (its tables kept at multiples of 8), and ``max_changed_jobs`` a third of the jobs:
the count-level optimum over types then breaks the churn limit, so the node-level model over types
(``solvers/mixed_place.py``) plans. Generated outside the clock; each row is ``api.solve`` end to
end from the dict with the time limit (``default``: no solver named), its wall time, status,
objective, bound and gap; the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import time

QUICK = {"sizes": "1024x16,4096x64", "limits": "10", "solvers": "default,milp,cpsat", "seeds": 1}


def constrained(seed: int, gpus: int, jobs: int) -> dict:
    """The instance of the module docstring."""
    from unicron_plan.tools.mixedgen import large_mixed

    doc = large_mixed(seed, gpus, 2, jobs, counts_per_job=16)
    for k, j in enumerate(doc["jobs"]):
        if k % 3 == 0:
            j["max_nodes"] = max(2, len(j["current"]["nodes"]))
        if k % 4 == 1 and j["current"]["gpus"] % 8 == 0:
            j["tp"] = 8
            th = j["throughput"]
            for t, table in (th.get("by_type") or {}).items():
                th["by_type"][t] = {c: v for c, v in table.items()
                                    if int(c) % 8 == 0 or int(c) == j["current"]["gpus"]} or {"8": 1.0}
    doc["max_changed_jobs"] = jobs // 3
    return doc


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", default="1024x16,4096x64")
    ap.add_argument("--limits", default="5,20")
    ap.add_argument("--solvers", default="default,milp,cpsat")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.quick:
        for k, v in QUICK.items():
            setattr(args, k, v)
    from unicron_plan import api

    print(json.dumps({"load_before": os.getloadavg()}))
    rows = []
    for size in args.sizes.split(","):
        gpus, jobs = (int(v) for v in size.split("x"))
        for seed in range(1, args.seeds + 1):
            doc = constrained(seed, gpus, jobs)
            for limit in (float(v) for v in args.limits.split(",")):
                for solver in args.solvers.split(","):
                    t = time.perf_counter()
                    plan = api.solve(doc, solver=None if solver == "default" else solver, time_limit_seconds=limit)
                    wall = time.perf_counter() - t
                    row = {"gpus": gpus, "jobs": jobs, "seed": seed, "limit": limit, "solver": solver,
                           "wall": round(wall, 2), "solution": plan.status.solution, "objective": plan.objective,
                           "bound": plan.bound, "gap": plan.gap,
                           "backend": (plan.solver.options or {}).get("backend"),
                           "plan_from": (plan.solver.options or {}).get("plan_from", "model")}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print(json.dumps({"load_after": os.getloadavg()}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, f, indent=1)


if __name__ == "__main__":
    main()
