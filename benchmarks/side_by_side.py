"""The backends side by side, whole processes: the project's DP, the plain C DP, HiGHS and CP-SAT.

    PYTHONPATH=. python benchmarks/side_by_side.py --quick                 # 16,384 x 128, two kinds
    PYTHONPATH=. python benchmarks/side_by_side.py --sizes 16384,131072 --json benchmarks/results-side-by-side.json
    PYTHONPATH=. python benchmarks/side_by_side.py --sizes 1048576 --kinds synthetic,model --json ...

Sizes: 16,384 GPUs x 128 jobs, 131,072 x 1,024 and 1,048,576 (131,072 nodes of 8) x 8,192. Kinds:
every ``generate --curves`` kind (``queued-*``: every job queued), seed 0, one failed node, running
jobs on nodes in a random order (``placement="shuffled"``, the generator's default), every table in
the compact form (``benchmarks/million.py``'s instances at 1,048,576). A kind whose tables would be
over the reader's 512 MiB limit at a size (``near-linear``: C/4 counts per job) is listed as not run,
with the reason. Per cell, each a whole process started under ``nice -n 10``, one at a time, with
the OS's accounting of that finished process (``os.wait4``: user + system CPU, peak RSS) and the
1-minute load average just before it:

* ``dp``: ``unicron-plan solve FILE --solver dp`` (exact), up to ``--runs`` runs within
  ``--repeat-budget`` seconds, medians;
* ``plain``: benchmarks/plain_dp.c built with ``gcc -O3 -march=native`` on the same Pareto counts
  (``dp_speed.write_options``), one process per GPU type, summed; ``--value-only`` (no choice table,
  no plan: the optimum's value) where its m (C + 1) 4-byte choice table is over ``--choice-max-bytes``;
  killed after ``--plain-timeout`` seconds (then recorded as not finished, never extrapolated);
* ``milp``, ``cpsat``: ``unicron-plan solve FILE --solver S --time-limit T`` (60 s), one run,
  killed ``--kill-after`` seconds past T.

Every answer's objective is compared with the DP's optimum (relative 1e-9): the plain DP's value and
the IP backends' plans. Results are merged into ``--json`` by (GPUs, kind) after every cell, so sizes
can be run separately. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

SIZES = {16_384: 128, 131_072: 1_024, 1_048_576: 8_192}
KINDS = ("synthetic", "model", "identical", "linear-step", "near-linear", "dense", "equal-per-gpu", "four-types",
         "queued-linear-step", "queued-equal-per-gpu", "queued-near-linear")
READER_MAX_ENTRIES = 20_000_000  # about 25 bytes of compact JSON per entry: over the reader's 512 MiB
REL = 1e-9


def cli() -> list[str]:
    exe = shutil.which("unicron-plan", path=str(Path(sys.executable).parent)) or shutil.which("unicron-plan")
    return [exe] if exe else [sys.executable, "-m", "unicron_plan.cli"]


def _session_cpu(sid: int) -> float:
    """User + system CPU seconds so far of the live processes of session ``sid`` (from /proc)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # fields after the name: state ppid pgrp session ... utime (12) stime (13)
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def run(cmd: list[str], timeout: float, nice: int, stdout: Path | None = None) -> dict:
    """One whole process under ``nice``: wall from spawn to exit, CPU and peak RSS from ``wait4``."""
    load = os.getloadavg()[0]
    out = open(stdout, "wb") if stdout else subprocess.DEVNULL
    err = tempfile.TemporaryFile()
    rss = tempfile.NamedTemporaryFile(suffix=".rss")
    start = time.perf_counter()
    # GNU time reports the command's own peak RSS (a process forked from this one would report this
    # process's); CPU comes from wait4, in microseconds.
    proc = subprocess.Popen(["/usr/bin/time", "-q", "-f", "%M", "-o", rss.name, "nice", "-n", str(nice), *cmd],
                            stdout=out, stderr=err, cwd=ROOT, start_new_session=True)
    killed = False
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - start > timeout and not killed:
            group_cpu = _session_cpu(proc.pid)  # a killed process's own accounting is lost with it
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
        time.sleep(0.02)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if stdout:
        out.close()
    err.seek(0)
    peak = Path(rss.name).read_text().split()
    row = {"cpu": ru.ru_utime + ru.ru_stime, "user": ru.ru_utime, "sys": ru.ru_stime, "wall": wall,
           "peak_mib": int(peak[-1]) / 1024 if peak and peak[-1].isdigit() else None, "rc": proc.returncode,
           "load_before": load}
    rss.close()
    if killed:
        row.update(killed_after_s=timeout, cpu=group_cpu)
    if proc.returncode and not killed:
        row["stderr"] = err.read()[-400:].decode(errors="replace")
    return row


def repeated(make_cmd, runs: int, budget: float, timeout: float, nice: int, stdout: Path | None = None) -> dict:
    """Up to ``runs`` runs while the elapsed wall stays under ``budget``: medians, and every run."""
    rows, t0 = [], time.perf_counter()
    while len(rows) < runs and (not rows or time.perf_counter() - t0 < budget):
        rows.append(run(make_cmd(), timeout, nice, stdout))
        if rows[-1]["rc"]:
            break
    med = {k: statistics.median(r[k] or 0.0 for r in rows) for k in ("cpu", "wall", "peak_mib")}
    return {**med, "runs": len(rows), "rc": rows[-1]["rc"], "each": rows}


def plan_fields(path: Path) -> dict:
    plan = json.loads(path.read_text())
    solver = plan.get("solver", {})
    opts = solver.get("options", {}) if isinstance(solver, dict) else {}
    keep = {k: v for k, v in opts.items() if k.endswith("_seconds") or k.endswith("_status")}
    return {"objective": plan["objective"], "bound": plan.get("bound"), "gap": plan.get("gap"),
            "solution": plan["status"]["solution"], "termination": plan["status"]["termination"], **keep}


def make_instance(gpus: int, jobs: int, kind: str, seed: int, path: Path) -> dict:
    from read_path import compact

    from unicron_plan.io import dumps, write_atomic
    from unicron_plan.tools.generate import generate_instance

    doc = compact(generate_instance(seed, gpus=gpus, jobs=jobs, curves=kind, placement="shuffled"))
    entries = sum(len(j["throughput"]["compact"]["counts"]) for j in doc["jobs"] if "compact" in j["throughput"])
    write_atomic(path, dumps(doc))
    return {"table_entries": entries, "bytes": path.stat().st_size}


def too_large(gpus: int, jobs: int, kind: str) -> str | None:
    """Why a kind is not run at a size (its instance over the reader's limit), or None."""
    if kind.endswith("near-linear") and jobs * (gpus // 4) > READER_MAX_ENTRIES:
        return (f"not run: near-linear tables hold C/4 = {gpus // 4:,} counts per job, {jobs * (gpus // 4):,} "
                "entries in all, JSON over the reader's 512 MiB limit")
    if kind == "dense" and gpus > 131_072:
        return ("not run: dense tables hold every count up to each job's largest (about 2e9 entries at this size, "
                "benchmarks/million.py), over the reader's limits")
    return None


def plain_inputs(path: Path, tmp: Path, choice_max: float) -> tuple[list[Path], bool, dict]:
    """The plain DP's inputs per GPU type, whether it runs value-only, and the loop's size."""
    import numpy as np

    from dp_speed import write_options
    from unicron_plan import api
    from unicron_plan.core.problem import build_problem
    from unicron_plan.solvers import dp

    problem = build_problem(api.load_instance(str(path)))
    choice = sum(4 * len(problem.jobs_of_type(t)) * (cap + 1) for t, cap in problem.capacity.items())
    cells = 0
    for t, cap in problem.capacity.items():
        for j in problem.jobs_of_type(t):
            y, _ = dp.pareto_options(j)
            cells += int(np.maximum(cap - y + 1, 0).sum())
    paths = write_options(problem, tmp)
    return paths, choice > choice_max, {"cells": cells, "choice_table_bytes": choice}


def plain(exe: Path, paths: list[Path], value_only: bool, runs: int, budget: float, timeout: float,
          nice: int, tmp: Path) -> dict:
    """The plain DP over every GPU type (one process each): summed medians and the summed objective."""
    total = {"cpu": 0.0, "wall": 0.0, "peak_mib": 0.0, "objective": 0.0, "dp_seconds": 0.0, "runs": runs}
    for n, p in enumerate(paths):
        out = tmp / f"plain-{n}.txt"
        cmd = [str(exe), str(p)] + (["--value-only"] if value_only else [])
        r = repeated(lambda: cmd, runs, budget, timeout, nice, out)
        if r["each"][-1].get("killed_after_s") or r["rc"]:
            return {"finished": False, "killed_after_s": timeout, "rc": r["rc"], "cpu_until_killed": r["cpu"],
                    "types_done": n, "value_only": value_only, "load_before": r["each"][0]["load_before"]}
        parts = out.read_text().split()
        total["objective"] += float(parts[0])
        total["dp_seconds"] += float(parts[3])
        total["cpu"] += r["cpu"]
        total["wall"] += r["wall"]
        total["peak_mib"] = max(total["peak_mib"], r["peak_mib"])
        total["runs"] = min(total["runs"], r["runs"])
        total.setdefault("load_before", r["each"][0]["load_before"])
    return {"finished": True, "value_only": value_only, **total}


def same(a: float | None, b: float | None) -> bool | None:
    if a is None or b is None:
        return None
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-6)


def cell(gpus: int, jobs: int, kind: str, a, exe: Path, tmp: Path) -> dict:
    row: dict = {"gpus": gpus, "jobs": jobs, "kind": kind, "seed": a.seed, "placement": "shuffled"}
    reason = too_large(gpus, jobs, kind)
    if reason:
        return {**row, "not_run": reason}
    inst = tmp / "instance.json"
    row["instance"] = make_instance(gpus, jobs, kind, a.seed, inst)
    big = gpus > 131_072
    runs = 1 if big else a.runs
    plan = tmp / "plan.json"
    base = cli() + ["solve", str(inst), "--out", str(plan)]
    row["dp"] = repeated(lambda: base + ["--solver", "dp"], runs, a.repeat_budget, a.dp_timeout, a.nice)
    if row["dp"]["rc"]:
        return row
    row["dp"].update(plan_fields(plan))
    opt = row["dp"]["objective"] if row["dp"]["solution"] == "optimal" else None
    if "plain" in a.backends:
        paths, value_only, size = plain_inputs(inst, tmp, a.choice_max_bytes)
        if size["cells"] > a.plain_max_cells:
            row["plain"] = {**size, "finished": False, "value_only": value_only,
                            "not_run": f"not run: its loop has {size['cells']:.3g} cells, over this pass's budget "
                                       f"of {a.plain_max_cells:.3g}"}
        else:
            row["plain"] = {**size, **plain(exe, paths, value_only, runs, a.repeat_budget, a.plain_timeout,
                                            a.nice, tmp)}
        if row["plain"].get("finished"):
            row["plain"]["equals_dp"] = same(row["plain"]["objective"], opt)
            row["dp_over_plain_cpu"] = row["dp"]["cpu"] / row["plain"]["cpu"]
        for p in paths:
            p.unlink()
    for solver in ("milp", "cpsat"):
        if solver not in a.backends:
            continue
        r = run(base + ["--solver", solver, "--time-limit", str(a.time_limit)], a.time_limit + a.kill_after,
                a.nice)
        if not r["rc"]:
            r.update(plan_fields(plan))
            r["equals_dp"] = same(r["objective"], opt)
        row[solver] = {"time_limit": a.time_limit, **r}
    inst.unlink()
    return row


def merge(path: Path, row: dict) -> None:
    """Replace the cell of the same (GPUs, kind) in ``path``, or add it."""
    old = json.loads(path.read_text()) if path.exists() else {"cells": []}
    cells = [c for c in old["cells"] if (c["gpus"], c["kind"]) != (row["gpus"], row["kind"])] + [row]
    cells.sort(key=lambda c: (c["gpus"], KINDS.index(c["kind"]) if c["kind"] in KINDS else 99))
    path.write_text(json.dumps({"method": __doc__.split("\n\n")[2].strip(), "cells": cells}, indent=1) + "\n")


def summary(r: dict) -> str:
    if "not_run" in r:
        return f"{r['gpus']:>9,} {r['kind']:22s} {r['not_run']}"
    parts = [f"{r['gpus']:>9,} {r['kind']:22s} dp {r['dp']['cpu']:.2f}s {r['dp'].get('solution')}"]
    p = r.get("plain")
    if p:
        parts.append(f"plain {p['cpu']:.2f}s eq={p.get('equals_dp')}" if p.get("finished") else
                     p.get("not_run", f"plain killed after {p.get('cpu_until_killed', 0):.0f} s CPU"))
    for s in ("milp", "cpsat"):
        if s in r:
            parts.append(f"{s} {r[s]['cpu']:.1f}s/{r[s]['wall']:.1f}w {r[s].get('solution')} eq={r[s].get('equals_dp')}")
    return "  ".join(parts)


def _ip(r: dict | None) -> str:
    if r is None:
        return "not run"
    if r["rc"]:
        return f"exit {r['rc']}" + (f" (killed after {r['killed_after_s']:.0f} s)" if "killed_after_s" in r else "")
    engine = r.get("highs_status") or r.get("cpsat_status") or "-"
    eq = {True: "= dp", False: "**differs from dp**", None: "dp not optimal"}[r.get("equals_dp")]
    return (f"{r['cpu']:.1f} / {r['wall']:.1f} / {r['peak_mib']:.0f}; {engine}; {r['solution']}, {eq}")


def table(path: Path) -> str:
    """The cells of a results file as one markdown table (the docs' side-by-side table)."""
    cells = json.loads(path.read_text())["cells"]
    limit = "/".join(f"{t:g}" for t in sorted({c[s]["time_limit"] for c in cells for s in ("milp", "cpsat") if s in c}))
    lines = ["| GPUs x jobs | kind | dp exact: CPU s / peak MiB | plain C DP: CPU s / peak MiB | dp / plain (CPU) "
             f"| milp T = {limit} s: CPU s / wall s / peak MiB; HiGHS; answer | cpsat T = {limit} s: CPU s / wall s / "
             "peak MiB; CP-SAT; answer | load (1-min) |",
             "| --- | --- | ---: | ---: | ---: | --- | --- | ---: |"]
    for c in cells:
        head = f"| {c['gpus']:,} x {c['jobs']:,} | {c['kind']} |"
        if "not_run" in c:
            lines.append(f"{head} {c['not_run']} | | | | | |")
            continue
        d, p = c["dp"], c.get("plain")
        dp_cell = f"**{d['cpu']:.2f}** / {d['peak_mib']:.0f} ({d['runs']} run{'s' if d['runs'] > 1 else ''}, {d['solution']})"
        if p is None:
            plain_cell = "not run"
        elif "not_run" in p:
            plain_cell = p["not_run"]
        elif not p["finished"]:
            cpu = "CPU not recorded" if p["cpu_until_killed"] is None else f"{p['cpu_until_killed']:.0f} s of CPU"
            plain_cell = f"not finished: killed after {p['killed_after_s']:.0f} s of wall, {cpu} ({p['cells']:.3g} cells)"
        else:
            eq = "= dp" if p["equals_dp"] else "**differs from dp**" if p["equals_dp"] is False else "dp not optimal"
            plain_cell = (f"{p['cpu']:.3g} / {p['peak_mib']:.0f}{' value-only' if p['value_only'] else ''}, "
                          f"{p['cells']:.3g} cells, {eq}")
        ratio = f"{c['dp_over_plain_cpu']:.3g}" if "dp_over_plain_cpu" in c else "-"
        loads = [r["load_before"] for k in ("dp", "plain", "milp", "cpsat") if isinstance(c.get(k), dict)
                 for r in c[k].get("each", [c[k]]) if "load_before" in r]
        load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"
        lines.append(f"{head} {dp_cell} | {plain_cell} | {ratio} | {_ip(c.get('milp'))} | {_ip(c.get('cpsat'))} "
                     f"| {load} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16384,131072,1048576", help="GPUs, comma-separated (of 16384, 131072, 1048576)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--backends", default="dp,plain,milp,cpsat", help="dp always runs (the reference)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3, help="dp and plain runs per cell (1 at 1,048,576)")
    ap.add_argument("--repeat-budget", type=float, default=30.0, help="no further run once this much wall has passed")
    ap.add_argument("--time-limit", type=float, default=60.0, help="the IP backends' --time-limit")
    ap.add_argument("--kill-after", type=float, default=120.0, help="seconds past the time limit an IP run is killed")
    ap.add_argument("--dp-timeout", type=float, default=600.0)
    ap.add_argument("--plain-timeout", type=float, default=900.0)
    ap.add_argument("--choice-max-bytes", type=float, default=4 * 2**30)
    ap.add_argument("--plain-max-cells", type=float, default=1e13, help="the plain DP is not run on a larger loop")
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="16,384 x 128, synthetic and linear-step, one run, T = 10 s")
    ap.add_argument("--json")
    ap.add_argument("--table", metavar="RESULTS", help="print RESULTS' cells as a markdown table and exit")
    a = ap.parse_args()
    if a.table:
        print(table(Path(a.table)))
        return
    if a.quick:
        a.sizes, a.runs, a.time_limit = "16384", 1, 10.0
        a.kinds = "synthetic,linear-step" if a.kinds == ",".join(KINDS) else a.kinds
    a.backends = set(a.backends.split(","))
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        exe = tmp / "plain_dp"
        subprocess.run(["gcc", "-O3", "-march=native", "-o", str(exe), str(HERE / "plain_dp.c"), "-lm"], check=True)
        for gpus in map(int, a.sizes.split(",")):
            for kind in a.kinds.split(","):
                start = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
                r = cell(gpus, SIZES[gpus], kind, a, exe, tmp)
                r["measured"] = {"utc": f"{start}-{time.strftime('%H:%M', time.gmtime())}", "cpus": os.cpu_count(),
                                 "load_after": os.getloadavg()[0]}
                print(summary(r), flush=True)
                if a.json:
                    merge(Path(a.json), r)


if __name__ == "__main__":
    main()
