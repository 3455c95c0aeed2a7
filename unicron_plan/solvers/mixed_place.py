"""The node-level integer program over GPU types and counts together, for mixed fleets with
node-level constraints (tp, max_nodes, same_rack) or ``max_changed_jobs`` (docs/solvers.md).

Job i with types T_i becomes one copy per type: its copy on its current type is the job itself,
each other copy has a job id of its own, no previous split and every count a change (the terms of
``Problem.alternatives``). The node-level model of :func:`unicron_plan.solvers.ipmodel.build` is
built over all copies (the per-node capacity rows hold every copy on that node; a node carries
one GPU type, so only copies of that type share it), and then

* every copy may take y = 0 (added with term 0 where the job may not suspend);
* at most one copy of a job runs: sum over copies and counts c > 0 of z <= 1 (= 1 when the
  job may not suspend);
* the objective of a copy on another type at count c is G^t(c) - G(0), so that a job suspended
  everywhere earns G(0) once, through its current copy's z at 0;
* the churn limit counts job i changed as on one type, and also when a queued job (x = 0)
  runs on another type.

Every plan of the model is a plan of the problem with the same value and vice versa, so the
backend's proof (optimal, infeasible) and its bound hold for the mixed problem.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from unicron_plan.core.problem import JobTerms, Problem, RawSolution
from unicron_plan.errors import InfeasibleError, SolverUnavailableError
from unicron_plan.solvers import DeadlineReached, SolverOptions
from unicron_plan.solvers import ipmodel

#: Separates a job id from the GPU type of its copy (no job id holds it).
COPY_MARK = "\x00"


@dataclasses.dataclass
class Copies:
    """The model of the module docstring and how to read it back."""

    model: ipmodel.Formulation
    expanded: Problem
    copies: list[list[JobTerms]]  # per job of the problem, its copies in the expanded problem
    zero_ok: list[bool]  # per job, whether it may suspend


def _with_zero(j: JobTerms) -> JobTerms:
    """``j`` with y = 0 among its counts (term 0) when it lacks it."""
    if len(j.counts) and int(j.counts[0]) == 0:
        return j
    return dataclasses.replace(j, counts=np.concatenate([[0], j.counts]).astype(np.int64),
                               f=np.concatenate([[0.0], j.f]), gains=np.concatenate([[0.0], j.gains]))


def build(problem: Problem, deadline: float | None = None) -> Copies:
    """The model over every job's copies; raises DeadlineReached when ``deadline`` passes."""
    expanded_jobs: list[JobTerms] = []
    copies: list[list[JobTerms]] = []
    zero_ok: list[bool] = []
    previous = dict(problem.state.previous)
    for j in problem.jobs:
        alts = problem.alternatives.get(j.id, [j])
        ok = len(j.counts) > 0 and int(j.counts[0]) == 0
        zero_ok.append(ok)
        mine = []
        for k, a in enumerate(alts):
            if k == 0:
                c = _with_zero(a) if len(alts) > 1 else a
                c = dataclasses.replace(c, index=len(expanded_jobs))
            else:
                # No previous split on another type; hit=True: no stay rule, no keep hint there.
                c = dataclasses.replace(_with_zero(a), index=len(expanded_jobs), id=f"{j.id}{COPY_MARK}{a.gpu_type}",
                                        hit=True)
                previous[c.id] = {}
            expanded_jobs.append(c)
            mine.append(c)
        copies.append(mine)
    state = dataclasses.replace(problem.state, previous=previous)
    expanded = dataclasses.replace(problem, state=state, jobs=expanded_jobs, max_changed_jobs=None, alternatives={})
    m = ipmodel.build(expanded, node_level=True, deadline=deadline)
    m.problem = expanded
    for j, mine, ok in zip(problem.jobs, copies, zero_ok):
        if len(mine) == 1:
            continue
        g0 = float(j.gains[0]) if ok else 0.0
        running = {}
        for c in mine:
            for k, y in enumerate(c.counts.tolist()):
                v = m.z[(c.index, k)]
                if y > 0:
                    running[v] = 1
                    if c is not mine[0]:
                        m.objective[v] = float(c.gains[k]) - g0
                elif c is not mine[0]:
                    m.objective[v] = 0.0
                    m.hint[v] = 1
                else:
                    m.objective[v] = g0
        m.row(running, lo=None if ok else 1, hi=1)
    if problem.max_changed_jobs is not None:
        _churn_row(m, problem, copies)
    return Copies(m, expanded, copies, zero_ok)


def _churn_row(m: ipmodel.Formulation, problem: Problem, copies: list[list[JobTerms]]) -> None:
    """sum_i changed_i <= max_changed_jobs, changed_i = 1 - z[i, k_x] + w_i (+ the other types'
    running z when x = 0) for unhit jobs whose x is allowed; 1 for the other jobs that stay."""
    fixed, coefs, constant = 0, {}, 0
    for j, mine in zip(problem.jobs, copies):
        if j.exiting:
            continue
        hits = np.flatnonzero(j.counts == j.x)
        if j.hit or not len(hits):
            fixed += 1
            continue
        cur = mine[0]
        kx = int(np.flatnonzero(cur.counts == j.x)[0])
        constant += 1
        coefs[m.z[(cur.index, kx)]] = coefs.get(m.z[(cur.index, kx)], 0) - 1
        if cur.index in m.w:
            coefs[m.w[cur.index]] = 1
        if j.x == 0:
            for c in mine[1:]:
                for k, y in enumerate(c.counts.tolist()):
                    if y > 0:
                        coefs[m.z[(c.index, k)]] = 1
    m.row(coefs, None, problem.max_changed_jobs - fixed - constant)


def read(copies: Copies, values) -> tuple[dict[str, int], dict[str, str], dict[str, dict[str, int]]]:
    """(counts, GPU type per job, placement) of the problem from the model's values."""
    m = copies.model
    split = m.placement(values)
    counts, types, placement = {}, {}, {}
    for mine in copies.copies:
        jid = mine[0].id
        counts[jid], types[jid], placement[jid] = 0, mine[0].gpu_type, {}
        for c in mine:
            y = max(range(len(c.counts)), key=lambda k: values[m.z[(c.index, k)]])
            if int(c.counts[y]) > 0:
                counts[jid], types[jid], placement[jid] = int(c.counts[y]), c.gpu_type, split[c.id]
                break
    return counts, types, placement


def _run(model: ipmodel.Formulation, options: SolverOptions, backend: str):
    if backend == "cpsat":
        from unicron_plan.solvers import cpsat

        return cpsat.run(model, options)
    from unicron_plan.solvers import milp

    result, values = milp.run(model, options, backend)
    return result, values, {"backend": backend, **model.stats()}


def default_backend() -> str:
    """CP-SAT when installed, else HiGHS; SolverUnavailableError without either."""
    from unicron_plan.solvers import cpsat, milp

    if cpsat.available():
        return "cpsat"
    if milp.available():
        return "highs"
    from unicron_plan.errors import MissingExtraError

    raise MissingExtraError("mixed GPU types with node-level constraints or max_changed_jobs need an IP backend "
                            "(cpsat or milp): pip install 'unicron-plan[ip]'")


def solve(problem: Problem, options: SolverOptions | None = None, backend: str | None = None,
          bound: float | None = None) -> RawSolution:
    """Solve the model with ``backend`` (``cpsat``, ``highs`` or ``cbc``; None: :func:`default_backend`).

    ``bound``: a known upper bound (the count-level optimum), kept when the backend's is weaker.
    Stopped by the deadline, the best plan found (or the keep-or-suspend plan, whichever is
    better) comes back ``feasible`` with the bound; InfeasibleError only when the backend proved
    that no plan exists, or when it found none and nothing else can be kept."""
    options = options or SolverOptions()
    backend = backend or default_backend()
    info: dict = {"model": "mixed types, node level", "backend": backend}
    try:
        copies = build(problem, options.deadline)
    except DeadlineReached:
        copies = None
    if copies is None:
        result, values = {"termination": "time_limit", "has_solution": False, "bound": math.inf}, None
        info["stopped"] = "time limit while building"
    else:
        result, values, more = _run(copies.model, options, backend)
        info.update({k: v for k, v in more.items() if v is not None and k != "backend"})
    if result["termination"] == "infeasible":
        raise InfeasibleError("no choice of GPU types, counts and nodes meets the node-level constraints and "
                              "the churn limit (the solver proved it)")
    found = values is not None and copies.model.feasible(values)
    counts = types = placement = None
    objective = -math.inf
    if found:
        counts, types, placement = read(copies, values)
        objective = problem.with_types(types).objective(counts, placement)
    proven = found and result["termination"] == "optimal"
    if not proven:
        kept = ipmodel.keep_or_suspend(problem)
        if kept is not None:
            kept_value = problem.objective(*kept)
            if kept_value > objective:
                counts, placement = kept
                types = {j.id: j.gpu_type for j in problem.jobs}
                objective, info["fallback"] = kept_value, "keep-or-suspend"
        if counts is None:
            raise InfeasibleError(f"no plan found ({result['termination']}); raise the time limit")
    top = result["bound"] if math.isfinite(result["bound"]) else math.inf
    if bound is not None:
        top = min(top, bound)
    if not math.isfinite(top):
        from unicron_plan.solvers.mixed import relaxation

        top = relaxation(problem, options.deadline)[1]
    top = max(top, objective)
    optimal = proven and math.isclose(top, objective, rel_tol=1e-9, abs_tol=1e-6)
    termination = "optimal" if proven else result["termination"]
    if termination not in ("optimal", "error"):
        termination = "time_limit"
        info.setdefault("stopped", "time limit")
    return RawSolution(counts=counts, objective=objective, bound=objective if optimal else top,
                       termination=termination, solution="optimal" if optimal else "feasible",
                       placement=placement, types=types, options=info)
