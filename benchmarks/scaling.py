"""How the DP's cost grows with GPUs and jobs: a sweep over generated jagged instances.

    PYTHONPATH=. python benchmarks/scaling.py [--quick]

Writes benchmarks/scaling.json (every run's seconds, medians) and
docs/scaling.png. For each size: the pruned DP's solve time, the plain
reference DP's (one run: it grows as C x sum of counts), and the
whole api.solve (build, DP, placement, validation), medians of ``RUNS`` runs.
The objectives of both DPs are checked equal.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

from unicron_plan import api
from unicron_plan.tools.generate import generate_instance
from unicron_plan.io import dumps, write_atomic
from unicron_plan.core.problem import build_problem
from unicron_plan.solvers import dp

ROOT = Path(__file__).resolve().parent.parent
RUNS = 3
REF_MAX_GPUS = 131072


def _median_time(fn, runs):
    ts, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), ts, out


def measure(gpus: int, jobs: int, seed: int = 1, runs: int = RUNS) -> dict:
    """One sweep point."""
    inst = api.load_instance(generate_instance(seed, gpus=gpus, jobs=jobs))
    problem = build_problem(inst)
    cap = problem.capacity["a800"]
    stats: dict = {}
    dp.solve_type(problem.jobs, cap, stats)
    t_dp, ts_dp, (_, v_dp) = _median_time(lambda: dp.solve_type(problem.jobs, cap), runs)
    row = {"gpus": gpus, "jobs": jobs, "seed": seed, "options": int(sum(len(j.counts) for j in problem.jobs)),
           "pareto": stats.get("options"), "kept": stats.get("kept"), "dp_seconds": ts_dp,
           "dp_median": t_dp, "objective": v_dp}
    t_all, ts_all, _ = _median_time(lambda: api.solve(inst), runs)
    row.update(total_seconds=ts_all, total_median=t_all)
    if gpus <= REF_MAX_GPUS:
        t_ref, ts_ref, (_, v_ref) = _median_time(lambda: dp.solve_type_reference(problem.jobs, cap), 1)
        assert math.isclose(v_ref, v_dp, rel_tol=1e-12), (gpus, jobs, v_ref, v_dp)
        row.update(reference_seconds=ts_ref, reference_median=t_ref)
    print(row["gpus"], row["jobs"], f"dp {t_dp:.4f}", f"total {t_all:.3f}",
          f"ref {row.get('reference_median', float('nan')):.3f}", flush=True)
    return row


def plot(rows_gpus, rows_jobs, path: Path) -> None:
    """Two panels: time vs GPUs (jobs = GPUs / 128) and time vs jobs (16,384 GPUs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, rows, key, label in ((axes[0], rows_gpus, "gpus", "GPUs (jobs = GPUs / 128)"),
                                 (axes[1], rows_jobs, "jobs", "jobs (16,384 GPUs)")):
        x = [r[key] for r in rows]
        ax.loglog(x, [r["dp_median"] for r in rows], "o-", label="dp solve (pruned)")
        ax.loglog(x, [r["total_median"] for r in rows], "s-", label="api.solve total (build+dp+place+validate)")
        xr = [r[key] for r in rows if "reference_median" in r]
        ax.loglog(xr, [r["reference_median"] for r in rows if "reference_median" in r], "^--",
                  label="plain reference DP")
        ax.set_xlabel(label)
        ax.set_ylabel("seconds (median)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].axhline(0.3, color="grey", lw=0.8, ls=":")
    axes[0].axhline(10.0, color="grey", lw=0.8, ls=":")
    axes[0].legend(fontsize=8)
    fig.suptitle("unicron-plan exact DP on jagged generated instances (2-core VM, medians)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    """Run the sweep, write the JSON and the plot."""
    import argparse

    ap = argparse.ArgumentParser(description="DP and api.solve times vs GPUs and jobs; rewrites "
                                             "benchmarks/scaling.json and docs/scaling.png.")
    ap.add_argument("--quick", action="store_true", help="fewer, smaller sizes")
    quick = ap.parse_args().quick
    gpu_sizes = [2048, 8192, 16384] if quick else [2048, 4096, 8192, 16384, 32768, 65536, 131072]
    job_sizes = [16, 64, 128] if quick else [16, 32, 64, 128, 256, 512, 1024]
    rows_gpus = [measure(g, g // 128) for g in gpu_sizes]
    rows_jobs = [measure(16384, j) for j in job_sizes]
    write_atomic(ROOT / "benchmarks" / "scaling.json",
                 dumps({"runs": RUNS, "by_gpus": rows_gpus, "by_jobs": rows_jobs}))
    plot(rows_gpus, rows_jobs, ROOT / "docs" / "scaling.png")


if __name__ == "__main__":
    main()
