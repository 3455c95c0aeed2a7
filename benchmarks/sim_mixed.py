"""Mixed fleets in the simulator: unicron (type choice) against type-bound and every baseline.

    python benchmarks/sim_mixed.py run SCENARIO.json OUT.json --seeds 10 [--seed 0] [--workers 2]
        [--policy NAME ...] [--without-domains] [--duration-hours H]
    python benchmarks/sim_mixed.py report OUT.json [OUT2.json ...]      # the table of docs/simulation.md
    python benchmarks/sim_mixed.py merge OUT.json PART1.json PART2.json  # seeds run apart, one file
    python benchmarks/sim_mixed.py quick                                 # the headline row, 3 seeds

``run`` simulates seeds seed .. seed+seeds-1 with every policy (``unicron-plan simulate``'s runs,
``simulate.run.simulate``) in up to ``--workers`` processes and rewrites OUT.json after every finished
seed (the runs so far in seed order and their summary, ``simulate.run.summarize``), so a long run
keeps what it has done. ``report`` prints one markdown row per policy: unicron / policy (mean
[95% interval], wins / seeds), type changes and GPU-hours held per type per run. ``quick`` runs
unicron and type-bound on 3 seeds of the 1,024-GPU mixed scenario (18 s of CPU in all).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from unicron_plan.io import dumps, read_json, write_atomic  # noqa: E402
from unicron_plan.simulate import run as simrun  # noqa: E402


def _load(path: str, without_domains: bool, hours: float | None = None):
    """The scenario, without its correlated failures (rack and switch domains) and cut to ``hours``
    when asked."""
    data = read_json(path)
    if without_domains and data.get("failures"):
        data["failures"].pop("domains", None)
        data["name"] += "-without-domains"
    if hours is not None:
        data["duration_hours"] = hours
        data["name"] += f"-{hours:g}h"
    return simrun.load_scenario(data)


def _one(args):
    path, names, seed, without_domains, hours = args
    start = time.perf_counter()
    out = simrun.simulate(_load(path, without_domains, hours), names, seed)
    out["wall_seconds"] = round(time.perf_counter() - start, 1)
    return out


def run(scenario: str, out: str, seeds: int, seed: int, workers: int, names: list[str] | None,
        without_domains: bool = False, hours: float | None = None) -> dict:
    sc = _load(scenario, without_domains, hours)
    names = names or simrun.default_policies(sc)
    done: dict[int, dict] = {}
    if Path(out).exists():  # resume: keep the seeds already run with the same policies
        prev = read_json(out)
        if prev.get("policies") == names and prev.get("scenario") == sc.name:
            done = {r["seed"]: r for r in prev["runs"]}
    todo = [seed + i for i in range(seeds) if seed + i not in done]

    def save():
        runs = [done[s] for s in sorted(done)]
        result = {"scenario": sc.name, "policies": names, "runs": runs,
                  "summary": simrun.summarize(runs, names) if runs else None}
        write_atomic(out, dumps(result))
        return result

    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(_one, (scenario, names, s, without_domains, hours)): s for s in todo}
        for fut in as_completed(futures):
            r = fut.result()
            done[r["seed"]] = r
            save()
            print(f"seed {r['seed']}: {r['events']} events, {r['wall_seconds']} s", file=sys.stderr)
    return save()


def merge(out: str, paths: list[str]) -> None:
    """One results file from several runs of the same scenario and policies (seeds run apart)."""
    parts = [read_json(p) for p in paths]
    first = parts[0]
    if any(p["scenario"] != first["scenario"] or p["policies"] != first["policies"] for p in parts):
        raise SystemExit("merge: the files differ in scenario or policies")
    runs = {r["seed"]: r for p in parts for r in p["runs"]}
    runs = [runs[s] for s in sorted(runs)]
    write_atomic(out, dumps({"scenario": first["scenario"], "policies": first["policies"], "runs": runs,
                             "summary": simrun.summarize(runs, first["policies"])}))


def _ratio(summary: dict, name: str) -> str:
    ur = summary["policies"][name].get("unicron_ratio")
    if not ur or ur.get("mean") is None:
        return "-"
    lo, hi = ur["ci95"]
    return f"{ur['mean']:.6f} [{lo:.6f}, {hi:.6f}] {ur['wins']}/{summary['seeds']}"


def report(paths: list[str]) -> None:
    for path in paths:
        data = read_json(path)
        s = data["summary"]
        if "seeds" not in s:  # one run: summarize it as a list of one
            s = {**s, "seeds": 1, "policies": {n: {**r, "unicron_ratio": None} for n, r in s["policies"].items()}}
        print(f"\n{data['scenario']}: {s['seeds']} seeds, {s.get('events_mean', s.get('events'))} events per run\n")
        types = sorted(next(iter(s["policies"].values())).get("gpu_hours", {}))
        print("| policy | weighted TFLOP | unicron / policy [95%], wins | reconfigurations | type changes | "
              + " | ".join(f"{t} GPU-hours" for t in types) + " |")
        print("|---|---:|---|---:|---:|" + "---:|" * len(types))
        for name in data["policies"]:
            r = s["policies"][name]
            gh = " | ".join(f"{r['gpu_hours'][t]:,.0f}" for t in types)
            print(f"| {name} | {r['weighted_tflop']:.5e} | {_ratio(s, name) if name != 'unicron' else '1'} | "
                  f"{r['reconfigurations']:.1f} | {r.get('type_changes', 0):.1f} | {gh} |")


def quick() -> None:
    """The headline row: unicron / type-bound on the 1,024-GPU mixed scenario, seeds 0-2."""
    start = time.perf_counter()
    sc = simrun.load_scenario(ROOT / "scenarios" / "gpt3-mix-1024-h100-a100.json")
    runs = simrun.run_seeds(sc, ["unicron", "type-bound"], 0, 3, workers=2)
    s = simrun.summarize(runs, ["unicron", "type-bound"])
    print(f"unicron / type-bound, seeds 0-2: {_ratio(s, 'type-bound')}; type changes per run: unicron "
          f"{s['policies']['unicron']['type_changes']:.1f}, type-bound {s['policies']['type-bound']['type_changes']:.1f}; "
          f"per seed: {[round(r['policies']['unicron']['weighted_tflop'] / r['policies']['type-bound']['weighted_tflop'], 6) for r in runs]}; "
          f"{time.perf_counter() - start:.1f} s wall")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("scenario")
    r.add_argument("out")
    r.add_argument("--seeds", type=int, default=10)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--policy", action="append")
    r.add_argument("--without-domains", action="store_true", help="drop the scenario's rack and switch failures")
    r.add_argument("--duration-hours", type=float, help="simulate only the first this many hours")
    p = sub.add_parser("report")
    p.add_argument("paths", nargs="+")
    sub.add_parser("quick")
    m = sub.add_parser("merge")
    m.add_argument("out")
    m.add_argument("paths", nargs="+")
    args = ap.parse_args()
    if args.cmd == "run":
        run(args.scenario, args.out, args.seeds, args.seed, args.workers, args.policy, args.without_domains,
            args.duration_hours)
    elif args.cmd == "merge":
        merge(args.out, args.paths)
    elif args.cmd == "report":
        report(args.paths)
    else:
        quick()


if __name__ == "__main__":
    main()
