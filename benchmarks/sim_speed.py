"""Wall and CPU seconds of whole `unicron-plan simulate` processes on the 131,072-GPU scenario (medians).

    PYTHONPATH=. python benchmarks/sim_speed.py [--runs N] [--all] [--hours H]

Default: one seed (0) of ``scenarios/gpt3-mix-131072-a800.json`` with ``unicron`` and ``greedy``, the
whole month (the figure docs/simulation.md "Speed" quotes); ``--all``: every policy; ``--hours H``:
the same scenario cut to its first H hours (a quick check: ``--hours 120`` takes about a sixth).
Prints per run the wall and CPU (user + system) seconds and the peak memory, then the medians
and the load average before and after, because on a shared machine wall time follows the load.
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

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "gpt3-mix-131072-a800.json"


def main() -> None:
    ap = argparse.ArgumentParser(description="Whole-process times of the 131,072-GPU simulation.")
    ap.add_argument("--runs", type=int, default=1, help="runs (default 1)")
    ap.add_argument("--all", action="store_true", help="every policy (default: unicron and greedy)")
    ap.add_argument("--hours", type=float, default=None, help="cut the scenario to its first HOURS hours")
    args = ap.parse_args()
    path = SCENARIO
    tmp = None
    if args.hours is not None:
        doc = json.loads(SCENARIO.read_text())
        doc["duration_hours"] = args.hours
        tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(doc, tmp)
        tmp.close()
        path = Path(tmp.name)
    cmd = [sys.executable, "-m", "unicron_plan.cli", "simulate", str(path), "--seed", "0", "--json", "-q"]
    if not args.all:
        cmd += ["--policy", "unicron", "--policy", "greedy"]
    print("command:", " ".join(cmd[1:]), flush=True)
    print("load average before:", " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    walls, cpus = [], []
    try:
        for k in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            walls.append(wall)
            cpus.append(cpu)
            print(f"run {k + 1}: wall {wall:.1f} s, cpu {cpu:.1f} s, peak {after.ru_maxrss / 1024:.0f} MiB",
                  flush=True)
    finally:
        if tmp is not None:
            os.unlink(tmp.name)
    print(f"median: wall {statistics.median(walls):.1f} s, cpu {statistics.median(cpus):.1f} s")
    print("load average after:", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
