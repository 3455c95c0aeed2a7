"""Whole `unicron-plan solve` processes under --time-limit T, per backend, on generated constrained instances.

Run from the repository root (the venv's `unicron-plan` on PATH, or --cli):

    PYTHONPATH=$PWD python benchmarks/deadline.py --quick            # about 2-3 minutes
    PYTHONPATH=$PWD python benchmarks/deadline.py [--gpus 8192,16384] [--limits 0.2,0.5,1,2,5]
        [--seeds 0,1] [--routes dp,milp,...] [--json benchmarks/results-deadline.json]

Each run is a new process, `unicron-plan solve FILE --solver S --time-limit T --out PLAN --timings`;
its wall time runs from before the process is spawned until it has exited (start-up, imports,
reading, building, solving, placing, validating, writing and exit all count) and its CPU time is
the child's user + system time. The target: every run ends within T + 0.5 s, with a plan that
validates, objective >= the keep-or-suspend plan's, and bound >= objective. The IP backends'
phases (``*_seconds`` in the plan's ``solver.options``: model building, the DP's start, the
engine's model copy and run, extraction; CP-SAT's copy is ``build_seconds``) are summarised per
route and T.

Routes (the solver name; ``mixed:`` = a mixed-fleet instance, solved through the solver's
mixed-fleet form, solvers.MIXED_ROUTES):

* ``dp``: even seeds the generator's ``queued-near-linear`` curves (the DP's slowest kind, every
  job queued: 262,144 / 524,288 table entries at 8,192 / 16,384 GPUs), odd seeds ``synthetic``
  curves with pinned jobs and hysteresis;
* ``milp``, ``milp-cbc``, ``cpsat``, ``auto``: tests/randgen_ip.py ``large_instance`` (tp,
  max_nodes, hysteresis, a churn limit; 32 nodes of 8 GPUs per rack, 64 jobs) with two jobs on
  ``same_rack`` and one unhit job pinned;
* ``mixed:dp``, ``mixed:milp``, ``mixed:milp-cbc``, ``mixed:cpsat``, ``mixed:auto``:
  tools/mixedgen.py ``large_mixed`` (two GPU types, 64 jobs allowed on both) with hysteresis on a
  fifth of the jobs and one unhit job pinned (no churn limit: the mixed-fleet forms refuse it).

Prints one line per run, then per route the worst and median overrun past T, the runs within
T + 0.5 s, the median and largest CPU seconds, the worst time from the later of the deadline and
the end of reading and building (which cannot stop) to the process's exit, and the load average
before and after. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

ROUTES = ("dp", "milp", "milp-cbc", "cpsat", "auto",
          "mixed:dp", "mixed:milp", "mixed:milp-cbc", "mixed:cpsat", "mixed:auto")
SLACK = 0.5  # seconds past T a run may take


def _single(gpus: int, seed: int) -> dict:
    """The IP backends' instance: large_instance with same_rack and a pinned job added."""
    from randgen_ip import large_instance

    inst = large_instance(np.random.default_rng(seed), racks=gpus // 256, nodes_per_rack=32, jobs=64)
    down = set(inst["event"]["failed_nodes"]) | {g["node"] for g in inst["event"]["failed_gpus"]}
    rack = {n["id"]: n["rack"] for n in inst["cluster"]["nodes"]}
    running = [j for j in inst["jobs"] if j["current"]["nodes"] and not down & set(j["current"]["nodes"])]
    one_rack = [j for j in running if len({rack[n] for n in j["current"]["nodes"]}) == 1]
    for j in one_rack[:2]:
        j["same_rack"] = True
    pinnable = [j for j in running if j not in one_rack[:2]]
    if pinnable:
        pinnable[0]["pinned"] = True
    inst["name"] = f"constrained-{gpus}-s{seed}"
    return inst


def _dp(gpus: int, seed: int) -> dict:
    """The DP's instance: queued-near-linear (even seeds) or synthetic with pinned jobs and hysteresis."""
    from unicron_plan.tools.generate import generate_instance

    if seed % 2 == 0:
        return generate_instance(seed + 1, gpus=gpus, jobs=128, curves="queued-near-linear")
    inst = generate_instance(seed, gpus=gpus, jobs=128)
    down = set(inst.get("event", {}).get("failed_nodes", []))
    running = [j for j in inst["jobs"] if j["current"]["gpus"] and not down & set(j["current"]["nodes"])]
    rng = np.random.default_rng(seed)
    for k, j in enumerate(running):
        if k < 4:
            j["pinned"] = True
        elif rng.random() < 0.25:
            j["min_gain_fraction"] = 0.05
    return inst


def _mixed(gpus: int, seed: int) -> dict:
    """The mixed fleet: large_mixed with hysteresis and a pinned job (the mixed-fleet forms take no
    churn limit or node-level constraint over several types)."""
    from unicron_plan.tools.mixedgen import large_mixed

    inst = large_mixed(seed, gpus, 2, 64)
    rng = np.random.default_rng(seed)
    down = set(inst["event"]["failed_nodes"])
    running = [j for j in inst["jobs"] if j["current"]["gpus"] and not down & set(j["current"]["nodes"])]
    for k, j in enumerate(running):
        if k == 0:
            j["pinned"] = True
        elif rng.random() < 0.2:
            j["min_gain_fraction"] = 0.05
    return inst


def _floor(inst: dict) -> float:
    """The keep-or-suspend plan's objective (every answer must reach it)."""
    from unicron_plan import api
    from unicron_plan.core.problem import build_problem
    from unicron_plan.solvers import ipmodel

    problem = build_problem(api.load_instance(inst))
    kept = ipmodel.keep_or_suspend(problem)
    return -np.inf if kept is None else problem.objective(*kept)


def _run(cli: list[str], path: Path, solver: str, limit: float, out: Path, timings: bool = True) -> dict:
    cmd = [*cli, "solve", str(path), "--solver", solver, "--time-limit", repr(limit), "--out", str(out),
           "--quiet"] + (["--timings"] if timings else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit + 120)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    row = {"wall": wall, "cpu": cpu, "exit": proc.returncode}
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("{")]
    if lines:
        row["phases"] = json.loads(lines[-1])
    if proc.returncode != 0:
        row["error"] = proc.stderr.strip()[-300:]
    return row


PROCESS_PHASES = ("import", "read", "build", "solve", "place", "validate", "write")  # --timings: cumulative ends
BACKEND_PHASES = ("model", "start", "build", "copy_and_engine", "engine", "extract")  # solver.options *_seconds


def phase_rows(rows: list[dict]) -> list[dict]:
    """Per route and T, the median seconds of each phase: the process's (from the cumulative ends that
    ``--timings`` prints; "solve" holds the backend's phases) and the backend's own (``*_seconds``)."""
    out = []
    for route in dict.fromkeys(r["route"] for r in rows):
        for limit in sorted({r["limit"] for r in rows if r["route"] == route}):
            mine = [r for r in rows if r["route"] == route and r["limit"] == limit and "phases" in r]
            if not mine:
                continue
            row = {"route": route, "limit": limit, "runs": len(mine),
                   "wall": statistics.median(r["wall"] for r in mine), "cpu": statistics.median(r["cpu"] for r in mine)}
            for before, name in zip(("",) + PROCESS_PHASES, PROCESS_PHASES):
                row[name] = statistics.median(r["phases"][name] - r["phases"].get(before, 0.0) for r in mine)
            for name in BACKEND_PHASES:
                seen = [r["backend_phases"][f"{name}_seconds"] for r in mine
                        if f"{name}_seconds" in r.get("backend_phases", {})]
                if seen:
                    row[f"backend_{name}"] = statistics.median(seen)
            out.append(row)
    return out


def main() -> None:
    """Generate, measure, print and optionally write the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one seed, T = 0.2 and 2 s (about 2-3 minutes)")
    ap.add_argument("--gpus", default="8192,16384")
    ap.add_argument("--limits", default="0.2,0.5,1,2,5")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--routes", default=",".join(ROUTES))
    ap.add_argument("--cli", default=None, help="the command to run (default: unicron-plan next to this "
                                                "Python, else python -m unicron_plan.cli)")
    ap.add_argument("--no-timings", action="store_true", help="do not ask for --timings (a CLI without it)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.limits = "0", "0.2,2"
    from unicron_plan import api
    from unicron_plan.io import read_json

    exe = Path(sys.executable).with_name("unicron-plan")
    cli = args.cli.split() if args.cli else [str(exe)] if exe.exists() else [sys.executable, "-m", "unicron_plan.cli"]
    routes = args.routes.split(",")
    limits = [float(t) for t in args.limits.split(",")]
    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="unicron-deadline-"))
    rows = []
    try:
        subprocess.run([*cli, "--version"], capture_output=True, check=True)  # page the program in
        print(f"{'GPUs':>6} {'route':15} {'seed':>4} {'T':>4} {'wall s':>7} {'over s':>7} {'cpu s':>6} "
              f"{'gap':>9} {'ok':3} fallback")
        for gpus in (int(g) for g in args.gpus.split(",")):
            for seed in (int(s) for s in args.seeds.split(",")):
                made: dict[str, tuple[Path, dict, float]] = {}
                for route in routes:
                    kind = "mixed" if route.startswith("mixed:") else "dp" if route == "dp" else "single"
                    if kind not in made:
                        inst = {"mixed": _mixed, "dp": _dp, "single": _single}[kind](gpus, seed)
                        path = tmp / f"{kind}-{gpus}-{seed}.json"
                        path.write_text(json.dumps(inst))
                        made[kind] = (path, api.load_instance(inst), _floor(inst))
                    path, inst, floor = made[kind]
                    solver = route.split(":")[-1]
                    for limit in limits:
                        out = tmp / "plan.json"
                        out.unlink(missing_ok=True)
                        row = {"gpus": gpus, "route": route, "seed": seed, "limit": limit,
                               **_run(cli, path, solver, limit, out, not args.no_timings)}
                        ok = row["exit"] == 0 and row["wall"] <= limit + SLACK
                        if row["exit"] == 0:
                            plan = api.load_plan(read_json(out))
                            opts = plan.solver.options or {}
                            valid = api.validate_plan(inst, plan).valid
                            row.update(objective=plan.objective, bound=plan.bound, gap=plan.gap,
                                       solution=plan.status.solution, fallback=opts.get("fallback", ""),
                                       valid=valid, at_least_keep_or_suspend=bool(
                                           plan.objective >= floor - 1e-9 * abs(floor)),
                                       backend_phases={k: v for k, v in opts.items() if k.endswith("_seconds")})
                            ok = ok and valid and row["at_least_keep_or_suspend"] and plan.bound >= plan.objective
                        row["ok"] = ok
                        rows.append(row)
                        gap = f"{row['gap']:9.2e}" if row.get("gap") is not None else f"{'-':>9}"
                        print(f"{gpus:>6} {route:15} {seed:>4} {limit:>4} {row['wall']:>7.2f} "
                              f"{row['wall'] - limit:>+7.2f} {row['cpu']:>6.2f} {gap} {'ok' if ok else 'NO':3} "
                              f"{row.get('fallback', row.get('error', ''))}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()
    summary = {}
    print(f"\n{'route':15} {'runs':>4} {'within T+0.5':>12} {'worst over':>10} {'median over':>11} {'median cpu':>10} "
          f"{'max cpu':>7} {'worst past max(T, read)':>10}")
    for route in routes:
        mine = [r for r in rows if r["route"] == route]
        if not mine:
            continue
        over = [r["wall"] - r["limit"] for r in mine]
        # From the later of the deadline and the end of reading and building (which cannot stop).
        after = [r["wall"] - max(r["limit"], r["phases"]["build"]) for r in mine if "build" in r.get("phases", {})]
        summary[route] = {"runs": len(mine), "within": sum(r["ok"] for r in mine), "worst_over": max(over),
                          "median_over": statistics.median(over),
                          "median_cpu": statistics.median(r["cpu"] for r in mine),
                          "max_cpu": max(r["cpu"] for r in mine),
                          "worst_after_deadline_or_read": max(after) if after else None}
        s = summary[route]
        tail = f"{s['worst_after_deadline_or_read']:>+10.2f}" if after else f"{'-':>10}"
        print(f"{route:15} {s['runs']:>4} {s['within']:>12} {s['worst_over']:>+10.2f} {s['median_over']:>+11.2f} "
              f"{s['median_cpu']:>10.2f} {s['max_cpu']:>7.2f} {tail}")
    print("\nbackend phases (seconds the backend reports in solver.options), median / max per route and T:")
    for route in routes:
        for limit in limits:
            mine = [r["backend_phases"] for r in rows if r["route"] == route and r["limit"] == limit
                    and r.get("backend_phases")]
            names = sorted({k for p in mine for k in p})
            if names:
                cells = ", ".join(f"{k[:-8]} {statistics.median(p.get(k, 0.0) for p in mine):.3f} / "
                                  f"{max(p.get(k, 0.0) for p in mine):.3f}" for k in names)
                summary.setdefault(route, {}).setdefault("phases", {})[str(limit)] = {
                    k: {"median": statistics.median(p.get(k, 0.0) for p in mine), "max": max(p.get(k, 0.0) for p in mine)}
                    for k in names}
                print(f"{route:15} T={limit:<4} {cells}")
    phases = phase_rows(rows)
    print("\nmedian seconds per phase (process: " + ", ".join(PROCESS_PHASES) + "; backend: "
          + ", ".join(BACKEND_PHASES) + ")")
    for p in phases:
        cells = " ".join(f"{k} {p[k]:.3f}" for k in PROCESS_PHASES)
        backend = " ".join(f"{k[8:]} {v:.3f}" for k, v in p.items() if k.startswith("backend_"))
        print(f"{p['route']:15} T={p['limit']:<4} {cells} | {backend or '-'}")
    print(f"load average before {load_before[0]:.1f} {load_before[1]:.1f} {load_before[2]:.1f}, "
          f"after {load_after[0]:.1f} {load_after[1]:.1f} {load_after[2]:.1f} (1/5/15 min; {os.cpu_count()} CPUs)")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
             "load_before": load_before, "load_after": load_after, "slack": SLACK,
             "summary": summary, "phases": phases, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
