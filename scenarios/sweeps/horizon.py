"""Run chosen points of ``horizon.yaml`` with the sweep's own seeds, then its table and plot.

    python scenarios/sweeps/horizon.py run OUT.jsonl [--gpus 128,1024] [--rate 6332.5] [--seeds 20] [--workers 1] [--start R]
    python scenarios/sweeps/horizon.py report OUT.jsonl [--plot docs/simulation-horizon.png]

``run`` appends one JSON line per finished run (point index, seed, weighted TFLOP per policy), so
a long run can be stopped and resumed (finished runs are skipped); seeds are those
``unicron-plan sweep`` gives the same point (``unicron_plan.simulate.sweep.seeds_of``).
``report`` prints, per point, unicron / each policy: mean, 95% interval, wins out of seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from unicron_plan.io import read_json  # noqa: E402
from unicron_plan.simulate import sweep as sw  # noqa: E402


def _points():
    spec, base_path = sw.load_sweep(HERE / "horizon.yaml")
    return spec, read_json(base_path), sw.grid_points(spec)


def _gpus(point) -> int:
    return int(Path(point["scenario"]).stem.split("-")[2])


def run(args) -> None:
    spec, base, points = _points()
    done = set()
    out = Path(args.out)
    if out.exists():
        done = {(r["point"], r["seed"]) for r in map(json.loads, out.read_text().splitlines()) if r}
    gpus = {int(g) for g in args.gpus.split(",")} if args.gpus else None
    rates = {float(r) for r in args.rate.split(",")} if args.rate else None
    tasks = []  # (replication, point, data, seed)
    for p, point in enumerate(points):
        if gpus and _gpus(point) not in gpus or rates and point["failures.node_mtbf_hours"] not in rates:
            continue
        data = sw.patched(sw.base_of(point, base, HERE), {k: v for k, v in point.items() if k != "scenario"})
        for r, seed in enumerate(sw.seeds_of(spec.seed, p, min(args.seeds, spec.replications.max))):
            if (p, seed) not in done and r >= args.start:
                tasks.append((r, p, data, seed))
    tasks.sort(key=lambda t: (t[0], t[1]))  # every point gets its first seeds before any gets its last
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=args.workers) as pool, out.open("a") as f:
        futures = [(p, seed, pool.submit(sw.run_task, data, spec.policies, seed)) for _, p, data, seed in tasks]
        for p, seed, fut in futures:
            f.write(json.dumps({"point": p, "seed": seed, "weighted_tflop": fut.result()}) + "\n")
            f.flush()


def report(args) -> None:
    spec, _, points = _points()
    runs: dict[int, list] = {}
    for line in Path(args.out).read_text().splitlines():
        r = json.loads(line)
        runs.setdefault(r["point"], []).append(r["weighted_tflop"])
    rows = []
    for p in sorted(runs):
        point = points[p]
        ratios = {name: sw.ratio_stats(runs[p], name) for name in spec.policies if name != "unicron"}
        rows.append({"gpus": _gpus(point), "node_mtbf_hours": point["failures.node_mtbf_hours"],
                     "horizon": point["cost.horizon"], "seeds": len(runs[p]), "ratios": ratios})
    others = [n for n in spec.policies if n != "unicron"]
    print("| GPUs | node MTBF h | horizon | seeds | " + " | ".join(f"unicron / {n}" for n in others) + " |")
    print("|" + "---|" * (4 + len(others)))
    for r in rows:
        cells = []
        for n in others:
            s = r["ratios"][n]
            lo, hi = s["ci95"]
            cells.append(f"{s['mean']:.5f} [{lo:.5f}, {hi:.5f}] {s['wins']}/{s['n']}")
        print(f"| {r['gpus']:,} | {r['node_mtbf_hours']:g} | {r['horizon']} | {r['seeds']} | " + " | ".join(cells) + " |")
    if args.plot:
        plot(rows, args.plot)


def plot(rows, path) -> None:
    """unicron / greedy (mean, 95% interval) against cluster size, per horizon and failure rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=False)
    for ax, name in zip(axes, ("greedy", "equal-share")):
        for (hz, rate), marker in zip([(h, r) for r in (6332.5, 1000) for h in ("cluster", "job")], "osDv"):
            sel = sorted((r for r in rows if r["horizon"] == hz and r["node_mtbf_hours"] == rate),
                         key=lambda r: r["gpus"])
            if not sel:
                continue
            xs = [r["gpus"] * (0.93 if hz == "cluster" else 1.07) for r in sel]
            ys = [r["ratios"][name]["mean"] for r in sel]
            err = [[y - r["ratios"][name]["ci95"][0] for y, r in zip(ys, sel)],
                   [r["ratios"][name]["ci95"][1] - y for y, r in zip(ys, sel)]]
            ax.errorbar(xs, ys, yerr=err, marker=marker, capsize=3, linestyle="-",
                        label=f"horizon {hz}, node MTBF {rate:g} h")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.set_ylabel(f"unicron / {name} (mean, 95% CI)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    from unicron_plan.io import save_figure_atomic

    save_figure_atomic(fig, path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("--gpus", default=None)
    r.add_argument("--rate", default=None)
    r.add_argument("--seeds", type=int, default=20)
    r.add_argument("--workers", type=int, default=1)
    r.add_argument("--start", type=int, default=0, help="first replication to run (a second process can take later ones)")
    p = sub.add_parser("report")
    p.add_argument("out")
    p.add_argument("--plot", default=None)
    args = ap.parse_args()
    run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    main()
