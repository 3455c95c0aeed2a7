"""Raw solution -> v1 plan: place the counts on nodes, price every job, report the status."""

from __future__ import annotations

import math
from itertools import accumulate, chain

from pydantic import TypeAdapter

from unicron_plan.core import cost
from unicron_plan.core.problem import Problem, RawSolution, action_of
from unicron_plan.plan.placement import place
from unicron_plan.plan.reasons import JobFacts, changes_of, explain_jobs
from unicron_plan.schema import Placement, Plan, PlanJob, SolverInfo, Status


_PLACEMENTS: dict[tuple[str, int], Placement] = {}  # (node, GPUs) -> its frozen Placement, shared
_MAX_PLACEMENTS = 1 << 16
_PLACEMENT_LIST = TypeAdapter(list[Placement])


def _placements(wheres: list[dict[str, int]]) -> list[list[Placement]]:
    """The frozen :class:`Placement` of each (node, GPUs) of each job's ``where``, made once and shared:
    a plan at 16,384 GPUs lists thousands, and building each anew cost three quarters of a job's
    entry. Looked up for all jobs at once."""
    keys = list(chain.from_iterable(zip(w, w.values()) for w in wheres))
    found = list(map(_PLACEMENTS.get, keys))
    if not all(found):  # (a Placement is always truthy; "None in" would call its __eq__)
        if len(_PLACEMENTS) > _MAX_PLACEMENTS:
            _PLACEMENTS.clear()
        at = [k for k, got in enumerate(found) if got is None]
        missing = list(map(keys.__getitem__, at))
        # the new ones validated in one call (no Python frame per placement)
        made = _PLACEMENT_LIST.validate_python([{"node": node, "gpus": gpus} for node, gpus in missing])
        _PLACEMENTS.update(zip(missing, made))
        for k, p in zip(at, made):
            found[k] = p
    ends = list(accumulate(map(len, wheres)))
    return [found[a:b] for a, b in zip([0, *ends], ends)]


def to_plan(problem: Problem, raw: RawSolution, solver_name: str, wall_seconds: float, used=None) -> Plan:
    """Place the counts on nodes and assemble the v1 plan, each job with its reason (:mod:`.reasons`).
    ``used``: GPUs per node over a whole plan of which ``problem`` holds some jobs (:func:`explain_jobs`)."""
    before = problem.state.previous  # the split before the event (a job moved to another type has none there)
    if raw.types:  # mixed fleets: each job on the GPU type the solver chose
        problem = problem.with_types(raw.types)
    placement = raw.placement if raw.placement is not None else place(problem, raw.counts)
    total_waf = 0.0
    gains = []
    previous = problem.state.previous
    wheres = []
    facts = []
    for j in problem.jobs:
        where = placement.get(j.id, {})
        wheres.append({n: g for n, g in where.items() if g > 0} if 0 in where.values() else where)
    entries = []  # each job's fields but its reason (explained for all jobs at once, below)
    for j, where, shares in zip(problem.jobs, wheres, _placements(wheres)):
        y = int(raw.counts[j.id])
        moved = cost.is_moved(j.x, y, where, previous.get(j.id, {}))
        f_y = j.f_of(y)
        total_waf += f_y
        changed = bool(cost.is_changed(y, j.x, j.hit, j.exiting, moved))
        penalty = float(cost.charged(y, j.x, j.f_x, j.d_trans, j.d_repeat, changed))
        gains.append(j.gain_of(y, moved))
        action = action_of(j.x, y, j.hit, moved)
        entries.append(dict(
            id=j.id, previous_gpus=j.x, gpus=y, action=action,
            nodes=list(where), placement=shares, waf_tflops=f_y, transition_penalty=penalty, hit=j.hit,
            gain=gains[-1], gpu_type=j.gpu_type, parallelism=j.layouts.get(y) if y else None,
            transition_seconds=j.d_trans if changed and j.x else 0.0,
            placement_left_to=problem.instance.jobs[j.index].placement_left_to))
        facts.append(JobFacts(j.id, action, j.x, y, j.hit, j.exiting, changed, j.f_x, f_y,
                              j.d_trans, gains[-1], where, before.get(j.id, {})))
    why = explain_jobs(facts, problem.state.nodes, problem.d_run, used)
    plan_jobs = [PlanJob(**e, reason=r.reason, why=r.why, keep_cost=r.keep_cost) for e, r in zip(entries, why)]
    objective = float(sum(gains))  # Problem.objective of these counts and this placement
    # A proven optimum's bound is the objective itself (not the solver's float-rounded copy).
    bound = objective if raw.solution == "optimal" else max(raw.bound, objective)
    gap = (bound - objective) / max(abs(bound), 1.0) if math.isfinite(bound) else None
    return Plan(
        instance=problem.instance.name,
        status=Status(termination=raw.termination, solution=raw.solution),
        objective=objective, bound=bound, gap=gap,
        d_run_seconds=problem.d_run, waf_tflops=total_waf, jobs=plan_jobs,
        solver=SolverInfo(name=solver_name, wall_seconds=wall_seconds, options=raw.options or None),
        capacity=problem.capacity, drained_nodes=problem.state.drained_nodes,
        changes=changes_of([r.reason for r in why]))
