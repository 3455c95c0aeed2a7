"""MILP backend: the integer program of :mod:`unicron_plan.solvers.ipmodel` through PuLP.

Three phases, as in PuLP itself: build (translate the neutral model to an
``LpProblem``), call (HiGHS through ``pulp.HiGHS`` by default, CBC through
``pulp.PULP_CBC_CMD`` with ``backend="cbc"``), extract (counts, node split and
an honest status). PuLP maps HiGHS's time-limit stop to "Optimal"; we read
the HiGHS model status and its dual bound ourselves, and for CBC use the
solution status (integer-feasible vs optimal). The bound is always capped by
the DP relaxation, a valid upper bound that needs no solver.
"""

from __future__ import annotations

import math
import os
import sys
import warnings

from unicron_plan.errors import InfeasibleError, SolverUnavailableError, UnicronError
from unicron_plan.core.problem import Problem, RawSolution
from unicron_plan.solvers import SolverOptions
from unicron_plan.solvers import ipmodel

BACKENDS = ("highs", "cbc")


def available(backend: str = "highs") -> bool:
    """PuLP importable and the chosen backend usable."""
    try:
        import pulp
    except ImportError:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        solver = pulp.HiGHS(msg=False) if backend == "highs" else pulp.PULP_CBC_CMD(msg=False)
        return bool(solver.available())


def build_lp(model: ipmodel.Formulation):
    """Phase 1: the neutral model as a PuLP problem (returns the problem and its variables)."""
    import pulp

    lp = pulp.LpProblem("unicron_plan", pulp.LpMaximize)
    if hasattr(lp, "add_variable"):  # PuLP >= 3.3 (LpVariable(...) is deprecated there)
        xs = [lp.add_variable(name, lowBound=lo, upBound=hi, cat=pulp.LpInteger)
              for name, lo, hi in zip(model.names, model.lb, model.ub)]
    else:  # pragma: no cover - older PuLP
        xs = [pulp.LpVariable(name, lowBound=lo, upBound=hi, cat=pulp.LpInteger)
              for name, lo, hi in zip(model.names, model.lb, model.ub)]
    # Scaled by a power of two so the largest coefficient is about 1 (exact in floating point):
    # HiGHS gives up ("Unknown") on objectives near 1e22; the plan's objective is recomputed anyway.
    top = max((abs(c) for c in model.objective.values()), default=0.0)
    scale = 2.0 ** -math.frexp(top)[1] if top > 0 else 1.0
    lp += pulp.lpSum(c * scale * xs[v] for v, c in model.objective.items())
    lp.objective_scale = scale  # read back by _call to unscale the dual bound
    for k, r in enumerate(model.rows):
        expr = pulp.lpSum(c * xs[v] for v, c in r.coefs.items())
        if r.lo is not None and r.lo == r.hi:
            lp += (expr == r.lo), f"r{k}"
            continue
        if r.lo is not None:
            lp += (expr >= r.lo), f"r{k}lo"
        if r.hi is not None:
            lp += (expr <= r.hi), f"r{k}hi"
    return lp, xs


_BANNER_SILENCED = False
_HIGHS_THREADS: int | None = None  # thread count the HiGHS scheduler was last set up with


def _silence_highs_banner() -> None:
    """HiGHS prints a copyright banner on stdout when the first Highs object is made, which would
    corrupt the plan JSON the CLI prints; make that first object with fd 1 pointed at /dev/null."""
    global _BANNER_SILENCED
    if _BANNER_SILENCED:
        return
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    _BANNER_SILENCED = True


def _call(lp, backend: str, options: SolverOptions, preprocess: bool = True) -> dict:
    """Phase 2: run the solver; returns termination, whether a solution exists and the dual bound."""
    import pulp

    limit = options.remaining()
    if backend == "highs":
        import highspy

        _silence_highs_banner()
        global _HIGHS_THREADS
        if options.threads != _HIGHS_THREADS:
            # HiGHS keeps one global thread scheduler per process; a run asking for another
            # thread count than the scheduler's fails (kSolveError) unless it is reset first.
            highspy.Highs.resetGlobalScheduler(True)
            _HIGHS_THREADS = options.threads

        # No MIP start for HiGHS either: through pulp.HiGHS, after setSolution() the variables
        # read back held the start, not HiGHS's (better) incumbent (seed 401 of
        # tests/randgen_ip.py). A run stopped before any solution falls back to the
        # keep-or-suspend plan instead (see extract).
        solver = pulp.HiGHS(msg=False, timeLimit=limit, threads=options.threads, gapRel=0.0, gapAbs=0.0)
        lp.solve(solver)

        h = lp.solverModel
        status = h.getModelStatus()
        info = h.getInfo()
        has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
        st = highspy.HighsModelStatus
        if status == st.kOptimal:
            termination = "optimal"
        elif status in (st.kTimeLimit, st.kInterrupt, st.kIterationLimit):
            termination = "time_limit"
        elif status in (st.kInfeasible, st.kUnboundedOrInfeasible):
            termination = "infeasible"
        else:
            termination = "error"
        bound = info.mip_dual_bound
        # PuLP hands HiGHS the negated objective of a maximisation; turn the bound back.
        _, sense = h.getObjectiveSense()
        if sense == highspy.ObjSense.kMinimize:
            bound = -bound
        bound /= getattr(lp, "objective_scale", 1.0)
        return {"termination": termination, "has_solution": has_solution,
                "bound": bound if math.isfinite(bound) else math.inf,
                "highs_status": h.modelStatusToString(status)}
    # No warmStart for CBC: with a MIP start, PuLP's CBC run returned the start itself as
    # "Optimal" on a maximisation in our tests (seed 80 of tests/randgen_ip.py).
    with warnings.catch_warnings():
        # PuLP 3.3 deprecates its bundled CBC in favour of a separately installed one; the
        # bundled binary is what ships here, so keep it without the warning.
        warnings.simplefilter("ignore", DeprecationWarning)
        solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=limit, threads=options.threads, gapRel=0.0,
                                   gapAbs=0.0, options=[] if preprocess else ["preprocess off"])
    lp.solve(solver)
    if lp.sol_status == pulp.LpSolutionOptimal:
        termination = "optimal"
    elif lp.sol_status == pulp.LpSolutionIntegerFeasible:
        termination = "time_limit"
    elif lp.status == pulp.LpStatusInfeasible:
        # Under a time limit CBC reports "Integer infeasible" when it merely found nothing in
        # time: that is no proof (extract falls back to the keep-or-suspend plan).
        termination = "time_limit" if limit is not None else "infeasible"
    elif limit is not None and lp.status == pulp.LpStatusNotSolved:
        termination = "time_limit"
    else:
        termination = "error"
    has_solution = lp.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    return {"termination": termination, "has_solution": has_solution, "bound": math.inf,
            "cbc_status": pulp.LpStatus[lp.status]}


def solve(problem: Problem, options: SolverOptions | None = None, backend: str = "highs") -> RawSolution:
    """Solve exactly (or up to the time limit) with PuLP and HiGHS (``backend="cbc"``: CBC)."""
    if backend not in BACKENDS:
        raise SolverUnavailableError(f"unknown MILP backend {backend!r}; valid: {', '.join(BACKENDS)}")
    import time

    if problem.alternatives:  # mixed fleets: the model over types and counts
        from unicron_plan.solvers import mixed_ip
        return mixed_ip.solve(problem, options, backend)
    started = time.perf_counter()
    options = options or SolverOptions()
    model = ipmodel.build(problem)
    result, values = run(model, options, backend)
    raw = extract(problem, model, result, values, {"backend": backend, **model.stats()})
    if backend == "cbc":
        raw = _confirm_cbc(problem, model, raw, options, started)
    return ipmodel.replace_migration_aware(problem, raw, lambda m, o: run(m, o, backend)[1], options, started)


def run(model: ipmodel.Formulation, options: SolverOptions, backend: str = "highs", preprocess: bool = True):
    """Phases 1 and 2 for one Formulation: (status dict, variable values or None)."""
    lp, xs = build_lp(model)
    result = _call(lp, backend, options, preprocess)
    return result, ([v.varValue for v in xs] if result["has_solution"] else None)


def _confirm_cbc(problem: Problem, model: ipmodel.Formulation, raw: RawSolution, options: SolverOptions,
                 started: float) -> RawSolution:
    """CBC's "Optimal" is not a proof: with preprocessing it has returned plans far below the
    optimum (tests/data/cbc-false-optimal-*.json). Unless the DP relaxation already proves the
    plan optimal, a second run without preprocessing must reach the same objective; otherwise
    the better plan is returned as ``feasible``."""

    if raw.solution != "optimal" or raw.options.get("proof") == "relaxation":
        return raw
    second = None
    if not options.expired():
        result, values = run(model, options, "cbc", preprocess=False)
        if result["termination"] == "optimal" and values is not None and model.feasible(values):
            second = extract(problem, model, result, values, dict(raw.options))
    if second is None:
        raw.options = {**raw.options, "cbc_unconfirmed": True}
        raw.solution, raw.termination = "feasible", "time_limit"
        return raw
    if math.isclose(second.objective, raw.objective, rel_tol=1e-9, abs_tol=1e-6):
        raw.options = {**raw.options, "proof": "cbc with and without preprocessing agree"}
        return raw
    best = second if second.objective > raw.objective else raw
    best.options = {**best.options, "cbc_runs_disagree": True}
    if best.options.get("proof") != "relaxation":
        best.solution = "feasible"
    return best


def extract(problem: Problem, model: ipmodel.Formulation, result: dict, values, info: dict) -> RawSolution:
    """Phase 3 (shared with cpsat): counts, split, status and a bound that is never below the objective."""
    from unicron_plan.solvers.dp import relaxation

    termination = result["termination"]
    if termination == "infeasible" and model.feasible(model.hint_values()):
        # A claim of infeasibility refuted by a plan in hand: the solver is wrong, not the instance.
        info = {**info, "infeasible_claim_refuted": True}
        termination, values = "error", None
    if termination == "infeasible":
        raise InfeasibleError("the constraints admit no plan (the solver proved it); relax tp, pinned, "
                              "max_nodes, same_rack, max_changed_jobs or min_gain_fraction")
    if termination == "error" and "infeasible_claim_refuted" not in info:
        # The solver gave up: keep-or-suspend is still a plan (feasible, termination error).
        detail = {k: v for k, v in result.items() if k.endswith("_status")} or info.get("cpsat_status")
        info, values = {**info, "solver_error": str(detail)}, None
    if values is None or any(v is None for v in values):
        # Stopped before any solution: the keep-or-suspend hint is feasible by construction.
        values = model.hint_values()
        if not model.feasible(values):
            if "solver_error" in info:
                raise UnicronError(f"the IP solver stopped with an error ({info['solver_error']}) "
                                   f"before finding a plan; try another --solver")
            raise InfeasibleError(f"no plan found ({termination}); raise the time limit")
        info = {**info, "fallback": "keep-or-suspend"}
    if termination == "optimal" and not model.feasible(values):
        # An "optimal" answer that breaks a row of the model is no answer.
        info = {**info, "optimal_claim_refuted": "infeasible values"}
        termination = "error"
        values = model.hint_values()
        if not model.feasible(values):
            raise UnicronError("the IP solver returned values that break its model; try another --solver")
        info = {**info, "fallback": "keep-or-suspend"}
    counts = model.counts(values)
    objective = problem.objective(counts, model.placement(values))
    hint = model.hint_values()
    hint_value = problem.objective(model.counts(hint), model.placement(hint)) if model.feasible(hint) else None
    if termination == "optimal" and hint_value is not None \
            and hint_value > objective + 1e-9 * max(1.0, abs(objective)):
        # Checked against a known feasible plan: a better one refutes the claim.
        info = {**info, "optimal_claim_refuted": "keep-or-suspend is better"}
        termination = "error"
    if termination != "optimal" and "fallback" not in info and hint_value is not None and hint_value > objective:
        # A time-limited incumbent can be worse than simply keeping everyone who can stay.
        values, info = hint, {**info, "fallback": "keep-or-suspend"}
        counts, objective = model.counts(values), hint_value
    _, relaxed = relaxation(problem)
    solver_bound = result["bound"]
    if solver_bound < objective - 1e-9 * max(1.0, abs(objective)):
        # A solver bound below a feasible objective is not a bound: never paper over it.
        info = {**info, "solver_bound_discarded": float(solver_bound)}
        solver_bound = math.inf
    bound = min(solver_bound, relaxed + 1e-9 * max(1.0, abs(relaxed)))
    if termination == "optimal":
        solution = "optimal"
    else:
        solution = "feasible"
    if math.isclose(objective, relaxed, rel_tol=1e-12, abs_tol=1e-9):
        solution = "optimal"  # the relaxation's optimum is attained: proven without the solver
        termination = "optimal"
        info = {**info, "proof": "relaxation"}
    bound = max(bound, objective)
    return RawSolution(counts=counts, objective=objective, bound=bound, termination=termination,
                       solution=solution, placement=model.placement(values),
                       options={k: v for k, v in info.items() if v is not None})
