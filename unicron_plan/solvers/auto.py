"""``auto``: the DP when it is exact for the instance, else an integer-programming backend.

The DP is exact when :func:`unicron_plan.constraints.dp_limitations` is empty
(the separable problem, plus pinned jobs and hysteresis, which only filter
counts). Otherwise ``milp`` (PuLP + HiGHS) runs, or ``cpsat`` when HiGHS is
missing. The backend that ran is recorded in ``SolverInfo.options["backend"]``.
"""

from __future__ import annotations

from unicron_plan.constraints import dp_limitations
from unicron_plan.errors import SolverUnavailableError
from unicron_plan.problem import Problem, RawSolution
from unicron_plan.solvers import SolverOptions


def available() -> bool:
    """The DP is always there."""
    return True


def choose(problem: Problem) -> str:
    """The solver name ``auto`` uses for ``problem``."""
    if not dp_limitations(problem):
        return "dp"
    from unicron_plan.solvers import cpsat, milp

    if milp.available():
        return "milp"
    if cpsat.available():
        return "cpsat"
    raise SolverUnavailableError("the instance needs an IP backend (milp or cpsat) and neither is installed")


def solve(problem: Problem, options: SolverOptions | None = None) -> RawSolution:
    """Dispatch to :func:`choose`'s solver."""
    import importlib

    name = choose(problem)
    raw = importlib.import_module(f"unicron_plan.solvers.{name}").solve(problem, options)
    raw.options = {"backend": name, **{k: v for k, v in raw.options.items() if k != "backend"}}
    return raw
