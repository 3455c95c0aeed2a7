"""The `unicron-plan` command line: parse, call the API, print. No modelling logic here.

Exit codes: 0 success; 1 a plan that does not validate; 2 bad input (one
message on stderr naming the field, never a traceback); 3 an internal error.
"""

from __future__ import annotations

import functools
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Cost-minimising reconfiguration plans for multi-job LLM training clusters.")


def _fail(code: int, message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def handle_errors(fn):
    """Map the package's typed errors to exit codes and one clear line on stderr."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from unicron_plan.errors import (InfeasibleError, InvalidInstanceError, PlanValidationError,
                                         SolverUnavailableError, UnicronError)
        try:
            return fn(*args, **kwargs)
        except (InvalidInstanceError, SolverUnavailableError) as exc:
            _fail(2, str(exc))
        except InfeasibleError as exc:
            _fail(1, str(exc))
        except PlanValidationError as exc:
            _fail(3, str(exc))
        except UnicronError as exc:
            _fail(3, str(exc))
    return wrapper


def emit(text: str, out: Optional[Path]) -> None:
    """Print to stdout, or write atomically to ``out``."""
    if out is None:
        sys.stdout.write(text)
    else:
        from unicron_plan.io import write_atomic

        write_atomic(out, text)


@app.command()
@handle_errors
def solve(instance: Path = typer.Argument(..., help="Instance JSON file."),
          solver: str = typer.Option("dp", "--solver", "-s", help="Solver name (see `unicron-plan solvers`)."),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the plan here instead of stdout."),
          time_limit: Optional[float] = typer.Option(None, "--time-limit", help="Seconds, for the IP backends."),
          threads: Optional[int] = typer.Option(None, "--threads", help="Worker threads, for the IP backends.")):
    """Compute the optimal reconfiguration plan of INSTANCE and print it as JSON."""
    from unicron_plan import api
    from unicron_plan.io import dumps

    plan = api.solve(api.load_instance(instance), solver=solver, time_limit_seconds=time_limit, threads=threads)
    emit(dumps(plan), out)


@app.command()
@handle_errors
def validate(instance: Path = typer.Argument(..., help="Instance JSON file."),
             plan: Path = typer.Argument(..., help="Plan JSON file."),
             as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")):
    """Check PLAN against INSTANCE: exit 0 when valid, 1 when not (the reasons on stderr)."""
    from unicron_plan import api

    report = api.validate_plan(api.load_instance(instance), api.load_plan(plan))
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    if report.valid:
        if not as_json:
            typer.echo(f"valid: objective {report.objective:.6g}")
        return
    for p in report.problems:
        typer.echo(f"invalid: {p}", err=True)
    raise typer.Exit(1)


class SchemaKind(str, Enum):
    instance = "instance"
    plan = "plan"
    scenario = "scenario"


@app.command()
def schema(kind: SchemaKind = typer.Argument(..., help="Which document: instance, plan or scenario.")):
    """Print the JSON Schema of the instance, plan or scenario format."""
    from unicron_plan.schema import Instance, Plan
    from unicron_plan.schema.scenario import Scenario

    model = {"instance": Instance, "plan": Plan, "scenario": Scenario}[kind.value]
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


# --- simulate (issue 5) ---
@app.command()
@handle_errors
def simulate(scenario: Path = typer.Argument(..., help="Scenario JSON file (FORMAT.md, Scenario)."),
             policy: Optional[list[str]] = typer.Option(
                 None, "--policy", "-p", help="Policy (repeatable): unicron, megatron, oobleck, greedy, "
                                              "equal-share. Default: all."),
             seed: int = typer.Option(0, "--seed", help="Seed of the first run (run i uses seed + i)."),
             seeds: int = typer.Option(1, "--seeds", min=1, help="Runs; more than 1 reports means and 95% intervals."),
             workers: int = typer.Option(2, "--workers", min=1, help="Processes for --seeds."),
             as_json: bool = typer.Option(False, "--json", help="Print the result JSON (FORMAT.md)."),
             plot: Optional[Path] = typer.Option(None, "--plot", help="PNG: cumulative weighted TFLOP and WAF "
                                                                       "over time (first seed)."),
             out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the JSON here too.")):
    """Simulate SCENARIO's failures and repairs over time under each policy."""
    from unicron_plan.io import dumps
    from unicron_plan.simulate import DEFAULT_POLICIES, run as simrun

    sc = simrun.load_scenario(scenario)
    names = simrun.check_policies(list(policy) if policy else list(DEFAULT_POLICIES))
    show = not as_json and sys.stderr.isatty()
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
    for col in ("policy", "weighted TFLOP", "policy / unicron", "reconfigs", "detection h", "transition h",
                "sub-healthy h"):
        table.add_column(col, justify="right" if col != "policy" else "left")
    ref = result["policies"].get("unicron", {}).get("weighted_tflop")
    for name in names:
        r = result["policies"][name]
        dh = r["downtime_hours"]
        table.add_row(name, f"{r['weighted_tflop']:.4e}",
                      f"{r['weighted_tflop'] / ref:.4f}" if ref else "-", f"{r['reconfigurations']:g}",
                      f"{dh['detection']:.3f}", f"{dh['transition']:.3f}", f"{dh['sub_healthy']:.3f}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)
    console.print(table)
# --- end simulate ---


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
