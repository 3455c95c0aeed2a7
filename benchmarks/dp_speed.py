"""The exact DP against the compiled plain DP, every curve kind, with jobs running and with every job queued.

    PYTHONPATH=. python benchmarks/dp_speed.py --quick            # 16,384 x 128, every row, ~3 min quiet
    PYTHONPATH=. python benchmarks/dp_speed.py --json benchmarks/results-dp-speed.json
    PYTHONPATH=. python benchmarks/dp_speed.py --scale 131072x1024 --time-limit 2

Rows: kind (``synthetic``, ``model`` and the adversarial kinds of ``generate --curves``) x state
(``running``: as generated, jobs at their current counts, so transitions break ties;
``queued``: every job's current set to 0 GPUs) x scale. ``queued-equal-per-gpu`` (equal values on
multiples of 3 tp) has only its queued row. Per row:

* ``dp``: ``dp.solve_type`` over the GPU types, median wall and CPU seconds of ``--runs`` runs;
* ``plain``: benchmarks/plain_dp.c (``gcc -O3 -march=native``; no bounds, no windows, the same Pareto counts),
  its own wall and CPU clocks around the DP; the objectives must agree (rel. 1e-9);
* with ``--process``: whole processes, ``python -m unicron_plan.cli solve FILE`` (reading, validation,
  building, solving, placement, validation, writing) against the plain DP's whole run (reading its
  binary input and solving), wall and CPU from the OS (getrusage), one pair per row after a warm-up;
* with ``--time-limit T``: ``api.solve(FILE, time_limit_seconds=T)`` in a fresh process, the wall
  seconds from the call, the status and the gap.

The plain DP is skipped where it would take hours (C x options > ``--plain-max-cells``, 2e10 by
default: near-linear at 131,072 x 1,024 is 4.4e12 cells). ``--quick``: 16,384 x 128, one run,
``--process``. The load average is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KINDS = ("synthetic", "model", "identical", "linear-step", "near-linear", "dense", "equal-per-gpu", "four-types",
         "queued-equal-per-gpu")


def build_plain(tmp: Path) -> Path:
    """Compile the plain DP reference (gcc -O3 -march=native: its inner loop vectorised for this machine)."""
    exe = tmp / "plain_dp"
    subprocess.run(["gcc", "-O3", "-march=native", "-o", str(exe), str(HERE / "plain_dp.c"), "-lm"], check=True)
    return exe


def write_options(problem, tmp: Path) -> list[Path]:
    """The plain DP's binary inputs, one per GPU type (the same Pareto counts as the project DP)."""
    from unicron_plan.solvers import dp

    paths = []
    for n, (gtype, cap) in enumerate(problem.capacity.items()):
        jobs = problem.jobs_of_type(gtype)
        if not jobs:
            continue
        path = tmp / f"options-{n}.bin"
        with open(path, "wb") as f:
            np.array([cap, len(jobs)], dtype=np.int64).tofile(f)
            for j in jobs:
                y, g = dp.pareto_options(j)
                np.array([len(y)], dtype=np.int64).tofile(f)
                y.astype(np.int64).tofile(f)
                g.astype(np.float64).tofile(f)
        paths.append(path)
    return paths


def child_run(cmd: list[str]) -> tuple[float, float, str]:
    """(wall, CPU seconds from the OS, stdout) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, out


def plain(exe: Path, paths: list[Path]) -> dict:
    """The plain DP over every GPU type: objective, its own wall and CPU seconds, whole-process ones."""
    obj = secs = cpu = pwall = pcpu = 0.0
    for path in paths:
        wall, c, out = child_run([str(exe), str(path)])
        parts = out.split()
        obj += float(parts[0])
        secs += float(parts[1])
        cpu += float(parts[3])
        pwall += wall
        pcpu += c
    return {"objective": obj, "seconds": secs, "cpu_seconds": cpu, "process_wall": pwall, "process_cpu": pcpu}


def project(problem, runs: int) -> dict:
    """The project's DP over the GPU types: objective, median wall and CPU seconds, the last run's stats."""
    from unicron_plan.solvers import dp

    walls, cpus, obj, stats = [], [], 0.0, {}
    for _ in range(runs):
        stats = {}
        w0, c0 = time.perf_counter(), time.process_time()
        obj = 0.0
        for gtype, cap in problem.capacity.items():
            jobs = problem.jobs_of_type(gtype)
            if jobs:
                st: dict = {}
                obj += dp.solve_type(jobs, cap, st)[1]
                stats[gtype] = {k: v for k, v in st.items() if k in ("kept", "options", "bound_met", "reachable",
                                                                      "early_exit", "cores_skipped")}
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    return {"objective": obj, "seconds": statistics.median(walls), "cpu_seconds": statistics.median(cpus),
            "stats": stats}


def make_doc(kind: str, state: str, gpus: int, jobs: int, direct: bool = False) -> dict:
    """The instance of a row (seed 1). ``direct``: near-linear with placeholder tables (the multiples of 8,
    which is where jobs are placed) for :func:`direct_near_linear` to replace."""
    from unicron_plan.tools import generate

    if direct:
        real = generate.adversarial_curve

        def placeholder(kind, rng, tp, nominal, total_gpus, *rest):
            top = min(max(nominal, 8), max(total_gpus // 4, 8))
            return {str(c): 150.0 * c for c in range(8, top + 1, 8)}

        generate.adversarial_curve = placeholder
        try:
            doc = generate.generate_instance(1, gpus=gpus, jobs=jobs, curves=kind, placement="shuffled")
        finally:
            generate.adversarial_curve = real
    else:
        doc = generate.generate_instance(1, gpus=gpus, jobs=jobs, curves=kind, placement="shuffled")
    if state == "queued":
        for j in doc["jobs"]:
            j["current"] = {"gpus": 0, "nodes": []}
    return doc


def direct_near_linear(problem, total_gpus: int):
    """Replace each job's placeholder terms by the near-linear table (every count 1..C/4, 150 TFLOP/s
    per GPU with relative noise 1e-9, as ``generate --curves near-linear``) in arrays: at 131,072 GPUs
    its JSON would be about 1 GB (over the reader's limit) and the dict 10 GB."""
    import dataclasses

    from unicron_plan.core import cost

    rng = np.random.default_rng(1)
    top = max(total_gpus // 4, 1)
    y = np.arange(0, top + 1, dtype=np.int64)
    jobs = []
    for j in problem.jobs:
        tflops = 150.0 * y * (1.0 + 1e-9 * rng.uniform(-1.0, 1.0, size=len(y)))
        tflops[0] = 0.0
        f = cost.waf(j.weight, tflops)
        f_x = float(f[j.x]) if j.x else 0.0
        gains = cost.gain(f, y, j.x, f_x, j.hit, problem.d_run, j.d_trans, j.exiting)
        jobs.append(dataclasses.replace(j, table={}, counts=y, f=f, gains=gains, f_x=f_x))
    problem.jobs = jobs
    return problem


def time_limited(path: Path, limit: float) -> dict:
    """``api.solve(path, time_limit_seconds=limit)`` in a fresh process: wall seconds from the call."""
    code = ("import json, sys, time; from unicron_plan import api; t = time.perf_counter(); "
            f"p = api.solve(sys.argv[1], time_limit_seconds={limit!r}); w = time.perf_counter() - t; "
            "print(json.dumps({'wall_seconds': w, 'solution': p.status.solution, 'gap': p.gap}))")
    wall, cpu, out = child_run([sys.executable, "-c", code, str(path)])
    row = json.loads(out.strip().splitlines()[-1])
    row.update(process_wall=wall, process_cpu=cpu, limit_seconds=limit)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="16384x128,131072x1024", help="GPUSxJOBS[,GPUSxJOBS]")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--states", default="running,queued")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--process", action="store_true", help="also whole processes against the plain DP's")
    ap.add_argument("--time-limit", type=float, default=0.0, help="also api.solve under this limit (0: skip)")
    ap.add_argument("--plain-max-cells", type=float, default=2e10)
    ap.add_argument("--quick", action="store_true", help="16,384 x 128, one run, --process")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.quick:
        a.scale, a.runs, a.process = "16384x128", 1, True
    from unicron_plan import api
    from unicron_plan.core.problem import build_problem

    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        exe = build_plain(tmp)
        for scale in a.scale.split(","):
            gpus, njobs = map(int, scale.split("x"))
            for kind in a.kinds.split(","):
                for state in a.states.split(","):
                    if kind.startswith("queued-") and state != "queued":
                        continue
                    direct = kind == "near-linear" and gpus > 32768
                    doc = make_doc(kind, state, gpus, njobs, direct)
                    path = tmp / "instance.json"
                    if not direct:
                        path.write_text(json.dumps(doc))
                    problem = build_problem(api.load_instance(doc))
                    del doc
                    if direct:
                        problem = direct_near_linear(problem, gpus)
                    row = {"kind": kind, "state": state, "gpus": gpus, "jobs": njobs, "in_process_arrays": direct,
                           "options": int(sum(len(j.counts) for j in problem.jobs))}
                    row["dp"] = project(problem, a.runs)
                    cells = sum(cap * sum(len(j.counts) for j in problem.jobs_of_type(t))
                                for t, cap in problem.capacity.items())
                    paths = write_options(problem, tmp) if cells <= a.plain_max_cells else []
                    if paths:
                        row["plain"] = plain(exe, paths)
                        assert math.isclose(row["dp"]["objective"], row["plain"]["objective"], rel_tol=1e-9), row
                        row["dp_over_plain"] = row["dp"]["seconds"] / row["plain"]["seconds"]
                        row["dp_over_plain_cpu"] = row["dp"]["cpu_seconds"] / row["plain"]["cpu_seconds"]
                    del problem
                    if a.process and not direct:
                        cmd = [sys.executable, "-m", "unicron_plan.cli", "solve", str(path), "--out", os.devnull]
                        child_run(cmd)  # warm-up (file cache)
                        wall, cpu, _ = child_run(cmd)
                        row["process"] = {"wall": wall, "cpu": cpu}
                        if paths:
                            row["process_over_plain"] = wall / row["plain"]["process_wall"]
                            row["process_over_plain_cpu"] = cpu / row["plain"]["process_cpu"]
                    if a.time_limit and not direct:
                        row["time_limit"] = time_limited(path, a.time_limit)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    out = {"scales": a.scale, "runs": a.runs, "load_before": load_before, "load_after": os.getloadavg(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}
    print(f"load average before {load_before[0]:.1f}, after {out['load_after'][0]:.1f}", file=sys.stderr)
    print(f"{'kind':22s} {'state':8s} {'GPUs':>7s} {'dp s':>8s} {'plain s':>8s} {'dp/plain':>8s} "
          f"{'proc s':>7s} {'proc/plain':>10s}", file=sys.stderr)
    for r in rows:
        pl = r.get("plain", {}).get("seconds")
        print(f"{r['kind']:22s} {r['state']:8s} {r['gpus']:7d} {r['dp']['seconds']:8.4f} "
              f"{pl if pl is not None else float('nan'):8.3f} {r.get('dp_over_plain', float('nan')):8.3f} "
              f"{r.get('process', {}).get('wall', float('nan')):7.2f} {r.get('process_over_plain', float('nan')):10.2f}",
              file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
