"""Failure-rate sweep of a library scenario: unicron's ratio to each policy as nodes fail more often.

Usage (from the repository root)::

    PYTHONPATH=. python benchmarks/sim_sweep.py [SCENARIO] [--seeds K] [--mtbf H1,H2,...]

Prints, per node MTBF, the mean weighted TFLOP ratio unicron / policy over K
seeds (seed i = i, as `simulate --seeds`), with its 95% interval.
"""

from __future__ import annotations

import argparse
import copy
import time

from unicron_plan.io import read_json
from unicron_plan.simulate import DEFAULT_POLICIES, load_scenario, run_seeds, summarize


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", nargs="?", default="scenarios/gpt3-mix-128-a800.json")
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--mtbf", default="6332,2000,500,200,100")
    args = ap.parse_args()
    base = read_json(args.scenario)
    names = list(DEFAULT_POLICIES)
    print(f"{'node MTBF h':>11} {'events':>7} " + " ".join(f"{n:>22}" for n in names[1:]))
    for mtbf in [float(x) for x in args.mtbf.split(",")]:
        data = copy.deepcopy(base)
        data["failures"]["node_mtbf_hours"] = mtbf
        sc = load_scenario(data)
        t = time.perf_counter()
        s = summarize(run_seeds(sc, names, 0, args.seeds, workers=2), names)
        cells = []
        for n in names[1:]:
            r = s["policies"][n]["unicron_ratio"]
            cells.append(f"{r['mean']:.3f} [{r['ci95'][0]:.3f},{r['ci95'][1]:.3f}] {r['wins']:>3}")
        print(f"{mtbf:>11.0f} {s['events_mean']:>7.1f} " + " ".join(f"{c:>22}" for c in cells)
              + f"   ({time.perf_counter() - t:.1f} s)")


if __name__ == "__main__":
    main()
