"""Python API for schedulers: load, solve, validate. Orchestration only.

Example::

    from unicron_plan import load_instance, solve, validate_plan
    inst = load_instance("instances/tiny-one-job-two-nodes.json")
    plan = solve(inst)                # exact DP, validated before it is returned
    assert validate_plan(inst, plan).valid
    print(plan.objective)             # 38697000.0
"""

from __future__ import annotations

import os
import time
from typing import Any

from unicron_plan.errors import InvalidInstanceError, PlanValidationError
from unicron_plan.io import parse_json, parse_json_tables, parse_model, read_json, read_json_tables
from unicron_plan.schema import Instance, Plan
from unicron_plan.schema.instance import read_node_columns, read_tables_once, settle_tables
from unicron_plan.core.checks import check_instance
from unicron_plan.solvers import (DEFAULT_TIME_LIMIT_SECONDS, MAX_THREADS, MAX_TIME_LIMIT_SECONDS, SolverOptions,
                                  get_solver)
from unicron_plan.plan.validate import ValidationReport
from unicron_plan.plan.validate import validate_plan as _validate


def _load(model, source: Any, keep: list | None = None):
    if isinstance(source, model):
        return source
    if isinstance(source, dict):
        return parse_model(model, source)
    what = model.__name__.lower()
    if not isinstance(source, (str, os.PathLike)):
        raise InvalidInstanceError(what, f"a path, a JSON text, a dict or a {model.__name__}, "
                                         f"not {type(source).__name__}")
    if isinstance(source, str) and not source.strip():
        raise InvalidInstanceError(what, "an empty path")
    text = isinstance(source, str) and source.lstrip().startswith("{")
    if model is not Instance:
        doc = parse_json(source) if text else read_json(source)
        if keep is not None:
            keep.append(doc)
        return parse_model(model, doc)
    # An instance's compact tables: read as arrays when they can be (else kept as read, as lists), and
    # checked at once, on arrays. A document so read that is refused is read again as lists: the
    # per-entry validation of those names the first bad entry.
    # The cluster's nodes: read as columns by the reader when they have the common shape (which then
    # need not walk them again), and handed to the validation with the very list they were read from.
    nodes = {"read": read_node_columns}
    doc, as_arrays = parse_json_tables(source, nodes=nodes) if text else read_json_tables(source, nodes=nodes)
    for _ in range(2):
        context = read_tables_once()
        if as_arrays and "columns" in nodes:
            context["node_columns"] = (nodes["raw"], nodes["columns"])
        try:
            instance = parse_model(model, doc, context=context)
        except InvalidInstanceError:
            instance = None
        if instance is not None and settle_tables(context["compact_tables"]):
            if keep is not None:  # the parsed text too (see solve)
                keep.append(doc)
            return instance
        if not as_arrays:
            break
        doc, as_arrays = (parse_json(source) if text else read_json(source)), False
    if keep is not None:
        keep.append(doc)
    return parse_model(model, doc)  # (the per-entry validation, which names the first bad entry)


def load_instance(source: str | os.PathLike | dict | Instance) -> Instance:
    """An Instance from a path, a JSON string or a dict; raises InvalidInstanceError naming the field."""
    instance = _load(Instance, source)
    if all(j.throughput.has_table for j in instance.jobs):
        check_instance(instance)  # derived tables are checked when they are built
    return instance


def load_plan(source: str | os.PathLike | dict | Plan) -> Plan:
    """A Plan from a path, a JSON string or a dict."""
    return _load(Plan, source)


def solve(instance: Instance | str | os.PathLike | dict, solver: str | None = None,
          time_limit_seconds: float | None = DEFAULT_TIME_LIMIT_SECONDS, threads: int | None = None,
          contingency: str | os.PathLike | dict | None = None,
          instance_fingerprint: str | None = None, prepared=None, started: float | None = None,
          timings: dict | None = None, keep: list | None = None, contingency_use: str = "cheaper") -> Plan:
    """The optimal (or, under a time limit, best found) plan, checked by the independent validator.

    ``solver`` is one of the registry (``unicron-plan solvers``); None (the default)
    means ``dp``, or ``auto`` when the instance has constraints the DP cannot express:
    ``brute``, ``milp`` (PuLP + HiGHS), ``milp-cbc``, ``cpsat`` (OR-Tools) or ``auto``
    (``dp`` when it is exact for the instance, else an IP backend; docs/solvers.md).
    ``time_limit_seconds`` is wall time from this call, for every solver (``dp``
    included): a solver stopped by it returns the best plan it holds as
    ``feasible`` (termination ``time_limit``) with a valid upper bound and the
    ``gap``; the default is the CLI's 60 s, None means no limit. ``threads`` reaches the IP backends.
    ``contingency``: a directory written by ``unicron-plan contingency`` (or its
    index); when the instance's event is one of its failures, the precomputed
    plan is placed, validated and returned (solver name ``contingency``); when
    it is not used, the fresh plan's ``solver.options["contingency_fallback"]``
    says why. A malformed index raises InvalidInstanceError.
    ``contingency_use``: ``cheaper`` (the default) reads an index on disk only when answering from it
    is estimated cheaper than solving afresh, from the problem's size before the index is read
    (:func:`unicron_plan.plan.contingency.cold_is_cheaper`; an index held as a dict is always tried);
    ``always`` tries it whatever the cost.
    ``instance_fingerprint``: the instance's ``contingency.fingerprint``, for a
    caller that keeps the instance and computed it once (the service); it is
    compared with the index's instead of hashing the instance again.
    ``prepared``: :func:`unicron_plan.core.problem.prepare` of the instance without its
    event, for a caller that plans many events on one cluster (the service): then only the
    event is checked; an instance it does not cover is checked whole.
    ``started``: the :func:`time.perf_counter` instant this process started
    (:func:`unicron_plan.solvers.process_started`), when the limit counts from there (the CLI: start-up
    and imports count too); by default it counts from this call.
    ``timings``: a dict filled with the seconds from ``started`` at the end of each phase
    (``read``, ``build``, ``solve``, ``place``, ``validate``) and the ``reserve`` kept for the
    phases after the solver.
    ``keep``: a list the parsed text, the instance and the problem are appended to, for a caller
    that ends its process right after (the CLI): it then never frees them (0.1-0.2 s of CPU at
    1,048,576 GPUs).

    Under a limit the solver's deadline is moved earlier by that reserve: the time placing,
    validating and writing the plan will take, estimated from the instance's size (jobs and
    nodes) and scaled by how slowly this call (or, with ``started``, this process) has run so far
    on this machine (wall seconds per CPU second: a loaded machine gets a larger reserve).

    Raises InvalidInstanceError for bad input, SolverUnavailableError for an
    unknown solver (or ``dp`` on constraints it cannot express), InfeasibleError
    when the constraints admit no plan, and PlanValidationError if a solver ever returns a plan
    that does not validate (a bug).
    """
    from unicron_plan.core.problem import build_problem
    from unicron_plan.plan.assemble import to_plan

    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or not 1 <= threads <= MAX_THREADS):
        raise InvalidInstanceError("threads", f"{threads!r}: give an integer in [1, {MAX_THREADS}]")
    if time_limit_seconds is not None and (isinstance(time_limit_seconds, bool)
                                           or not isinstance(time_limit_seconds, (int, float))
                                           or not 0 < time_limit_seconds <= MAX_TIME_LIMIT_SECONDS):
        raise InvalidInstanceError("time_limit_seconds", f"{time_limit_seconds!r}: give seconds above 0 and at most "
                                                         f"{MAX_TIME_LIMIT_SECONDS:g} (None: no limit)")

    # The limit is wall time from the call (or ``started``): reading, building and placing count too.
    # The slowdown is measured over this call, or over the whole process when ``started`` is given.
    call, cpu = (time.perf_counter(), time.process_time()) if started is None else (started, 0.0)
    deadline = None if time_limit_seconds is None else call + float(time_limit_seconds)
    phases = timings if timings is not None else {}
    # build_problem runs check_instance itself: parse only here, so the checks run once.
    instance = _load(Instance, instance, keep)
    phases["read"] = time.perf_counter() - call
    fallback = problem = None
    if contingency is not None:
        if contingency_use not in ("cheaper", "always"):
            raise ValueError(f"contingency_use must be 'cheaper' or 'always', not {contingency_use!r}")
        start = time.perf_counter()
        problem = build_problem(instance, prepared)
        built = time.perf_counter() - start
        solver = solver or _default_solver(problem)
        if contingency_use == "cheaper" and not isinstance(contingency, dict):
            from unicron_plan.plan.contingency import cold_is_cheaper

            fallback = cold_is_cheaper(problem, solver, contingency)
        if fallback is None:
            plan, fallback = _from_contingency(instance, contingency, instance_fingerprint, problem)
            if plan is not None:
                if keep is not None:
                    keep.append(instance)
                return plan
    if problem is None:
        start = time.perf_counter()
        problem = build_problem(instance, prepared)
        built = time.perf_counter() - start
    phases["build"] = time.perf_counter() - call
    solver = solver or _default_solver(problem)
    options = SolverOptions(time_limit_seconds=time_limit_seconds, threads=threads)
    if deadline is not None:
        slowdown = _slowdown(time.perf_counter() - call, time.process_time() - cpu)
        reserve = post_solve_reserve(problem, slowdown, float(time_limit_seconds))
        phases["reserve"] = reserve
        options = SolverOptions(time_limit_seconds=time_limit_seconds, threads=threads, deadline=deadline - reserve,
                                slowdown=slowdown)
    solve_fn = get_solver(solver)
    start = time.perf_counter() - built  # wall_seconds: building + solving, not the solver's import
    raw = solve_fn(problem, options)
    phases["solve"] = time.perf_counter() - call
    if fallback is not None:
        raw.options = {**raw.options, "contingency_fallback": fallback}
    plan = to_plan(problem, raw, solver, time.perf_counter() - start)
    phases["place"] = time.perf_counter() - call
    report = _validate(instance, plan, derived=problem.derived())
    phases["validate"] = time.perf_counter() - call
    if keep is not None:
        keep += [instance, problem, raw]
    if not report.valid:
        raise PlanValidationError(report.problems)
    return plan


def _default_solver(problem) -> str:
    """``dp``, or ``auto`` when ``problem`` has constraints the DP cannot express."""
    from unicron_plan.core.constraints import dp_limitations

    return "auto" if dp_limitations(problem) else "dp"


#: CPU seconds of the work after a solver (placing, validating and writing the plan): a fixed part
#: and a part per job and per node; about twice what it took at 8,192-16,384 GPUs
#: (docs/performance.md, "Time limits").
POST_SOLVE_CPU_SECONDS = (0.01, 2e-5)
SLOWDOWN_RANGE = (1.0, 8.0)  # wall seconds per CPU second assumed at least / at most


def _slowdown(wall: float, cpu: float) -> float:
    """Wall seconds per CPU second of work that took ``wall`` seconds and ``cpu`` seconds of CPU
    (2 when there was too little to tell), within SLOWDOWN_RANGE."""
    slowdown = wall / cpu if cpu > 0.02 else 2.0
    return min(max(slowdown, SLOWDOWN_RANGE[0]), SLOWDOWN_RANGE[1])


def post_solve_reserve(problem, slowdown: float, limit: float) -> float:
    """Seconds of a time limit kept for the work after the solver: its CPU estimate from the
    instance's size times ``slowdown``, at most half the limit (the rest goes to the solver)."""
    fixed, per = POST_SOLVE_CPU_SECONDS
    estimate = fixed + per * (len(problem.jobs) + len(problem.state.nodes))
    return min(estimate * slowdown, 0.5 * limit)


def _from_contingency(instance: Instance, contingency, instance_fingerprint: str | None,
                      problem) -> tuple[Plan | None, str | None]:
    """(the precomputed plan for the instance's event, placed and validated, None) or
    (None, why none was used): a stored plan that does not check out is never used.
    ``problem``: the instance's, built."""
    from unicron_plan.plan.contingency import check_index, lookup, read_for_event
    from unicron_plan.solvers.contingency import proven_optimal
    from unicron_plan.core.problem import RawSolution
    from unicron_plan.plan.assemble import to_plan

    start = time.perf_counter()
    if isinstance(contingency, dict):
        index = check_index(contingency)
    else:
        index, known = read_for_event(contingency, instance)
        instance_fingerprint = instance_fingerprint or known
    found = lookup(instance, index, instance_fingerprint)
    if found is None:
        return None, "no precomputed plan matches this instance and event"
    if found[1] is None:
        return None, f"the index lists {found[0]} as infeasible"
    key, counts, stored = found
    types = index["plans"][index["failures"][key]["plan"]].get("types") or None  # mixed fleets
    if types is not None:
        choices = {jid: {a.gpu_type for a in alts} for jid, alts in problem.alternatives.items()}
        if any(t not in choices.get(jid, ()) for jid, t in types.items()):
            return None, f"the stored plan for {key} names GPU types this instance does not allow"
    base_problem, problem = problem, problem.with_types(types or {})
    if set(counts) != {j.id for j in problem.jobs} or not all(_allows(j.counts, counts[j.id]) for j in problem.jobs):
        return None, f"the stored plan for {key} gives counts this instance does not allow"
    used: dict[str, int] = {}
    for j in problem.jobs:
        used[j.gpu_type] = used.get(j.gpu_type, 0) + counts[j.id]
    if any(used[t] > problem.capacity.get(t, 0) for t in used):
        return None, f"the stored plan for {key} exceeds the healthy capacity"
    if base_problem.alternatives:  # mixed fleets: the stored value must reach the bound over types
        from unicron_plan.solvers.mixed import relaxation as mixed_relaxation

        _, bound = mixed_relaxation(base_problem)
        proven = problem.objective(counts) >= bound - 1e-9 * max(1.0, abs(bound))
    else:
        proven = proven_optimal(problem, counts, index.get("multipliers"))
    if not proven:
        return None, f"the stored plan for {key} is not proven optimal for this instance"
    value = problem.objective(counts)
    raw = RawSolution(counts=counts, objective=value, bound=value,
                      options={"contingency_key": key, "precomputed": True}, types=types)
    plan = to_plan(base_problem, raw, "contingency", time.perf_counter() - start)
    report = _validate(instance, plan, derived=base_problem.derived())
    if not report.valid or abs(value - stored) > 1e-9 * max(1.0, abs(stored)) \
            or abs(plan.objective - value) > 1e-9 * max(1.0, abs(value)):
        return None, f"the stored plan for {key} does not check out (stale or edited index)"
    return plan, None


def _allows(ascending, count: int) -> bool:
    """Whether ``count`` is one of the ``ascending`` allowed counts of a job (a binary search)."""
    at = int(ascending.searchsorted(count))
    return at < len(ascending) and int(ascending[at]) == count


def validate_plan(instance: Instance | str | os.PathLike | dict, plan: Plan | str | os.PathLike | dict) -> ValidationReport:
    """Recompute the objective and check every constraint of ``plan``."""
    return _validate(load_instance(instance), load_plan(plan))
