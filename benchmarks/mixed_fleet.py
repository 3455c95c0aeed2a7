"""Mixed fleets: the exact type-and-count solver beside HiGHS and CP-SAT on the same model.

    PYTHONPATH=. python benchmarks/mixed_fleet.py --quick            # about 3 minutes on a quiet machine
    PYTHONPATH=. python benchmarks/mixed_fleet.py [--sizes 16384x128,131072x1024] [--kinds jagged,dense]
        [--seeds 3] [--ip-limit 60] [--ip-sizes 16384x128] [--ip-seeds 1] [--single 7] [--json OUT]

Instances: :func:`unicron_plan.tools.mixedgen.large_mixed` (4 GPU types, every job allowed 2-4 of
them, a node of the first type failed; kinds ``mixedgen.KINDS``), generated outside the clock.
Per instance:

* ``mixed``: ``solvers.mixed.solve_types`` on the built problem (HiGHS imported before, no time
  limit; ``proven``: bound == value), wall and CPU time of this process; then ``api.solve`` end to
  end from the dict (parse, checks, build, solve, placement, validation; its default time limit),
  wall, with its status;
* ``milp`` and ``cpsat``: ``api.solve(..., solver=NAME, time_limit_seconds=IP_LIMIT)`` on the same
  instance (the IP of :mod:`unicron_plan.solvers.mixed_ip`), at the sizes of ``--ip-sizes``; wall
  and CPU time (HiGHS and CP-SAT run in this process, one thread).

``--single N``: a single-type instance (instances/jagged-16384-128jobs.json) solved N times by
``dp.solve`` and by ``mixed.solve`` alternately (the mixed entry hands a problem without
alternatives to the DP): the CPU-time ratio of the medians shows the single-type path pays nothing.

Each row is printed as JSON as it finishes; then medians per size and kind, with the load average
before and after (the machine's other work shows in wall time far more than in CPU time).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from pathlib import Path

QUICK = {"sizes": "16384x128", "kinds": "jagged,linear-step,dense,near-linear,queued-linear-step",
         "seeds": 2, "ip_limit": 10.0, "ip_sizes": "16384x128", "ip_seeds": 1,
         "big": "131072x1024:near-linear:0,131072x1024:linear-step:1,131072x1024:jagged:0", "single": 5}


def _timed(fn):
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _instance_row(gpus: int, jobs: int, kind: str, seed: int, ip_limit: float, with_api: bool = True) -> dict:
    from unicron_plan import api
    from unicron_plan.core.problem import build_problem
    from unicron_plan.solvers import mixed
    from unicron_plan.tools.mixedgen import kind_args, large_mixed

    doc = large_mixed(seed, gpus, 4, jobs, **kind_args(kind))
    inst = api.load_instance(doc)
    problem = build_problem(inst)
    (_, _, value, bound, stopped, stats), wall, cpu = _timed(lambda: mixed.solve_types(problem))
    row = {"gpus": gpus, "types": 4, "jobs": jobs, "kind": kind, "seed": seed,
           "mixed_wall": round(wall, 3), "mixed_cpu": round(cpu, 3), "proven": not stopped and bound == value,
           "value": value, "nodes": stats["nodes"], "lagrange_steps": stats["lagrange_steps"]}
    if not with_api:
        return row
    plan, api_wall, _ = _timed(lambda: api.solve(doc))
    row.update({"api_wall": round(api_wall, 3), "objective": plan.objective, "bound": plan.bound,
                "status": plan.status.solution,
                "moved_type": sum(1 for pj, j in zip(plan.jobs, inst.jobs)
                                  if pj.gpus and pj.gpu_type != j.throughput.gpu_type)})
    for name in (("milp", "cpsat") if ip_limit > 0 else ()):
        ref, ref_wall, ref_cpu = _timed(lambda: api.solve(doc, solver=name, time_limit_seconds=ip_limit))
        gap = (ref.bound - ref.objective) / max(abs(ref.bound), 1.0)
        row[name] = {"wall": round(ref_wall, 2), "cpu": round(ref_cpu, 2), "objective": ref.objective, "bound": ref.bound,
                     "status": ref.status.solution, "gap": gap,
                     "fallback": (ref.solver.options or {}).get("fallback"),
                     "agrees": abs(ref.objective - plan.objective) <= 1e-9 * abs(plan.objective)}
    return row


def _single(runs: int) -> dict:
    """CPU time of dp.solve and mixed.solve on a single-type instance, alternately."""
    from unicron_plan import api
    from unicron_plan.core.problem import build_problem
    from unicron_plan.solvers import dp, mixed

    inst = api.load_instance(Path(__file__).resolve().parent.parent / "instances" / "jagged-16384-128jobs.json")
    problem = build_problem(inst)
    assert not problem.alternatives
    times = {"dp": [], "mixed": []}
    values = set()
    for _ in range(runs):
        for name, fn in (("dp", dp.solve), ("mixed", mixed.solve)):
            raw, _, cpu = _timed(lambda: fn(problem))
            times[name].append(cpu)
            values.add(raw.objective)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"single_type": "jagged-16384-128jobs", "runs": runs, "dp_cpu_median": round(med["dp"], 4),
            "mixed_cpu_median": round(med["mixed"], 4), "ratio": round(med["mixed"] / med["dp"], 3),
            "same_objective": len(values) == 1}


def main() -> None:
    from unicron_plan.tools.mixedgen import KINDS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="16,384 GPUs x 5 kinds x 2 seeds (HiGHS and CP-SAT on "
                    "seed 0, 10 s limit), three 131,072-GPU instances, the single-type check: about 3 minutes")
    ap.add_argument("--sizes", default="16384x128,131072x1024")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--ip-limit", type=float, default=60.0, help="seconds for HiGHS and CP-SAT; 0 skips them")
    ap.add_argument("--ip-sizes", default="16384x128,131072x1024", help="the sizes at which the IP backends run")
    ap.add_argument("--ip-seeds", type=int, default=None, help="the IP backends on the first N seeds only")
    ap.add_argument("--single", type=int, default=0, help="runs of the single-type check (0: none)")
    ap.add_argument("--no-api", action="store_true", help="skip api.solve and the IP backends (the solve only)")
    ap.add_argument("--json")
    a = ap.parse_args()
    big = ""
    if a.quick:
        a.sizes, a.kinds, a.seeds, a.ip_limit, a.ip_sizes, a.ip_seeds, big, a.single = (
            QUICK["sizes"], QUICK["kinds"], QUICK["seeds"], QUICK["ip_limit"], QUICK["ip_sizes"], QUICK["ip_seeds"],
            QUICK["big"], QUICK["single"])
    import highspy  # noqa: F401 - imported once, outside the clock

    load_before = os.getloadavg()
    cases = [(size, kind, seed) for size in a.sizes.split(",") for kind in a.kinds.split(",")
             for seed in range(a.seeds)]
    cases += [tuple(c.split(":")) for c in big.split(",") if c]
    ip_sizes = set(a.ip_sizes.split(","))
    rows = []
    for size, kind, seed in cases:
        gpus, jobs = (int(v) for v in size.split("x"))
        ip = size in ip_sizes and (a.ip_seeds is None or int(seed) < a.ip_seeds)
        row = _instance_row(gpus, jobs, kind, int(seed), a.ip_limit if ip else 0.0, not a.no_api)
        rows.append(row)
        print(json.dumps(row), flush=True)
    single = _single(a.single) if a.single else None
    if single:
        print(json.dumps(single), flush=True)
    load_after = os.getloadavg()
    print(f"\nload average (1, 5, 15 min) before {load_before}, after {load_after}")
    print("| GPUs x jobs | kind | runs | mixed wall median (max) | mixed CPU median (max) | nodes | all proven |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["gpus"], r["jobs"], r["kind"]), []).append(r)
    for (gpus, jobs, kind), rs in groups.items():
        w, c = [r["mixed_wall"] for r in rs], [r["mixed_cpu"] for r in rs]
        print(f"| {gpus} x {jobs} | {kind} | {len(rs)} | {statistics.median(w):.2f} ({max(w):.2f}) | "
              f"{statistics.median(c):.2f} ({max(c):.2f}) | {'-'.join(str(r['nodes']) for r in rs)} | "
              f"{all(r['proven'] for r in rs)} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "single": single, "load_before": load_before, "load_after": load_after}, f,
                      indent=1)


if __name__ == "__main__":
    main()
