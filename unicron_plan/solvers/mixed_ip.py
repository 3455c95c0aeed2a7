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
import time

from unicron_plan.core.problem import Problem, RawSolution
from unicron_plan.errors import InfeasibleError, MissingExtraError
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


def _start(problem: Problem, options: SolverOptions, model: Formulation,
           meaning: dict[int, tuple[str, str, int]]) -> tuple | None:
    """The mixed solver's plan (:func:`unicron_plan.solvers.mixed.solve_types`, stopped at the
    deadline) as (counts, types, value, bound, exact), set as the model's start; None when it
    found no plan."""
    from unicron_plan.solvers.mixed import solve_types

    try:
        counts, types, value, bound, stopped, _ = solve_types(problem, options.deadline)
    except InfeasibleError:  # none found in time (or none exists: the engine says which)
        return None
    except MissingExtraError:  # the mixed solver's HiGHS is not installed: the engine alone
        return None
    if model is not None:
        values = [0] * len(model.names)
        for v, (jid, t, y) in meaning.items():
            if counts[jid] == y and (types[jid] == t or y == 0):
                values[v] = 1
        if model.feasible(values):
            model.start = values
    return counts, types, problem.with_types(types).objective(counts), bound, not stopped


def _trivial_bound(problem: Problem) -> float:
    """Every job at its best option on its best type, capacities ignored: an upper bound that costs
    no solve."""
    return math.fsum(max(float(a.gains.max()) for a in problem.alternatives.get(j.id, [j])) for j in problem.jobs)


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
    """Solve the model with ``backend`` (``highs`` or ``cbc`` through PuLP, ``cpsat``: OR-Tools).

    The mixed solver runs first (under the same deadline): its plan is the engine's start, its
    bound caps the engine's, and the answer is the best of the engine's plan, the mixed solver's
    and keep-or-suspend. An engine's ``optimal`` below the mixed solver's exact optimum is refuted;
    the answer is ``optimal`` when the mixed solver proved the plan returned, or when the engine's
    claim meets the bound."""
    from unicron_plan.solvers.mixed import _limitations, solve_types

    if _limitations(problem):  # node-level or churn constraints: the node-level model over types
        from unicron_plan.solvers import mixed_place

        return mixed_place.solve(problem, options, backend, single=single_solver(backend), relax=solve_types)
    options = options or SolverOptions()
    stamps = [time.perf_counter()]  # the phases' ends: model, start, copy and engine, extract
    try:
        model, meaning = build(problem, options.deadline)
    except DeadlineReached:
        model = meaning = None
    stamps.append(time.perf_counter())
    start = None if options.expired() else _start(problem, options, model, meaning)
    stamps.append(time.perf_counter())
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
    stamps.append(time.perf_counter())
    if result["termination"] == "infeasible" and start is None:
        raise InfeasibleError("the jobs that may not suspend (pinned, hysteresis) do not fit on any choice of "
                              "GPU types (the solver proved it)")
    plans = []  # (value, name, counts, types): the engine's first, so that it wins ties
    if values is not None and model.feasible(values):
        counts, types = {}, {}
        for v, (jid, t, y) in meaning.items():
            if values[v] > 0.5:
                counts[jid], types[jid] = y, t
        plans.append((problem.with_types(types).objective(counts), None, counts, types))
    elif values is not None:
        info = {**info, "incumbent_discarded": "infeasible values"}
    if start is not None:
        plans.append((start[2], "mixed", start[0], start[1]))
    kept = keep_or_suspend(problem)
    if kept is not None:
        plans.append((problem.objective(kept[0]), "keep-or-suspend", kept[0], {j.id: j.gpu_type for j in problem.jobs}))
    if not plans:
        raise InfeasibleError(f"no plan found ({result['termination']}); raise the time limit")
    objective, name, counts, types = max(plans, key=lambda p: p[0])  # the first of the best
    stamps.append(time.perf_counter())
    info = {**info, **{f"{phase}_seconds": round(b - a, 4) for phase, a, b in
                       zip(("model", "start", "copy_and_engine", "extract"), stamps, stamps[1:])}}
    termination = result["termination"]
    if termination == "infeasible":
        info, termination = {**info, "infeasible_claim_refuted": True}, "error"
    exact = start is not None and start[4]
    if termination == "optimal" and exact and plans[0][1] is None \
            and plans[0][0] < start[2] - 1e-12 * max(1.0, abs(start[2])):
        info, termination = {**info, "optimal_claim_refuted": "below the exact mixed optimum"}, "error"
    if name is not None:
        info = {**info, "fallback": name}
        if termination == "optimal":
            termination = "time_limit"  # the engine's claim was about another plan
    bound = result["bound"]
    if bound < objective - 1e-9 * max(1.0, abs(objective)):  # below a feasible plan: no bound
        info, bound = {**info, "solver_bound_discarded": float(bound)}, math.inf
    if start is not None:
        bound = min(bound, start[3])
    if not math.isfinite(bound):  # no engine bound (CBC reports none) and no mixed solver's
        bound = _trivial_bound(problem)
    bound = max(bound, objective)
    proven = exact and objective >= start[2] - 1e-12 * max(1.0, abs(start[2]))
    if proven:
        info = {**info, "proof": "mixed solver"}
    optimal = proven or (termination == "optimal" and math.isclose(bound, objective, rel_tol=1e-9, abs_tol=1e-6))
    if termination == "optimal" and not optimal:
        termination = "time_limit"  # the backend's rounding leaves a visible gap: no proof
    return RawSolution(counts=counts, objective=objective, bound=objective if optimal else bound,
                       termination="optimal" if optimal else termination,
                       solution="optimal" if optimal else "feasible", types=types,
                       options={**{k: v for k, v in info.items() if v is not None}, "model": "mixed types"})
