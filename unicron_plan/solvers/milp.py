"""MILP backend: the integer program of :mod:`unicron_plan.solvers.ipmodel` with HiGHS or CBC.

Three phases: build (the neutral model's rows as arrays, :meth:`ipmodel.Formulation.matrix`),
call (HiGHS in process through ``highspy``; CBC, the binary shipped with PuLP, as a child
process on an MPS file written by HiGHS, with ``backend="cbc"``) and extract (counts, node
split and an honest status). We read the HiGHS model status and its dual bound ourselves,
and for CBC its solution file's status line (integer-feasible vs optimal). The bound is
always capped by the DP relaxation, a valid upper bound that needs no solver.

The deadline of :class:`unicron_plan.solvers.SolverOptions` binds every phase: building
stops at it (the keep-or-suspend plan comes back), a solver is never started after it,
HiGHS gets the time left and an interrupt callback that stops it at the deadline, and
CBC gets ``-sec`` and a watchdog that kills the process at the deadline.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import numpy as np

from unicron_plan.core.constraints import dp_limitations
from unicron_plan.errors import InfeasibleError, SolverUnavailableError, UnicronError
from unicron_plan.core.problem import Problem, RawSolution
from unicron_plan.solvers import DeadlineReached, SolverOptions, check_deadline
from unicron_plan.solvers import ipmodel

BACKENDS = ("highs", "cbc")
CBC_MARGIN_SECONDS = 0.1  # CBC's own -sec stops this much before the watchdog's kill


def available(backend: str = "highs") -> bool:
    """The chosen backend usable: highspy importable (HiGHS); PuLP's CBC binary present (CBC),
    looked for in PuLP's package without importing it (0.05-0.15 s of CPU, paid only when CBC runs)."""
    try:
        import highspy  # noqa: F401  (CBC reads the MPS file HiGHS writes)
    except ImportError:
        return False
    if backend == "highs":
        return True
    import glob
    import importlib.util

    spec = importlib.util.find_spec("pulp")
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(glob.glob(os.path.join(where, "solverdir", "cbc", "*", "*", "cbc*"))
               for where in spec.submodule_search_locations)


def _cbc_path() -> str | None:
    """The CBC binary shipped with PuLP, or None."""
    try:
        import pulp
    except ImportError:
        return None
    with warnings.catch_warnings():
        # PuLP 3.3 deprecates its bundled CBC in favour of a separately installed one; the
        # bundled binary is what ships here, so keep it without the warning.
        warnings.simplefilter("ignore", DeprecationWarning)
        solver = pulp.PULP_CBC_CMD(msg=False)
        return solver.path if solver.available() else None


def highs_lp(model: ipmodel.Formulation, deadline: float | None = None):
    """Phase 1: the neutral model as a ``highspy.HighsLp`` (maximise; integer columns, rowwise matrix).

    The objective is scaled by a power of two so the largest coefficient is about 1 (exact in
    floating point): HiGHS gives up ("Unknown") on objectives near 1e22; the plan's objective is
    recomputed anyway. The scale is returned to unscale the dual bound. Raises DeadlineReached
    when ``deadline`` passes on the way."""
    import highspy

    check_deadline(deadline)
    n = len(model.names)
    cost = np.zeros(n)
    if model.objective:
        cost[np.fromiter(model.objective.keys(), dtype=np.int64)] = np.fromiter(model.objective.values(), dtype=np.float64)
    top = float(np.max(np.abs(cost))) if n else 0.0
    scale = 2.0 ** -math.frexp(top)[1] if top > 0 else 1.0
    start, index, value, lo, hi = model.matrix()
    check_deadline(deadline)
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = len(lo)
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = cost * scale
    lp.col_lower_ = np.asarray(model.lb, dtype=np.float64)
    lp.col_upper_ = np.asarray(model.ub, dtype=np.float64)
    lp.row_lower_ = np.where(np.isinf(lo), -highspy.kHighsInf, lo)
    lp.row_upper_ = np.where(np.isinf(hi), highspy.kHighsInf, hi)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = n
    lp.a_matrix_.num_row_ = len(lo)
    lp.a_matrix_.start_ = start.astype(np.int32)
    lp.a_matrix_.index_ = index.astype(np.int32)
    lp.a_matrix_.value_ = value
    check_deadline(deadline)
    lp.integrality_ = [highspy.HighsVarType.kInteger] * n
    return lp, scale


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


def _highs(threads: int | None):
    """A silent Highs object (the process-wide scheduler set up for ``threads``)."""
    import highspy

    _silence_highs_banner()
    global _HIGHS_THREADS
    if threads != _HIGHS_THREADS:
        # HiGHS keeps one global thread scheduler per process; a run asking for another
        # thread count than the scheduler's fails (kSolveError) unless it is reset first.
        highspy.Highs.resetGlobalScheduler(True)
        _HIGHS_THREADS = threads
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    return h


NOT_STARTED = {"termination": "time_limit", "has_solution": False, "bound": math.inf}
HIGHS_GRACE_SECONDS = 0.15  # a HiGHS run still going this long after the deadline is abandoned
_ABANDONED: list[threading.Thread] = []  # HiGHS runs left at a deadline, finishing on their own


def _wait_for_abandoned(options: SolverOptions) -> None:
    """HiGHS keeps one thread scheduler per process: a new run waits (up to the deadline) for the
    runs abandoned at earlier deadlines, which stop at their first interrupt check."""
    while _ABANDONED:
        left = options.remaining()
        _ABANDONED[0].join(left)
        if _ABANDONED[0].is_alive():
            return
        _ABANDONED.pop(0)


def _call_highs(model: ipmodel.Formulation, options: SolverOptions, start: list | None = None
                ) -> tuple[dict, list | None]:
    """Phase 2 with HiGHS: (termination, whether a solution exists, the dual bound; values or None).
    ``start``: feasible values HiGHS starts from (default: the model's :attr:`~ipmodel.Formulation.start`;
    its incumbent is read back, never the start)."""
    import highspy

    start = start if start is not None else model.start

    options = options.for_engine(ipmodel.extract_cpu_seconds(model))
    try:
        lp, scale = highs_lp(model, options.deadline)
    except DeadlineReached:
        lp = None
    _wait_for_abandoned(options)
    if lp is None or options.expired():
        return {**NOT_STARTED, "highs_status": "not started: the deadline had passed"}, None
    h = _highs(options.threads)
    h.passModel(lp)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.0)
    if start is not None:
        sol = highspy.HighsSolution()
        sol.col_value = [float(v) for v in start]
        sol.value_valid = True
        h.setSolution(sol)
    left = options.remaining()
    if left is not None:
        h.setOptionValue("time_limit", max(float(left), 1e-3))
        deadline = options.deadline

        def stop_at_deadline(event):  # HiGHS's own clock may start late: the callback holds the deadline
            if time.perf_counter() >= deadline:
                event.interrupt()

        h.cbMipInterrupt += stop_at_deadline
        h.cbSimplexInterrupt += stop_at_deadline
        h.cbIpmInterrupt += stop_at_deadline
    # A run stopped before any solution falls back to the start, else the keep-or-suspend plan
    # (see extract).
    if left is None:
        h.run()
    else:
        # HiGHS's presolve calls no interrupt callback and can overrun its own time limit by
        # seconds: the run goes on a thread (HiGHS releases the GIL) and is abandoned if it has
        # not stopped shortly after the deadline; its callback stops it at its next check.
        runner = threading.Thread(target=h.run, name="highs", daemon=True)
        runner.start()
        runner.join(max(options.deadline - time.perf_counter(), 0.0) + HIGHS_GRACE_SECONDS)
        if runner.is_alive():
            _ABANDONED.append(runner)
            return {**NOT_STARTED, "highs_status": "abandoned at the deadline (in presolve)"}, None
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
    bound = info.mip_dual_bound / scale
    values = list(h.getSolution().col_value) if has_solution else None
    return {"termination": termination, "has_solution": has_solution,
            "bound": bound if math.isfinite(bound) else math.inf,
            "highs_status": h.modelStatusToString(status)}, values


def _call_cbc(model: ipmodel.Formulation, options: SolverOptions, preprocess: bool) -> tuple[dict, list | None]:
    """Phase 2 with CBC: the model written as MPS by HiGHS (only when the time left covers the
    write, which cannot be stopped), CBC run as a child process under a watchdog (killed at the
    deadline), its solution file read back."""
    # After CBC: its solution file read back (a line per variable), then the extraction.
    options = options.for_engine(ipmodel.extract_cpu_seconds(model) + 1e-6 * len(model.names))
    path = _cbc_path()
    if path is None:
        raise SolverUnavailableError("PuLP's CBC binary is not available")
    import highspy

    try:
        lp, _ = highs_lp(model, options.deadline)
    except DeadlineReached:
        return {**NOT_STARTED, "cbc_status": "not started: the deadline had passed"}, None
    if not options.affords(mps_cpu_seconds(model)):
        return {**NOT_STARTED, "cbc_status": "not started: too little time left to write the model"}, None
    # Minimise the negated objective (MPS has no portable sense); names make the solution readable.
    lp.sense_ = highspy.ObjSense.kMinimize
    lp.col_cost_ = -np.asarray(lp.col_cost_)
    lp.col_names_ = [f"c{k}" for k in range(lp.num_col_)]
    lp.row_names_ = [f"r{k}" for k in range(lp.num_row_)]
    if options.expired():
        return {**NOT_STARTED, "cbc_status": "not started: the deadline had passed"}, None
    with tempfile.TemporaryDirectory(prefix="unicron-cbc-") as tmp:
        mps, sol = os.path.join(tmp, "model.mps"), os.path.join(tmp, "model.sol")
        h = _highs(options.threads)
        h.passModel(lp)
        h.writeModel(mps)
        args = [path, mps, "-ratio", "0", "-allow", "0"]
        if options.threads is not None:
            args += ["-threads", str(int(options.threads))]
        if not preprocess:
            args += ["-preprocess", "off"]
        left = options.remaining()
        if left is not None:
            if left <= 0:
                return {**NOT_STARTED, "cbc_status": "not started: the deadline had passed"}, None
            args += ["-sec", f"{max(left - CBC_MARGIN_SECONDS, 0.01):.3f}"]
        args += ["-solve", "-solution", sol]
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=options.remaining())
        except subprocess.TimeoutExpired:  # the watchdog: CBC ignores -sec in its initial LP
            proc.kill()
            proc.wait()
            return {**NOT_STARTED, "cbc_status": "killed at the deadline"}, None
        return _read_cbc(sol, len(model.names), left is not None)


def mps_cpu_seconds(model: ipmodel.Formulation) -> float:
    """CPU seconds of writing ``model`` as an MPS file with its names (a line per nonzero, variable
    and row): about twice the 0.27 s it took for 161,916 variables, 34,477 rows and 359,045
    nonzeros."""
    return 0.005 + 1e-6 * (len(model.matrix()[1]) + len(model.names) + len(model.rows))


def _read_cbc(sol: str, n: int, limited: bool) -> tuple[dict, list | None]:
    """CBC's solution file: its status line and the nonzero columns."""
    try:
        with open(sol) as f:
            lines = f.read().splitlines()
    except OSError:
        return {"termination": "error", "has_solution": False, "bound": math.inf,
                "cbc_status": "no solution file"}, None
    words = lines[0].split() if lines else []
    first = words[0] if words else ""
    # "Stopped on time - objective value X" holds an integer solution; "Stopped on time (no integer
    # solution - continuous used) ..." does not (PuLP reads the fifth word the same way).
    has_solution = first == "Optimal" or (first == "Stopped" and len(words) > 4 and words[4] == "objective")
    if first == "Optimal":
        termination = "optimal"
    elif first == "Stopped" or (first in ("Infeasible", "Integer") and limited):
        # Under a time limit CBC reports "Integer infeasible" when it merely found nothing in
        # time: that is no proof (extract falls back to the keep-or-suspend plan).
        termination = "time_limit"
    elif first in ("Infeasible", "Integer"):
        termination = "infeasible"
    else:
        termination = "error"
    values = None
    if has_solution:
        values = [0.0] * n
        for line in lines[1:]:
            parts = line.split()
            if parts and parts[0] == "**":
                parts = parts[1:]
            if len(parts) >= 3 and parts[1].startswith("c") and parts[1][1:].isdigit():
                values[int(parts[1][1:])] = float(parts[2])
    return {"termination": termination, "has_solution": has_solution, "bound": math.inf,
            "cbc_status": " ".join(words[:4])}, values


def solve(problem: Problem, options: SolverOptions | None = None, backend: str = "highs") -> RawSolution:
    """Solve exactly (or up to the time limit) with HiGHS (``backend="cbc"``: CBC)."""
    if backend not in BACKENDS:
        raise SolverUnavailableError(f"unknown MILP backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if problem.alternatives:  # mixed fleets: solvers/mixed_ip.py (routed by get_solver)
        raise SolverUnavailableError("mixed GPU types go through solvers.get_solver (or solvers.mixed / solvers.mixed_ip)")
    started = time.perf_counter()
    options = options or SolverOptions()
    try:
        model = ipmodel.build(problem, deadline=options.deadline)
    except DeadlineReached:
        return fallback(problem, options, {"backend": backend})
    built = time.perf_counter()
    relaxed = seed(problem, model, options.deadline)
    seeded = time.perf_counter()
    result, values = run(model, options, backend)
    ran = time.perf_counter()
    raw = extract(problem, model, result, values, {"backend": backend, **model.stats()}, options.deadline, relaxed)
    phases = {"model": round(built - started, 4), "start": round(seeded - built, 4),
              "copy_and_engine": round(ran - seeded, 4), "extract": round(time.perf_counter() - ran, 4)}
    raw.options.update({f"{name}_seconds": t for name, t in phases.items() if t is not None})
    if backend == "cbc":
        raw = _confirm_cbc(problem, model, raw, options, started, relaxed)
    return ipmodel.replace_migration_aware(problem, raw, lambda m, o: run(m, o, backend)[1], options, started)


def run(model: ipmodel.Formulation, options: SolverOptions, backend: str = "highs", preprocess: bool = True,
        start: list | None = None):
    """Phases 1 and 2 for one Formulation: (status dict, variable values or None); ``start``
    (HiGHS only): feasible values to start from (default: the model's start)."""
    if backend == "highs":
        return _call_highs(model, options, start)
    return _call_cbc(model, options, preprocess)


def seed(problem: Problem, model: ipmodel.Formulation, deadline: float | None) -> tuple:
    """The DP relaxation of ``problem`` (:func:`unicron_plan.solvers.dp.relaxation_bound`, stopped at
    ``deadline``), returned for :func:`extract`; its counts (at node level placed in whole tp groups,
    :func:`unicron_plan.solvers.group_place.place_groups`), when they satisfy the model (the churn
    limit and the node-level constraints may cut them), become the model's start: the engine starts
    from them and the answer is never below them (exact or the best held at the deadline)."""
    from unicron_plan.solvers.dp import relaxation_bound

    relaxed = relaxation_bound(problem, deadline)
    placement = None
    if model.node_level:  # the counts placed in whole tp groups, when that works
        from unicron_plan.solvers.group_place import place_groups

        placement = place_groups(problem, relaxed[0])
    values = ipmodel.solution_values(model, relaxed[0], placement)
    if values is not None and model.feasible(values):
        model.start = values
    return relaxed


def fallback(problem: Problem, options: SolverOptions, info: dict) -> RawSolution:
    """The deadline passed before a model was built: the keep-or-suspend plan
    (:func:`ipmodel.keep_or_suspend`) with the DP relaxation's bound."""
    from unicron_plan.solvers.dp import relaxation_bound

    kept = ipmodel.keep_or_suspend(problem)
    if kept is None:
        raise InfeasibleError("no plan found before the deadline (time_limit); raise the time limit")
    counts, placement = kept
    objective = problem.objective(counts, placement)
    relaxed_counts, relaxed_value, relaxed, exact = relaxation_bound(problem, options.deadline)
    info = {**info, "fallback": "keep-or-suspend", "stopped": "time limit while building"}
    if not dp_limitations(problem) and relaxed_value > objective:
        # Nothing but the capacity binds: the DP's plan (its optimum, or its best when it was
        # stopped too) is feasible as it is and better.
        counts, placement, objective = relaxed_counts, None, problem.objective(relaxed_counts)
        info["fallback"] = "dp"
    bound = max(relaxed + 1e-9 * max(1.0, abs(relaxed)), objective)
    proven = exact and math.isclose(objective, relaxed, rel_tol=1e-12, abs_tol=1e-9)
    return RawSolution(counts=counts, objective=objective, bound=objective if proven else bound,
                       termination="optimal" if proven else "time_limit",
                       solution="optimal" if proven else "feasible", placement=placement,
                       options={**info, **({"proof": "relaxation"} if proven else {})})


def _confirm_cbc(problem: Problem, model: ipmodel.Formulation, raw: RawSolution, options: SolverOptions,
                 started: float, relaxed: tuple | None = None) -> RawSolution:
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
            second = extract(problem, model, result, values, dict(raw.options), options.deadline, relaxed)
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


def _known_plans(problem: Problem, model: ipmodel.Formulation) -> list[tuple[str, list, float]]:
    """The plans held without the engine, best first, as (name, values, objective): the model's start
    (the DP's plan, ``dp``) and the keep-or-suspend hint, those that satisfy the model."""
    out = []
    for name, values in (("dp", model.start), ("keep-or-suspend", model.hint_values())):
        values = None if values is None else np.asarray(values, dtype=np.float64)  # converted once
        if values is not None and model.feasible(values):
            out.append((name, values, problem.objective(model.counts(values), model.placement(values))))
    return sorted(out, key=lambda p: -p[2])


def extract(problem: Problem, model: ipmodel.Formulation, result: dict, values, info: dict,
            deadline: float | None = None, relaxed: tuple | None = None) -> RawSolution:
    """Phase 3 (shared with cpsat): counts, split, status and a bound that is never below the objective.

    The plan returned is the engine's, unless a plan held without it is better: the DP's start and
    keep-or-suspend (:func:`_known_plans`), and the DP relaxation's plan when it is exact and
    nothing but the capacity binds (then it is this problem's optimum, placed at assembly, even
    when it was no start of the model). An engine stopped, refuted or in error never answers below
    them. ``relaxed``: the DP relaxation from :func:`seed`, which caps the bound (computed here
    when not given, stopped at ``deadline``: its Lagrangian bound then)."""
    from unicron_plan.solvers.dp import relaxation_bound

    termination = result["termination"]
    info = {**info, **{k: v for k, v in result.items() if k.endswith("_status")}}
    known = _known_plans(problem, model)
    relaxed = relaxed if relaxed is not None else relaxation_bound(problem, deadline)
    relaxed_counts, relaxed_value, relaxed, relaxed_exact = relaxed  # a bound, exact or not
    exact_dp = relaxed_exact and not dp_limitations(problem)  # the relaxation is the problem itself
    if termination == "infeasible" and (known or exact_dp):
        # A claim of infeasibility refuted by a plan in hand: the solver is wrong, not the instance.
        info = {**info, "infeasible_claim_refuted": True}
        termination, values = "error", None
    if termination == "infeasible":
        raise InfeasibleError("the constraints admit no plan (the solver proved it); relax tp, pinned, "
                              "max_nodes, same_rack, max_changed_jobs or min_gain_fraction")
    if termination == "error" and "infeasible_claim_refuted" not in info:
        # The solver gave up: the plans held are still plans (feasible, termination error).
        detail = {k: v for k, v in result.items() if k.endswith("_status")} or info.get("cpsat_status")
        info, values = {**info, "solver_error": str(detail)}, None
    if values is not None and any(v is None for v in values):
        values = None
    if values is not None:
        values = np.asarray(values, dtype=np.float64)  # once, for the checks and the reading below
    if values is not None and not model.feasible(values):
        # An incumbent (or an "optimal" answer) that breaks a row of the model is no answer.
        if termination == "optimal":
            info, termination = {**info, "optimal_claim_refuted": "infeasible values"}, "error"
        else:
            info = {**info, "incumbent_discarded": "infeasible values"}
        values = None
    if values is None and known:
        # Stopped before any solution: the best plan held.
        name, values, _ = known[0]
        info = {**info, "fallback": name}
    if values is None and not exact_dp:
        if "solver_error" in info or "optimal_claim_refuted" in info:
            raise UnicronError(f"the IP solver stopped with an error ({info.get('solver_error', 'infeasible values')}) "
                               f"before finding a plan; try another --solver")
        raise InfeasibleError(f"no plan found ({termination}); raise the time limit")
    if values is not None:
        counts, placement = model.counts(values), model.placement(values)
        objective = problem.objective(counts, placement)
    else:
        counts, placement, objective = {}, None, -math.inf  # the DP relaxation's plan, below
    if known and known[0][2] > objective:
        name, better, better_value = known[0]
        if termination == "optimal" and better_value > objective + 1e-9 * max(1.0, abs(objective)):
            # Checked against a known feasible plan: a better one refutes the claim.
            info, termination = {**info, "optimal_claim_refuted": f"{name} is better"}, "error"
        if termination != "optimal":
            values, info = better, {**info, "fallback": name}
            counts, placement, objective = model.counts(values), model.placement(values), better_value
    solver_bound = result["bound"]
    if exact_dp and objective < relaxed_value - 1e-12 * max(1.0, abs(relaxed_value)):
        # Its optimum is the truth, and a solver that stopped below it (within its own
        # tolerances) proved nothing; its plan is feasible as it is and held: the answer.
        if termination == "optimal":
            info = {**info, "optimal_claim_refuted": "below the exact DP optimum"}
            termination = "error"
        solver_bound = math.inf
        counts, placement = dict(relaxed_counts), None
        objective, info = problem.objective(counts), {**info, "fallback": "dp"}
    if solver_bound < objective - 1e-9 * max(1.0, abs(objective)):
        # A solver bound below a feasible objective is not a bound: never paper over it.
        info = {**info, "solver_bound_discarded": float(solver_bound)}
        solver_bound = math.inf
    bound = min(solver_bound, relaxed + 1e-9 * max(1.0, abs(relaxed)))
    solution = "optimal" if termination == "optimal" else "feasible"
    if math.isclose(objective, relaxed, rel_tol=1e-12, abs_tol=1e-9):
        solution = "optimal"  # the relaxation's optimum is attained: proven without the solver
        termination = "optimal"
        info = {**info, "proof": "relaxation"}
    bound = max(bound, objective)
    return RawSolution(counts=counts, objective=objective, bound=bound, termination=termination,
                       solution=solution, placement=placement,
                       options={k: v for k, v in info.items() if v is not None})
