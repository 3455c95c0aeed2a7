"""Wall and CPU seconds of whole `unicron-plan solve` processes (medians), next to Python's own start-up.

    PYTHONPATH=. python benchmarks/process_time.py [RUNS]

Targets (quiet machine, medians): `unicron-plan --version` <= 0.15 s, `solve` of the tiny
instance <= 0.35 s.

Runs are interleaved (one of each command per round) so that load changes on a
shared machine hit every command alike.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import numpy, pydantic, typer": [sys.executable, "-c", "import numpy, pydantic, typer"],
    "unicron-plan --version": [sys.executable, "-m", "unicron_plan.cli", "--version"],
    "solve tiny (1 job)": [sys.executable, "-m", "unicron_plan.cli", "solve", "instances/tiny-one-job-two-nodes.json",
                           "--out", os.devnull],
    "solve jagged-16384-128jobs": [sys.executable, "-m", "unicron_plan.cli", "solve",
                                   "instances/jagged-16384-128jobs.json", "--out", os.devnull],
}


def main() -> None:
    """Print one line per command: median wall, median user+sys CPU."""
    import argparse

    ap = argparse.ArgumentParser(description="Whole-process wall and CPU times of a few commands.")
    ap.add_argument("runs", nargs="?", type=int, default=11, help="runs per command (default 11)")
    runs = ap.parse_args().runs
    wall = {k: [] for k in COMMANDS}
    cpu = {k: [] for k in COMMANDS}
    for _ in range(runs):
        for name, cmd in COMMANDS.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            wall[name].append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    for name in COMMANDS:
        print(f"{name:32s} wall {statistics.median(wall[name]):.3f} s   cpu {statistics.median(cpu[name]):.3f} s"
              f"   (min wall {min(wall[name]):.3f})")


if __name__ == "__main__":
    main()
