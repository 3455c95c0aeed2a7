"""Mixed fleets: the exact type-and-count solver beside HiGHS and CP-SAT on the same model.

    PYTHONPATH=. python benchmarks/mixed_fleet.py [--sizes 16384x128,131072x1024] [--curves jagged,dense]
        [--seeds 3] [--ip-limit 60] [--json OUT]

Instances: :func:`unicron_plan.tools.mixedgen.large_mixed` (4 GPU types, every job allowed 2-4 of
them, a node of the first type failed), generated outside the clock. Per instance:

* ``mixed``: the solve time of ``solvers.mixed.solve_types`` on the built problem (in process,
  the problem built first, HiGHS imported before), then ``api.solve`` end to end from the dict
  (parse, checks, build, solve, placement, validation);
* ``milp`` and ``cpsat``: ``api.solve(..., solver=NAME, time_limit_seconds=IP_LIMIT)`` on the same
  instance (the IP of :mod:`unicron_plan.solvers.mixed_ip`), skipped with ``--ip-limit 0``.

Each row is printed as JSON (objective, bound, status, seconds) as it finishes.
"""

from __future__ import annotations

import argparse
import gc
import json
import time


def main() -> None:
    from unicron_plan import api
    from unicron_plan.core.problem import build_problem
    from unicron_plan.solvers import mixed
    from unicron_plan.tools.mixedgen import large_mixed

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16384x128,131072x1024")
    ap.add_argument("--curves", default="jagged,linear-step,dense")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--ip-limit", type=float, default=60.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    import highspy  # noqa: F401 - imported once, outside the clock

    rows = []
    for size in a.sizes.split(","):
        gpus, jobs = (int(v) for v in size.split("x"))
        for curves in a.curves.split(","):
            for seed in range(a.seeds):
                doc = large_mixed(seed, gpus, 4, jobs, curves=curves)
                inst = api.load_instance(doc)
                problem = build_problem(inst)
                gc.collect()
                start = time.perf_counter()
                _, _, value, bound, stopped, stats = mixed.solve_types(problem)
                solve_s = time.perf_counter() - start
                start = time.perf_counter()
                plan = api.solve(doc)
                row = {"gpus": gpus, "types": 4, "jobs": jobs, "curves": curves, "seed": seed,
                       "mixed_solve_seconds": solve_s, "mixed_api_seconds": time.perf_counter() - start,
                       "objective": plan.objective, "bound": plan.bound, "status": plan.status.solution,
                       "nodes": stats["nodes"], "lagrange_steps": stats["lagrange_steps"],
                       "moved_type": sum(1 for pj, j in zip(plan.jobs, inst.jobs)
                                         if pj.gpus and pj.gpu_type != j.throughput.gpu_type)}
                for name in (("milp", "cpsat") if a.ip_limit > 0 else ()):
                    gc.collect()
                    start = time.perf_counter()
                    ref = api.solve(doc, solver=name, time_limit_seconds=a.ip_limit)
                    row[name] = {"seconds": time.perf_counter() - start, "objective": ref.objective,
                                 "bound": ref.bound, "status": ref.status.solution,
                                 "agrees": abs(ref.objective - plan.objective) <= 1e-9 * abs(plan.objective)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
