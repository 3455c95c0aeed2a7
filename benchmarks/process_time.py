"""Wall and CPU seconds of whole `unicron-plan solve` processes (medians), next to Python's own start-up.

    PYTHONPATH=. python benchmarks/process_time.py [RUNS]

Targets (quiet machine, medians): `unicron-plan --version` <= 0.15 s, `solve` of the tiny
instance <= 0.35 s; the whole `solve` of the 16,384-GPU jagged instance <= 1.5x the compiled plain
DP's whole run on the same instance (benchmarks/plain_dp.c, reading its binary input and solving;
its input is written before the clock starts): where that run takes less than Python's own
start-up, the floor is the start-up, which the rows ``python -c pass`` and
``import numpy, pydantic, typer`` show.

The package's modules are loaded from their bytecode when it exists; with
PYTHONDONTWRITEBYTECODE set and a source checkout (an editable install) that was never compiled,
every run compiles them (about 0.05 s of CPU): the script says so, and
``python -m compileall -q unicron_plan`` first measures the package as `pip install` leaves it.

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


def uncompiled_modules() -> int:
    """How many of the package's modules have no current bytecode (each run then compiles them)."""
    import importlib.util
    from pathlib import Path

    import unicron_plan

    root = Path(unicron_plan.__file__).parent
    missing = 0
    for src in root.rglob("*.py"):
        pyc = Path(importlib.util.cache_from_source(str(src)))
        missing += not pyc.is_file() or pyc.stat().st_mtime < src.stat().st_mtime
    return missing


def plain_dp_command(tmp) -> list[str]:
    """The compiled plain DP's whole run on the jagged instance (its binary input written now)."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from dp_speed import build_plain, write_options

    from unicron_plan import api
    from unicron_plan.core.problem import build_problem

    problem = build_problem(api.load_instance("instances/jagged-16384-128jobs.json"))
    paths = write_options(problem, tmp)
    assert len(paths) == 1, "one GPU type"
    return [str(build_plain(tmp)), str(paths[0])]


def main() -> None:
    """Print one line per command: median wall, median user+sys CPU."""
    import argparse
    import tempfile
    from pathlib import Path

    ap = argparse.ArgumentParser(description="Whole-process wall and CPU times of a few commands.")
    ap.add_argument("runs", nargs="?", type=int, default=11, help="runs per command (default 11)")
    runs = ap.parse_args().runs
    missing = uncompiled_modules()
    if missing:
        print(f"note: {missing} of the package's modules have no current bytecode; every run compiles them "
              f"(`python -m compileall -q unicron_plan` first to measure as installed)")
    tmp = tempfile.TemporaryDirectory()
    commands = dict(COMMANDS, **{"plain DP jagged-16384 (C)": plain_dp_command(Path(tmp.name))})
    wall = {k: [] for k in commands}
    cpu = {k: [] for k in commands}
    load = os.getloadavg()
    for _ in range(runs):
        for name, cmd in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            wall[name].append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    for name in commands:
        print(f"{name:32s} wall {statistics.median(wall[name]):.3f} s   cpu {statistics.median(cpu[name]):.3f} s"
              f"   (min wall {min(wall[name]):.3f})")
    solve, plain = "solve jagged-16384-128jobs", "plain DP jagged-16384 (C)"
    print(f"solve / plain DP whole run: wall {statistics.median(wall[solve]) / statistics.median(wall[plain]):.1f}x, "
          f"cpu {statistics.median(cpu[solve]) / max(statistics.median(cpu[plain]), 1e-3):.1f}x; "
          f"load average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    tmp.cleanup()


if __name__ == "__main__":
    main()
