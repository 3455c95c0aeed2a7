"""Side-by-side solver benchmarks and the regression check against a committed baseline.

For each instance and each requested solver: ``runs`` timed runs of the solver
on the built problem (``solve_seconds``: what the solver itself costs) and of
the whole :func:`unicron_plan.api.solve` (``total_seconds``: building,
solving, placement and validation), optionally of the whole CLI process
(``process_seconds``). Medians are reported, with the objective and its gap to
the best objective any solver (or the instance's recorded reference) reached.
Solvers that are not registered or whose backend is missing are reported as
``unavailable``, never silently skipped.

An instance is a path, or ``generate:KEY=VALUE,...`` (keys of
:func:`unicron_plan.tools.generate.generate_instance`, e.g.
``generate:gpus=131072,jobs=1024,seed=2``; ``curves=identical`` etc. for the adversarial kinds)
for instances too big to commit.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

OPT_TOL = 1e-9


def _load(spec: str):
    """(name, Instance) from a path or a ``generate:`` spec."""
    from unicron_plan.api import load_instance

    if spec.startswith("generate:"):
        from unicron_plan.tools.generate import generate_instance

        kwargs = {}
        for part in filter(None, spec[len("generate:"):].split(",")):
            k, _, v = part.partition("=")
            kwargs[k] = float(v) if k == "demand" else (v if k in ("curves", "name") else int(v))
        seed = kwargs.pop("seed", 0)
        return spec, load_instance(generate_instance(seed, **kwargs))
    return spec, load_instance(spec)


def machine() -> dict:
    """What the numbers were measured on."""
    return {"python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()}


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def _process_time(spec: str, solver: str, instance) -> float:
    """Wall seconds of one `python -m unicron_plan.cli solve` process."""
    import unicron_plan
    from unicron_plan.io import dumps, write_atomic

    root = str(Path(unicron_plan.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory() as tmp:
        path = spec
        if spec.startswith("generate:"):
            path = os.path.join(tmp, "instance.json")
            write_atomic(path, dumps(instance))
        out = os.path.join(tmp, "plan.json")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "unicron_plan.cli", "solve", path, "--solver", solver,
                        "--out", out], env=env, check=True, capture_output=True)
        return time.perf_counter() - start


def run_bench(specs: list[str], solvers: list[str], runs: int = 3, process: bool = False,
              time_limit: float | None = None, progress: bool = False) -> dict:
    """Benchmark ``solvers`` on every instance ``spec``; returns the JSON-ready results."""
    from unicron_plan import api
    from unicron_plan.errors import SolverUnavailableError, UnicronError
    from unicron_plan.core.problem import build_problem
    from unicron_plan.solvers import SolverOptions, get_solver

    results = {"schema_version": "1", "kind": "bench", "machine": machine(), "runs": runs,
               "instances": {}}
    bar = None
    if progress:
        from rich.progress import Progress

        bar = Progress(transient=True)
        bar.start()
        task = bar.add_task("bench", total=len(specs) * len(solvers))
    try:
        for spec in specs:
            name, instance = _load(spec)
            problem = build_problem(instance)
            entry = {"name": instance.name, "gpus": int(sum(n.gpus for n in instance.cluster.nodes)),
                     "nodes": len(instance.cluster.nodes), "jobs": len(instance.jobs),
                     "options": int(sum(len(j.counts) for j in problem.jobs)), "solvers": {}}
            if instance.reference is not None:
                entry["reference"] = instance.reference.objective
            for solver in solvers:
                row: dict = {}
                try:
                    fn = get_solver(solver)
                except SolverUnavailableError as exc:
                    row = {"status": "unavailable", "message": str(exc)}
                else:
                    try:
                        opts = SolverOptions(time_limit_seconds=time_limit)
                        solve_t, total_t, proc_t = [], [], []
                        for _ in range(runs):
                            start = time.perf_counter()
                            raw = fn(problem, opts)
                            solve_t.append(time.perf_counter() - start)
                            start = time.perf_counter()
                            plan = api.solve(instance, solver=solver, time_limit_seconds=time_limit)
                            total_t.append(time.perf_counter() - start)
                            if process:
                                proc_t.append(_process_time(spec, solver, instance))
                        row = {"status": "ok", "objective": plan.objective, "bound": plan.bound,
                               "solution": plan.status.solution, "solve_seconds": solve_t,
                               "total_seconds": total_t, "median_solve_seconds": _median(solve_t),
                               "median_total_seconds": _median(total_t), "raw_objective": raw.objective}
                        if process:
                            row["process_seconds"] = proc_t
                            row["median_process_seconds"] = _median(proc_t)
                    except UnicronError as exc:
                        row = {"status": "error", "message": str(exc)}
                entry["solvers"][solver] = row
                if bar:
                    bar.advance(task)
            objs = [r["objective"] for r in entry["solvers"].values() if r.get("status") == "ok"]
            if "reference" in entry:
                objs.append(entry["reference"])
            best = max(objs) if objs else None
            entry["best"] = best
            for r in entry["solvers"].values():
                if r.get("status") == "ok":
                    r["gap"] = (best - r["objective"]) / max(abs(best), 1.0)
            results["instances"][name] = entry
    finally:
        if bar:
            bar.stop()
    return results


def _same_file_key(name: str, roots: list[Path]) -> Optional[Path]:
    """The resolved file a path key names (relative keys tried against each root), None for
    generated instances and paths that name no file."""
    if name.startswith("generate:"):
        return None
    p = Path(name)
    for cand in ([p] if p.is_absolute() else [r / p for r in roots]):
        if cand.is_file():
            return cand.resolve()
    return None


def match_baseline(results: dict, baseline: dict, roots: list[Path]) -> tuple[dict[str, str], list[str]]:
    """({result key: baseline key}, result keys with no baseline entry). Keys match when equal or
    when they name the same file (a baseline key relative to any of ``roots``, e.g. the current
    directory and the repository holding the baseline, an absolute key as it is)."""
    base_keys = list(baseline.get("instances", {}))
    by_file: dict[Path, str] = {}
    for k in base_keys:
        f = _same_file_key(k, roots)
        if f is not None:
            by_file.setdefault(f, k)
    matched, unmatched = {}, []
    for k in results.get("instances", {}):
        if k in baseline.get("instances", {}):
            matched[k] = k
            continue
        f = _same_file_key(k, roots)
        if f is not None and f in by_file:
            matched[k] = by_file[f]
        else:
            unmatched.append(k)
    return matched, unmatched


def check(results: dict, baseline: dict, tolerance: float = 0.5, floor_seconds: float = 0.01,
          key: str = "median_solve_seconds", roots: Optional[list[Path]] = None) -> list[str]:
    """Regressions of ``results`` against ``baseline``: a solver slower by more than
    ``tolerance`` (relative, times below ``floor_seconds`` count as the floor) or no longer
    optimal, and every instance or solver of ``results`` the baseline does not hold (so a
    check never passes by comparing nothing). Returns one message per problem (empty: none)."""
    matched, unmatched = match_baseline(results, baseline, roots or [Path.cwd()])
    problems = [f"{name}: no baseline entry for this instance (keys are as given to `bench`, or name "
                f"the same file)" for name in unmatched]
    for name, base_name in matched.items():
        base = baseline["instances"][base_name]
        now = results["instances"][name]
        for solver in now["solvers"]:
            if solver not in base.get("solvers", {}):
                problems.append(f"{name} / {solver}: no baseline entry for this solver")
        for solver, b in base.get("solvers", {}).items():
            if b.get("status") != "ok" or solver not in now["solvers"]:
                continue
            r = now["solvers"][solver]
            if r.get("status") != "ok":
                problems.append(f"{name} / {solver}: {r.get('status')} ({r.get('message', '')}), "
                                f"baseline had it ok")
                continue
            t_now, t_base = max(r[key], floor_seconds), max(b[key], floor_seconds)
            if t_now > t_base * (1.0 + tolerance):
                problems.append(f"{name} / {solver}: {key} {r[key]:.4f} s > baseline {b[key]:.4f} s "
                                f"x (1 + {tolerance})")
            base_gap = 1.0 if b.get("gap") is None else b["gap"]
            if base_gap <= OPT_TOL and r.get("gap", 0.0) > OPT_TOL:
                problems.append(f"{name} / {solver}: lost optimality, gap {r['gap']:.3g} "
                                f"(objective {r['objective']!r}, best {now['best']!r})")
            if r["objective"] < b["objective"] - OPT_TOL * max(abs(b["objective"]), 1.0):
                problems.append(f"{name} / {solver}: objective {r['objective']!r} below "
                                f"baseline {b['objective']!r}")
    return problems


def table(results: dict):
    """A rich Table of the results (median times, objective, gap), unavailable solvers included."""
    from rich.table import Table

    t = Table(title=f"unicron-plan bench ({results['runs']} runs, medians)")
    for col in ("instance", "GPUs", "jobs", "solver", "status", "solve s", "total s", "process s",
                "objective TFLOP", "gap (fraction)"):
        t.add_column(col, justify="left" if col in ("instance", "solver", "status") else "right",
                     no_wrap=True)
    for name, e in results["instances"].items():
        for solver, r in e["solvers"].items():
            if r.get("status") != "ok":
                t.add_row(e["name"], str(e["gpus"]), str(e["jobs"]), solver, r["status"], "", "", "", "", "")
                continue
            t.add_row(e["name"], str(e["gpus"]), str(e["jobs"]), solver, r["solution"],
                      f"{r['median_solve_seconds']:.4f}", f"{r['median_total_seconds']:.3f}",
                      f"{r['median_process_seconds']:.3f}" if "median_process_seconds" in r else "-",
                      f"{r['objective']:.10e}", f"{r['gap']:.1e}")
    return t


def notes(results: dict) -> list[str]:
    """One line per solver that did not run, with the reason."""
    seen, out = set(), []
    for e in results["instances"].values():
        for solver, r in e["solvers"].items():
            if r.get("status") != "ok" and (solver, r.get("message")) not in seen:
                seen.add((solver, r.get("message")))
                out.append(f"{solver}: {r['status']}: {r.get('message', '')}")
    return out
