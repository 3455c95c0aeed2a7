"""Human-readable views of a plan (the JSON on stdout stays the contract)."""

from __future__ import annotations

from unicron_plan.schema import Plan
from unicron_plan.text import shown


def summary_table(plan: Plan):
    """A rich Table: one row per job with its action, GPUs before and after, nodes, WAF and penalty."""
    from rich.table import Table

    table = Table(title=f"{shown(plan.instance, 60)}: {plan.status.solution} ({plan.solver.name}), "
                        f"objective {plan.objective:.6g} TFLOP, bound {plan.bound:.6g} TFLOP (weighted useful work)")
    for col in ("job", "action", "GPUs before", "GPUs after", "nodes", "WAF TFLOP/s", "penalty TFLOP"):
        table.add_column(col, justify="left" if col in ("job", "action", "nodes") else "right")
    for j in plan.jobs:
        nodes = ", ".join(shown(n, 24) for n in j.nodes[:6]) + (f" (+{len(j.nodes) - 6})" if len(j.nodes) > 6 else "")
        table.add_row(shown(j.id, 40), j.action, str(j.previous_gpus), str(j.gpus), nodes or "-",
                      f"{j.waf_tflops:.6g}", f"{j.transition_penalty:.6g}")
    return table


def print_summary(plan: Plan) -> None:
    """Print :func:`summary_table` on stderr (stdout carries the plan JSON)."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        console = Console(stderr=True, width=120)
    console.print(summary_table(plan))
