"""Human-readable views of a plan (the JSON on stdout stays the contract)."""

from __future__ import annotations

from unicron_plan.schema import Plan
from unicron_plan.text import shown


def summary_table(plan: Plan):
    """A rich Table: one row per job with its action, reason, GPUs before and after, nodes, WAF, penalty and
    the GPU-minutes its transition loses; on a fleet of several GPU types also the type each job runs on
    under the plan. The title gives the objective as a rate with its horizon (docs/format.md, glossary)."""
    from rich.table import Table

    from unicron_plan.plan.reasons import num

    d_run = plan.d_run_seconds
    changes = ", ".join(f"{n} {r}" for r, n in (plan.changes or {}).items())
    table = Table(title=f"{shown(plan.instance, 60)}: {plan.status.solution} ({plan.solver.name}), "
                        f"{num(plan.objective / d_run)} weighted TFLOP/s over a {num(d_run / 3600.0)} h horizon "
                        f"(objective {plan.objective:.6g} TFLOP, bound {plan.bound:.6g} TFLOP: weighted useful work)"
                        + (f"; changes: {changes}" if changes else ""))
    types = len(plan.capacity or {}) > 1 or len({j.gpu_type for j in plan.jobs}) > 1
    reasons = any(j.reason is not None for j in plan.jobs)
    cols = ("job", "action", *(("reason",) if reasons else ()), "GPUs before", "GPUs after",
            *(("GPU type",) if types else ()), "nodes", "WAF TFLOP/s", "penalty TFLOP", "transition GPU-min")
    for col in cols:
        table.add_column(col, justify="left" if col in ("job", "action", "reason", "GPU type", "nodes") else "right")
    for j in plan.jobs:
        nodes = ", ".join(shown(n, 24) for n in j.nodes[:6]) + (f" (+{len(j.nodes) - 6})" if len(j.nodes) > 6 else "")
        lost = j.previous_gpus * (j.transition_seconds or 0.0)
        table.add_row(shown(j.id, 40), j.action, *((j.reason or "-",) if reasons else ()), str(j.previous_gpus),
                      str(j.gpus), *((shown(j.gpu_type or "-", 24),) if types else ()), nodes or "-",
                      f"{j.waf_tflops:.6g}", f"{j.transition_penalty:.6g}", num(lost / 60.0))
    return table


def print_summary(plan: Plan) -> None:
    """Print :func:`summary_table` on stderr (stdout carries the plan JSON)."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        console = Console(stderr=True, width=120)
    console.print(summary_table(plan))
