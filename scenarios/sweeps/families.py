"""Every planning horizon against greedy, the clairvoyant policy and an upper bound on the scenario families.

    python scenarios/sweeps/families.py run OUT.jsonl --gpus 1024 [--seeds 20] [--families jagged,...]
                                                    [--duration-hours 720] [--workers 2] [--start 0]
                                                    [--columns greedy,...,bound] [--charged-setup]
    python scenarios/sweeps/families.py report FILE.jsonl [FILE.jsonl ...] [--plot docs/simulation-families.png]

``run`` writes one JSON line per (family, size, seed): the scenario's parameters and the weighted
TFLOP of ``greedy``, of ``unicron`` under each horizon (``cluster``, ``job``, ``event``,
``lifetime``), of the ``lookahead`` and ``rollout`` policies, of the ``clairvoyant`` policy and the ``bound``
(``unicron_plan.simulate.bound``: no policy earns more), all on the same events (a paired
comparison). Columns a line already has are kept (the runs are deterministic) and only the missing
ones of ``--columns`` are run; the line is appended again with them, and the last line of a key
wins. Scenarios come from ``unicron_plan.tools.families`` (seed s of a family and size is always
the same scenario). ``report`` prints, per family and size: each column's ratio to greedy (mean,
95% interval, seeds at least as good), the lifetime horizon, the lookahead and the rollout against each fixed
horizon (seeds at least as good), and the share of the greedy -> bound gap each closes (sum over
seeds of column - greedy over the sum of bound - greedy).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

HORIZONS = ("cluster", "job", "event", "lifetime")
FIXED = HORIZONS[:3]
POLICY_COLUMNS = ("greedy",) + HORIZONS + ("lookahead", "rollout", "rollout-to-end", "clairvoyant")
COLUMNS = POLICY_COLUMNS + ("bound",)
DERIVED = ("lifetime", "lookahead", "rollout", "rollout-to-end")  # compared with every fixed horizon
TIE = 1e-12  # a relative difference below this is a tie (the runs are deterministic)


def run_one(family: str, gpus: int, seed: int, duration_hours: float, columns=COLUMNS, have=None,
            charged_setup: bool = False) -> dict:
    """One line: the weighted TFLOP of each of ``columns`` on the seed's events (with those in ``have``);
    ``charged_setup``: every planner plans the time-0 allocation with the transitions the instance would
    charge (``PlannerPolicy.free_setup`` False), as the runs before 2026-12-05 did."""
    import numpy as np
    from unicron_plan.simulate.bound import upper_bound
    from unicron_plan.simulate.policies import PlannerPolicy, make_policy

    PlannerPolicy.free_setup = not charged_setup
    from unicron_plan.simulate.run import load_scenario, simulate
    from unicron_plan.simulate.trace import draw_events
    from unicron_plan.tools.families import family_scenario

    data = family_scenario(family, seed, gpus, duration_hours=duration_hours)
    out = dict(have or {})
    for column in columns:
        if column in out:
            continue
        if column == "bound":
            sc = load_scenario(data)
            factor = max(make_policy("unicron" if c in HORIZONS else c, sc).healthy_factor() for c in POLICY_COLUMNS)
            out[column] = upper_bound(sc, draw_events(sc, np.random.default_rng(seed)), factor)
            continue
        horizon = column if column in HORIZONS else "event"  # the other policies never read it
        policy = "unicron" if column in HORIZONS else column
        res = simulate(load_scenario(dict(data, cost={"horizon": horizon})), [policy], seed)
        out[column] = float(res["policies"][policy]["weighted_tflop"])
    line = {"family": family, "gpus": gpus, "seed": seed, "duration_hours": duration_hours,
            "failures": data["failures"], "weighted_tflop": out}
    if charged_setup:
        line["charged_setup"] = True
    return line


def _task(args):
    return run_one(*args)


def _key(r: dict) -> tuple:
    return r["family"], r["gpus"], r["seed"], r["duration_hours"], r.get("charged_setup", False)


def read_lines(paths) -> list[dict]:
    out = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out[_key(r)] = r
    return list(out.values())


def run(args) -> None:
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from unicron_plan.tools.families import FAMILIES

    out = Path(args.out)
    columns = tuple(args.columns.split(",")) if args.columns else COLUMNS
    unknown = sorted(set(columns) - set(COLUMNS))
    if unknown:
        raise SystemExit(f"--columns: unknown {', '.join(unknown)}; valid: {', '.join(COLUMNS)}")
    have = {_key(r): r["weighted_tflop"] for r in read_lines([out] * out.exists())}
    families = args.families.split(",") if args.families else list(FAMILIES)
    keys = [(f, int(g), s, args.duration_hours, args.charged_setup) for s in range(args.start, args.seeds)
            for g in args.gpus.split(",") for f in families]
    tasks = [k[:4] + (columns, have.get(k), args.charged_setup) for k in keys
             if not set(columns) <= set(have.get(k, {}))]
    with out.open("a") as fh:
        if args.workers <= 1:  # in this process, one after the other
            for t in tasks:
                fh.write(json.dumps(_task(t), sort_keys=True) + "\n")
                fh.flush()
        else:
            with ProcessPoolExecutor(max_workers=args.workers) as pool:
                for fut in as_completed([pool.submit(_task, t) for t in tasks]):
                    fh.write(json.dumps(fut.result(), sort_keys=True) + "\n")
                    fh.flush()
    compact(out)


def compact(path: Path) -> None:
    """Rewrite ``path`` with one line per key (the last), in key order."""
    lines = sorted(read_lines([path]), key=lambda r: (r["gpus"], r["family"], r["seed"], r["duration_hours"],
                                                     r.get("charged_setup", False)))
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))


def summarise(lines: list[dict]) -> list[dict]:
    """Per (family, GPUs, duration): each column's ratio to greedy (where every seed has it), the derived
    models' seed-by-seed comparisons with the fixed horizons and the gap to the bound each column closes."""
    import numpy as np
    from unicron_plan.simulate.run import _ci95

    groups: dict[tuple, list[dict]] = {}
    if len({r.get("charged_setup", False) for r in lines}) > 1:
        raise SystemExit("report one kind of run at a time (with or without --charged-setup)")
    for r in lines:
        groups.setdefault((r["family"], r["gpus"], r["duration_hours"]), []).append(r["weighted_tflop"])
    rows = []
    for (family, gpus, hours), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        row = {"family": family, "gpus": gpus, "duration_hours": hours, "seeds": len(runs), "columns": {},
               "at_least": {}, "at_least_best_fixed": {}}
        bounded = all("bound" in r for r in runs)
        gap = sum(r["bound"] - r["greedy"] for r in runs) if bounded else 0.0
        for c in COLUMNS[1:]:
            if not all(c in r for r in runs):  # a column not run at this size
                continue
            ratios = [r[c] / r["greedy"] for r in runs]
            lo, hi = _ci95(ratios)
            row["columns"][c] = {
                "mean": float(np.mean(ratios)), "ci95": [lo, hi],
                "at_least_greedy": sum(x >= 1 - TIE for x in ratios),
                "gap_closed": (sum(r[c] - r["greedy"] for r in runs) / gap) if gap > 0 else None}
        for d in DERIVED:
            if d in row["columns"] and all(h in row["columns"] for h in FIXED):
                row["at_least"][d] = {h: sum(r[d] >= r[h] * (1 - TIE) for r in runs) for h in FIXED}
                row["at_least_best_fixed"][d] = sum(r[d] >= max(r[h] for h in FIXED) * (1 - TIE) for r in runs)
        rows.append(row)
    return rows


def _pct(x: float) -> str:
    return f"{(x - 1) * 100:+.3f}%"


def table(rows: list[dict]) -> str:
    """Two markdown tables: each column against greedy; the derived horizons seed by seed and the gap closed."""
    shown = COLUMNS[1:]
    head = "| family | GPUs | h | seeds | " + " | ".join(f"{c} / greedy" for c in shown) + " |"
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        cells = []
        for c in shown:
            s = row["columns"].get(c)
            cells.append("n/a" if s is None else f"{_pct(s['mean'])} [{_pct(s['ci95'][0])}, {_pct(s['ci95'][1])}] "
                                                 f"({s['at_least_greedy']}/{row['seeds']})")
        out.append(f"| {row['family']} | {row['gpus']:,} | {row['duration_hours']:g} | {row['seeds']} | "
                   + " | ".join(cells) + " |")
    gapped = COLUMNS[1:-1]
    head = ("| family | GPUs | seeds | " + " | ".join(f"{d} >= cluster / job / event / best fixed" for d in DERIVED)
            + " | gap to the bound closed: " + " / ".join(gapped) + " |")
    out += ["", head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        cells = []
        for d in DERIVED:
            at = row["at_least"].get(d)
            cells.append("n/a" if at is None else
                         f"{at['cluster']} / {at['job']} / {at['event']} / {row['at_least_best_fixed'][d]}")
        gaps = [row["columns"].get(c, {}).get("gap_closed") for c in gapped]
        out.append(f"| {row['family']} | {row['gpus']:,} | {row['seeds']} | " + " | ".join(cells) + " | "
                   + " / ".join("n/a" if g is None else f"{g:.3f}" for g in gaps) + " |")
    return "\n".join(out)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    labels = [f"{r['family']}\n{r['gpus']:,}" for r in rows]
    # the cluster horizon is 1-9% below greedy at 16,384 GPUs and up, the bound far above: in the table only
    shown = ("job", "event", "lifetime", "lookahead", "rollout", "clairvoyant")
    width = 0.8 / len(shown)
    for k, c in enumerate(shown):
        idx = [i for i, r in enumerate(rows) if c in r["columns"]]
        cols = [rows[i]["columns"][c] for i in idx]
        means = [(s["mean"] - 1) * 100 for s in cols]
        err = [[(s["mean"] - s["ci95"][0]) * 100 for s in cols], [(s["ci95"][1] - s["mean"]) * 100 for s in cols]]
        ax.bar([i + (k - (len(shown) - 1) / 2) * width for i in idx], means, width, yerr=err, label=c, capsize=2)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("weighted TFLOP vs greedy (%), mean and 95% interval")
    ax.set_title("unicron under each horizon, the lookahead, the rollout and the clairvoyant policy, against greedy "
                 "(cluster horizon and upper bound: see the tables)", fontsize=9)
    ax.legend(fontsize=8, ncol=5)
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
    r.add_argument("--charged-setup", action="store_true",
                   help="plan the time-0 allocation with the transitions the instance would charge (another file)")
    r.add_argument("--columns", default="", help=f"comma-separated, of: {', '.join(COLUMNS)} (default: all)")
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
