"""The mixed-fleet problem as an integer program, for the IP backends (milp, cpsat) as references.

Binaries z[i,t,k]: job i runs on GPU type t with its k-th allowed count there (y = 0 once, on
its current type); sum_{t,k} z[i,t,k] = 1 per job; per type sum_{i,k} c_itk z[i,t,k] <= C_t;
maximise sum G_i^t(c_itk) z[i,t,k]. The same model as :mod:`unicron_plan.solvers.mixed`
solves by decomposition, built from the same terms, with every count (no pruning). With
node-level constraints or ``max_changed_jobs`` the node-level model over types of
:mod:`unicron_plan.solvers.mixed_place` runs on the same backend instead.
"""

from __future__ import annotations

import math

from unicron_plan.core.problem import Problem, RawSolution
from unicron_plan.errors import InfeasibleError
from unicron_plan.solvers import DeadlineReached, SolverOptions, check_deadline
from unicron_plan.solvers.ipmodel import Formulation, keep_or_suspend


def build(problem: Problem, deadline: float | None = None) -> tuple[Formulation, dict[int, tuple[str, str, int]]]:
    """(the model, {variable: (job id, GPU type, count)}); raises DeadlineReached when ``deadline``
    passes on the way."""
    model = Formulation(problem, node_level=False)
    meaning: dict[int, tuple[str, str, int]] = {}
    per_type: dict[str, dict[int, int]] = {t: {} for t in problem.capacity}
    for j in problem.jobs:
        check_deadline(deadline)
        one: dict[int, int] = {}
        for a in problem.alternatives.get(j.id, [j]):
            for y, g in zip(a.counts.tolist(), a.gains.tolist()):
                if y == 0 and a.off_type:
                    continue  # suspended is one choice, kept on the current type
                v = model.var(f"z_{j.index}_{a.gpu_type}_{y}", 0, 1)
                meaning[v] = (j.id, a.gpu_type, int(y))
                model.objective[v] = float(g)
                one[v] = 1
                if y:
                    per_type[a.gpu_type][v] = int(y)
                elif not a.off_type:
                    model.hint[v] = 1  # suspended: feasible whenever the job may suspend
        model.row(one, lo=1, hi=1)
    for t, coefs in per_type.items():
        if coefs:
            model.row(coefs, hi=int(problem.capacity[t]))
    return model, meaning


def single_solver(backend: str | None):
    """The single-type solver of the node-level model's candidates on ``backend``: the DP where it is
    exact, else CP-SAT (``cpsat``), CBC (``cbc``) or the router (:func:`unicron_plan.solvers.auto.solve_single`)."""
    from unicron_plan.core.constraints import dp_limitations
    from unicron_plan.solvers import auto, cpsat, dp, milp

    def single(problem: Problem, options: SolverOptions) -> RawSolution:
        if not dp_limitations(problem):
            return dp.solve(problem, options)
        if backend == "cpsat":
            return cpsat.solve(problem, options)
        if backend == "cbc":
            return milp.solve(problem, options, "cbc")
        return auto.solve_single(problem, options)

    return single


def solve(problem: Problem, options: SolverOptions | None, backend: str) -> RawSolution:
    """Solve the model with ``backend`` (``highs`` or ``cbc`` through PuLP, ``cpsat``: OR-Tools)."""
    from unicron_plan.solvers.mixed import _limitations, solve_types

    if _limitations(problem):  # node-level or churn constraints: the node-level model over types
        from unicron_plan.solvers import mixed_place

        return mixed_place.solve(problem, options, backend, single=single_solver(backend), relax=solve_types)
    options = options or SolverOptions()
    try:
        model, meaning = build(problem, options.deadline)
    except DeadlineReached:
        model = meaning = None
    if model is None:
        result, values, info = {"termination": "time_limit", "has_solution": False, "bound": math.inf}, None, \
            {"backend": backend, "stopped": "time limit while building"}
    elif backend == "cpsat":
        from unicron_plan.solvers import cpsat

        result, values, info = cpsat.run(model, options)
    else:
        from unicron_plan.solvers import milp

        result, values = milp.run(model, options, backend)
        info = {"backend": backend, **model.stats()}
    if result["termination"] == "infeasible":
        raise InfeasibleError("the jobs that may not suspend (pinned, hysteresis) do not fit on any choice of "
                              "GPU types (the solver proved it)")
    counts, types = {}, {}
    if values is not None and model.feasible(values):
        for v, (jid, t, y) in meaning.items():
            if values[v] > 0.5:
                counts[jid], types[jid] = y, t
    optimal = result["termination"] == "optimal" and bool(counts)
    if not optimal:
        # Stopped: the plan held, or keeping every job that can stay (on its type) and suspending the
        # others, whichever is better.
        kept = keep_or_suspend(problem)
        kept_value = None if kept is None else problem.objective(kept[0])
        if kept_value is not None and (not counts or kept_value > problem.with_types(types).objective(counts)):
            counts, types = kept[0], {j.id: j.gpu_type for j in problem.jobs}
            info = {**info, "fallback": "keep-or-suspend"}
        if not counts:
            raise InfeasibleError(f"no plan found ({result['termination']}); raise the time limit")
        if result["termination"] == "optimal":
            result = {**result, "termination": "time_limit"}
    objective = problem.with_types(types).objective(counts)
    optimal = result["termination"] == "optimal"
    bound = result["bound"] if math.isfinite(result["bound"]) else math.inf
    if not math.isfinite(bound):  # CBC reports no bound (and its "optimal" is no proof): the relaxation's
        from unicron_plan.solvers.mixed import relaxation

        bound = relaxation(problem, options.deadline)[1]
    bound = max(bound, objective)
    if optimal and not math.isclose(bound, objective, rel_tol=1e-9, abs_tol=1e-6):
        optimal = False  # the backend's rounding leaves a visible gap: no proof
    return RawSolution(counts=counts, objective=objective, bound=objective if optimal else bound,
                       termination="optimal" if optimal else result["termination"],
                       solution="optimal" if optimal else "feasible", types=types,
                       options={**{k: v for k, v in info.items() if v is not None}, "model": "mixed types"})
