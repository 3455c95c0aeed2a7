"""The `unicron-plan` command line: parse, call the API, print. No modelling logic here.

Exit codes: 0 success; 1 a plan that does not validate; 2 bad input (one
message on stderr naming the field, never a traceback); 3 an internal error.
"""

from __future__ import annotations

import contextvars
import functools
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Cost-minimising reconfiguration plans for multi-job LLM training clusters.")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"unicron-plan {version('unicron-plan')}")
        except PackageNotFoundError:  # pragma: no cover - run from a source tree without install
            typer.echo("unicron-plan (not installed)")
        raise typer.Exit()


@app.callback()
def _root(show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                            help="Print the version and exit.")) -> None:
    """Cost-minimising reconfiguration plans for multi-job LLM training clusters."""


def _fail(code: int, message: str) -> None:
    from unicron_plan.text import one_line

    typer.echo(f"error: {one_line(message, 2400)}", err=True)  # each part is bounded where it is made
    raise typer.Exit(code)


from unicron_plan.progress import working  # noqa: E402,F401 (light: imports only on use)
from unicron_plan.solvers import (DEFAULT_TIME_LIMIT_SECONDS, MAX_THREADS,  # noqa: E402 (light: no solver
                                  MAX_TIME_LIMIT_SECONDS)  # is imported)


def handle_errors(fn):
    """Map the package's typed errors to exit codes and one clear line on stderr."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from unicron_plan.errors import (FitFailedError, InfeasibleError, InvalidInstanceError,
                                         PlanValidationError, SolverUnavailableError, UnicronError)
        try:
            return fn(*args, **kwargs)
        except (InvalidInstanceError, SolverUnavailableError) as exc:
            _fail(2, str(exc))
        except (InfeasibleError, FitFailedError) as exc:
            _fail(1, str(exc))
        except PlanValidationError as exc:
            _fail(3, str(exc))
        except UnicronError as exc:
            _fail(3, str(exc))
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except BrokenPipeError:  # the reader of stdout went away (`| head`): stop quietly, as the
            import os            # Python documentation recommends (Python's own flush would fail again)

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(1) from None
        except Exception as exc:  # a bug: say so in one line; UNICRON_DEBUG=1 shows the traceback
            import os

            if os.environ.get("UNICRON_DEBUG"):
                raise
            _fail(3, f"internal error (a bug, please report it with the input): {type(exc).__name__}: {exc}")
    return wrapper


class ContingencyUse(str, Enum):
    cheaper = "cheaper"
    always = "always"


@app.command()
@handle_errors
def solve(instance: Path = typer.Argument(..., help="Instance JSON file."),
          solver: Optional[str] = typer.Option(
              None, "--solver", "-s", help="dp, brute, milp, milp-cbc, cpsat or auto (see `unicron-plan solvers`); "
                                           "default: dp, or auto when the instance has constraints the DP cannot express."),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the plan here instead of stdout."),
          time_limit: float = typer.Option(
              DEFAULT_TIME_LIMIT_SECONDS, "--time-limit", min=0.001, max=MAX_TIME_LIMIT_SECONDS,
              help="Wall-clock seconds from the start, for every solver: when it runs out the best plan "
                   "found so far is returned as 'feasible' with its bound and gap."),
          threads: Optional[int] = typer.Option(None, "--threads", min=1, max=MAX_THREADS,
                                                help="Worker threads, for the IP backends."),
          contingency: Optional[Path] = typer.Option(
              None, "--contingency", help="Directory from `unicron-plan contingency`: use its precomputed "
                                          "plan when the event matches one (validated first; otherwise "
                                          "solve afresh and say why on stderr)."),
          contingency_use: "ContingencyUse" = typer.Option(
              "cheaper", "--contingency-use",
              help="With --contingency: 'cheaper' reads the index only when a warm answer is estimated to "
                   "cost less CPU than solving afresh (from the problem's size, before the index is read; "
                   "otherwise solve afresh and say why); 'always' tries the index whatever the cost."),
          summary: bool = typer.Option(False, "--summary", help="Also print a table of the plan "
                                                                "(job, action, GPUs, GPU type on a mixed fleet, nodes, WAF, "
                                                                "penalty) on stderr."),
          quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress spinner on stderr."),
          timings: bool = typer.Option(False, "--timings", help="Also print, on stderr as JSON, the seconds "
                                                                "from the process's start at the end of each phase.")):
    """Compute the optimal reconfiguration plan of INSTANCE and print it as JSON."""
    import gc
    import time

    from unicron_plan.solvers import process_started

    as_process = _AS_PROCESS.get()
    if as_process:
        # A one-shot process: no full collections over the instance's objects (each took 0.04-0.05 s
        # of CPU at 8,192 GPUs, 0.15-0.2 s of wall time on a loaded machine, at any point of the
        # solve); reference counting still frees everything outside a cycle, and the process ends.
        gc.disable()
        _one_shot_memory()

    # Run as the process's command, the limit counts from the process's start (imports count too);
    # called in another program (a test's CliRunner), from this call.
    started = process_started() if as_process else time.perf_counter()
    phases = {"import": time.perf_counter() - started}
    from unicron_plan import api
    from unicron_plan.io import dumps, emit

    with working(f"solving {instance.name}", quiet):
        plan = api.solve(instance, solver=solver, time_limit_seconds=time_limit, threads=threads,
                         contingency=contingency, started=started, timings=phases,  # parses and checks once
                         contingency_use=ContingencyUse(contingency_use).value,
                         keep=_KEPT if as_process else None)
    reason = (plan.solver.options or {}).get("contingency_fallback")
    if reason:
        typer.echo(f"note: contingency not used: {reason}; solved from scratch", err=True)
    if not quiet and plan.solver.name in ("dp", "auto") and _source_tree_without_native():
        typer.echo("note: the DP ran its slower numpy loop: this source tree has no compiled "
                   "_maxplus; `pip install -e .` builds it (or run from outside the tree)", err=True)
    emit(dumps(plan), out)
    if timings:
        phases["write"] = time.perf_counter() - started
        typer.echo(json.dumps({k: round(v, 4) for k, v in phases.items()}), err=True)
    if summary:
        from unicron_plan.plan.report import print_summary

        print_summary(plan)


_KEPT: list = []  # a `solve` process's instance and problem: never freed, the process ends (_exit_now)


def _one_shot_memory() -> None:
    """A one-shot process's memory settings. On glibc: blocks of every size from the heap (mallopt's
    M_MMAP_THRESHOLD raised from 128 KiB), so that a freed large block (a numpy temporary, the JSON
    parser's buffers) is reused by the next one instead of being unmapped and the next one mapped afresh
    and faulted in page by page (at 1,048,576 GPUs about 0.35 s of system time less, and a larger peak:
    docs/performance.md, "Tables as arrays"); and the heap's free top kept (M_TRIM_THRESHOLD raised from
    128 KiB), so that freeing a large block there does not give its pages back to be faulted in again by
    the next one. And numpy's arrays on pages of 4 KiB, not transparent huge pages
    (:func:`unicron_plan.heap.numpy_small_pages`; docs/performance.md, "Cold answers with less placing,
    and the solve process's pages"). Where the C library is another or the environment sets malloc's or
    numpy's own parameters, those are left as they are (:mod:`unicron_plan.heap`)."""
    from unicron_plan.heap import numpy_small_pages, set_malloc

    set_malloc(2**31 - 1, 2**31 - 1)  # each at most INT_MAX
    numpy_small_pages()


def _source_tree_without_native() -> bool:
    """Whether the package runs from a source checkout whose DP extension is not built (Python
    run from the repository root imports the tree, not the installed copy)."""
    from unicron_plan.solvers import dp

    return dp.NATIVE is None and (Path(dp.__file__).resolve().parents[2] / "pyproject.toml").is_file()


@app.command()
@handle_errors
def validate(instance: Path = typer.Argument(..., help="Instance JSON file."),
             plan: Path = typer.Argument(..., help="Plan JSON file."),
             as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")):
    """Check PLAN against INSTANCE: exit 0 when valid, 1 when not (the reasons on stderr)."""
    from unicron_plan import api

    inst = api.load_instance(instance)  # (the instance's errors first)
    doc = api.load_plan(plan)
    report = api.validate_plan(inst, doc)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    if report.valid:
        if not as_json:
            from unicron_plan.plan.reasons import num

            d_run = doc.d_run_seconds
            typer.echo(f"valid: objective {report.objective:.6g} TFLOP (weighted useful work): "
                       f"{num(report.objective / d_run)} weighted TFLOP/s over a {num(d_run / 3600.0)} h horizon")
        return
    from unicron_plan.text import one_line

    for p in report.problems[:50]:
        typer.echo(f"invalid: {one_line(p)}", err=True)
    if len(report.problems) > 50:
        typer.echo(f"invalid: ... and {len(report.problems) - 50} more problems", err=True)
    raise typer.Exit(1)


@app.command()
@handle_errors
def explain(instance: Path = typer.Argument(..., help="Instance JSON file."),
            plan: Path = typer.Argument(..., help="Plan JSON file (validated first)."),
            as_json: bool = typer.Option(False, "--json", help="Print the explanation as JSON.")):
    """Explain PLAN for a person: what the event did, each changed job with its reason and numbers, and its
    cheapest alternatives (keeping it, the next best count). Exit 1 when the plan does not validate."""
    from unicron_plan import api
    from unicron_plan.errors import PlanValidationError
    from unicron_plan.tools.explain import explain as explained, explain_text
    from unicron_plan.text import one_line

    try:
        ex = explained(api.load_instance(instance), api.load_plan(plan))
    except PlanValidationError as exc:
        for p in exc.problems[:50]:
            typer.echo(f"invalid: {one_line(p)}", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps(ex, indent=2, sort_keys=True) if as_json else explain_text(ex))


class SchemaKind(str, Enum):
    instance = "instance"
    plan = "plan"
    scenario = "scenario"
    points = "points"
    sweep = "sweep"
    efficiency = "efficiency"
    signals = "signals"
    action = "action"


@app.command()
def schema(kind: SchemaKind = typer.Argument(..., help="Which document: instance, plan, scenario, points, "
                                                       "sweep, efficiency, or the service's signals and "
                                                       "action bodies.")):
    """Print the JSON Schema of the instance, plan, scenario, calibration points, sweep or efficiency format,
    or of the body of the service's POST /v1/signals or POST /v1/actions."""
    from unicron_plan.schema import Instance, Plan
    from unicron_plan.schema.efficiency import EfficiencyFile, MeasuredPoints
    from unicron_plan.schema.scenario import Scenario
    from unicron_plan.schema.signal import ActionBody, SignalsBody
    from unicron_plan.schema.sweep import Sweep

    model = {"instance": Instance, "plan": Plan, "scenario": Scenario, "points": MeasuredPoints,
             "sweep": Sweep, "efficiency": EfficiencyFile, "signals": SignalsBody,
             "action": ActionBody}[kind.value]
    typer.echo(json.dumps(model.model_json_schema(), indent=2, sort_keys=True))


@app.command()
def solvers():
    """List the solvers and whether each is available here."""
    import importlib

    from unicron_plan.solvers import REGISTRY

    for spec in REGISTRY:
        mod = importlib.import_module(spec.module)
        ok = mod.available() if hasattr(mod, "available") else True
        typer.echo(f"{spec.name:8s} {'available  ' if ok else 'unavailable'} {spec.summary}")


@app.command()
@handle_errors
def models(as_json: bool = typer.Option(False, "--json", help="Print the lists as JSON.")):
    """List the library's models and GPU types (the names `curve` and a job's `throughput.model` take)."""
    from unicron_plan.perf.library import get_gpu, get_model, gpu_names, model_names

    ms = [get_model(n) for n in model_names()]
    gs = [get_gpu(n) for n in gpu_names()]
    if as_json:
        typer.echo(json.dumps({
            "models": [{"name": m.name, "params": m.params(), "active_params": m.active_params(), "layers": m.layers,
                        "moe": m.moe} for m in ms],
            "gpu_types": [{"name": g.name, "peak_tflops": g.peak_tflops, "memory_gib": g.memory_gib,
                           "gpus_per_node": g.gpus_per_node} for g in gs]}, indent=2, sort_keys=True))
        return
    typer.echo("models (parameters in billions; active per token for MoE):")
    for m in ms:
        active = f", {m.active_params() / 1e9:.1f} B active" if m.moe else ""
        typer.echo(f"  {m.name:24s} {m.params() / 1e9:8.1f} B params{active}, {m.layers} layers")
    typer.echo("GPU types:")
    for g in gs:
        typer.echo(f"  {g.name:8s} {g.peak_tflops:7.0f} TFLOP/s dense BF16, {g.memory_gib:5.0f} GiB, "
                   f"{g.gpus_per_node} GPUs per node")


@app.command()
@handle_errors
def contingency(instance: Path = typer.Argument(..., help="Instance JSON file (its event, if any, is ignored)."),
                out: Path = typer.Option(Path("contingency"), "--out", "-o", help="Output directory."),
                racks: bool = typer.Option(False, "--racks", help="Also plan for the failure of each rack."),
                max_cells: Optional[int] = typer.Option(None, "--max-cells", min=1,
                                              help="Refuse an instance whose jobs x whole-node capacity units "
                                                   "exceed this (the index's tables grow with it; default 2^28, "
                                                   "about 12 GiB of memory at 8,192 jobs x 131,072 nodes)."),
                quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar.")):
    """Precompute the optimal plan for the failure of every single node (and rack) of INSTANCE."""
    from unicron_plan import api
    from unicron_plan.plan.contingency import INDEX_MAX_CELLS, build_contingency, index_cells, write_contingency

    inst = api.load_instance(instance)
    cells, limit = index_cells(inst), max_cells or INDEX_MAX_CELLS
    if cells > limit:
        typer.echo(f"error: instance: {len(inst.jobs)} jobs x whole-node capacity units = {cells:,} is over "
                   f"--max-cells {limit:,}: the index's tables would not fit a planner's memory; raise "
                   f"--max-cells to build it anyway", err=True)
        raise typer.Exit(2)
    index = build_contingency(inst, racks=racks, progress=not quiet)
    path = write_contingency(index, out, inst)
    st = index["stats"]
    infeasible = f" ({st['infeasible']} more infeasible)" if st.get("infeasible") else ""
    typer.echo(f"{st['failures']} failures{infeasible} in {st['groups']} groups, {st['plans']} distinct plans, "
               f"{st['wall_seconds']:.2f} s -> {path}", err=True)


class Family(str, Enum):
    jagged = "jagged"
    near_linear = "near-linear"
    min_counts = "min-counts"


class CurveKind(str, Enum):
    synthetic = "synthetic"
    model = "model"
    identical = "identical"
    linear_step = "linear-step"
    near_linear = "near-linear"
    dense = "dense"
    equal_per_gpu = "equal-per-gpu"
    four_types = "four-types"
    queued_linear_step = "queued-linear-step"
    queued_equal_per_gpu = "queued-equal-per-gpu"
    queued_near_linear = "queued-near-linear"


class Placement(str, Enum):
    shuffled = "shuffled"
    ordered = "ordered"


@app.command()
@handle_errors
def generate(out: Path = typer.Argument(..., help="File to write."),
             seed: int = typer.Option(0, "--seed", help="Seed of the numpy Generator (same seed, same bytes)."),
             gpus: int = typer.Option(16384, "--gpus", help="GPUs in the cluster."),
             jobs: int = typer.Option(128, "--jobs", help="Number of jobs."),
             gpus_per_node: int = typer.Option(8, "--gpus-per-node"),
             nodes_per_rack: int = typer.Option(32, "--nodes-per-rack"),
             demand: float = typer.Option(1.25, "--demand", help="Sum of nominal job sizes / cluster GPUs."),
             max_counts: int = typer.Option(400, "--max-counts", help="Most allowed counts per job."),
             failed_nodes: int = typer.Option(1, "--failed-nodes", help="Nodes failing in the event (0: none)."),
             curves: CurveKind = typer.Option(CurveKind.synthetic, "--curves",
                                              help="synthetic jagged tables, model (unicron_plan.perf), or an "
                                                   "adversarial kind (unicron_plan.tools.adversarial)."),
             scenario: bool = typer.Option(False, "--scenario", help="Write a scenario instead of an instance."),
             duration_hours: float = typer.Option(720.0, "--duration-hours", help="Scenario length."),
             family: Optional[Family] = typer.Option(
                 None, "--family", help="With --scenario: a scenario of this family, its job mix, failure rate "
                                        "and repair mix drawn by --seed for --gpus (unicron_plan.tools.families; "
                                        "the other shape options do not apply)."),
             name: Optional[str] = typer.Option(None, "--name"),
             placement: Placement = typer.Option(Placement.shuffled, "--placement",
                                                 help="Running jobs on nodes in a random order (shuffled, as "
                                                      "real clusters place them) or in node order (ordered)."),
             quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress spinner on stderr.")):
    """Write a seeded instance (or scenario) drawn from the documented distributions (unicron_plan.tools.generate)."""
    from unicron_plan.tools.generate import generate_instance, generate_scenario
    from unicron_plan.io import dumps, write_atomic

    kwargs = dict(gpus=gpus, jobs=jobs, gpus_per_node=gpus_per_node, nodes_per_rack=nodes_per_rack,
                  demand=demand, max_counts=max_counts, curves=curves.value, name=name,
                  placement=placement.value)
    if family is not None and not scenario:
        from unicron_plan.errors import InvalidInstanceError

        raise InvalidInstanceError("--family", "a family is a scenario family: add --scenario")
    if family is not None:  # (its other options are checked by generate_instance)
        from unicron_plan.tools.generate import check_options

        check_options(seed=seed, gpus=gpus, gpus_per_node=gpus_per_node, nodes_per_rack=nodes_per_rack,
                      duration_hours=duration_hours)
        if gpus < gpus_per_node:
            from unicron_plan.errors import InvalidInstanceError

            raise InvalidInstanceError("--gpus", f"{gpus}: a scenario family needs at least one node of "
                                                 f"{gpus_per_node} GPUs")
    with working(f"generating {out.name}", quiet):
        if family is not None:
            from unicron_plan.tools.families import family_scenario

            doc = family_scenario(family.value, seed, gpus, duration_hours=duration_hours,
                                  gpus_per_node=gpus_per_node, nodes_per_rack=nodes_per_rack)
        else:
            doc = (generate_scenario(seed, duration_hours=duration_hours, **kwargs) if scenario
                   else generate_instance(seed, failed_nodes=failed_nodes, **kwargs))
    write_atomic(out, dumps(doc))


@app.command()
@handle_errors
def bench(instances: list[str] = typer.Argument(..., help="Instance files, or generate:gpus=N,jobs=M,seed=S."),
          solver: list[str] = typer.Option(["dp"], "--solver", "-s", help="Solver to run (repeatable)."),
          runs: int = typer.Option(3, "--runs", help="Timed runs per solver and instance."),
          process: bool = typer.Option(False, "--process", help="Also time the whole `solve` CLI process."),
          time_limit: Optional[float] = typer.Option(None, "--time-limit", help="Seconds, for the IP backends."),
          as_json: bool = typer.Option(False, "--json", help="Print the results as JSON instead of the table."),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the results as JSON here too."),
          check: Optional[Path] = typer.Option(None, "--check", help="Baseline JSON to compare against: every "
                                                                     "instance and solver run must be in it."),
          tolerance: float = typer.Option(0.5, "--tolerance", help="Allowed relative slowdown."),
          floor: float = typer.Option(0.01, "--floor", help="Times below this many seconds count as this."),
          quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar.")):
    """Run solvers side by side and print median times, objectives and gaps; --check exits 1 on a regression."""
    from unicron_plan.tools import bench as b
    from unicron_plan.io import dumps, parse_model, read_json, write_atomic

    if check is not None:  # read before the (long) run, so a bad baseline fails at once
        from unicron_plan.schema.bench import BenchResults

        baseline = parse_model(BenchResults, read_json(check)).model_dump(mode="json")
    results = b.run_bench(instances, solver, runs=runs, process=process, time_limit=time_limit,
                          progress=not quiet)
    if as_json:
        sys.stdout.write(dumps(results))
    else:
        from rich.console import Console

        Console(width=200).print(b.table(results))
    for line in b.notes(results):
        typer.echo(line, err=True)
    if out is not None:
        write_atomic(out, dumps(results))
    if check is not None:
        roots = [Path.cwd(), check.resolve().parent.parent]  # benchmarks/baseline.json keys are repo-relative
        problems = b.check(results, baseline, tolerance=tolerance, floor_seconds=floor, roots=roots)
        for p in problems:
            typer.echo(f"regression: {p}", err=True)
        if problems:
            raise typer.Exit(1)
        typer.echo(f"no regression against {check} (tolerance {tolerance})", err=True)


# Commands whose modules are heavy to import are registered only when asked
# for (or when help lists them), so `unicron-plan solve` starts fast.
EXTRA_COMMANDS: dict[str, tuple[str, str]] = {
    "curve": ("unicron_plan.perf.cli", "curve"),
    "calibrate": ("unicron_plan.perf.cli", "calibrate"),
    "serve": ("unicron_plan.service.cli", "serve"),
}
_registered: set[str] = set()


def register_extra_commands(names=None) -> typer.Typer:
    """Register the extra commands ``names`` (all when None) on ``app`` and return it."""
    import importlib

    for name, (module, attr) in EXTRA_COMMANDS.items():
        if (names is None or name in names) and name not in _registered:
            fn = getattr(importlib.import_module(module), attr)
            app.command(name)(handle_errors(fn))
            _registered.add(name)
    return app


def full_app() -> typer.Typer:
    """The app with every command registered (for tests and documentation)."""
    return register_extra_commands()


# --- simulate ---
@app.command()
@handle_errors
def simulate(scenario: Path = typer.Argument(..., help="Scenario JSON file (docs/format.md, Scenario)."),
             policy: Optional[list[str]] = typer.Option(
                 None, "--policy", "-p", help="Policy (repeatable): unicron, megatron, oobleck, varuna, "
                                              "bamboo, greedy, equal-share, type-bound (unicron keeping "
                                              "every job on its GPU type). Default: all (type-bound only "
                                              "on a mixed fleet)."),
             seed: int = typer.Option(0, "--seed", min=0, help="Seed of the first run (run i uses seed + i)."),
             seeds: int = typer.Option(1, "--seeds", min=1, max=10_000,
                                       help="Runs; more than 1 reports means and 95% intervals."),
             workers: int = typer.Option(2, "--workers", min=1, max=256, help="Processes for --seeds."),
             as_json: bool = typer.Option(False, "--json", help="Print the result JSON (docs/format.md)."),
             plot: Optional[Path] = typer.Option(None, "--plot", help="PNG: cumulative weighted TFLOP and WAF "
                                                                       "over time (first seed)."),
             out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the JSON here too."),
             quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar on stderr.")):
    """Simulate SCENARIO's failures and repairs over time under each policy."""
    from unicron_plan.io import dumps, emit
    from unicron_plan.simulate import run as simrun

    sc = simrun.load_scenario(scenario)
    names = simrun.check_policies(list(policy) if policy else simrun.default_policies(sc))
    show = not quiet and sys.stderr.isatty()
    with _progress(show, seeds, sc.name) as tick:
        if seeds == 1:
            runs = [simrun.simulate(sc, names, seed, record=plot is not None, progress=tick)]
        else:
            runs = simrun.run_seeds(sc, names, seed, seeds, workers=workers, progress=tick)
    if plot is not None:
        first = runs[0] if "series" in runs[0] else simrun.simulate(sc, names, seed, record=True)
        simrun.plot(first, plot)
    result = simrun.summarize(runs, names)
    text = dumps(result)
    if out is not None:
        emit(text, out)
    if as_json:
        sys.stdout.write(text)
        return
    _print_summary(result, names)


def _progress(show: bool, seeds: int, name: str):
    """A rich progress bar on stderr (events of one run, or runs), or a no-op."""
    import contextlib

    if not show:
        return contextlib.nullcontext(None)

    @contextlib.contextmanager
    def bar():
        from rich.console import Console
        from rich.progress import Progress

        class Tick:
            def __init__(self, prog, task):
                self.prog, self.task = prog, task

            def __call__(self):
                self.prog.advance(self.task)

            def set_total(self, total: int) -> None:
                self.prog.update(self.task, total=total)

        with Progress(console=Console(stderr=True), transient=True) as prog:
            what = "runs" if seeds > 1 else "events x policies"
            yield Tick(prog, prog.add_task(f"simulating {name} ({what})", total=seeds if seeds > 1 else None))
    return bar()


def _print_summary(result: dict, names: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{result['scenario']} (seed {result['seed']}"
                        + (f", {result['seeds']} seeds" if "seeds" in result else "") + ")")
    several = "seeds" in result
    mixed = any("type_changes" in r for r in result["policies"].values())  # a mixed fleet
    for col in ("policy", "weighted TFLOP" + (" (mean [95% CI])" if several else ""),
                "unicron / policy" + (" (mean [95% CI])" if several else ""), "reconfigs", "detection h",
                "transition h", "sub-healthy h") + (("type changes",) if mixed else ()):
        table.add_column(col, justify="right" if col != "policy" else "left")
    ref = result["policies"].get("unicron", {}).get("weighted_tflop")
    for name in names:
        r = result["policies"][name]
        dh = r["downtime_hours"]
        work, ratio = f"{r['weighted_tflop']:.4e}", f"{ref / r['weighted_tflop']:.4f}" if ref and r["weighted_tflop"] else "-"
        if several:
            lo, hi = r["ci95"]["weighted_tflop"]
            work += f" [{lo:.4e}, {hi:.4e}]"
            ur = r.get("unicron_ratio") or {}
            if ur.get("mean") is not None:
                ratio = f"{ur['mean']:.4f} [{ur['ci95'][0]:.4f}, {ur['ci95'][1]:.4f}]"
        table.add_row(name, work, ratio,
                      f"{r['reconfigurations']:g}",
                      f"{dh['detection']:.3f}", f"{dh['transition']:.3f}", f"{dh['sub_healthy']:.3f}",
                      *((f"{r['type_changes']:g}",) if mixed else ()))
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)


@app.command()
@handle_errors
def sweep(sweep_file: Path = typer.Argument(..., metavar="SWEEP", help="Sweep file, YAML or JSON "
                                                                        "(`unicron-plan schema sweep`)."),
          backend: str = typer.Option("process", "--backend", help="process (local processes) or ray."),
          address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (default: a local "
                                                                          "Ray instance)."),
          workers: int = typer.Option(2, "--workers", min=1, max=256, help="Local processes or Ray CPUs."),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="Directory for sweep.json and the plots."),
          as_json: bool = typer.Option(False, "--json", help="Print the result JSON instead of the table."),
          quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar on stderr.")):
    """Simulate a grid of scenario variants x policies x seeds; unicron's ratio to each policy with 95% CIs."""
    from unicron_plan.errors import InvalidInstanceError
    from unicron_plan.io import dumps, emit, read_json
    from unicron_plan.simulate import sweep as sw

    if backend not in sw.BACKENDS:
        raise InvalidInstanceError("--backend", f"{backend!r}; valid: {', '.join(sw.BACKENDS)}")
    spec, scenario_path = sw.load_sweep(sweep_file)
    base = read_json(scenario_path)
    if out is not None:
        if out.exists() and not out.is_dir():
            raise InvalidInstanceError("--out", f"{out} is not a directory")
        out.mkdir(parents=True, exist_ok=True)
    show = not quiet and sys.stderr.isatty()
    with _sweep_progress(show, len(sw.grid_points(spec)) * spec.replications.max) as tick:
        result = sw.run_sweep(spec, base, backend=backend, address=address, workers=workers, progress=tick,
                              root=Path(sweep_file).parent)
    text = dumps(result)
    if out is not None:
        emit(text, out / "sweep.json")
        sw.plot_sweep(result, out)
    if as_json:
        sys.stdout.write(text)
        return
    _print_sweep(result)


def _sweep_progress(show: bool, most: int):
    """A rich progress bar of runs (up to the most the sweep may need), or a no-op."""
    import contextlib

    if not show:
        return contextlib.nullcontext(None)

    @contextlib.contextmanager
    def bar():
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(stderr=True), transient=True) as prog:
            task = prog.add_task("sweep (runs, at most)", total=most)
            yield lambda n: prog.advance(task, n)
    return bar()


def _print_sweep(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    others = [n for n in result["policies"] if n != "unicron"]
    table = Table(title=f"sweep {result['name'] or result['scenario']}: unicron / policy, mean [95% CI]")
    table.add_column("point")
    table.add_column("seeds", justify="right")
    for name in others:
        table.add_column(name, justify="right")
    for row in result["points"]:
        cells = []
        for name in others:
            r = row["ratios"][name]
            cells.append("-" if r["mean"] is None else f"{r['mean']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]")
        point = ", ".join(f"{k}={v}" for k, v in row["point"].items()) or "(base)"
        table.add_row(point, f"{row['seeds']}{'' if row['converged'] else '*'}", *cells)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)
    if not all(r["converged"] for r in result["points"]):
        console.print("* the target half-width was not reached within replications.max")
# --- end simulate ---


# --- in-band detection (docs/detection.md) ---
def _watch_target(coordinator, job, rank, node, token_file, need_job: bool = True, **options):
    """A :class:`unicron_plan.watch.Watch` from the options, the environment filling what is not given."""
    from unicron_plan.errors import InvalidInstanceError
    from unicron_plan.watch import Watch, environment

    try:
        env = environment(rank=rank is None)
    except ValueError as exc:  # $RANK and the like hold no rank
        raise InvalidInstanceError("--rank", str(exc)) from None
    given = {"coordinator": coordinator, "job": job, "rank": rank, "node": node, "token_file": token_file}
    cfg = {k: v if v is not None else env[k] for k, v in given.items()}
    if not need_job and cfg["rank"] is None:
        cfg["rank"] = 0
    for key, var in (("coordinator", "UNICRON_COORDINATOR"), ("job", "SLURM_JOB_ID"), ("rank", "SLURM_PROCID or RANK")):
        if cfg[key] is None and (need_job or key != "job"):
            raise InvalidInstanceError(f"--{key}", f"not given, and ${var} is not set")
    try:
        return Watch(**cfg, **options)
    except ValueError as exc:
        raise InvalidInstanceError("--coordinator", str(exc)) from None
    except OSError as exc:
        raise InvalidInstanceError("--token-file", f"{token_file}: {exc.strerror}") from None


_COORD = typer.Option(None, "--coordinator", help="The coordinator's URL (default $UNICRON_COORDINATOR).")
_TOKEN = typer.Option(None, "--token-file", help="File holding the coordinator's token "
                                                 "(default $UNICRON_TOKEN_FILE).")
_NODE = typer.Option(None, "--node", help="The node's id in the cluster (default $SLURMD_NODENAME, else the host).")


@app.command(context_settings={"allow_interspersed_args": False})
@handle_errors
def watch(command: list[str] = typer.Argument(..., help="The command to run, after --."),
          coordinator: Optional[str] = _COORD,
          job: Optional[str] = typer.Option(None, "--job", help="The job's id (default $SLURM_JOB_ID)."),
          rank: Optional[int] = typer.Option(None, "--rank", min=0, help="The rank (default $RANK, $OMPI_COMM_WORLD_RANK, $PMI_RANK or $SLURM_PROCID)."),
          node: Optional[str] = _NODE, token_file: Optional[str] = _TOKEN) -> None:
    """Run COMMAND, its output passed through, and report its abnormal exit and its error lines on
    stderr (NCCL, CUDA, Xid ...) to the coordinator; signals are passed on to it. Exits with its status."""
    from unicron_plan.watch import supervise

    raise typer.Exit(supervise(list(command), _watch_target(coordinator, job, rank, node, token_file)))


def _read_xid_state(path: str):
    """The time of the newest Xid line an earlier `watch-node --state` run read, or None (no file)."""
    import json
    import math

    from unicron_plan.errors import InvalidInstanceError

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.loads(fh.read(4096))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidInstanceError("--state", f"{path}: {exc.strerror}") from None
    except ValueError:
        doc = None
    value = doc.get("kernel_log_read_to") if isinstance(doc, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInstanceError("--state", f"{path}: not a watch-node state file")
    return float(value)


def _write_xid_state(path: str, read_to: float) -> None:
    import json

    from unicron_plan.errors import InvalidInstanceError
    from unicron_plan.io import write_atomic

    try:
        write_atomic(path, json.dumps({"kernel_log_read_to": read_to}) + "\n")
    except OSError as exc:
        raise InvalidInstanceError("--state", f"{path}: {exc.strerror}") from None


@app.command("watch-node")
@handle_errors
def watch_node(kernel_log: Optional[str] = typer.Option(None, "--kernel-log",
                                                         help="A kernel log to read Xid lines from ('-': stdin; e.g. "
                                                              "`journalctl -k -o short-iso-precise | ...`)."),
               dcgmi: Optional[str] = typer.Option(None, "--dcgmi",
                                                   help="Output of `dcgmi health -c -j` ('-': stdin)."),
               heartbeat: Optional[float] = typer.Option(None, "--heartbeat", min=0.05, max=3600.0,
                                                         help="Then send the node's heartbeat every so many "
                                                              "seconds until stopped (SIGTERM, SIGINT)."),
               since: Optional[str] = typer.Option(
                   None, "--since", help="Report only the Xid lines logged at or after this time: ISO 8601 "
                                         "(2026-12-07T04:00:00Z; without a zone, local time), or 'all' (every "
                                         "line, also one without a readable time). Default: when watch-node "
                                         "starts, or with --state the newest line an earlier run read."),
               state: Optional[str] = typer.Option(
                   None, "--state", help="File keeping the time of the newest Xid line read: a later run "
                                         "reports only lines logged after it (created if absent)."),
               coordinator: Optional[str] = _COORD, node: Optional[str] = _NODE,
               token_file: Optional[str] = _TOKEN) -> None:
    """Report a node's GPU errors (the driver's Xid lines, DCGM's health check) to the coordinator, and
    with --heartbeat its health (a node that stops beating is lost: its failure, a plan follows).
    Kernel lines logged before watch-node started are not reported unless --since or --state says so."""
    import signal
    import threading
    import time

    from unicron_plan.errors import InvalidInstanceError
    from unicron_plan.watch import kernel_events, node_heartbeat, report_node

    started = time.time()
    if kernel_log is None and dcgmi is None and heartbeat is None:
        raise InvalidInstanceError("--kernel-log", "give --kernel-log, --dcgmi, --heartbeat or several")
    if kernel_log == "-" and dcgmi == "-":
        raise InvalidInstanceError("--dcgmi", "only one of --kernel-log and --dcgmi can read stdin")
    if (since is not None or state is not None) and kernel_log is None:
        raise InvalidInstanceError("--since" if since is not None else "--state", "needs --kernel-log")
    since_time = None
    if since is not None and since != "all":
        from unicron_plan.faults.xid import line_time

        since_time = line_time(since.strip() + " ") if since.strip()[:1].isdigit() else None
        if since_time is None:
            raise InvalidInstanceError("--since", f"{since[:64]!r} is not an ISO 8601 time "
                                                  "(2026-12-07T04:00:00Z) or 'all'")
    read_to = _read_xid_state(state) if state is not None else None
    if since is None and read_to is None:
        since_time = started  # an earlier line may have been reported already: never again

    def opened(path):
        if path == "-":
            return sys.stdin
        try:
            return open(path, encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InvalidInstanceError("--kernel-log" if path == kernel_log else "--dcgmi",
                                       f"{path}: {exc.strerror}") from None

    lines = opened(kernel_log) if kernel_log is not None else []
    dcgm_text = None
    if dcgmi is not None:
        with opened(dcgmi) as fh:
            dcgm_text = fh.read(16 * 1024 * 1024)
    if heartbeat is not None:
        from unicron_plan.watch import HEARTBEAT_INTERVAL

        kw = {"heartbeat_interval": min(heartbeat, HEARTBEAT_INTERVAL)}
    else:
        kw = {}
    target = _watch_target(coordinator, None, None, node, token_file, need_job=False, **kw)
    events, newest = kernel_events(lines, since=since_time, after=read_to)
    try:
        count = report_node(target, [], dcgm_text, events=events)
    except ValueError as exc:  # not JSON
        raise InvalidInstanceError("--dcgmi", f"not JSON: {exc}") from None
    if state is not None:
        marks = [t for t in (read_to, since_time, newest) if t is not None]
        if marks:
            _write_xid_state(state, max(marks))
    if kernel_log is not None or dcgmi is not None:
        typer.echo(f"{count} report(s) for node {target.node}; {target.lost} not sent", err=True)
    if heartbeat is not None:
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *a: stop.set())
        node_heartbeat(target, heartbeat, stop)
        target.close()
    else:
        target.stop()
# --- end in-band detection ---


from unicron_plan.integrations.cli import register as _register_integrations  # noqa: E402

_register_integrations(app, handle_errors)  # import / export (scheduler adapters)


# True while main() runs as the process's own command line (the console script, `python -m`): only
# then does a time limit count from the process's start and does `solve` end the process at once.
# A context variable set for the call only, so an in-process caller of main(argv) is never affected.
_AS_PROCESS: contextvars.ContextVar[bool] = contextvars.ContextVar("unicron_plan_cli_as_process", default=False)


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point. Without ``argv`` it runs the process's command line (``sys.argv``)
    as that process; with ``argv`` it is an in-process call: time limits count from the call, and
    nothing process-wide (garbage collection, the process's exit) is touched."""
    as_process = argv is None
    token = _AS_PROCESS.set(as_process)
    try:
        _main(sys.argv[1:] if as_process else argv, as_process)
    finally:
        _AS_PROCESS.reset(token)


def _main(args: list[str], as_process: bool) -> None:
    first = next((a for a in args if not a.startswith("-")), None)
    if first is None:  # help lists every command; --version needs none
        names = [] if "--version" in args else None
    else:
        names = [] if first in _CORE_COMMANDS else [first] if first in EXTRA_COMMANDS else None
    register_extra_commands(names)
    try:
        code = _run(command(app), args)
    except SystemExit as exc:
        if first == "solve" and as_process:
            _exit_now(exc.code)
        raise
    if first == "solve" and as_process:
        _exit_now(code)
    sys.exit(code)


def _run(cmd, args: list[str]) -> int:
    """Run the click command; a usage error (a missing or unknown option...) is one line on stderr, exit 2."""
    from unicron_plan.text import one_line

    # click's exceptions, wherever this typer takes click from (its own copy, or click itself)
    click = sys.modules[typer.BadParameter.__module__]
    try:
        rv = cmd.main(args=args, prog_name="unicron-plan", standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "unicron-plan"
        typer.echo(f"error: {one_line(exc.format_message())} (see '{where} --help')", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        typer.echo(f"error: {one_line(exc.format_message())}", err=True)
        return exc.exit_code
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        return 1
    return rv if isinstance(rv, int) else 0


def _exit_now(code) -> None:
    """End a `solve` process at once, its output flushed: tearing down the interpreter (freeing the
    instance's tables, stopping solver threads) took 0.3-0.7 s on a loaded machine, time a
    caller waiting on the time limit would otherwise wait too."""
    import os

    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        code = code or 1
    os._exit(code)


def command(typer_app: typer.Typer):
    """The click command of ``typer_app``, its flags (``--json``, ``--summary``, ``--help``...) shown
    in help without a value placeholder, as they take none."""
    def bare(cmd) -> None:
        for p in cmd.params:
            if getattr(p, "is_flag", False):
                p.metavar = ""
        make_help = cmd.get_help_option

        def help_option(ctx, _make=make_help):
            opt = _make(ctx)
            if opt is not None:
                opt.metavar = ""
            return opt
        cmd.get_help_option = help_option
        for sub in getattr(cmd, "commands", {}).values():
            bare(sub)

    cmd = typer.main.get_command(typer_app)
    bare(cmd)
    return cmd


_CORE_COMMANDS = {"solve", "validate", "schema", "solvers", "models", "contingency", "generate", "bench", "simulate",
                  "sweep", "import", "export", "watch", "watch-node"}


if __name__ == "__main__":  # pragma: no cover
    main()
