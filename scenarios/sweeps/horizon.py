"""Run chosen points of ``horizon.yaml`` with the sweep's own seeds, then its table and plot.

    python scenarios/sweeps/horizon.py run OUT.jsonl [--gpus 128,1024] [--rate 6332.5] [--horizon event,job]
                                                     [--seeds 20] [--workers 2] [--start R]
                                                     [--reuse FILE ...] [--known-only]
    python scenarios/sweeps/horizon.py report FILE.jsonl [FILE.jsonl ...] [--plot docs/simulation-horizon.png]
    python scenarios/sweeps/horizon.py lifetimes --gpus 16384 --rate 6332.5 --horizon job [--seeds 5]

``run`` appends one JSON line per finished run: the point's parameters (``gpus``,
``node_mtbf_hours``, ``horizon``), the seed and the weighted TFLOP of every policy, so a long run
can be stopped and resumed (finished runs are skipped). The horizons of one size and rate share
their seeds (a paired comparison): those ``unicron-plan sweep`` gives the grid point with the
grid's first horizon (``unicron_plan.simulate.sweep.seeds_of``). Only ``unicron`` depends on the
horizon (the other policies never read it: greedy and equal-share ignore the objective), so each
seed runs the other six policies once and ``unicron`` once per horizon; with ``--reuse`` (and for
seeds the output file already holds under another horizon) their values are taken from those runs
and only ``unicron`` runs. A horizon label ``H-sev1`` runs ``cost.horizon: H`` with the planner's
node MTBF that of the failures that re-plan (node MTBF / SEV1 share; docs/model.md).
``report`` reads any number of such files (lines of the older format, which named only the
point's index in the grid of ``LEGACY_GRID``, are read through that grid) and prints, per size,
rate and horizon, unicron / each policy: mean, 95% interval, wins out of seeds; then, per size and
rate, the default horizon's unicron against greedy and its closest baseline with the paper's cluster
horizon beside it; then, on the seeds the horizons share, each horizon's unicron against the others'.
``lifetimes`` replays the first seeds of one size and rate with unicron alone and reports how long
an allocation the planner gave a job lasted (until the job's next change, or the end of the run),
by the event of the re-plan that gave it and whether that event hit the job.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from unicron_plan.io import read_json  # noqa: E402
from unicron_plan.simulate import sweep as sw  # noqa: E402

#: The grid the lines without parameters were written under: (GPUs, node MTBF h, horizon) per index.
LEGACY_GRID = [(g, r, h) for g, r, h in itertools.product((128, 1024, 16384, 131072), (6332.5, 1000.0),
                                                         ("cluster", "job"))]


def _points():
    spec, base_path = sw.load_sweep(HERE / "horizon.yaml")
    return spec, read_json(base_path), sw.grid_points(spec)


def _gpus(point) -> int:
    return int(Path(point["scenario"]).stem.split("-")[2])


def _key(gpus: int, rate: float, horizon: str) -> tuple:
    return int(gpus), float(rate), str(horizon)


def read_runs(paths) -> dict[tuple, dict[int, dict]]:
    """(GPUs, node MTBF h, horizon) -> seed -> weighted TFLOP per policy, from every file (a later line
    for the same point and seed replaces an earlier one)."""
    runs: dict[tuple, dict[int, dict]] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            if "horizon" in r:
                key = _key(r["gpus"], r["node_mtbf_hours"], r["horizon"])
            else:
                key = _key(*LEGACY_GRID[r["point"]])
            runs.setdefault(key, {})[int(r["seed"])] = r["weighted_tflop"]
    return runs


#: A horizon label's suffix that gives the planner the node MTBF of the failures that re-plan (SEV1):
#: ``event-sev1`` is ``cost.horizon: "event"`` with ``cost.node_mtbf_hours`` = node MTBF / SEV1 share.
SEV1_SUFFIX = "-sev1"


def horizon_patch(data: dict, label: str) -> dict:
    """The scenario fields a horizon label sets: ``cost.horizon``, and for a ``-sev1`` label the planner's
    node MTBF, that of SEV1 failures (docs/model.md, "Planning horizon")."""
    if not label.endswith(SEV1_SUFFIX):
        return {"cost.horizon": label}
    f = data["failures"]
    return {"cost.horizon": label[: -len(SEV1_SUFFIX)],
            "cost.node_mtbf_hours": float(f["node_mtbf_hours"]) / float(f["severity_mix"]["sev1"])}


def _task(data: dict, horizons: list[str], policies: list[str], seed: int,
          known: dict | None = None) -> dict[str, dict]:
    """One seed: the policies other than unicron once (or their ``known`` values, which no horizon
    changes), unicron under each horizon."""
    others = [p for p in policies if p != "unicron"]
    if known is not None and all(p in known for p in others):
        shared = {p: known[p] for p in others}
    else:
        shared = sw.run_task(sw.patched(data, horizon_patch(data, horizons[0])), others, seed) if others else {}
    out = {}
    for h in horizons:
        u = sw.run_task(sw.patched(data, horizon_patch(data, h)), ["unicron"], seed)
        out[h] = {p: (u["unicron"] if p == "unicron" else shared[p]) for p in policies}
    return out


def run(args) -> None:
    spec, base, points = _points()
    out = Path(args.out)
    done = set()
    known: dict[tuple, dict] = {}  # (GPUs, rate, seed) -> every policy's values of a finished run
    for key, seeds in read_runs([out] * out.exists() + list(args.reuse)).items():
        for s, values in seeds.items():
            known[(key[0], key[1], s)] = values
    if out.exists():
        for key, seeds in read_runs([out]).items():
            done.update((*key, s) for s in seeds)
    gpus = {int(g) for g in args.gpus.split(",")} if args.gpus else None
    rates = {float(r) for r in args.rate.split(",")} if args.rate else None
    grid_horizons = list(spec.grid.get("cost.horizon", ["event"]))
    horizons = args.horizon.split(",") if args.horizon else grid_horizons
    tasks = []  # (replication, gpus, rate, data, seed, horizons to run)
    seen = set()
    for p, point in enumerate(points):
        g, rate = _gpus(point), float(point["failures.node_mtbf_hours"])
        if (g, rate) in seen or gpus and g not in gpus or rates and rate not in rates:
            continue
        seen.add((g, rate))  # the first horizon's point: its seeds serve every horizon
        data = sw.patched(sw.base_of(point, base, HERE),
                          {k: v for k, v in point.items() if k not in ("scenario", "cost.horizon")})
        for r, seed in enumerate(sw.seeds_of(spec.seed, p, min(args.seeds, spec.replications.max))):
            todo = [h for h in horizons if (g, rate, h, seed) not in done]
            if args.known_only and (g, rate, seed) not in known:
                continue
            if todo and r >= args.start:
                tasks.append((r, g, rate, data, seed, todo))
    tasks.sort(key=lambda t: (t[0], t[1]))  # every point gets its first seeds before any gets its last
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=args.workers) as pool, out.open("a") as f:
        futures = {pool.submit(_task, data, todo, spec.policies, seed, known.get((g, rate, seed))): (r, g, rate, seed)
                   for r, g, rate, data, seed, todo in tasks}
        for fut in as_completed(futures):  # written as each finishes: a stopped run keeps them
            r, g, rate, seed = futures[fut]
            for h, values in fut.result().items():
                f.write(json.dumps({"gpus": g, "node_mtbf_hours": rate, "horizon": h, "replication": r,
                                    "seed": seed, "weighted_tflop": values}) + "\n")
            f.flush()


def _cell(s: dict) -> str:
    lo, hi = s["ci95"]
    return f"{s['mean']:.5f} [{lo:.5f}, {hi:.5f}] {s['wins']}/{s['n']}"


def report(args) -> None:
    spec, _, _ = _points()
    runs = read_runs(args.files)
    order = {h: k for k, h in enumerate(spec.grid.get("cost.horizon", []))}
    others = [n for n in spec.policies if n != "unicron"]
    rows = []
    for key in sorted(runs, key=lambda k: (k[0], -k[1], order.get(k[2], 99), k[2])):
        values = list(runs[key].values())
        rows.append({"gpus": key[0], "node_mtbf_hours": key[1], "horizon": key[2], "seeds": len(values),
                     "ratios": {n: sw.ratio_stats(values, n) for n in others}})
    print("| GPUs | node MTBF h | horizon | seeds | " + " | ".join(f"unicron / {n}" for n in others) + " |")
    print("|" + "---|" * (4 + len(others)))
    for r in rows:
        cells = [_cell(r["ratios"][n]) for n in others]
        print(f"| {r['gpus']:,} | {r['node_mtbf_hours']:g} | {r['horizon']} | {r['seeds']} | " + " | ".join(cells) + " |")
    # the simulator's default horizon against greedy and its closest baseline, the paper's beside it
    from unicron_plan.simulate.policies import DEFAULT_HORIZON

    by = {(r["gpus"], r["node_mtbf_hours"], r["horizon"]): r for r in rows}
    sizes = sorted({(r["gpus"], r["node_mtbf_hours"]) for r in rows}, key=lambda k: (k[0], -k[1]))
    baselines = [n for n in others if n != "greedy"]
    print(f"\n| GPUs | node MTBF h | seeds | unicron ({DEFAULT_HORIZON}) / greedy | "
          f"unicron ({DEFAULT_HORIZON}) / closest baseline | unicron (cluster, the paper's) / greedy |")
    print("|---|---|---|---|---|---|")
    for g, rate in sizes:
        d, c = by.get((g, rate, DEFAULT_HORIZON)), by.get((g, rate, "cluster"))
        if d is None:
            continue
        near = min(baselines, key=lambda n: d["ratios"][n]["mean"])
        paper = f"{_cell(c['ratios']['greedy'])}" if c else "not run"
        print(f"| {g:,} | {rate:g} | {d['seeds']} | {_cell(d['ratios']['greedy'])} | "
              f"{near}: {_cell(d['ratios'][near])} | {paper} |")
    # the horizons against each other, on the seeds they share
    pairs = []
    for (g, rate, h), seeds in runs.items():
        for (g2, rate2, h2), seeds2 in runs.items():
            if (g2, rate2) == (g, rate) and order.get(h, 99) < order.get(h2, 99):
                common = sorted(set(seeds) & set(seeds2))
                if common:
                    both = [{"unicron": seeds2[s]["unicron"], "other": seeds[s]["unicron"]} for s in common]
                    pairs.append((g, rate, h2, h, sw.ratio_stats(both, "other")))
    if pairs:
        print("\n| GPUs | node MTBF h | unicron under | / unicron under | same seeds: mean [95%] wins/seeds |")
        print("|---|---|---|---|---|")
        for g, rate, h2, h, s in sorted(pairs, key=lambda p: (p[0], -p[1], order.get(p[2], 99), order.get(p[3], 99))):
            print(f"| {g:,} | {rate:g} | {h2} | {h} | {_cell(s)} |")
    if args.plot:
        labels = sorted({r["horizon"] for r in rows}, key=lambda h: (order.get(h, 99), h))
        plot(rows, args.plot, labels)


def plot(rows, path, horizons) -> None:
    """unicron / greedy (mean, 95% interval) against cluster size, per failure rate, one line per horizon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = sorted({r["node_mtbf_hours"] for r in rows}, reverse=True)
    fig, axes = plt.subplots(1, len(rates), figsize=(5 * len(rates), 4), squeeze=False)
    shift = {h: 0.9 + 0.2 * k / max(len(horizons) - 1, 1) for k, h in enumerate(horizons)}
    for ax, rate in zip(axes[0], rates):
        for h, marker in zip(horizons, "osD^v"):
            sel = sorted((r for r in rows if r["horizon"] == h and r["node_mtbf_hours"] == rate),
                         key=lambda r: r["gpus"])
            sel = [r for r in sel if r["ratios"]["greedy"]["n"] > 1]
            if not sel:
                continue
            xs = [r["gpus"] * shift[h] for r in sel]
            ys = [r["ratios"]["greedy"]["mean"] for r in sel]
            err = [[y - r["ratios"]["greedy"]["ci95"][0] for y, r in zip(ys, sel)],
                   [r["ratios"]["greedy"]["ci95"][1] - y for y, r in zip(ys, sel)]]
            ax.errorbar(xs, ys, yerr=err, marker=marker, capsize=3, linestyle="-", label=f"horizon {h}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("unicron / greedy (mean, 95% interval)")
        ax.set_title(f"node MTBF {rate:g} h")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    from unicron_plan.io import save_figure_atomic

    save_figure_atomic(fig, path, dpi=110)
    plt.close(fig)


def lifetimes(args) -> None:
    """How long unicron's allocations lasted, by the kind of re-plan that made them (docs/model.md)."""
    import numpy as np

    from unicron_plan.simulate import policies
    from unicron_plan.simulate.run import load_scenario, simulate

    spec, base, points = _points()
    p, point = next((p, pt) for p, pt in enumerate(points)
                    if _gpus(pt) == int(args.gpus) and float(pt["failures.node_mtbf_hours"]) == float(args.rate))
    data = sw.patched(sw.base_of(point, base, HERE), {"failures.node_mtbf_hours": float(args.rate),
                                                      "cost.horizon": args.horizon})
    changes: list = []  # (time, job, event kind, hit) of every change of a job's allocation
    original = policies.UnicronPolicy.replan

    def replan(self, eng, failed, repaired, charge):
        before = {j.id: j.alloc for j in eng.jobs}
        _, hit = self.plan(eng, failed, repaired)
        original(self, eng, failed, repaired, charge)
        kind = "failure" if failed else "repair" if repaired else None
        for j in eng.jobs:
            old = before[j.id]
            if kind and (set(j.alloc) != set(old) or sum(j.alloc.values()) != sum(old.values())):
                changes.append((eng.t, j.id, kind, bool(hit[j.id])))

    policies.UnicronPolicy.replan = replan
    life: dict[tuple, list] = {}
    try:
        for seed in sw.seeds_of(spec.seed, p, args.seeds):
            changes.clear()
            simulate(load_scenario(data), ["unicron"], seed)
            end = float(data["duration_hours"]) * 3600.0
            per_job: dict[str, list] = {}
            for t, jid, kind, hit in changes:
                per_job.setdefault(jid, []).append((t, kind, hit))
            for seq in per_job.values():
                for (t, kind, hit), nxt in zip(seq, [c[0] for c in seq[1:]] + [end]):
                    life.setdefault((kind, hit), []).append((nxt - t) / 3600.0)
    finally:
        policies.UnicronPolicy.replan = original
    print(f"{args.gpus} GPUs, node MTBF {args.rate} h, horizon {args.horizon}, {args.seeds} seeds")
    for (kind, hit), v in sorted(life.items()):
        print(f"  after a {kind}, job {'hit' if hit else 'not hit'}: {len(v)} changes, lasted mean "
              f"{np.mean(v):.1f} h, median {np.median(v):.1f} h")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("--gpus", default=None, help="sizes to run, e.g. 128,1024 (default: all of the grid)")
    r.add_argument("--rate", default=None, help="node MTBF hours to run, e.g. 6332.5 (default: all)")
    r.add_argument("--horizon", default=None, help="horizons to run, e.g. event,job (default: the grid's)")
    r.add_argument("--seeds", type=int, default=20)
    r.add_argument("--workers", type=int, default=1)
    r.add_argument("--start", type=int, default=0, help="first replication to run (a second process can take later ones)")
    r.add_argument("--reuse", nargs="*", default=[],
                   help="result files whose runs of the same seed give the policies other than unicron")
    r.add_argument("--known-only", action="store_true",
                   help="run only the seeds whose other policies' values are known (a paired ablation)")
    p = sub.add_parser("report")
    p.add_argument("files", nargs="+")
    p.add_argument("--plot", default=None)
    lt = sub.add_parser("lifetimes")
    lt.add_argument("--gpus", required=True)
    lt.add_argument("--rate", required=True)
    lt.add_argument("--horizon", default="job")
    lt.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    {"run": run, "report": report, "lifetimes": lifetimes}[args.cmd](args)


if __name__ == "__main__":
    main()
