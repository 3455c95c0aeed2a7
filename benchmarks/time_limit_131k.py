"""Whole `unicron-plan solve --time-limit 2` processes at 131,072 GPUs x 1,024 jobs, per curve kind.

    PYTHONPATH=. python benchmarks/time_limit_131k.py [--runs 5] [--limit 2] [--kinds ...] [--json OUT]

The target: an answer within 2.5 s of the call (the process's start), within 0.1% of its bound.
Each row's instance is generated once (seed 1, outside the clock, as benchmarks/dp_speed.py
makes it: ``synthetic`` running is the kind of the library's jagged instance; the queued rows set
every job's current count to 0); then ``--runs`` processes of
``python -m unicron_plan.cli solve FILE --time-limit T --out PLAN --timings`` run one after the
other, kinds interleaved (one run of each per round, so that load changes hit every kind alike).
Wall seconds run from before the process is spawned until it has exited (start-up, imports,
reading, building, solving, placing, validating, writing and exit); CPU seconds are the child's
user + system time (getrusage). Per kind: median and largest wall, median CPU, the median end of
each phase (seconds from the process's start, ``--timings``), the plan's status and gap
(bound over objective). ``near-linear`` has no row: its JSON at this size is about 1 GB, over the
reader's 512 MiB limit (benchmarks/dp_speed.py times its DP in arrays). About a minute with
``--runs 5`` on a quiet machine; the load average is printed before and after.

``--files F ...`` times those instance files instead (a row per file, named by its stem), e.g. the
1,048,576-GPU instances of benchmarks/million.py:

    for k in synthetic model identical; do PYTHONPATH=. python benchmarks/million.py /tmp/m/$k.json --curves $k; done
    PYTHONPATH=. python benchmarks/time_limit_131k.py --files /tmp/m/*.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

ROWS = (("synthetic", "running"), ("linear-step", "queued"), ("equal-per-gpu", "queued"),
        ("queued-equal-per-gpu", "queued"), ("dense", "queued"), ("dense", "running"))
PHASES = ("import", "read", "build", "solve", "place", "validate", "write")


def one(path: Path, plan: Path, limit: float) -> dict:
    """One whole process: wall and CPU seconds, phases, the plan's status and gap."""
    cmd = [sys.executable, "-m", "unicron_plan.cli", "solve", str(path), "--time-limit", str(limit),
           "--out", str(plan), "--timings", "--quiet"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"{path.name}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    phases = json.loads(proc.stderr.strip().splitlines()[-1])
    doc = json.loads(plan.read_text())
    return {"wall": wall, "cpu": cpu, "phases": phases, "solution": doc["status"]["solution"],
            "gap": doc.get("gap", 0.0) or 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--limit", type=float, default=2.0)
    ap.add_argument("--gpus", type=int, default=131072)
    ap.add_argument("--jobs", type=int, default=1024)
    ap.add_argument("--kinds", default=",".join(f"{k}:{s}" for k, s in ROWS), help="KIND:STATE,...")
    ap.add_argument("--files", nargs="+", type=Path, help="instance files to time instead of generated ones")
    ap.add_argument("--json")
    a = ap.parse_args()
    from dp_speed import make_doc

    rows = [] if a.files else [tuple(r.split(":")) for r in a.kinds.split(",")]
    load_before = os.getloadavg()
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        paths = {f.stem: f for f in a.files or ()}
        for kind, state in rows:
            path = tmp / f"{kind}-{state}.json"
            path.write_text(json.dumps(make_doc(kind, state, a.gpus, a.jobs)))
            paths[f"{kind} {state}"] = path
        results = {name: [] for name in paths}
        for name, path in paths.items():  # warm-up: the file cache and the interpreter's files
            one(path, tmp / "plan.json", a.limit)
        for _ in range(a.runs):
            for name, path in paths.items():
                results[name].append(one(path, tmp / "plan.json", a.limit))
    load_after = os.getloadavg()
    summary = []
    print(f"{'the files given' if a.files else f'{a.gpus} GPUs x {a.jobs} jobs'}, --time-limit {a.limit:g}, "
          f"{a.runs} runs per kind; load average "
          f"before {load_before[0]:.1f}, after {load_after[0]:.1f}")
    print(f"{'kind':30s} {'wall med':>8s} {'max':>6s} {'cpu med':>7s} {'within':>6s}  "
          + " ".join(f"{p:>8s}" for p in PHASES) + "  solution  worst gap")
    for name, runs in results.items():
        walls = [r["wall"] for r in runs]
        row = {"kind": name, "wall_median": statistics.median(walls), "wall_max": max(walls),
               "cpu_median": statistics.median(r["cpu"] for r in runs),
               "within": sum(w <= a.limit + 0.5 for w in walls),
               "phases_median": {p: statistics.median(r["phases"].get(p, float("nan")) for r in runs) for p in PHASES},
               "solutions": sorted({r["solution"] for r in runs}), "worst_gap": max(r["gap"] for r in runs),
               "runs": runs}
        summary.append(row)
        print(f"{name:30s} {row['wall_median']:8.2f} {row['wall_max']:6.2f} {row['cpu_median']:7.2f} "
              f"{row['within']:>3d}/{len(runs):<2d}  " + " ".join(f"{row['phases_median'][p]:8.3f}" for p in PHASES)
              + f"  {','.join(row['solutions']):8s}  {row['worst_gap']:.1e}")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpus": a.gpus, "jobs": a.jobs,
            "limit": a.limit, "runs": a.runs, "load_before": load_before, "load_after": load_after,
            "rows": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
