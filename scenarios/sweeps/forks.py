"""Forks at the first re-plan where the lifetime horizon and the seed's best fixed horizon part: gamble or mistake?

    python scenarios/sweeps/forks.py run OUT.json --results benchmarks/results-families-1024.jsonl
                                     [--futures 64] [--seconds 1800] [--families jagged,...]
    python scenarios/sweeps/forks.py report FILE.json

For every seed of the results file (``families.py``) where the best of the fixed horizons on that
seed (cluster, job, event) earns more than unicron under ``"lifetime"``, both runs are replayed
with every re-plan's allocations logged; at the first re-plan where they differ, the run is forked
(``unicron_plan.simulate.fork``: the same state, each policy continuing) onto ``--futures`` futures
sampled from the scenario's own failure and repair model (the same futures for both: common random
numbers), each to the run's end. A divergence at the time-0 plan forks from time 0 (whole runs on
sampled events). Each fork is also continued on the seed's actual future, which must give back the
two recorded results (``actual_check``).

The other two fixed horizons are forked at the same re-plan (each from its own state then) onto the
same futures. Per seed: the mean difference lifetime - fixed over the futures (with its 95% interval),
the futures lifetime wins, on how many futures each of the four runs is at least the best of the three
fixed horizons on that future, and the verdict: ``gamble`` when lifetime is ex ante the better choice (interval
above 0) yet lost on the actual future, ``mistake`` when the fixed horizon is ex ante the better
(interval below 0), ``even`` otherwise. ``report`` prints the table and the counts. Bounded: at most
``--futures`` futures per seed and ``--seconds`` of work in all (seeds not reached are listed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE))

from families import FIXED, TIE, read_lines  # noqa: E402


class _Pause(Exception):
    """Raised inside the re-plan to fork at: carries the engine's copy and the re-plan's arguments."""


def _policy(horizon: str):
    from unicron_plan.simulate.policies import UnicronPolicy, policy_model

    p = UnicronPolicy(policy_model("unicron"))
    p.horizon = horizon
    return p


def _engine(sc, events, horizon: str):
    from unicron_plan.simulate.engine import Engine
    from unicron_plan.simulate.trace import planning_mtbf_hours

    return Engine(sc, events, _policy(horizon), planning_mtbf_hours(sc))


def replan_log(sc, events, horizon: str) -> tuple[list, float]:
    """(per re-plan: its time and every job's allocation after it; the run's weighted TFLOP)."""
    eng = _engine(sc, events, horizon)
    log = []
    plain = type(eng.policy).replan

    def logged(e, failed, repaired, charge):
        plain(eng.policy, e, failed, repaired, charge)
        log.append((e.t, tuple(tuple(sorted(j.alloc.items())) for j in e.jobs)))

    eng.policy.replan = logged
    out = eng.run()["weighted_tflop"]
    return log, out


def paused_at(sc, events, horizon: str, k: int):
    """(a fork of the run of ``horizon`` taken as re-plan ``k`` begins, its (failed, repaired, charge))."""
    from unicron_plan.simulate.fork import fork

    eng = _engine(sc, events, horizon)
    plain = type(eng.policy).replan
    seen = [0]

    def pausing(e, failed, repaired, charge):
        if seen[0] == k:
            raise _Pause(fork(e), (failed, repaired, charge))
        seen[0] += 1
        plain(eng.policy, e, failed, repaired, charge)

    eng.policy.replan = pausing
    try:
        eng.run()
    except _Pause as p:
        copy, args = p.args
        del copy.policy.replan  # the copy re-plans as its class does
        return copy, args
    raise ValueError(f"the run has fewer than {k + 1} re-plans")


def continued(snapshot, args, future, end: float) -> float:
    """Weighted TFLOP of a fresh copy of ``snapshot`` from its re-plan to ``end`` on ``future``; plus what it had."""
    from unicron_plan.simulate.fork import continue_on, fork

    eng = fork(snapshot)
    before = eng.output
    eng.policy.replan(eng, *args)
    return before + continue_on(eng, future, end)


def fork_seed(family: str, gpus: int, seed: int, hours: float, fixed: str, futures: int) -> dict:
    """The fork analysis of one seed: lifetime against ``fixed`` at their first differing re-plan."""
    import numpy as np
    from unicron_plan.simulate.fork import future_events
    from unicron_plan.simulate.policies import PlannerPolicy
    from unicron_plan.simulate.run import _ci95, load_scenario
    from unicron_plan.simulate.trace import draw_events
    from unicron_plan.tools.families import family_scenario

    PlannerPolicy.free_setup = True
    sc = load_scenario(family_scenario(family, seed, gpus, duration_hours=hours))
    events = draw_events(sc, np.random.default_rng(seed))
    (log_l, val_l), (log_f, val_f) = replan_log(sc, events, "lifetime"), replan_log(sc, events, fixed)
    k = next((i for i, (a, b) in enumerate(zip(log_l, log_f)) if a != b), None)
    out = {"family": family, "gpus": gpus, "seed": seed, "duration_hours": hours, "fixed": fixed,
           "actual": {"lifetime": val_l, fixed: val_f}, "futures": futures}
    if k is None:
        out["replan"] = None
        return out
    end = sc.duration_hours * 3600.0
    t = log_l[k][0]
    out.update(replan=k, replans=len(log_l), hours_at=t / 3600.0)
    seeds = np.random.SeedSequence([seed, k, 1]).spawn(futures)
    runs = ("lifetime",) + FIXED  # every run continued from its own state at the re-plan (the same time)
    values = []  # per future: each run's weighted TFLOP
    if k == 0:  # the time-0 plans differ: whole runs on sampled events
        for s in seeds:
            ev = future_events(sc, [], 0.0, np.random.default_rng(s))
            values.append({h: _engine(sc, ev, h).run()["weighted_tflop"] for h in runs})
        out["actual_check"] = bool(_engine(sc, events, "lifetime").run()["weighted_tflop"] == val_l
                                   and _engine(sc, events, fixed).run()["weighted_tflop"] == val_f)
    else:
        snaps = {h: paused_at(sc, events, h, k) for h in runs}
        past = [e for e in events if e.time <= t]
        rest = [e for e in events if e.time > t]
        got = {h: continued(*snaps[h], rest, end) for h in ("lifetime", fixed)}
        out["actual_check"] = bool(abs(got["lifetime"] - val_l) <= 1e-9 * val_l
                                   and abs(got[fixed] - val_f) <= 1e-9 * val_f)
        for s in seeds:
            fut = future_events(sc, past, t, np.random.default_rng(s))
            values.append({h: continued(*snaps[h], fut, end) for h in runs})
    scale = val_f
    rel = [(v["lifetime"] - v[fixed]) / scale for v in values]
    lo, hi = _ci95(rel)
    out.update(mean_rel=float(np.mean(rel)), ci95_rel=[lo, hi], diffs_rel=rel,
               lifetime_wins=sum(d > TIE for d in rel), ties=sum(abs(d) <= TIE for d in rel),
               actual_rel=(val_l - val_f) / scale)
    out["verdict"] = "gamble" if lo > 0 else "mistake" if hi < 0 else "even"
    # on how many futures each run is at least the best of the three fixed horizons on that future
    out["at_least_best_fixed"] = {h: sum(v[h] >= max(v[f] for f in FIXED) * (1 - TIE) for v in values)
                                  for h in runs}
    return out


def losing_seeds(lines: list[dict]) -> list[tuple]:
    """(family, GPUs, seed, hours, the seed's best fixed horizon) where lifetime earns less than it."""
    out = []
    for r in lines:
        w = r["weighted_tflop"]
        if "lifetime" not in w or not all(h in w for h in FIXED):
            continue
        best = max(FIXED, key=lambda h: w[h])
        if w["lifetime"] < w[best] * (1 - TIE):
            out.append((r["family"], r["gpus"], r["seed"], r["duration_hours"], best))
    return sorted(out)


def run(args) -> None:
    lines = read_lines([args.results])
    todo = [c for c in losing_seeds(lines) if not args.families or c[0] in args.families.split(",")]
    out = Path(args.out)
    done = json.loads(out.read_text()) if out.exists() else {"seeds": []}
    have = {(r["family"], r["gpus"], r["seed"]) for r in done["seeds"]}
    start = time.monotonic()
    for family, gpus, seed, hours, fixed in todo:
        if (family, gpus, seed) in have:
            continue
        if time.monotonic() - start > args.seconds:
            print(f"time budget spent: {family} {gpus} seed {seed} not reached", file=sys.stderr)
            continue
        done["seeds"].append(fork_seed(family, gpus, seed, hours, fixed, args.futures))
        done["seeds"].sort(key=lambda r: (r["gpus"], r["family"], r["seed"]))
        out.write_text(json.dumps(done, indent=1, sort_keys=True) + "\n")


def summary(rows: list[dict]) -> dict:
    """Per size: counts of verdicts; the mean over the forked seeds of lifetime's share of futures won against
    the fixed horizon, and of the largest share of futures on which one run is at least the best fixed."""
    out = {}
    for r in rows:
        s = out.setdefault(r["gpus"], {"losses": 0, "gamble": 0, "mistake": 0, "even": 0, "no_fork": 0,
                                       "lifetime_win_share": [], "best_single_share": []})
        s["losses"] += 1
        if r.get("replan") is None:
            s["no_fork"] += 1
            continue
        s[r["verdict"]] += 1
        s["lifetime_win_share"].append(r["lifetime_wins"] / r["futures"])
        s["best_single_share"].append(max(r["at_least_best_fixed"].values()) / r["futures"])
    return out


def table(rows: list[dict]) -> str:
    head = ("| family | GPUs | seed | fixed | re-plan (of) | at h | lifetime - fixed, actual | over futures: mean "
            "[95%] | lifetime wins | verdict | futures at least the best fixed: lifetime / cluster / job / event |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if r.get("replan") is None:
            out.append(f"| {r['family']} | {r['gpus']:,} | {r['seed']} | {r['fixed']} | none | | | | | | |")
            continue
        out.append(f"| {r['family']} | {r['gpus']:,} | {r['seed']} | {r['fixed']} | {r['replan']} ({r['replans']}) "
                   f"| {r['hours_at']:.1f} | {r['actual_rel'] * 100:+.4f}% | {r['mean_rel'] * 100:+.4f}% "
                   f"[{r['ci95_rel'][0] * 100:+.4f}%, {r['ci95_rel'][1] * 100:+.4f}%] | "
                   f"{r['lifetime_wins']}/{r['futures']} | {r['verdict']} | "
                   + " / ".join(str(r["at_least_best_fixed"][h]) for h in ("lifetime",) + FIXED) + " |")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("--results", required=True)
    r.add_argument("--futures", type=int, default=64)
    r.add_argument("--seconds", type=float, default=1800.0)
    r.add_argument("--families", default="")
    p = sub.add_parser("report")
    p.add_argument("file")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run(args)
        return
    rows = json.loads(Path(args.file).read_text())["seeds"]
    print(table(rows))
    for gpus, s in sorted(summary(rows).items()):
        shares = {k: s.pop(k) for k in ("lifetime_win_share", "best_single_share")}
        means = {k: round(sum(v) / max(len(v), 1), 3) for k, v in shares.items()}
        print(f"{gpus:,} GPUs: {s}; mean over the forked seeds: {means}")


if __name__ == "__main__":
    main()
