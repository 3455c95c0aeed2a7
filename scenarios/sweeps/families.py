"""Every planning horizon against greedy and the clairvoyant reference on the scenario families.

    python scenarios/sweeps/families.py run OUT.jsonl --gpus 1024 [--seeds 20] [--families jagged,...]
                                                    [--duration-hours 720] [--workers 2] [--start 0]
    python scenarios/sweeps/families.py report FILE.jsonl [FILE.jsonl ...] [--plot docs/simulation-families.png]

``run`` appends one JSON line per finished (family, size, seed): the scenario's parameters and the
weighted TFLOP of ``greedy``, of ``unicron`` under each horizon (``cluster``, ``job``, ``event``,
``lifetime``) and of the ``clairvoyant`` reference, all on the same events (a paired comparison).
Finished runs are skipped, so a long run can be stopped and resumed. Scenarios come from
``unicron_plan.tools.families`` (seed s of a family and size is always the same scenario).
``report`` prints, per family and size: each horizon's ratio to greedy (mean, 95% interval, seeds
at least as good), the lifetime horizon against each fixed horizon (seeds at least as good), and
the share of the greedy -> clairvoyant gap each horizon closes (sum over seeds of horizon - greedy
over the sum of clairvoyant - greedy).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

HORIZONS = ("cluster", "job", "event", "lifetime")
COLUMNS = ("greedy",) + HORIZONS + ("clairvoyant",)
TIE = 1e-12  # a relative difference below this is a tie (the runs are deterministic)


def run_one(family: str, gpus: int, seed: int, duration_hours: float) -> dict:
    """One line: every column's weighted TFLOP on the seed's events."""
    from unicron_plan.simulate.run import load_scenario, simulate
    from unicron_plan.tools.families import family_scenario

    data = family_scenario(family, seed, gpus, duration_hours=duration_hours)
    out = {}
    for column in COLUMNS:
        horizon = column if column in HORIZONS else "event"  # greedy and clairvoyant never read it
        policy = "unicron" if column in HORIZONS else column
        res = simulate(load_scenario(dict(data, cost={"horizon": horizon})), [policy], seed)
        out[column] = float(res["policies"][policy]["weighted_tflop"])
    return {"family": family, "gpus": gpus, "seed": seed, "duration_hours": duration_hours,
            "failures": data["failures"], "weighted_tflop": out}


def _task(args):
    return run_one(*args)


def read_lines(paths) -> list[dict]:
    out = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out[(r["family"], r["gpus"], r["seed"], r["duration_hours"])] = r
    return list(out.values())


def run(args) -> None:
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from unicron_plan.tools.families import FAMILIES

    out = Path(args.out)
    done = {(r["family"], r["gpus"], r["seed"], r["duration_hours"]) for r in read_lines([out] * out.exists())}
    families = args.families.split(",") if args.families else list(FAMILIES)
    tasks = [(f, int(g), s, args.duration_hours) for s in range(args.start, args.seeds)
             for g in args.gpus.split(",") for f in families if (f, int(g), s, args.duration_hours) not in done]
    with ProcessPoolExecutor(max_workers=args.workers) as pool, out.open("a") as fh:
        for fut in as_completed([pool.submit(_task, t) for t in tasks]):
            fh.write(json.dumps(fut.result(), sort_keys=True) + "\n")
            fh.flush()


def summarise(lines: list[dict]) -> list[dict]:
    """Per (family, GPUs, duration): each column's ratio to greedy and the lifetime horizon's comparisons."""
    import numpy as np
    from unicron_plan.simulate.run import _ci95

    groups: dict[tuple, list[dict]] = {}
    for r in lines:
        groups.setdefault((r["family"], r["gpus"], r["duration_hours"]), []).append(r["weighted_tflop"])
    rows = []
    for (family, gpus, hours), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        row = {"family": family, "gpus": gpus, "duration_hours": hours, "seeds": len(runs), "columns": {}}
        gap = sum(r["clairvoyant"] - r["greedy"] for r in runs)
        for c in COLUMNS[1:]:
            ratios = [r[c] / r["greedy"] for r in runs]
            lo, hi = _ci95(ratios)
            row["columns"][c] = {
                "mean": float(np.mean(ratios)), "ci95": [lo, hi],
                "at_least_greedy": sum(x >= 1 - TIE for x in ratios),
                "gap_closed": (sum(r[c] - r["greedy"] for r in runs) / gap) if gap > 0 else None}
        row["lifetime_at_least"] = {h: sum(r["lifetime"] >= r[h] * (1 - TIE) for r in runs) for h in HORIZONS[:3]}
        row["lifetime_at_least_best_fixed"] = sum(r["lifetime"] >= max(r[h] for h in HORIZONS[:3]) * (1 - TIE)
                                                  for r in runs)
        rows.append(row)
    return rows


def _pct(x: float) -> str:
    return f"{(x - 1) * 100:+.3f}%"


def table(rows: list[dict]) -> str:
    head = ("| family | GPUs | h | seeds | " + " | ".join(f"{c} / greedy" for c in COLUMNS[1:])
            + " | lifetime >= cluster / job / event / best fixed | gap closed: cluster / job / event / lifetime |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        cells = []
        for c in COLUMNS[1:]:
            s = row["columns"][c]
            cells.append(f"{_pct(s['mean'])} [{_pct(s['ci95'][0])}, {_pct(s['ci95'][1])}] "
                         f"({s['at_least_greedy']}/{row['seeds']})")
        at = row["lifetime_at_least"]
        gaps = [row["columns"][h]["gap_closed"] for h in HORIZONS]
        out.append(f"| {row['family']} | {row['gpus']:,} | {row['duration_hours']:g} | {row['seeds']} | "
                   + " | ".join(cells)
                   + f" | {at['cluster']} / {at['job']} / {at['event']} / {row['lifetime_at_least_best_fixed']} | "
                   + " / ".join("n/a" if g is None else f"{g:.2f}" for g in gaps) + " |")
    return "\n".join(out)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    labels = [f"{r['family']}\n{r['gpus']:,}" for r in rows]
    shown = COLUMNS[2:]  # the cluster horizon is 1-13% below greedy at 16,384 GPUs and up: in the table only
    width = 0.8 / len(shown)
    for k, c in enumerate(shown):
        means = [(r["columns"][c]["mean"] - 1) * 100 for r in rows]
        err = [[(r["columns"][c]["mean"] - r["columns"][c]["ci95"][0]) * 100 for r in rows],
               [(r["columns"][c]["ci95"][1] - r["columns"][c]["mean"]) * 100 for r in rows]]
        ax.bar([i + (k - 1.5) * width for i in range(len(rows))], means, width, yerr=err, label=c, capsize=2)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("weighted TFLOP vs greedy (%), mean and 95% interval")
    ax.set_title("unicron under each horizon and the clairvoyant reference, against greedy (cluster horizon: "
                 "see the table)", fontsize=9)
    ax.legend(fontsize=8, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("--gpus", default="1024")
    r.add_argument("--seeds", type=int, default=20)
    r.add_argument("--start", type=int, default=0)
    r.add_argument("--families", default="")
    r.add_argument("--duration-hours", type=float, default=720.0)
    r.add_argument("--workers", type=int, default=2)
    p = sub.add_parser("report")
    p.add_argument("files", nargs="+")
    p.add_argument("--plot", default="")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run(args)
        return
    rows = summarise(read_lines(args.files))
    print(table(rows))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
