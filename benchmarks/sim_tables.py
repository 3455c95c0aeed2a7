"""The simulator tables of docs/simulation.md ("Results"): run, write their JSON, print their markdown.

    python benchmarks/sim_tables.py run [CASE ...] [--workers 2]   # writes benchmarks/results-sim-CASE.json
    python benchmarks/sim_tables.py table [CASE ...]              # the markdown tables from those files

Each case is a library scenario and a number of seeds (seeds 0..K-1, as ``unicron-plan simulate
SCENARIO --seeds K --json``, whose summary it writes, with every policy's weighted TFLOP per seed
under ``per_seed`` so that a test can re-run the first seeds and compare: tests/test_results_files.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

#: case -> (scenario file, seeds)
CASES = {
    "gpt3-mix-128-a800": ("scenarios/gpt3-mix-128-a800.json", 100),
    "gpt3-mix-128-a800-dense": ("scenarios/gpt3-mix-128-a800-dense.json", 100),
    "gpt3-mix-128-a800-perf": ("scenarios/gpt3-mix-128-a800-perf.json", 100),
    "gpt3-mix-128-a800-perf-dense": ("scenarios/gpt3-mix-128-a800-perf-dense.json", 100),
    "gpt3-mix-1024-a800": ("scenarios/gpt3-mix-1024-a800.json", 100),
    "gpt3-mix-16384-a800": ("scenarios/gpt3-mix-16384-a800.json", 20),
}


def result_path(case: str) -> Path:
    return HERE / f"results-sim-{case}.json"


def run_case(case: str, seeds: int | None = None, workers: int = 2) -> dict:
    """The summary of ``unicron-plan simulate`` over seeds 0..seeds-1 (the case's own count when None),
    with ``per_seed``: policy -> weighted TFLOP of each seed."""
    from unicron_plan.simulate import run as simrun

    path, default = CASES[case]
    scenario = simrun.load_scenario(ROOT / path)
    names = simrun.default_policies(scenario)
    runs = simrun.run_seeds(scenario, names, 0, seeds or default, workers=workers)
    result = simrun.summarize(runs, names)
    result["per_seed"] = {p: [float(r["policies"][p]["weighted_tflop"]) for r in runs] for p in names}
    return result


def table(result: dict) -> str:
    rows = ["| policy | weighted TFLOP | unicron / policy [95%] | wins | detection h | transition h "
            "| sub-healthy h | reconfigurations |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    from unicron_plan.simulate.run import DEFAULT_POLICIES

    order = {name: k for k, name in enumerate(DEFAULT_POLICIES)}
    for name, p in sorted(result["policies"].items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])):
        down = p["downtime_hours"]
        if name == "unicron":
            ratio, wins = "1", "-"
        else:
            r = p["unicron_ratio"]
            ratio, wins = f"{r['mean']:.4f} [{r['ci95'][0]:.4f}, {r['ci95'][1]:.4f}]", str(r["wins"])
        rows.append(f"| {name} | {p['weighted_tflop']:.4e} | {ratio} | {wins} | {down['detection']:.3f} | "
                    f"{down['transition']:.3f} | {down['sub_healthy']:.3f} | {p['reconfigurations']:.1f} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    from unicron_plan.io import dumps, read_json, write_atomic

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=("run", "table"))
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    for case in args.cases or list(CASES):
        if args.cmd == "run":
            write_atomic(result_path(case), dumps(run_case(case, workers=args.workers)))
        else:
            print(f"{case} ({CASES[case][1]} seeds)\n\n{table(read_json(result_path(case)))}\n")


if __name__ == "__main__":
    main()
