"""The MILP backend with CBC (shipped with PuLP) instead of HiGHS: ``--solver milp-cbc``.

CBC reports no dual bound this way, so a time-limited run's bound is the
DP relaxation's optimum (see :mod:`unicron_plan.solvers.milp`).
"""

from __future__ import annotations

from unicron_plan.core.problem import Problem, RawSolution
from unicron_plan.solvers import SolverOptions
from unicron_plan.solvers import milp


def available() -> bool:
    """PuLP's bundled CBC runs here."""
    return milp.available("cbc")


def solve(problem: Problem, options: SolverOptions | None = None) -> RawSolution:
    """:func:`unicron_plan.solvers.milp.solve` with ``backend="cbc"``."""
    return milp.solve(problem, options, backend="cbc")
