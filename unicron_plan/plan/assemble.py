"""Raw solution -> v1 plan: place the counts on nodes, price every job, report the status."""

from __future__ import annotations

import math

from pydantic import TypeAdapter

from unicron_plan.core import cost
from unicron_plan.core.problem import Problem, RawSolution, action_of
from unicron_plan.plan.placement import HeldPlacement, place, place_held
from unicron_plan.plan.reasons import JobFacts, changes_of, explain_jobs
from unicron_plan.schema import Plan, PlanJob, SolverInfo, Status
from unicron_plan.schema.placements import NodeTotals, PlacementArrays, node_totals, placement_models


_JOBS = TypeAdapter(list[PlanJob])


def to_plan(problem: Problem, raw: RawSolution, solver_name: str, wall_seconds: float, used=None,
            arrays: bool = True) -> Plan:
    """Place the counts on nodes and assemble the v1 plan, each job with its reason (:mod:`.reasons`).
    ``used``: GPUs per node over a whole plan of which ``problem`` holds some jobs (:func:`explain_jobs`).
    ``arrays``: the jobs' placements are held as arrays (:class:`PlacementArrays`) and their models made
    when a caller first reads one (:meth:`Plan.hold_placements`); False: made here."""
    before = problem.state.previous  # the split before the event (a job moved to another type has none there)
    if raw.types:  # mixed fleets: each job on the GPU type the solver chose
        problem = problem.with_types(raw.types)
    held = None
    if raw.placement is not None:
        placement = raw.placement
    elif arrays:  # the arrays made as the placement is put in cluster order
        placement, held = place_held(problem, raw.counts)
    else:
        placement = place(problem, raw.counts)
    total_waf = 0.0
    gains = []
    previous = problem.state.previous
    wheres = []
    facts = []
    lazy = isinstance(placement, HeldPlacement) and bool((held.gpus > 0).all())  # (place_held places no 0)
    if lazy:  # each job's split read through the arrays (made when first read), its nodes those of its entries
        wheres = list(map(placement.view, range(len(problem.jobs))))
        ids, ends = held.node_ids(), placement.splits.ends
        node_lists = [ids[a:b] for a, b in zip(ends, ends[1:])]
    else:
        for j in problem.jobs:
            where = placement.get(j.id, {})
            if 0 in where.values():
                where = {n: g for n, g in where.items() if g > 0}
                held = None  # (then made from the splits below)
            wheres.append(where)
        node_lists = list(map(list, wheres))
    if arrays and held is None:
        try:
            held = PlacementArrays.from_splits(wheres, problem.state.node_ids(), problem.state.order)
        except (KeyError, OverflowError):  # a node outside the cluster, a count beyond int64: models
            held = None
    models = placement_models(wheres) if held is None else [[]] * len(wheres)
    ys = [int(raw.counts[j.id]) for j in problem.jobs]
    moves = _moved_on_arrays(problem, held, ys)
    if moves is None:
        moves = [cost.is_moved(j.x, y, where, previous.get(j.id, {})) for j, y, where in zip(problem.jobs, ys, wheres)]
    entries = []  # each job's fields but its reason (explained for all jobs at once, below)
    for j, where, shares, y, moved, nodes in zip(problem.jobs, wheres, models, ys, moves, node_lists):
        f_y = j.f_of(y)
        total_waf += f_y
        changed = bool(cost.is_changed(y, j.x, j.hit, j.exiting, moved))
        penalty = float(cost.charged(y, j.x, j.f_x, j.d_trans, j.d_repeat, changed))
        gains.append(j.gain_of(y, moved, f_y))
        action = action_of(j.x, y, j.hit, moved)
        entries.append(dict(
            id=j.id, previous_gpus=j.x, gpus=y, action=action,
            nodes=nodes, placement=shares, waf_tflops=f_y, transition_penalty=penalty, hit=j.hit,
            gain=gains[-1], gpu_type=j.gpu_type, parallelism=j.layouts.get(y) if y else None,
            transition_seconds=j.d_trans if changed and j.x else 0.0,
            placement_left_to=problem.instance.jobs[j.index].placement_left_to))
        facts.append(JobFacts(j.id, action, j.x, y, j.hit, j.exiting, changed, j.f_x, f_y,
                              j.d_trans, gains[-1], where, before.get(j.id, {})))
    if used is None and held is not None:  # every job's GPUs per node, from the arrays
        used = NodeTotals(problem.state.order, node_totals(held.node, held.gpus, len(held.names)))
    why = explain_jobs(facts, problem.state.nodes, problem.d_run, used)
    for e, r in zip(entries, why):
        e["reason"], e["why"], e["keep_cost"] = r.reason, r.why, r.keep_cost
    plan_jobs = _JOBS.validate_python(entries)  # (one call: no Python frame per job, the same models)
    objective = float(sum(gains))  # Problem.objective of these counts and this placement
    # A proven optimum's bound is the objective itself (not the solver's float-rounded copy).
    bound = objective if raw.solution == "optimal" else max(raw.bound, objective)
    gap = (bound - objective) / max(abs(bound), 1.0) if math.isfinite(bound) else None
    plan = Plan(
        instance=problem.instance.name,
        status=Status(termination=raw.termination, solution=raw.solution),
        objective=objective, bound=bound, gap=gap,
        d_run_seconds=problem.d_run, waf_tflops=total_waf, jobs=plan_jobs,
        solver=SolverInfo(name=solver_name, wall_seconds=wall_seconds, options=raw.options or None),
        capacity=problem.capacity, drained_nodes=problem.state.drained_nodes,
        changes=changes_of([r.reason for r in why]))
    if held is not None:
        plan.hold_placements(held)
    return plan


def _moved_on_arrays(problem: Problem, held, ys: list) -> "list[bool] | None":
    """:func:`cost.is_moved` of every job at once (:func:`cost.moved_on_arrays`), from the placement held as
    arrays on the cluster's positions and the previous splits as arrays; None when either is not at hand
    (the jobs' not the instance's, in its order)."""
    state = problem.state
    jobs = problem.jobs
    if held is None or held.names is not state.node_ids() or len(held) != len(jobs) \
            or any(j.index != k for k, j in enumerate(jobs)):
        return None
    return cost.moved_on_arrays([j.x for j in jobs], ys, held.starts, held.node, held.gpus, len(held.names),
                                state.previous_arrays())
