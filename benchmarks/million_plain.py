"""The plain C DP's work at 1,048,576 GPUs, where its choice table does not fit in memory.

    PYTHONPATH=. python benchmarks/million_plain.py INSTANCE.json OUT_DIR [--sample-jobs 64]

Writes the plain DP's input (benchmarks/plain_dp.c, the same Pareto counts as the project's DP,
``dp_speed.write_options``) for the first ``--sample-jobs`` jobs of the instance's first GPU type,
capacity unchanged, to OUT_DIR/sample.bin, and prints the cells (sum over the jobs' counts y of
C - y + 1, the loop's iterations) of the sample and of every job. Run
``plain_dp OUT_DIR/sample.bin --value-only`` (built with ``gcc -O3 -march=native``): its DP CPU
seconds times (all cells / sample cells) is the value-only loop's CPU over every job, as the loop's
work is the same per cell; a lower bound of the plain DP's CPU (which also writes a 4-byte choice
per cell and backtracks).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instance")
    ap.add_argument("out")
    ap.add_argument("--sample-jobs", type=int, default=64)
    a = ap.parse_args()
    from unicron_plan import api
    from unicron_plan.core.problem import build_problem
    from unicron_plan.solvers import dp

    problem = build_problem(api.load_instance(a.instance))
    gtype, cap = next(iter(problem.capacity.items()))
    jobs = problem.jobs_of_type(gtype)
    options = [dp.pareto_options(j) for j in jobs]
    cells = [int(np.maximum(cap - y + 1, 0).sum()) for y, _ in options]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sample = options[:a.sample_jobs]
    with open(out / "sample.bin", "wb") as f:
        np.array([cap, len(sample)], dtype=np.int64).tofile(f)
        for y, g in sample:
            np.array([len(y)], dtype=np.int64).tofile(f)
            y.astype(np.int64).tofile(f)
            g.astype(np.float64).tofile(f)
    print(json.dumps({"gpu_type": gtype, "capacity": cap, "jobs": len(jobs), "sample_jobs": len(sample),
                      "cells_all": sum(cells), "cells_sample": sum(cells[:len(sample)]),
                      "choice_table_bytes": 4 * len(jobs) * (cap + 1)}))


if __name__ == "__main__":
    main()
