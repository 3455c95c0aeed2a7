"""Exhaustive enumeration of every combination of allowed counts.

Independent of the DP (no pruning, no decomposition by GPU type): the
reference the exact solvers are tested against. Exponential; refuses
instances with more than ``MAX_COMBINATIONS`` combinations.
"""

from __future__ import annotations

import itertools
import math

from unicron_plan.core.constraints import dp_limitations
from unicron_plan.errors import InfeasibleError, SolverUnavailableError
from unicron_plan.core.problem import Problem, RawSolution
from unicron_plan.solvers import SolverOptions

MAX_COMBINATIONS = 2_000_000


def available() -> bool:
    """Pure Python."""
    return True


def solve(problem: Problem, options: SolverOptions | None = None) -> RawSolution:
    """Try every combination of counts (and, on a mixed fleet, of GPU types: y = 0 once per job);
    keep the best one that fits every GPU type."""
    limits = dp_limitations(problem)
    if problem.alternatives:
        from unicron_plan.solvers.mixed import _limitations

        limits = _limitations(problem)
    if limits:
        raise SolverUnavailableError(
            f"solver 'brute' enumerates counts only and cannot express {', '.join(limits)}; "
            f"use --solver auto, milp or cpsat")
    domains = [[(a, int(y)) for a in problem.alternatives.get(j.id, [j]) for y in a.counts
                if y > 0 or not a.off_type] for j in problem.jobs]
    size = math.prod(len(d) for d in domains)
    if size > MAX_COMBINATIONS:
        raise SolverUnavailableError(
            f"brute force would enumerate {size} combinations (limit {MAX_COMBINATIONS}); use --solver dp")
    best_value, best = -math.inf, None
    for combo in itertools.product(*domains):
        used: dict[str, int] = {}
        for a, y in combo:
            used[a.gpu_type] = used.get(a.gpu_type, 0) + y
        if any(used[t] > problem.capacity[t] for t in used):
            continue
        value = sum(a.gain_of(y) for a, y in combo)
        if value > best_value:
            best_value, best = value, combo
    if best is None:
        raise InfeasibleError("no combination of GPU types and allowed counts fits the capacity")
    counts = {a.id: y for a, y in best}
    types = {a.id: a.gpu_type for a, y in best} if problem.alternatives else None
    return RawSolution(counts=counts, objective=best_value, bound=best_value, types=types)
