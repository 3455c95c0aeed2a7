"""A plan explained for a person (``unicron-plan explain``): what the event did, each
changed job with its reason and numbers, and its cheapest alternatives (keeping it, the next best
count). The reasons are recomputed by the validator (:mod:`unicron_plan.plan.reasons`), never read
from the plan."""

from __future__ import annotations

import time

from unicron_plan.errors import PlanValidationError
from unicron_plan.plan.reasons import doing, nodes_text, num
from unicron_plan.schema import Instance, Plan
from unicron_plan.text import shown

ORDER = ("hit", "chosen")  # changed jobs, the ones the event forced first


def _event(instance: Instance, state) -> dict:
    """What the event did: its kind, a sentence, the nodes drained and the GPUs taken out or returned."""
    ev = instance.event
    drained = state.drained_nodes
    out = sum(max(n.healthy_before - n.healthy_after, 0) for n in state.nodes.values())
    back = sum(max(n.healthy_after - n.healthy_before, 0) for n in state.nodes.values())
    if ev is None:
        text = "no event: the plan starts from the current allocation"
    elif ev.kind == "failure":
        parts = []
        if ev.failed_nodes:
            parts.append(f"{len(ev.failed_nodes)} node{'s' * (len(ev.failed_nodes) != 1)} failed "
                         f"({nodes_text(ev.failed_nodes)})")
        if ev.failed_gpus:
            parts.append(f"{len(ev.failed_gpus)} GPU{'s' * (len(ev.failed_gpus) != 1)} failed (" + ", ".join(
                f"{shown(g.node, 40)} GPU {g.gpu}" for g in ev.failed_gpus[:3])
                + (f" +{len(ev.failed_gpus) - 3} more" if len(ev.failed_gpus) > 3 else "") + ")")
        text = " and ".join(parts) + f"; {len(drained)} node{'s' * (len(drained) != 1)} drained, " \
                                     f"{out} GPUs out of service"
    elif ev.kind == "repair":
        text = f"repair of {nodes_text(list(ev.repaired_nodes) + [g.node for g in ev.repaired_gpus])}: " \
               f"{back} GPUs back in service"
    else:
        verb = "arrive" if ev.kind == "job_arrival" else "leave"
        text = f"{len(ev.jobs)} job{'s' * (len(ev.jobs) != 1)} {verb} ({nodes_text(ev.jobs)})"
    return {"kind": None if ev is None else ev.kind, "text": text, "drained_nodes": len(drained),
            "gpus_out": out, "gpus_back": back}


def _next_best(term, y: int, gain: float, free: int) -> dict | None:
    """The job's best other count within ``free`` GPUs of its type (the others as planned), at count level;
    ``gain``: its term in the plan."""
    import numpy as np

    fits = np.flatnonzero((term.counts != y) & (term.counts <= free))
    if not len(fits):
        return None
    k = int(fits[np.argmax(term.gains[fits])])
    best = float(term.gains[k])
    return {"gpus": int(term.counts[k]), "term": best, "objective_loss": gain - best}


def _replanned(instance: Instance, job_id: str, objective: float, deadline: float) -> dict | None:
    """Keeping ``job_id`` as it was (pinned) and re-planning every other job: the objective lost against
    ``objective``, when that plan is proven optimal before ``deadline`` (None otherwise)."""
    from unicron_plan import api
    from unicron_plan.errors import InfeasibleError

    left = deadline - time.perf_counter()
    if left <= 0:
        return None
    pinned = instance.model_copy(update={"jobs": [
        j.model_copy(update={"pinned": True}) if j.id == job_id else j for j in instance.jobs]})
    try:
        other = api.solve(pinned, time_limit_seconds=left)
    except InfeasibleError:
        return {"feasible": False, "objective_loss": None}
    if other.status.solution != "optimal":
        return None
    return {"feasible": True, "objective_loss": objective - other.objective}


def explain(instance: Instance, plan: Plan, replan_seconds: float = 20.0) -> dict:
    """The explanation of a valid ``plan`` of ``instance`` as a JSON-ready dict (``explain --json``);
    raises PlanValidationError when the plan does not validate.

    For each chosen job, when time allows (``replan_seconds`` in all), also the cost of keeping it with
    every other job re-planned (``keep_replanned``: the optimum with the job pinned; None when not
    computed or not proven optimal in time)."""
    from unicron_plan.core.problem import build_problem
    from unicron_plan.plan.validate import validate_plan

    report = validate_plan(instance, plan, reasons=True)
    if not report.valid:
        raise PlanValidationError(report.problems)
    problem = build_problem(instance)
    d_run = plan.d_run_seconds
    terms = {j.id: j for j in problem.jobs}
    by_id = {j.id: j for j in plan.jobs}
    used: dict[str, int] = {}
    for j in plan.jobs:
        t = j.gpu_type or terms[j.id].gpu_type
        used[t] = used.get(t, 0) + j.gpus
    jobs, changes = [], {"hit": 0, "chosen": 0, "unchanged": 0}
    deadline = time.perf_counter() + replan_seconds
    optimal = plan.status.solution == "optimal"
    transition_gpu_minutes = 0.0
    for job, r in zip(instance.jobs, report.reasons):
        changes[r.reason] += 1
        if r.reason == "unchanged":
            continue
        pj, term = by_id[job.id], terms[job.id]
        on_type = (pj.gpu_type or term.gpu_type) == term.gpu_type
        lost = pj.previous_gpus * term.d_trans / 60.0 if pj.transition_penalty else 0.0
        transition_gpu_minutes += lost
        free = problem.capacity.get(term.gpu_type, 0) - used.get(term.gpu_type, 0) + (pj.gpus if on_type else 0)
        jobs.append({
            "id": job.id, "reason": r.reason, "action": pj.action, "previous_gpus": pj.previous_gpus,
            "gpus": pj.gpus, "gpu_type": pj.gpu_type, "why": r.why,
            "tflops_before": term.f_x, "tflops_after": pj.waf_tflops,
            "transition_seconds": term.d_trans if pj.transition_penalty else 0.0,
            "transition_gpu_minutes": lost, "keep_cost": r.keep_cost,
            "next_best": _next_best(term, pj.gpus, pj.gain if pj.gain is not None else term.gain_of(pj.gpus), free)
            if on_type else None,
            "keep_replanned": _replanned(instance, job.id, plan.objective, deadline)
            if r.reason == "chosen" and optimal else None})
    jobs.sort(key=lambda j: ORDER.index(j["reason"]))
    for j in jobs:
        j["alternatives"] = _alternatives(j, d_run)
    before = sum(terms[j.id].f_x for j in instance.jobs)
    return {
        "instance": plan.instance, "status": plan.status.solution, "event": _event(instance, problem.state),
        "objective": {"tflop": plan.objective, "rate_tflops": plan.objective / d_run, "horizon_seconds": d_run,
                      "waf_tflops_before": before, "waf_tflops_after": plan.waf_tflops},
        "changes": changes, "transition_gpu_minutes": transition_gpu_minutes, "jobs": jobs}


def _alternatives(j: dict, d_run: float) -> str:
    keep, again = j["keep_cost"], j.get("keep_replanned")
    text = "keeping it, the others as planned: " + (
        ("not feasible (hit by the event)" if j["reason"] == "hit" else
         f"not feasible (needs {j['previous_gpus']} GPUs the plan gives to other jobs)") if keep is None else
        f"objective {num(keep)} TFLOP lower ({num(keep / d_run)} weighted TFLOP/s)")
    if again is not None:
        text += "; keeping it, the others re-planned: " + (
            "not feasible" if not again["feasible"] else
            f"objective {num(again['objective_loss'])} TFLOP lower "
            f"({num(again['objective_loss'] / d_run)} weighted TFLOP/s)")
    nb = j["next_best"]
    if nb is None:
        return text + "; no other count fits in the GPUs the others leave"
    return text + (f"; next best count {nb['gpus']} GPUs: objective {num(nb['objective_loss'])} TFLOP lower "
                   f"({num(nb['objective_loss'] / d_run)} weighted TFLOP/s)")


def explain_text(ex: dict) -> str:
    """The explanation for a person, with units."""
    o, ev, ch = ex["objective"], ex["event"], ex["changes"]
    d_run = o["horizon_seconds"]
    lines = [
        f"{shown(ex['instance'], 60)}: {ev['text']}.",
        f"plan ({ex['status']}): {num(o['rate_tflops'])} weighted TFLOP/s over a {num(d_run / 3600.0)} h horizon "
        f"(objective {num(o['tflop'])} TFLOP); running {num(o['waf_tflops_before'])} weighted TFLOP/s before, "
        f"{num(o['waf_tflops_after'])} after.",
        f"changes: {ch['hit']} hit, {ch['chosen']} chosen, {ch['unchanged']} unchanged; transitions lose "
        f"{num(ex['transition_gpu_minutes'])} GPU-min in all.",
    ]
    for reason, title in (("hit", "hit by the event (forced)"), ("chosen", "chosen for the gain (not hit)")):
        group = [j for j in ex["jobs"] if j["reason"] == reason]
        if not group:
            continue
        lines.append("")
        lines.append(f"{title}: {len(group)} job{'s' * (len(group) != 1)}")
        for j in group:
            lines.append(f"  {shown(j['id'], 60)}: {j['action']}, {doing(j['action'], j['previous_gpus'], j['gpus'])}")
            lines.append(f"    why: {j['why']}")
            lines.append(f"    alternatives: {j['alternatives']}.")
    return "\n".join(lines)
