"""Sweeps: a grid over scenario fields x policies x seeds, on local processes or a Ray cluster.

Each run is the pure task :func:`run_task` (scenario data, policies, seed) ->
per-policy weighted TFLOP, so every backend computes the same numbers for the
same seeds. Seeds come from ``numpy.random.SeedSequence(sweep.seed)``: grid
point p gets child p of the root, and its replication r gets child r of that
(an integer seed drawn from it), so adding points, replications or workers
never changes an existing run. Replications are added to a point in batches
until the 95% confidence half-width of every unicron / policy ratio is at most
the target, or the maximum is reached.
"""

from __future__ import annotations

import copy
import itertools
import os
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import parse_model, read_document, read_json, save_figure_atomic
from unicron_plan.schema.sweep import Sweep

BACKENDS = ("process", "ray")


def load_sweep(path: str | os.PathLike) -> tuple[Sweep, Path]:
    """(the checked sweep, the scenario path it names); YAML or JSON; bad input names the field."""
    p = Path(path)
    data = read_document(p)
    sweep = parse_model(Sweep, data)
    scenario = Path(sweep.scenario)
    if not scenario.is_absolute():
        scenario = p.parent / scenario
    return sweep, scenario


def grid_points(sweep: Sweep) -> list[dict[str, Any]]:
    """Every combination of the grid's values, as {path: value}, in file order."""
    paths = list(sweep.grid)
    return [dict(zip(paths, combo)) for combo in itertools.product(*(sweep.grid[k] for k in paths))]


def patched(base: dict, point: dict[str, Any]) -> dict:
    """``base`` with each dotted path set to its value (missing objects on the way created empty);
    InvalidInstanceError names ``grid.<path>`` for a path through a list or a value."""
    data = copy.deepcopy(base)
    for path, value in point.items():
        keys = path.split(".")
        node = data
        for depth, key in enumerate(keys):
            last = depth == len(keys) - 1
            if isinstance(node, list):
                if not key.isdigit() or int(key) >= len(node):
                    raise InvalidInstanceError(f"grid.{path}", f"{key!r} is not an index of that list")
                key = int(key)
            elif not isinstance(node, dict):
                raise InvalidInstanceError(f"grid.{path}", f"{'.'.join(keys[:depth])} holds no fields")
            elif not last and key not in node:
                node[key] = {}  # an optional object the base leaves out (e.g. policy_models.megatron):
                # the scenario's schema checks the result, so a misspelt field is still refused by name
            if last:
                node[key] = value
            else:
                node = node[key]
    return data


def seeds_of(root: int, point: int, count: int) -> list[int]:
    """The integer seeds of replications 0..count-1 of grid point ``point``."""
    child = np.random.SeedSequence(root).spawn(point + 1)[point]
    return [int(s.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)) for s in child.spawn(count)]


#: A grid key that names base scenarios (paths relative to the sweep file) instead of a field.
SCENARIO_KEY = "scenario"


def base_of(point: dict[str, Any], base: dict, root: Optional[Path]) -> dict:
    """The base scenario of a grid point: the sweep's, or the file its ``scenario`` key names."""
    name = point.get(SCENARIO_KEY)
    if name is None:
        return base
    from unicron_plan.io import read_json

    path = Path(str(name))
    if not path.is_absolute():
        path = (root or Path.cwd()) / path
    return read_json(path)


def run_task(scenario_data: dict, policies: list[str], seed: int) -> dict[str, float]:
    """One run: weighted TFLOP per policy (the pure unit every backend executes)."""
    from unicron_plan.simulate.run import load_scenario, simulate

    out = simulate(load_scenario(scenario_data), policies, seed)
    return {name: float(r["weighted_tflop"]) for name, r in out["policies"].items()}


def ratio_stats(runs: list[dict[str, float]], policy: str) -> dict[str, Any]:
    """Mean, 95% interval and half-width of the per-seed ratio unicron / ``policy``; all None (``n`` 0) when no
    seed has a ratio (the policy earned nothing in every run)."""
    from unicron_plan.simulate.run import _ci95

    ratios = [r["unicron"] / r[policy] for r in runs if r[policy] > 0]
    if not ratios:
        return {"mean": None, "ci95": None, "half_width": None, "n": 0, "wins": 0}
    lo, hi = _ci95(ratios)
    wins = sum(1 for x in ratios if x >= 1 - 1e-12)  # seeds where unicron earned at least as much
    return {"mean": float(np.mean(ratios)), "ci95": [lo, hi], "half_width": (hi - lo) / 2, "n": len(ratios),
            "wins": wins}


def _converged(stats: dict[str, Any], target: float) -> bool:
    """Whether a ratio's interval is narrow enough (one with no ratio never is)."""
    return stats["half_width"] is not None and stats["half_width"] <= target


class _ProcessBackend:
    def __init__(self, workers: int):
        from concurrent.futures import ProcessPoolExecutor

        self.pool = ProcessPoolExecutor(max_workers=workers) if workers > 1 else None

    def map(self, tasks: list[tuple]) -> list[dict[str, float]]:
        if self.pool is None:
            return [run_task(*t) for t in tasks]
        return list(self.pool.map(run_task, *zip(*tasks)))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


class _RayBackend:
    def __init__(self, address: Optional[str], workers: int):
        try:
            import ray
        except ImportError:
            raise InvalidInstanceError("--backend", "ray is not installed: pip install 'unicron-plan[ray]'") \
                from None
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            kwargs = {"address": address} if address else {"num_cpus": workers}
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False, **kwargs)
        self.remote = ray.remote(run_task)

    def map(self, tasks: list[tuple]) -> list[dict[str, float]]:
        return self.ray.get([self.remote.remote(*t) for t in tasks])

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


def run_sweep(sweep: Sweep, base: dict, backend: str = "process", address: Optional[str] = None,
              workers: int = 2, progress: Optional[Callable[[int], None]] = None,
              root: Optional[Path] = None) -> dict[str, Any]:
    """Run every grid point until its ratios are tight enough; the JSON-ready result. A grid key
    ``scenario`` lists base scenarios (paths relative to ``root``, the sweep file's folder). Without
    ``policies`` in the file, a grid with a mixed fleet also runs ``type-bound`` (as ``simulate`` does)."""
    from unicron_plan.simulate.mixed import default_policies, is_mixed
    from unicron_plan.simulate.run import check_policies, load_scenario

    policies = check_policies(sweep.policies)
    points = grid_points(sweep)
    scenarios, mixed = [], None
    for point in points:
        fields = {k: v for k, v in point.items() if k != SCENARIO_KEY}
        data = patched(base_of(point, base, root), fields)
        try:
            loaded = load_scenario(data)
        except InvalidInstanceError as exc:
            where = ", ".join(f"{k}={v!r}" for k, v in point.items())
            raise InvalidInstanceError(f"grid ({where}): {exc.field}", exc.message) from None
        mixed = mixed or (loaded if is_mixed(loaded) else None)
        scenarios.append(data)
    if mixed is not None and "policies" not in sweep.model_fields_set:
        policies = default_policies(mixed, tuple(policies))
    rep = sweep.replications
    runner = _RayBackend(address, workers) if backend == "ray" else _ProcessBackend(workers)
    runs: list[list[dict[str, float]]] = [[] for _ in points]
    seeds = [seeds_of(sweep.seed, p, rep.max) for p in range(len(points))]
    try:
        todo = {p: rep.min for p in range(len(points))}
        while todo:
            tasks, owners = [], []
            for p, n in todo.items():
                for s in seeds[p][len(runs[p]):len(runs[p]) + n]:
                    tasks.append((scenarios[p], policies, s))
                    owners.append(p)
            for p, result in zip(owners, runner.map(tasks)):
                runs[p].append(result)
            if progress:
                progress(len(tasks))
            todo = {}
            for p in range(len(points)):
                wide = any(not _converged(ratio_stats(runs[p], name), rep.target_half_width)
                           for name in policies if name != "unicron")
                if wide and len(runs[p]) < rep.max:
                    todo[p] = min(rep.batch, rep.max - len(runs[p]))
    finally:
        runner.close()
    rows = []
    for p, point in enumerate(points):
        ratios = {name: ratio_stats(runs[p], name) for name in policies if name != "unicron"}
        rows.append({"point": point, "seeds": len(runs[p]), "seed_values": seeds[p][:len(runs[p])],
                     "ratios": ratios,
                     "converged": all(_converged(r, rep.target_half_width) for r in ratios.values()),
                     "weighted_tflop_mean": {name: float(np.mean([r[name] for r in runs[p]]))
                                             for name in policies}})
    return {"name": sweep.name, "scenario": sweep.scenario, "policies": policies, "seed": sweep.seed,
            "replications": rep.model_dump(), "backend": backend, "points": rows}


def plot_sweep(result: dict[str, Any], out_dir: Path) -> list[Path]:
    """One PNG per swept field: each baseline's ratio (mean, 95% interval) against the field's values."""
    from unicron_plan.extras import require

    require("matplotlib", "sweep plots (--out)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["points"]
    fields = list(rows[0]["point"]) if rows else []
    written = []
    for field in fields:
        fig, ax = plt.subplots(figsize=(7, 4))
        for name in (n for n in result["policies"] if n != "unicron"):
            xs, ys, errs = [], [], []
            for r in rows:
                s = r["ratios"][name]
                if s["mean"] is None or not isinstance(r["point"][field], (int, float)):
                    continue
                xs.append(r["point"][field])
                ys.append(s["mean"])
                errs.append(s["half_width"])
            if xs:
                ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, linestyle="none", label=f"unicron / {name}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        values = [r["point"][field] for r in rows if isinstance(r["point"][field], (int, float))]
        if values and min(values) > 0 and max(values) >= 10 * min(values):
            ax.set_xscale("log")  # rates and times spanning a decade or more
        ax.set_xlabel(field)
        ax.set_ylabel("weighted TFLOP ratio (95% CI)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / f"sweep-{field.replace('.', '_')}.png"
        save_figure_atomic(fig, path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
