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
from typing import Callable

import numpy as np

from unicron_plan.core.problem import JobTerms, Problem, RawSolution
from unicron_plan.errors import InfeasibleError
from unicron_plan.solvers import DeadlineReached, SolverOptions
from unicron_plan.solvers import ipmodel

#: The single-type solver the candidates use: ``(problem, options) -> RawSolution``.
SingleSolver = Callable[[Problem, SolverOptions], RawSolution]
#: The count-level solver over types, :func:`unicron_plan.solvers.mixed.solve_types`'s signature.
Relaxation = Callable[[Problem, "float | None"], tuple]

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


def hint_values(copies: Copies, problem: Problem, counts: dict[str, int], types: dict[str, str],
                placement: dict[str, dict[str, int]]) -> list[int] | None:
    """A plan of the problem (with its placement) as values of the model; None when they break a row."""
    from unicron_plan.core.cluster import rack_key
    from unicron_plan.core.constraints import eligible_nodes, stays

    m, state = copies.model, problem.state
    at = {name: v for v, name in enumerate(m.names)}
    values = [0] * len(m.names)
    for j, mine in zip(problem.jobs, copies.copies):
        y = counts[j.id]
        chosen = next((c for c in mine if c.gpu_type == types.get(j.id, j.gpu_type)), None) if y > 0 else None
        if y > 0 and chosen is None:
            return None
        for c in mine:
            ks = np.flatnonzero(c.counts == (y if c is chosen else 0))
            if not len(ks):
                return None
            values[m.z[(c.index, int(ks[0]))]] = 1
        if chosen is None:
            continue
        split = {n: g for n, g in placement.get(j.id, {}).items() if g}
        used_racks = set()
        for nid, g in split.items():
            v = m.b.get((chosen.index, nid))
            if v is None or g % chosen.tp:
                return None
            values[v] = g // chosen.tp
            if f"u_{chosen.index}_{nid}" in at:
                values[at[f"u_{chosen.index}_{nid}"]] = 1
            used_racks.add(rack_key(nid, state.nodes[nid].rack))
        racks = list(dict.fromkeys(rack_key(n, state.nodes[n].rack) for n in eligible_nodes(copies.expanded, chosen)))
        for k, rack in enumerate(racks):
            if rack in used_racks and f"r_{chosen.index}_{k}" in at:
                values[at[f"r_{chosen.index}_{k}"]] = 1
        if chosen is mine[0] and chosen.index in m.w and stays(chosen) and y == chosen.x \
                and split != state.previous.get(j.id, {}):
            values[m.w[chosen.index]] = 1
    return values if m.feasible(values) else None


#: Returned by :func:`place_count_level` when only the churn limit binds and it holds: plan
#: assembly places the counts as for any plan.
PLACED_AT_ASSEMBLY = object()


def place_count_level(problem: Problem, counts: dict[str, int], types: dict[str, str], options: SolverOptions):
    """The counts on the chosen types (the count-level plan) placed under every node-level and
    churn constraint (:data:`PLACED_AT_ASSEMBLY` when no node-level constraint binds), or None."""
    from unicron_plan.solvers.ipmodel import needs_node_level

    resolved = problem.with_types(types)
    if not resolved.churn_holds(counts):
        return None
    if not needs_node_level(resolved):
        return PLACED_AT_ASSEMBLY
    from unicron_plan.solvers import cpsat

    if not cpsat.available():
        return None
    left = options.remaining()
    return cpsat.place_constrained(resolved, counts, 5.0 if left is None else min(5.0, left / 2), options.threads)


#: At most this many seconds (and a quarter of the time left) for each candidate type assignment.
CANDIDATE_SECONDS = 10.0


def candidate(problem: Problem, types: dict[str, str], options: SolverOptions,
              single: SingleSolver) -> tuple[dict[str, int], dict[str, str], dict | None, float] | None:
    """The best plan found with every job on the type ``types`` gives it, by ``single`` (the
    single-type solver the router hands over): (counts, types, placement or None, objective), or None.

    A job on another type than its current one is marked hit there: it has no previous split,
    and the churn limit counts it changed (also when it suspends: stricter than needed, never
    looser)."""
    from unicron_plan.errors import UnicronError

    moved = problem.with_types(types)
    fixed = dataclasses.replace(moved, alternatives={},
                                jobs=[dataclasses.replace(j, hit=True) if j.off_type else j for j in moved.jobs])
    try:
        raw = single(fixed, options)
    except (UnicronError, DeadlineReached):
        return None
    counts = {jid: int(y) for jid, y in raw.counts.items()}
    chosen = {j.id: (types.get(j.id, j.gpu_type) if counts[j.id] > 0 else j.gpu_type) for j in problem.jobs}
    resolved = problem.with_types(chosen)
    if not resolved.churn_holds(counts):
        return None
    return counts, chosen, raw.placement, resolved.objective(counts, raw.placement)


def _slice(options: SolverOptions, share: float) -> SolverOptions:
    """Options ending after ``share`` of the time left, and at most CANDIDATE_SECONDS from now."""
    import time

    left = options.remaining()
    span = CANDIDATE_SECONDS if left is None else min(CANDIDATE_SECONDS, share * left)
    return SolverOptions(threads=options.threads, deadline=time.perf_counter() + span, slowdown=options.slowdown)


def _run(model: ipmodel.Formulation, options: SolverOptions, backend: str, start: list | None = None):
    if backend == "cpsat":
        from unicron_plan.solvers import cpsat

        return cpsat.run(model, options)
    from unicron_plan.solvers import milp

    result, values = milp.run(model, options, backend, start=start if backend == "highs" else None)
    return result, values, {"backend": backend, **{k: v for k, v in result.items() if k.endswith("_status")},
                            **model.stats()}


def default_backend() -> str:
    """HiGHS when installed (on generated instances with constraints it proved optimality sooner
    than CP-SAT: ``benchmarks/mixed_constraints.py``), else CP-SAT; MissingExtraError without either."""
    from unicron_plan.solvers import cpsat, milp

    if milp.available():
        return "highs"
    if cpsat.available():
        return "cpsat"
    from unicron_plan.errors import MissingExtraError

    raise MissingExtraError("mixed GPU types with node-level constraints or max_changed_jobs need an IP backend "
                            "(milp or cpsat): pip install 'unicron-plan[ip]'")


def solve(problem: Problem, options: SolverOptions | None = None, backend: str | None = None,
          bound: float | None = None, types: dict[str, str] | None = None, *, single: SingleSolver,
          relax: Relaxation) -> RawSolution:
    """The best plan of the mixed problem under its node-level and churn constraints.

    1. Candidates (each with a quarter of the time left, at most CANDIDATE_SECONDS): every job on
       the type of ``types`` (the count-level optimum's), then every job on its current type,
       each solved by the single-type solvers (:func:`candidate`).
    2. The model of the module docstring with ``backend`` (``cpsat``, ``highs`` or ``cbc``; None:
       :func:`default_backend`), started from the best candidate, with the time left.

    ``single`` solves the candidates' single-type problems and ``relax`` is the count-level solver
    (:func:`unicron_plan.solvers.mixed.solve_types`), both handed over by the caller: this module
    imports no solver that routes back to it.
    ``bound``: a known upper bound (the count-level optimum), kept when the backend's is weaker.
    Without ``bound`` (called directly, not by :func:`unicron_plan.solvers.mixed.solve`, which has
    tried it already), the count-level plan itself comes first: placed under the constraints
    (:func:`place_count_level`), it is a plan held and the start of 1 and 2, and optimal at once
    when it meets its own bound.

    The best plan of 0, 1, 2 and the keep-or-suspend plan comes back, ``optimal`` only when 2 proved
    it (an engine's claim below a plan held is refuted) or the placed count-level optimum meets its
    bound; InfeasibleError only when the backend proved that no plan exists, or when none was found."""
    options = options or SolverOptions()
    backend = backend or default_backend()
    info: dict = {"model": "mixed types, node level", "backend": backend}
    best = None  # (counts, types, placement, objective, source)
    if bound is None:
        try:  # the count-level optimum over types: an upper bound, and the first candidate's types
            counts, types, _, bound, stopped, _ = relax(problem, options.deadline)
        except InfeasibleError:
            counts = None  # not proven here (it may have been stopped): the model decides
        placed = None if counts is None or options.expired() else place_count_level(problem, counts, types, options)
        if placed is not None:
            placement = None if placed is PLACED_AT_ASSEMBLY else placed
            objective = problem.with_types(types).objective(counts, placement)
            best = (counts, types, placement, objective, "count-level plan, placed")
            if not stopped and objective >= bound - 1e-12 * max(1.0, abs(bound)):
                info.update(plan_from=best[4], proof="the count-level optimum placed")
                return RawSolution(counts=counts, objective=objective, bound=objective, termination="optimal",
                                   solution="optimal", placement=placement, types=types, options=info)
    tried = []
    for label, assignment in (("count-level types", types), ("current types", {j.id: j.gpu_type for j in problem.jobs})):
        if assignment is None or assignment in tried or options.expired():
            continue
        tried.append(assignment)
        found = candidate(problem, assignment, _slice(options, 0.25), single)
        if found is not None and (best is None or found[3] > best[3]):
            best = (*found, f"candidate: {label}")
    try:
        copies = build(problem, options.deadline)
    except DeadlineReached:
        copies = None
    if copies is None:
        result, values = {"termination": "time_limit", "has_solution": False, "bound": math.inf}, None
        info["stopped"] = "time limit while building"
    else:
        start = None
        if best is not None and best[2] is not None:
            start = hint_values(copies, problem, *best[:3])
            if start is not None:
                copies.model.hint = dict(enumerate(start))
        result, values, more = _run(copies.model, options, backend, start)
        info.update({k: v for k, v in more.items() if v is not None and k != "backend"})
        info["started_from"] = "keep-or-suspend" if start is None else best[4]
    if result["termination"] == "infeasible":
        raise InfeasibleError("no choice of GPU types, counts and nodes meets the node-level constraints and "
                              "the churn limit (the solver proved it)")
    proven, engine = False, result["termination"]
    if values is not None and copies.model.feasible(values):
        counts, chosen, placement = read(copies, values)
        objective = problem.with_types(chosen).objective(counts, placement)
        proven = engine == "optimal"
        if proven and best is not None and best[3] > objective + 1e-9 * max(1.0, abs(objective)):
            # Checked against a plan held: a better one refutes the claim.
            info["optimal_claim_refuted"] = f"{best[4]} is better"
            proven, engine = False, "error"
        if best is None or objective >= best[3] or proven:
            best = (counts, chosen, placement, objective, "model")
    if not proven:
        kept = ipmodel.keep_or_suspend(problem)
        if kept is not None:
            kept_value = problem.objective(*kept)
            if best is None or kept_value > best[3]:
                best = (kept[0], {j.id: j.gpu_type for j in problem.jobs}, kept[1], kept_value, "keep-or-suspend")
        if best is None:
            raise InfeasibleError(f"no plan found ({result['termination']}); raise the time limit")
    counts, chosen, placement, objective, source = best
    if source != "model":
        info["plan_from"] = source
        if source == "keep-or-suspend":
            info["fallback"] = source
    top = result["bound"] if math.isfinite(result["bound"]) else math.inf
    if bound is not None:
        top = min(top, bound)
    if not math.isfinite(top):
        top = relax(problem, options.deadline)[3]
    top = max(top, objective)
    optimal = proven and math.isclose(top, objective, rel_tol=1e-9, abs_tol=1e-6)
    termination = "optimal" if proven else engine
    if termination not in ("optimal", "error"):
        termination = "time_limit"
        info.setdefault("stopped", "time limit")
    return RawSolution(counts=counts, objective=objective, bound=objective if optimal else top,
                       termination=termination, solution="optimal" if optimal else "feasible",
                       placement=placement, types=chosen, options=info)
