"""CP-SAT backend: the integer program of :mod:`unicron_plan.solvers.ipmodel` with OR-Tools CP-SAT.

CP-SAT needs integer objective coefficients, so every gain g is scaled by a
power of two s and rounded: g' = round(g * s). s is the largest power of two
with s * sum_i max_k |g_ik| <= 2**48 (far from int64 overflow, and every
scaled value is exact in a double). Exactly one count is chosen per job, so
for any solution z

    |sum g' z / s - sum g z| <= E = sum_i max_k |g'_ik / s - g_ik|  (<= n_jobs / (2 s)),

and the true optimum is at most (CP-SAT's bound on the scaled objective) / s + E.
That sum is the reported bound; the objective is always recomputed exactly by
``problem.objective``. A CP-SAT OPTIMAL is reported as ``optimal`` only when this
bound equals the exact objective to the validator's tolerance (else ``feasible``).
FEASIBLE is never mapped to optimal (PuLP's mistake).
"""

from __future__ import annotations

import math

import threading

from unicron_plan.core.problem import Problem, RawSolution
from unicron_plan.errors import SolverUnavailableError
from unicron_plan.solvers import DeadlineReached, SolverOptions, check_deadline
from unicron_plan.solvers import ipmodel
from unicron_plan.solvers.ipmodel import extract_cpu_seconds

SCALE_BUDGET = 2.0 ** 48


#: CPU seconds of importing OR-Tools' CP-SAT (about 0.3 s measured, with a margin): under a limit it
#: is not imported when the time left would not cover it.
IMPORT_CPU_SECONDS = 0.45
GRACE_SECONDS = 0.15  # a CP-SAT run still going this long after the deadline is abandoned


def available() -> bool:
    """OR-Tools installed (found without importing it: the import takes about 0.3 s)."""
    import importlib.util

    try:
        return importlib.util.find_spec("ortools.sat.python.cp_model") is not None
    except ImportError:
        return False


def _affords_import(options: SolverOptions) -> bool:
    """Whether OR-Tools is loaded, or can be before the deadline."""
    import sys

    return "ortools.sat.python.cp_model" in sys.modules or options.affords(IMPORT_CPU_SECONDS)


def scale_of(model: ipmodel.Formulation) -> tuple[float, float]:
    """The power-of-two scale s and the rounding-error bound E of the objective (see module docstring).

    Objective terms on the z variables are grouped per job (one z per job is 1);
    any other term (the placement model's) counts with its variable's largest value.
    Vectorised over the terms (1.9 M at 1,048,576 GPUs); the groups are summed in the order of
    their first term, as a loop over the objective would.
    """
    import numpy as np

    n = len(model.objective)
    if not n:
        return 1.0, 0.0
    var = np.fromiter(model.objective.keys(), dtype=np.int64, count=n)
    gain = np.fromiter(model.objective.values(), dtype=np.float64, count=n)
    job = np.full(len(model.names), -1, dtype=np.int64)  # the job of every z variable
    if model.z:
        zs = np.fromiter(model.z.values(), dtype=np.int64, count=len(model.z))
        job[zs] = np.fromiter((i for i, _ in model.z), dtype=np.int64, count=len(model.z))
    largest = np.maximum(np.abs(np.asarray(model.lb, dtype=np.float64)[var]),
                         np.abs(np.asarray(model.ub, dtype=np.float64)[var]))
    count = np.where(job[var] >= 0, 1.0, largest)  # z: one per job; others: the variable's largest value
    key = np.where(job[var] >= 0, job[var], -1 - var)  # the group: the job, or the variable alone
    groups, first, member = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")

    def group_sum(per_term: np.ndarray) -> float:
        top = np.full(len(groups), -np.inf)
        np.maximum.at(top, member, per_term)
        return sum(top[order].tolist())

    total = group_sum(np.abs(gain) * count)
    s = 2.0 ** math.floor(math.log2(SCALE_BUDGET / total)) if total > 0 else 1.0
    err = group_sum(np.abs(np.round(gain * s) / s - gain) * count)
    return s, err


#: Terms (variables, row coefficients, objective terms, hints) added to a CpModel between two looks
#: at the deadline: a few milliseconds of work.
BUILD_CHECK_TERMS = 4096


def build_cp(model: ipmodel.Formulation, scale: float, deadline: float | None = None):
    """Phase 1: the neutral model as a CpModel with the scaled objective, hinted with the model's
    start (:meth:`ipmodel.Formulation.start_values`); returns (model, variables). Looks at
    ``deadline`` every BUILD_CHECK_TERMS terms of every part (variables, rows, objective, hints)
    and raises DeadlineReached once it has passed."""
    from ortools.sat.python import cp_model

    cp = cp_model.CpModel()
    xs = []
    for k, (name, lo, hi) in enumerate(zip(model.names, model.lb, model.ub)):
        if k % BUILD_CHECK_TERMS == 0:
            check_deadline(deadline)
        xs.append(cp.new_int_var(lo, hi, name))
    _add_rows(cp, xs, model.rows, deadline)
    # The objective straight into the proto, as CpModel.maximize writes it (CP-SAT minimises the
    # negated sum, scaling factor -1), a chunk at a time: maximize() appends term by term with no look
    # at the deadline (8-11 s of CPU for the 1.9 M terms of 1,048,576 GPUs x 8,192 jobs; about 1 s here).
    objective = cp.proto.objective
    objective.scaling_factor = -1.0
    items = list(model.objective.items())
    for k in range(0, len(items), BUILD_CHECK_TERMS):
        check_deadline(deadline)
        chunk = [(xs[v].index, -int(round(g * scale))) for v, g in items[k:k + BUILD_CHECK_TERMS]]
        chunk = [(i, c) for i, c in chunk if c]  # as maximize(): no zero terms
        objective.vars.extend([i for i, _ in chunk])
        objective.coeffs.extend([c for _, c in chunk])
    for v, val in enumerate(model.start_values()):
        if v % BUILD_CHECK_TERMS == 0:
            check_deadline(deadline)
        cp.add_hint(xs[v], val)
    check_deadline(deadline)
    return cp, xs


def _add_rows(cp, xs, rows: list[ipmodel.Row], deadline: float | None) -> None:
    """The rows as linear constraints written straight into the proto, as CpModel.add writes them
    (terms in variable order, an equality as one constraint, else one per bounded side), a chunk of terms at a time with a
    look at the deadline every BUILD_CHECK_TERMS terms: add() takes a row in one call (about 2.5 s
    of CPU for the 1.9 M-term capacity row of 1,048,576 GPUs x 8,192 jobs)."""
    from ortools.sat.python.cp_model import INT_MAX, INT_MIN

    constraints = cp.proto.constraints
    done = 0  # terms (and rows) written since the last look at the deadline
    for r in rows:
        if r.lo is not None and r.lo == r.hi:
            sides = [(r.lo, r.lo)]
        else:
            sides = ([(r.lo, INT_MAX)] if r.lo is not None else []) + ([(INT_MIN, r.hi)] if r.hi is not None else [])
        terms = sorted(r.coefs.items())  # as add(); rows are mostly built in variable order
        for lo, hi in sides:
            linear = constraints.add().linear
            done += 1
            for k in range(0, len(terms), BUILD_CHECK_TERMS):
                chunk = terms[k:k + BUILD_CHECK_TERMS]
                if done + len(chunk) > BUILD_CHECK_TERMS:
                    check_deadline(deadline)
                    done = 0
                done += len(chunk)
                linear.vars.extend([xs[v].index for v, _ in chunk])
                linear.coeffs.extend([c for _, c in chunk])
            linear.domain.extend([lo, hi])


def solve(problem: Problem, options: SolverOptions | None = None) -> RawSolution:
    """Solve with CP-SAT (time limit and workers from ``options``)."""
    import time

    from unicron_plan.solvers.milp import extract, fallback, seed

    if problem.alternatives:  # mixed fleets: solvers/mixed_ip.py (routed by get_solver)
        raise SolverUnavailableError("mixed GPU types go through solvers.get_solver (or solvers.mixed / solvers.mixed_ip)")
    started = time.perf_counter()
    options = options or SolverOptions()
    try:
        model = ipmodel.build(problem, deadline=options.deadline)
    except DeadlineReached:
        return fallback(problem, options, {})
    built = time.perf_counter()
    relaxed = seed(problem, model, options.deadline)
    seeded = time.perf_counter()
    result, values, info = run(model, options)
    ran = time.perf_counter()
    raw = extract(problem, model, result, values, info, options.deadline, relaxed)
    phases = {"model": round(built - started, 4), "start": round(seeded - built, 4),
              "extract": round(time.perf_counter() - ran, 4)}  # build and engine: cpsat.run's
    raw.options.update({f"{name}_seconds": t for name, t in phases.items() if t is not None})
    if raw.solution == "optimal" and result["termination"] == "optimal" and not _close(raw.bound, raw.objective):
        # Optimal for the scaled objective, but the rounding error leaves a visible gap.
        raw.solution = "feasible"
    return ipmodel.replace_migration_aware(problem, raw, lambda m, o: run(m, o)[1], options, started)


def run(model: ipmodel.Formulation, options: SolverOptions):
    """Build, call CP-SAT and read back: (status dict, values or None, info)."""
    scale, err = scale_of(model)
    info = {"scale": scale, "max_rounding_error": err, **model.stats()}
    not_started = {"termination": "time_limit", "has_solution": False, "bound": math.inf}
    if not _affords_import(options):
        return not_started, None, {**info, "cpsat_status": "not started: too little time left to load OR-Tools"}
    from ortools.sat.python import cp_model

    import time

    copying = time.perf_counter()
    try:
        cp, xs = build_cp(model, scale, options.deadline)
    except DeadlineReached:
        cp = None
    info["build_seconds"] = round(time.perf_counter() - copying, 4)
    options = options.for_engine(extract_cpu_seconds(model))
    if cp is None or options.expired():  # never started after the deadline
        return not_started, None, {**info, "cpsat_status": "not started: the deadline had passed"}
    solver = cp_model.CpSolver()
    left = options.remaining()  # after building: model building counts against the limit
    timer = None
    if left is not None:
        solver.parameters.max_time_in_seconds = max(float(left), 1e-3)
        timer = threading.Timer(left, solver.stop_search)  # holds the deadline if CP-SAT overruns
        timer.daemon = True
        timer.start()
    if options.threads is not None:
        solver.parameters.num_workers = int(options.threads)
    solving = time.perf_counter()
    if timer is None:
        status = solver.solve(cp)
    else:
        # CP-SAT can answer its stop request late (seconds, on a loaded machine, in presolve): the run
        # goes on a thread (CP-SAT releases the GIL) and is abandoned if it has not stopped shortly
        # after the deadline; the timer has asked it to stop, and it ends on its own.
        answer: list = []
        runner = threading.Thread(target=lambda: answer.append(solver.solve(cp)), name="cpsat", daemon=True)
        runner.start()
        runner.join(max(options.deadline - time.perf_counter(), 0.0) + GRACE_SECONDS)
        info["engine_seconds"] = round(time.perf_counter() - solving, 4)
        if not answer:
            return not_started, None, {**info, "cpsat_status": "abandoned at the deadline"}
        timer.cancel()
        status = answer[0]
    info["engine_seconds"] = round(time.perf_counter() - solving, 4)
    has_solution = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    if status == cp_model.OPTIMAL:
        termination = "optimal"
    elif status == cp_model.INFEASIBLE:
        termination = "infeasible"
    elif status in (cp_model.FEASIBLE, cp_model.UNKNOWN):
        termination = "time_limit"
    else:
        termination = "error"
    # Without a solution (UNKNOWN) CP-SAT's bound is not meaningful; the DP relaxation bounds instead.
    bound = solver.best_objective_bound / scale + err if has_solution else math.inf
    if not math.isfinite(bound):
        bound = math.inf
    values = [solver.value(x) for x in xs] if has_solution else None
    info = {**info, "cpsat_status": solver.status_name(status)}
    return {"termination": termination, "has_solution": has_solution, "bound": bound}, values, info


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def place_constrained(problem: Problem, counts: dict[str, int], time_limit_seconds: float | None = None,
                      threads: int | None = None, deadline: float | None = None,
                      slowdown: float = 1.0) -> dict[str, dict[str, int]] | None:
    """Place ``counts`` under the node-level constraints (tp groups inside nodes, max_nodes,
    same_rack, pinned and unhit-unchanged jobs on their previous split), moving as few GPUs as
    possible and preferring the jobs' racks; None when no placement was found in the time limit.

    An assignment problem (``solvers.ipmodel.build_placement``) solved with OR-Tools CP-SAT:
    tp makes node quantities multiples of tp, which a plain flow cannot express.
    """
    for j in problem.jobs:
        if counts[j.id] not in j.counts:
            return None
    options = SolverOptions(time_limit_seconds=time_limit_seconds, threads=threads, slowdown=slowdown)
    if deadline is not None and (options.deadline is None or deadline < options.deadline):
        options = SolverOptions(threads=threads, deadline=deadline, slowdown=slowdown)
    try:
        model = ipmodel.build_placement(problem, counts, deadline=options.deadline)
    except DeadlineReached:
        return None
    values = run(model, options)[1]
    if values is None or not model.feasible(values):
        return None
    return model.placement(values)
