"""Running scenarios: one seed (every policy on the same events), many seeds in parallel, plots.

Seeds: run i of ``--seeds K`` uses seed ``seed + i`` (so it equals a single
run with ``--seed seed+i``); each run draws its events from
``numpy.random.default_rng(seed + i)``. Runs go to a ProcessPoolExecutor with
2 workers and are collected in seed order, so the output does not depend on
scheduling.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Optional

import numpy as np

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.heap import set_malloc
from unicron_plan.io import parse_model, read_json
from unicron_plan.core.checks import check_scenario
from unicron_plan.schema.scenario import Scenario
from unicron_plan.simulate.engine import Engine
from unicron_plan.simulate.policies import POLICIES, OwnGpusPolicy, make_policy
from unicron_plan.simulate.trace import draw_events, planning_mtbf_hours

DEFAULT_POLICIES = ("unicron", "megatron", "oobleck", "varuna", "bamboo", "greedy", "equal-share")


def load_scenario(source: str | os.PathLike | dict | Scenario) -> Scenario:
    """A checked Scenario from a path or a dict; raises InvalidInstanceError naming the field."""
    if isinstance(source, Scenario):
        scenario = source
    else:
        data = source if isinstance(source, dict) else read_json(source)
        scenario = parse_model(Scenario, data)
    from unicron_plan.simulate.mixed import with_model_tables

    scenario = with_model_tables(scenario)  # jobs that name a model get its tables (per GPU type)
    check_scenario(scenario)
    for name, model in (scenario.policy_models or {}).items():
        if name not in POLICIES:
            raise InvalidInstanceError(f"policy_models.{name}", f"unknown policy; valid: {', '.join(POLICIES)}")
        if model.spare_nodes and not issubclass(POLICIES[name], OwnGpusPolicy):
            raise InvalidInstanceError(f"policy_models.{name}.spare_nodes",
                                       "only the baselines keep fixed spares (megatron, oobleck, varuna, "
                                       "bamboo); the planner policies use every healthy GPU")
        if model.spare_nodes and model.spare_nodes >= len(scenario.cluster.nodes):
            raise InvalidInstanceError(f"policy_models.{name}.spare_nodes",
                                       f"{model.spare_nodes} spares leave none of the {len(scenario.cluster.nodes)} "
                                       f"nodes to train on")
    return scenario


def default_policies(scenario: Scenario) -> list[str]:
    """The policies run when none is named: DEFAULT_POLICIES, and ``type-bound`` on a mixed fleet."""
    from unicron_plan.simulate.mixed import default_policies as with_mixed

    return with_mixed(scenario, DEFAULT_POLICIES)


def check_policies(names: list[str]) -> list[str]:
    """The policy names, deduplicated in order; InvalidInstanceError for an unknown one."""
    out = []
    for k, name in enumerate(names):
        if name not in POLICIES:
            raise InvalidInstanceError(f"--policy[{k}]", f"unknown policy {name!r}; valid: {', '.join(POLICIES)}")
        if name not in out:
            out.append(name)
    return out


#: glibc's malloc: blocks from 32 MiB up mapped on their own, and up to 64 MiB freed at the heap's top
#: kept (see keep_freed_memory)
MMAP_THRESHOLD, TRIM_THRESHOLD = 32 << 20, 64 << 20
_MALLOC_SET = False


def keep_freed_memory() -> bool:
    """Let glibc's malloc reuse freed memory for the simulator's large temporary arrays, once per process.

    A re-plan at the largest sizes allocates arrays of a few MB (the DP's passes over 450,000 options,
    the problem builder's) and frees them; by default glibc maps many of them on their own and gives
    the heap's top back, so every re-plan faults their pages in again (system time, and the page
    zeroing). With blocks below 32 MiB served from the heap and 64 MiB of free top kept, the pages
    stay. Results do not depend on it. Left alone where the process's environment sets malloc's own
    parameters (``MALLOC_*`` or ``GLIBC_TUNABLES``) and where the C library is not glibc. Returns
    whether the parameters were set (by this or an earlier call)."""
    global _MALLOC_SET
    if not _MALLOC_SET:
        _MALLOC_SET = set_malloc(MMAP_THRESHOLD, TRIM_THRESHOLD)
    return _MALLOC_SET


def simulate(scenario: Scenario, policies: list[str], seed: int, record: bool = False,
             progress: Optional[Callable[[], None]] = None) -> dict[str, Any]:
    """One run: draw the events with ``default_rng(seed)`` and replay them for each policy.

    Returns ``{"scenario", "seed", "events", "policies": {name: result}}`` and, with
    ``record``, ``"series": {name: [(hours, cumulative weighted TFLOP, WAF)]}``.

    Example::

        sc = load_scenario("scenarios/gpt3-mix-128-a800.json")
        out = simulate(sc, ["unicron", "megatron"], seed=0)
        out["policies"]["unicron"]["weighted_tflop"]
    """
    keep_freed_memory()
    events = draw_events(scenario, np.random.default_rng(seed))
    mtbf = planning_mtbf_hours(scenario)
    if progress is not None and hasattr(progress, "set_total"):
        progress.set_total(len(events) * len(policies))
    out: dict[str, Any] = {"scenario": scenario.name, "seed": seed, "events": len(events), "policies": {}}
    series = {}
    for name in policies:
        eng = Engine(scenario, events, make_policy(name, scenario), mtbf, record=record, progress=progress)
        out["policies"][name] = eng.run()
        if record:
            series[name] = eng.series
    if record:
        out["series"] = series
    return out


def _one(args):
    scenario, policies, seed = args
    return simulate(scenario, policies, seed)


def run_seeds(scenario: Scenario, policies: list[str], seed: int, seeds: int, workers: int = 2,
              progress: Optional[Callable[[], None]] = None) -> list[dict[str, Any]]:
    """Runs for seeds seed .. seed+seeds-1, in parallel processes, returned in seed order."""
    tasks = [(scenario, policies, seed + i) for i in range(seeds)]
    if seeds == 1 or workers <= 1:
        results = []
        for t in tasks:
            results.append(_one(t))
            if progress:
                progress()
        return results
    results = [None] * seeds
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(_one, t): i for i, t in enumerate(tasks)}
        from concurrent.futures import as_completed

        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            if progress:
                progress()
    return results


def _ci95(values: list[float]) -> list[float]:
    """Student-t 95% interval of the mean (a point when there is one value)."""
    arr = np.asarray(values, dtype=float)
    mean = float(arr.mean())
    if len(arr) < 2:
        return [mean, mean]
    from unicron_plan.extras import require

    t = require("scipy.stats", "95% intervals over seeds").t

    half = float(t.ppf(0.975, len(arr) - 1) * arr.std(ddof=1) / math.sqrt(len(arr)))
    return [mean - half, mean + half]


def summarize(runs: list[dict[str, Any]], policies: list[str]) -> dict[str, Any]:
    """Mean per policy over the runs, with 95% intervals and unicron's ratio to each policy.

    With one run this is the run itself (docs/format.md shape). With several,
    ``policies[NAME]`` holds the means in the same shape plus ``ci95`` and, when
    unicron ran, ``unicron_ratio`` (per-seed unicron / NAME: mean, ci95, wins).
    """
    first = runs[0]
    if len(runs) == 1:
        return {"scenario": first["scenario"], "seed": first["seed"], "events": first["events"],
                "policies": first["policies"]}
    out: dict[str, Any] = {"scenario": first["scenario"], "seed": first["seed"], "seeds": len(runs),
                           "events_mean": float(np.mean([r["events"] for r in runs])), "policies": {}}
    for name in policies:
        rs = [r["policies"][name] for r in runs]
        wt = [r["weighted_tflop"] for r in rs]
        entry: dict[str, Any] = {
            "weighted_tflop": float(np.mean(wt)),
            "reconfigurations": float(np.mean([r["reconfigurations"] for r in rs])),
            "downtime_hours": {k: float(np.mean([r["downtime_hours"][k] for r in rs]))
                               for k in ("detection", "transition", "sub_healthy")},
            "recompute_hours": float(np.mean([r["recompute_hours"] for r in rs])),
            "queue_hours": float(np.mean([r["queue_hours"] for r in rs])),
            "healthy_waf_tflops": float(np.mean([r["healthy_waf_tflops"] for r in rs])),
            "ci95": {"weighted_tflop": _ci95(wt)},
        }
        if "type_changes" in rs[0]:  # mixed fleets
            entry["type_changes"] = float(np.mean([r["type_changes"] for r in rs]))
            entry["gpu_hours"] = {t: float(np.mean([r["gpu_hours"][t] for r in rs])) for t in rs[0]["gpu_hours"]}
        if "unicron" in policies:
            ratios = [r["policies"]["unicron"]["weighted_tflop"] / r["policies"][name]["weighted_tflop"]
                      if r["policies"][name]["weighted_tflop"] > 0 else math.inf for r in runs]
            finite = [x for x in ratios if math.isfinite(x)]
            entry["unicron_ratio"] = {
                "mean": float(np.mean(finite)) if finite else None,
                "ci95": _ci95(finite) if finite else None,
                "min": float(min(finite)) if finite else None,
                "wins": int(sum(1 for r in runs if r["policies"]["unicron"]["weighted_tflop"]
                                >= r["policies"][name]["weighted_tflop"] * (1 - 1e-12))),
            }
        out["policies"][name] = entry
    return out


def plot(run: dict[str, Any], path: str | os.PathLike) -> None:
    """Cumulative weighted TFLOP and WAF over time per policy (one run with ``record``), PNG via Agg."""
    from unicron_plan.extras import require

    require("matplotlib", "--plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = run["series"].get("unicron")
    rows = 3 if ref is not None else 2
    fig, axes = plt.subplots(rows, 1, figsize=(9, 3.2 * rows), sharex=True)
    ax1, ax2 = axes[0], axes[1]
    if ref is not None:
        ref_arr = np.asarray(ref, dtype=float)
        grid = np.linspace(0.0, ref_arr[-1, 0], 2000)
        ref_cum = np.interp(grid, ref_arr[:, 0], ref_arr[:, 1])
    for name, series in run["series"].items():
        arr = np.asarray(series, dtype=float)
        days = arr[:, 0] / 24.0
        ax1.plot(days, arr[:, 1] / 1e9, label=name)
        ax2.step(days, arr[:, 2] / 1e3, where="post", label=name, linewidth=0.9)
        if ref is not None:
            behind = ref_cum - np.interp(grid, arr[:, 0], arr[:, 1])
            axes[2].plot(grid / 24.0, behind / 1e9, label=name)
    ax1.set_ylabel("cumulative weighted\nwork (1e9 TFLOP)")
    ax2.set_ylabel("WAF (1e3 weighted\nTFLOP/s)")
    if ref is not None:
        axes[2].set_ylabel("work behind unicron\n(1e9 TFLOP)")
    axes[-1].set_xlabel("days")
    ax1.set_title(f"{run['scenario']} (seed {run['seed']}, {run['events']} events)")
    ax1.legend(loc="upper left")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    from unicron_plan.io import save_figure_atomic

    save_figure_atomic(fig, path, dpi=110)
    plt.close(fig)
