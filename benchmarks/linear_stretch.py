"""Equal values per GPU with jobs of mixed granularity: the DP's packing rule (solvers/dp.py rule 5).

    PYTHONPATH=. python benchmarks/linear_stretch.py --seed 2 --jobs 1024 --capacity 100001
    PYTHONPATH=. python benchmarks/linear_stretch.py ... --without-packing     # the DP before the rule
    PYTHONPATH=. python benchmarks/linear_stretch.py ... --write-plain FILE    # plain_dp.c's input

Every job runs on multiples of 3, 8 or 12 GPUs (4-39 of them) at 150 TFLOPS per GPU; half of
them are running at a random count, every other count paying a 600 s transition. The greedy plan
often falls short of the Lagrangian bound here (the tied jobs' granularities must be combined to
fill the capacity), which made the DP run one full pass keeping every option. One process solves
one instance and prints the objective, how the bound was met and the options the pass kept; time
whole processes from outside (``/usr/bin/time -v``), and the plain DP on the same options with
``gcc -O3 -march=native -o plain_dp benchmarks/plain_dp.c -lm; ./plain_dp FILE``.
"""

from __future__ import annotations

import argparse

import numpy as np

from unicron_plan.solvers import dp
from unicron_plan.tools.adversarial import linear_stretch_options


def family(seed: int, jobs: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The Pareto options of every job (module docstring)."""
    return linear_stretch_options(np.random.default_rng(seed), jobs)


def write_plain(options, capacity: int, path: str) -> None:
    """plain_dp.c's binary input: int64 C, m, then per job K, K counts, K gains."""
    with open(path, "wb") as f:
        np.array([capacity, len(options)], dtype=np.int64).tofile(f)
        for y, g in options:
            np.array([len(y)], dtype=np.int64).tofile(f)
            np.asarray(y, dtype=np.int64).tofile(f)
            np.asarray(g, dtype=np.float64).tofile(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=1024)
    ap.add_argument("--capacity", type=int, default=100001)
    ap.add_argument("--without-packing", action="store_true", help="the DP without rule 5")
    ap.add_argument("--write-plain", metavar="FILE", help="write plain_dp.c's input and exit")
    a = ap.parse_args()
    options = family(a.seed, a.jobs)
    if a.write_plain:
        write_plain(options, a.capacity, a.write_plain)
        return
    if a.without_packing:
        dp._packing = lambda *args: None
    stats: dict = {}
    counts, value = dp.solve_options(options, a.capacity, stats)
    print(f"{value:.6f} bound_met={stats.get('bound_met')} kept={stats.get('kept')} options={stats.get('options')} "
          f"gpus={sum(counts)}")


if __name__ == "__main__":
    main()
