"""The near-linear kind at 131,072 GPUs x 1,024 jobs (32,768 counts per job, 33.5 M options),
in-process: its JSON would be about 1 GB, so it is generated as a dict and solved directly.

    PYTHONPATH=. python benchmarks/near_linear_131072.py     # about 2 minutes, 10 GB peak

Prints the time to generate, validate and build the instance, then two runs of
``dp.solve_type`` over the GPU types with the objective (equal across runs).
"""

from __future__ import annotations

import argparse
import gc
import time


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    t0 = time.perf_counter()
    from unicron_plan.core.problem import build_problem
    from unicron_plan.schema import Instance
    from unicron_plan.solvers import dp
    from unicron_plan.tools.generate import generate_instance

    doc = generate_instance(1, gpus=131072, jobs=1024, curves="near-linear")
    t1 = time.perf_counter()
    print(f"generated {t1 - t0:.1f} s", flush=True)
    inst = Instance.model_validate(doc)
    del doc
    gc.collect()
    t2 = time.perf_counter()
    print(f"validated {t2 - t1:.1f} s", flush=True)
    problem = build_problem(inst)
    t3 = time.perf_counter()
    print(f"built {t3 - t2:.1f} s; options {sum(len(j.counts) for j in problem.jobs)}", flush=True)
    for run in range(2):
        stats = {}
        t = time.perf_counter()
        total = 0.0
        for gtype, cap in problem.capacity.items():
            jobs = problem.jobs_of_type(gtype)
            if jobs:
                _, v = dp.solve_type(jobs, cap, stats)
                total += v
        print(f"dp.solve_type run {run}: {time.perf_counter() - t:.2f} s objective {total:.10e} "
              f"options kept {stats.get('kept')}", flush=True)


if __name__ == "__main__":
    main()
