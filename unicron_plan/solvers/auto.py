"""``auto``: the DP when it is exact for the instance, else an integer-programming backend.

1. No constraint beyond what the DP expresses (:func:`unicron_plan.core.constraints.dp_limitations`
   empty: the separable problem, pinned jobs, hysteresis): the DP.
2. Otherwise the DP's optimum of the relaxation (node-level constraints and the churn
   limit dropped) is an upper bound; if its counts respect ``max_changed_jobs`` and are
   placed under every node-level constraint, that plan is optimal (value = bound) and is
   returned (``backend: dp+place``). Placement tries whole tp groups greedily first
   (:func:`unicron_plan.solvers.group_place.place_groups`, when tp is the only node-level
   constraint that binds), then :func:`unicron_plan.solvers.cpsat.place_constrained`.
3. Else ``milp`` (PuLP + HiGHS), or ``cpsat`` when HiGHS is missing.

The backend that ran is recorded in ``SolverInfo.options["backend"]``.
"""

from __future__ import annotations


from unicron_plan.core.constraints import dp_limitations
from unicron_plan.errors import MissingExtraError, SolverUnavailableError
from unicron_plan.core.problem import Problem, RawSolution
from unicron_plan.solvers import SolverOptions

PLACE_SECONDS = 5.0  # at most this long (or half the time limit) for step 2's placement


def available() -> bool:
    """The DP is always there."""
    return True


def choose(problem: Problem) -> str:
    """The exact backend ``auto`` falls back to for ``problem`` (``dp`` when the DP is exact)."""
    if not dp_limitations(problem):
        return "dp"
    from unicron_plan.solvers import cpsat, milp

    if milp.available():
        return "milp"
    if cpsat.available():
        return "cpsat"
    raise MissingExtraError("the instance has constraints the DP cannot express: an IP backend (milp or cpsat) "
                            "is needed: pip install 'unicron-plan[ip]'")


def _relaxation_placed(problem: Problem, options: SolverOptions) -> RawSolution | None:
    """Step 2: the DP relaxation's counts, if they can be placed under every constraint."""
    from unicron_plan.solvers import cpsat
    from unicron_plan.solvers.dp import relaxation_bound

    counts, value, _, exact = relaxation_bound(problem, options.deadline)
    if not exact or options.expired():  # stopped by the deadline: the backend's fallback answers
        return None
    if not problem.churn_holds(counts):
        return None
    from unicron_plan.solvers.ipmodel import needs_node_level

    placement = None  # only the churn limit binds, and it holds: placement.place will do
    if needs_node_level(problem):
        if all(": tp " in s for s in dp_limitations(problem) if not s.startswith("max_changed_jobs")):
            from unicron_plan.solvers.group_place import place_groups

            placement = place_groups(problem, counts)
        if placement is None and not options.expired():
            if not cpsat.available():
                return None
            left = options.remaining()
            limit = PLACE_SECONDS if left is None else min(PLACE_SECONDS, left / 2)
            placement = cpsat.place_constrained(problem, counts, limit, options.threads, options.deadline,
                                                options.slowdown)
        if placement is None:
            return None
    return RawSolution(counts=counts, objective=problem.objective(counts), bound=value,
                       placement=placement, options={"backend": "dp+place"})


def solve(problem: Problem, options: SolverOptions | None = None) -> RawSolution:
    """Dispatch as the module docstring says: the one router. Mixed fleets go to
    :mod:`unicron_plan.solvers.mixed`, handed :func:`solve_single` for their single-type parts."""
    options = options or SolverOptions()
    if problem.alternatives:  # mixed fleets: types and counts (solvers/mixed.py)
        from unicron_plan.solvers import mixed
        raw = mixed.solve(problem, options, single=solve_single)
        raw.options = {"backend": "mixed", **raw.options}
        return raw
    return solve_single(problem, options)


def solve_single(problem: Problem, options: SolverOptions | None = None) -> RawSolution:
    """Steps 1-3 of the module docstring for a problem whose jobs keep their GPU type."""
    import importlib

    options = options or SolverOptions()
    name = choose(problem)
    if name != "dp":
        raw = _relaxation_placed(problem, options)
        if raw is not None:
            return raw
    raw = importlib.import_module(f"unicron_plan.solvers.{name}").solve(problem, options)
    raw.options = {"backend": name, **{k: v for k, v in raw.options.items() if k != "backend"}}
    return raw
