"""Independent plan checker: every constraint of docs/format.md; the objective, each job's `gain` and
`hit` and the plan's `gap` recomputed.

It shares only the cluster state and the cost terms (:mod:`unicron_plan.core.cost`)
with the solvers, never their arithmetic, so a solver bug cannot hide here.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter

import numpy as np

from unicron_plan.core import cost
from unicron_plan.core.cluster import build_state
from unicron_plan.core.problem import action_of, resolve_tables, resolve_type_tables
from unicron_plan.schema import Instance, Plan
from unicron_plan.core.checks import check_instance
from unicron_plan.plan.reasons import JobFacts, changes_of, explain_jobs
from unicron_plan.schema.placements import LazySplits, NodeTotals, SplitView, node_totals

REL_TOL = 1e-9
_node, _gpus = attrgetter("node"), attrgetter("gpus")  # of a placement entry


@dataclass
class ValidationReport:
    """Outcome of validating a plan: valid or not, the reasons, and the recomputed objective."""

    valid: bool
    problems: list[str] = field(default_factory=list)
    objective: float = 0.0
    reasons: list | None = None  # each job's recomputed JobReason, in the instance's order (when computed)

    def to_json(self) -> dict:
        """JSON-ready form."""
        return {"valid": self.valid, "problems": self.problems, "objective": self.objective}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-6)


def _in_service(state):
    """A test of whether some nodes are all in service (not drained) and of one GPU type: the nodes of
    ``state.usable_ids()[type]``, read from the healthy cluster's nodes per type and the drained nodes
    where the state keeps them (without a copy of every node id)."""
    if state.healthy is None or state.touched is None:
        usable = state.usable_ids()
        return lambda nids, gtype: nids <= usable.get(gtype, set())
    healthy, drained = state.healthy, set(state.drained_nodes)  # (the ids per type made on the first test)
    return lambda nids, gtype: nids <= healthy.ids_by_type.get(gtype, frozenset()) and drained.isdisjoint(nids)


def validate_plan(instance: Instance, plan: Plan, *, derived=None, reasons: bool = False,
                  whole_used=None) -> ValidationReport:
    """Check ``plan`` against ``instance``; never raises for a bad plan, only reports.

    ``derived``: optional ``(tables, state)`` or ``(tables, state, type_tables)`` already derived
    from this very instance (checked tables, :func:`build_state` and, on a mixed fleet,
    :func:`resolve_type_tables`), so that api.solve does not derive them twice; they are inputs,
    not solver arithmetic, so the check stays independent.
    ``reasons``: also recompute each job's reason when the plan gives none (the report's ``reasons``).
    ``whole_used``: GPUs per node over a whole plan of which ``plan`` holds some jobs, for the reasons'
    keep costs (:func:`unicron_plan.plan.reasons.explain_jobs`).
    """
    type_tables = None
    if derived is None:
        tables, layouts = resolve_tables(instance)
        check_instance(instance, tables)
        state = build_state(instance)
        if any(j.throughput.by_type is not None or j.throughput.gpu_types is not None for j in instance.jobs):
            type_tables = resolve_type_tables(instance, tables, layouts)[0]
    else:
        tables, state, *more = derived
        type_tables = more[0] if more else None
    d_run = cost.d_run_seconds(instance, state.nodes_in_service())
    repair = cost.pending_repair_seconds(instance) if instance.cost.horizon == "lifetime" else None
    problems: list[str] = []
    bad = problems.append
    if plan.instance != instance.name:
        bad(f"instance: plan is for {plan.instance!r}, not {instance.name!r}")
    if not _close(plan.d_run_seconds, d_run):
        bad(f"d_run_seconds: {plan.d_run_seconds} != {d_run}")
    by_id, at = {}, {}
    for k, pj in enumerate(plan.jobs):
        if pj.id in by_id:
            bad(f"jobs[{k}].id: {pj.id!r} appears twice")
        by_id[pj.id] = pj
        at[pj.id] = k
    held = plan.placement_arrays()  # the placements as arrays when the plan holds them so (else its models)
    if held is not None:
        held = _Held(held, state)
    known = {j.id for j in instance.jobs}
    for jid in by_id:
        if jid not in known:
            bad(f"jobs: {jid!r} is not a job of the instance")
    in_service, state_nodes = _in_service(state), state.nodes  # (nodes, GPU type) -> all in service, of it
    placed_nodes: list[str] = []  # every (known node, GPUs) of every job, for the per-node totals
    placed_gpus: list[int] = []
    used_per_type: dict[str, int] = {}
    total = 0.0
    total_waf = 0.0
    changed_jobs = 0
    facts: list[tuple[object, JobFacts]] = []  # (plan entry, its recomputed facts) for the reasons
    clean = _clean_jobs(instance, plan, tables, state, held, d_run, repair) if held is not None else None
    if clean is not None:  # (no job has a problem: the loop below would report none)
        total, total_waf, used_per_type, changed_jobs, facts = clean
        held.placed += range(len(facts))
    for job in instance.jobs if clean is None else ():
        pj = by_id.get(job.id)
        if pj is None:
            bad(f"jobs: job {job.id!r} is missing from the plan")
            continue
        where = f"job {job.id!r}"
        table = tables[job.id]
        x, y, hit = job.current.gpus, pj.gpus, state.hit[job.id]
        gtype = now_type = job.throughput.gpu_type
        table_y = table
        if pj.gpu_type is not None and pj.gpu_type != now_type:  # mixed fleets: runs on another type
            gtype = pj.gpu_type
            others = (type_tables or {}).get(job.id, {})
            if gtype not in others:
                bad(f"{where}: gpu_type {gtype!r} is not a GPU type the job may run on "
                    f"({', '.join(job.throughput.allowed_types())})")
                continue
            if job.id in state.exiting:
                bad(f"{where}: leaves in the job_exit event, but the plan moves it to GPU type {gtype!r}")
            elif job.pinned:
                bad(f"{where}: pinned, but the plan moves it to GPU type {gtype!r}")
            table_y = others[gtype]
        if pj.previous_gpus != x:
            bad(f"{where}: previous_gpus {pj.previous_gpus} != current.gpus {x}")
        exiting = job.id in state.exiting
        if exiting and y != 0:
            bad(f"{where}: leaves in the job_exit event but is planned {y} GPUs (must be 0)")
        at_y = None if y == 0 else table_y.get(y)  # (its TFLOP/s, looked up once)
        if y != 0 and at_y is None:
            bad(f"{where}: {y} GPUs is not a count of its throughput table"
                + (f" for {gtype!r}" if gtype != now_type else ""))
            continue
        if held is None:
            entries = pj.placement
            split = dict(zip(map(_node, entries), map(_gpus, entries)))
            listed_twice = len(split) != len(entries)
            if listed_twice:
                entries = list(zip(map(_node, entries), map(_gpus, entries)))
        else:
            k = at[job.id]
            split = held.splits[k]
            listed_twice = len(split) != held.lengths[k]
            if listed_twice:
                entries = held.arrays.pairs(k)
        if listed_twice:
            split = {}
            for node_id, g in entries:
                if node_id in split:
                    bad(f"{where}: node {node_id!r} appears twice in placement")
                    split[node_id] += g
                else:
                    split[node_id] = g
        if sum(split.values()) != y:
            bad(f"{where}: placement sums to {sum(split.values())}, not gpus {y}")
        listed = set(pj.nodes)
        if listed != split.keys() or len(pj.nodes) != len(listed):
            bad(f"{where}: nodes {pj.nodes} do not match the placement's nodes {sorted(split)}")
        if held is not None and held.in_service(k, gtype):
            held.placed.append(k)
        elif held is None and in_service(split.keys(), gtype):
            placed_nodes += split.keys()
            placed_gpus += split.values()
        else:
            for nid, g in split.items():
                node = state_nodes.get(nid)
                if node is None:
                    bad(f"{where}: unknown node {nid!r}")
                    continue
                if node.drained:
                    bad(f"{where}: node {nid!r} is failed or drained")
                if node.gpu_type != gtype:
                    bad(f"{where}: node {nid!r} has GPU type {node.gpu_type!r}, the job runs on {gtype!r}")
                placed_nodes.append(nid)
                placed_gpus.append(g)
        used_per_type[gtype] = used_per_type.get(gtype, 0) + y
        # Stay rule (docs/format.md): keeping the count on another split than the previous
        # one is a move, a change that pays its transition.
        moved = cost.is_moved(x, y, split, state.previous.get(job.id, {})) or (gtype != now_type and y > 0)
        expected_action = action_of(x, y, hit, moved)
        if pj.action != expected_action:
            bad(f"{where}: action {pj.action!r}, expected {expected_action!r}")
        f_x = 0.0 if x == 0 else cost.waf(job.weight, table[x])
        f_y = 0.0 if y == 0 else cost.waf(job.weight, at_y)
        d_trans, d_repeat = cost.job_transition_terms(instance, job, state.previous.get(job.id, {}),
                                                      state.nodes_in_service(), repair_seconds=repair)
        changed = cost.is_changed(y, x, hit, exiting, moved)
        penalty = cost.charged(y, x, f_x, d_trans, d_repeat, changed)
        g = cost.gain(f_y, y, x, f_x, hit, d_run, d_trans, exiting, moved, d_repeat)
        if not _close(pj.waf_tflops, f_y):
            bad(f"{where}: waf_tflops {pj.waf_tflops} != {f_y}")
        if not _close(pj.transition_penalty, penalty):
            bad(f"{where}: transition_penalty {pj.transition_penalty} != {penalty}")
        if pj.transition_seconds is not None and not _close(pj.transition_seconds, d_trans if changed and x else 0.0):
            bad(f"{where}: transition_seconds {pj.transition_seconds} != {d_trans if changed and x else 0.0}")
        if pj.placement_left_to is not None and pj.placement_left_to != job.placement_left_to:
            bad(f"{where}: placement_left_to {pj.placement_left_to!r}, the instance says {job.placement_left_to!r}")
        if pj.hit is not None and pj.hit != hit:
            bad(f"{where}: hit {pj.hit}, but the event {'touched' if hit else 'did not touch'} its nodes")
        if pj.gain is not None and not _close(pj.gain, g):
            bad(f"{where}: gain {pj.gain} != recomputed {g}")
        total += g
        total_waf += f_y
        facts.append((pj, JobFacts(job.id, expected_action, x, y, hit, exiting, bool(changed), f_x, f_y, d_trans,
                                   pj.gain if pj.gain is not None and _close(pj.gain, g) else g,
                                   split, state.previous.get(job.id, {}))))
        changed_jobs += bool(changed)
        _check_constraints(job, where, state, split, x, y, hit, f_x * d_run, g, bool(changed), bad)
    over = _overfilled(state, placed_nodes, placed_gpus) if held is None else held.overfilled(placed_nodes, placed_gpus)
    for nid, used in over:
        bad(f"node {nid!r}: {used} GPUs placed on {state.nodes[nid].healthy_after} healthy GPUs")
    capacity = state.capacity()
    for gtype, used in used_per_type.items():
        if used > capacity[gtype]:
            bad(f"capacity: {used} {gtype} GPUs planned, {capacity[gtype]} healthy")
    if instance.max_changed_jobs is not None and changed_jobs > instance.max_changed_jobs:
        bad(f"max_changed_jobs: {changed_jobs} jobs changed, at most {instance.max_changed_jobs} allowed")
    if whole_used is None and held is not None:  # (every checked job's GPUs per node, summed above)
        whole_used = NodeTotals(state.order, held.used)
    recomputed = _check_reasons(plan, facts, state, d_run, bad, reasons, whole_used)
    if not _close(plan.objective, total):
        bad(f"objective: {plan.objective} != recomputed {total}")
    if not _close(plan.waf_tflops, total_waf):
        bad(f"waf_tflops: {plan.waf_tflops} != recomputed {total_waf}")
    if plan.bound < plan.objective and not _close(plan.bound, plan.objective):
        bad(f"bound: {plan.bound} is below the objective {plan.objective}")
    if plan.gap is not None:
        gap = (plan.bound - plan.objective) / max(abs(plan.bound), 1.0)
        if not math.isclose(plan.gap, gap, rel_tol=REL_TOL, abs_tol=1e-9):
            bad(f"gap: {plan.gap} != (bound - objective) / max(|bound|, 1) = {gap}")
    if plan.status.solution == "optimal" and not _close(plan.bound, plan.objective):
        bad(f"status: solution 'optimal' but bound {plan.bound} != objective {plan.objective}")
    if plan.status.solution == "optimal" and plan.status.termination != "optimal":
        bad(f"status: solution 'optimal' with termination {plan.status.termination!r}")
    if plan.drained_nodes is not None:  # (what a scheduler's export drains: exactly the event's drained nodes)
        _check_drained(plan.drained_nodes, state.drained_nodes, bad)
    if plan.capacity is not None and plan.capacity != capacity:
        bad(f"capacity: {plan.capacity} != the healthy GPUs per type after the event {capacity}")
    return ValidationReport(valid=not problems, problems=problems, objective=total, reasons=recomputed)


def _check_drained(listed: list[str], drained: list[str], bad) -> None:
    """A plan's ``drained_nodes`` are the nodes the event drains, each once (in any order)."""
    if len(set(listed)) != len(listed):
        twice = next(n for n, k in Counter(listed).items() if k > 1)
        bad(f"drained_nodes: {twice!r} is listed twice")
    extra, missing = sorted(set(listed) - set(drained)), sorted(set(drained) - set(listed))
    if extra:
        bad(f"drained_nodes: {len(extra)} node(s) the event does not drain, e.g. {', '.join(map(repr, extra[:5]))}")
    if missing:
        bad(f"drained_nodes: {len(missing)} node(s) the event drains are not listed, e.g. "
            f"{', '.join(map(repr, missing[:5]))}")


def _isclose(a: np.ndarray, b: np.ndarray, abs_tol: float = 1e-6) -> np.ndarray:
    """``math.isclose(a, b, rel_tol=REL_TOL, abs_tol=abs_tol)`` of each pair (float64 arrays): its very
    formula (equal, else both finite and the difference within either relative bound or ``abs_tol``)."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(b - a)
        return (a == b) | (np.isfinite(a) & np.isfinite(b)
                           & ((diff <= np.abs(REL_TOL * b)) | (diff <= np.abs(REL_TOL * a)) | (diff <= abs_tol)))


def _floats(values: list) -> "np.ndarray | None":
    """``values`` (ints and floats) as float64, or None for another type or an int not exact in float64."""
    kinds = set(map(type, values))
    if not kinds <= {float, int} or (int in kinds and any(type(v) is int and abs(v) > 2**53 for v in values)):
        return None
    return np.asarray(values, dtype=np.float64).reshape(len(values))


def _moved(held: "_Held", previous, xs: list, ys: list) -> "list[bool] | None":
    """:func:`unicron_plan.core.cost.moved_on_arrays` of the held entries (positions all in the cluster, none
    twice) against ``previous`` (the previous splits' arrays, or None)."""
    if len(held.lengths) != len(xs):
        return None
    return cost.moved_on_arrays(xs, ys, held.arrays.starts, held.pos, held.arrays.gpus, len(held.order), previous)


def _clean_jobs(instance: Instance, plan: Plan, tables, state, held: "_Held", d_run: float, repair):
    """The per-job checks of :func:`validate_plan` over a plan held as arrays whose jobs are the instance's
    in its order, each on its own GPU type: (the objective, the plan's WAF, GPUs per type, jobs changed,
    each job's (plan entry, facts)) when no job has a problem, as the job-by-job loop computes them (the
    scalar terms of :mod:`unicron_plan.core.cost` per job where they hold a branch; the products, sums and
    tolerances elementwise in float64, the same IEEE operations); else None (or a case not covered here:
    the loop then checks job by job and names each problem)."""
    jobs, pjs = instance.jobs, plan.jobs
    m = len(jobs)
    ids = [job.id for job in jobs]
    if len(pjs) != m or [pj.id for pj in pjs] != ids or len(set(ids)) != m:
        return None
    xs = [job.current.gpus for job in jobs]
    ys = [pj.gpus for pj in pjs]
    if [pj.previous_gpus for pj in pjs] != xs:
        return None
    now_types = [job.throughput.gpu_type for job in jobs]
    if any(pj.gpu_type is not None and pj.gpu_type != t for pj, t in zip(pjs, now_types)):
        return None  # (a job moved to another GPU type: the loop's case)
    hits = list(map(state.hit.__getitem__, ids))
    exiting_ids = state.exiting
    exits = [jid in exiting_ids for jid in ids]
    if any(e and y != 0 for e, y in zip(exits, ys)):
        return None
    codes = held.types
    if not all(map(held.in_service, range(m), now_types)) or any(t not in codes for t in now_types):
        return None  # (hence every node of every job is one of the cluster's: held.distinct, held.sums)
    splits, lengths = held.splits, held.lengths
    distinct, sums = held.distinct(), held.sums()
    if distinct is None:  # (the checks on the splits themselves)
        distinct = not any(len(split) != n for split, n in zip(splits, lengths))
    if not distinct:
        return None  # (a node listed twice)
    if sums is None:
        sums = [sum(split.values()) for split in splits]
    if sums != ys:
        return None
    named, ends = held.arrays.node_ids(), held.ends
    for k, (pj, a, b) in enumerate(zip(pjs, ends, ends[1:])):
        nodes = pj.nodes
        if nodes != named[a:b]:  # (as planned: the nodes in the placement's order, the split's keys)
            split = splits[k]
            listed = set(nodes)
            if listed != split.keys() or len(nodes) != len(listed):
                return None
    views = list(map(SplitView, repeat(splits), range(m)))  # each job's split, made when first read
    weights = [job.weight for job in jobs]
    w = _floats(weights)
    if w is None or any(type(v) is not float for v in weights):
        return None
    table_of = list(map(tables.__getitem__, ids))
    at_x, at_y = [0.0] * m, [0.0] * m
    for k, (table, x, y) in enumerate(zip(table_of, xs, ys)):
        if y != 0:
            got = table.get(y)
            if got is None:
                return None
            at_y[k] = got
        if x != 0:
            at_x[k] = table[x]  # (KeyError as in the loop)
    tx, ty = _floats(at_x), _floats(at_y)
    if tx is None or ty is None:
        return None
    previous = state.previous
    prevs = [previous.get(jid, {}) for jid in ids]
    moved = _moved(held, state.previous_arrays(), xs, ys)
    if moved is None:
        moved = list(map(cost.is_moved, xs, ys, splits, prevs))
    actions = list(map(action_of, xs, ys, hits, moved))
    if [pj.action for pj in pjs] != actions:
        return None
    in_service = state.nodes_in_service()
    terms = [cost.job_transition_terms(instance, job, prev, in_service, repair_seconds=repair)
             for job, prev in zip(jobs, prevs)]
    d_trans_list = [t[0] for t in terms]
    d_trans, d_repeat = _floats(d_trans_list), _floats([t[1] for t in terms])
    if d_trans is None or d_repeat is None:
        return None
    x_zero = np.fromiter((x == 0 for x in xs), dtype=bool, count=m)
    y_zero = np.fromiter((y == 0 for y in ys), dtype=bool, count=m)
    changed = np.fromiter(map(cost.is_changed, ys, xs, hits, exits, moved), dtype=bool, count=m)
    with np.errstate(all="ignore"):  # (an overflow is inf, as in Python)
        f_x = np.where(x_zero, 0.0, cost.waf(w, tx))
        f_y = np.where(y_zero, 0.0, cost.waf(w, ty))
        penalty = cost.charged(np.asarray(ys), np.asarray(xs), f_x, d_trans, d_repeat, changed)
        g = f_y * d_run - penalty  # cost.gain with the changed flags made above
    given = {name: [getattr(pj, name) for pj in pjs] for name in ("waf_tflops", "transition_penalty",
                                                                   "transition_seconds", "gain")}
    waf, charged = _floats(given["waf_tflops"]), _floats(given["transition_penalty"])
    if waf is None or charged is None or not _isclose(waf, f_y).all() or not _isclose(charged, penalty).all():
        return None
    for name, want in (("transition_seconds", np.where(changed & ~x_zero, d_trans, 0.0)), ("gain", g)):
        values = given[name]
        at = [k for k, v in enumerate(values) if v is not None]
        if at:
            got = _floats([values[k] for k in at])
            if got is None or not _isclose(got, want[at]).all():
                return None
    if any(pj.placement_left_to is not None and pj.placement_left_to != job.placement_left_to
           or pj.hit is not None and pj.hit != hit for pj, job, hit in zip(pjs, jobs, hits)):
        return None
    f_x_list, f_y_list, g_list, changed_list = f_x.tolist(), f_y.tolist(), g.tolist(), changed.tolist()
    problems: list[str] = []
    for job, split, x, y, hit, fx, gk, ch in zip(jobs, views, xs, ys, hits, f_x_list, g_list, changed_list):
        _check_constraints(job, f"job {job.id!r}", state, split, x, y, hit, fx * d_run, gk, ch, problems.append)
    if problems:
        return None
    used_per_type: dict[str, int] = {}
    for t, y in zip(now_types, ys):
        used_per_type[t] = used_per_type.get(t, 0) + y
    total = total_waf = 0.0
    for gk, fy in zip(g_list, f_y_list):
        total += gk
        total_waf += fy
    gains = [gk if v is None else v for v, gk in zip(given["gain"], g_list)]
    facts = list(zip(pjs, map(JobFacts, ids, actions, xs, ys, hits, exits, changed_list, f_x_list, f_y_list,
                              d_trans_list, gains, views, prevs)))
    return total, total_waf, used_per_type, sum(changed_list), facts


class _Held:
    """A plan's placements held as arrays (:class:`unicron_plan.schema.placements.PlacementArrays`), read
    for the checks: each job's split, and whether all its nodes are in service and of one GPU type,
    found for every job at once (the same test as :func:`_in_service` on each job's nodes)."""

    def __init__(self, arrays, state):
        self.arrays = arrays
        self.splits = LazySplits(arrays)
        starts = arrays.starts
        lengths = np.diff(starts)
        self.lengths = lengths.tolist()
        self.ends = self.splits.ends
        ids = state.node_ids()
        if arrays.names is ids:
            pos = arrays.node
        else:  # the nodes' positions in this cluster (-1: not one of its nodes)
            order = state.order
            pos = np.fromiter(map(order.get, arrays.names, repeat(-1)), dtype=np.int64, count=len(arrays.names))
            pos = pos[arrays.node]
        self.pos, self.state, self.order = pos, state, state.order
        nodes = state.node_arrays()
        code = nodes.group_type[nodes.group]  # each node's GPU type (its index in nodes.types)
        if state.drained_nodes:
            code = code.copy()
            code[np.fromiter(map(state.order.__getitem__, state.drained_nodes), dtype=np.int64)] = -1
        entry = np.where(pos >= 0, code[np.maximum(pos, 0)], -1)  # -1: unknown or drained
        # each job's one GPU type when every node of it is in service and of that type, else -1
        # (-2: the job has no node)
        one = np.full(len(lengths), -2, dtype=np.int64)
        full = np.flatnonzero(lengths > 0)
        if len(full):
            low = np.minimum.reduceat(entry, starts[full])
            high = np.maximum.reduceat(entry, starts[full])
            one[full] = np.where(low == high, low, -1)
        self.one = one.tolist()
        self.types = {t: k for k, t in enumerate(nodes.types)}
        self.placed: list[int] = []  # the jobs found in service, for the per-node totals

    def _as_made(self) -> bool:
        """Whether the entries are one job's after another's from the first (as the planner makes them)."""
        starts = self.arrays.starts
        return (len(starts) > 0 and int(starts[0]) == 0 and int(starts[-1]) == len(self.pos)
                and min(self.lengths, default=0) >= 0)

    def distinct(self) -> "bool | None":
        """Whether no job lists a node twice, found on the positions (None when the entries are not as made
        or some node is not the cluster's: then read off the splits)."""
        pos = self.pos
        if not self._as_made() or (len(pos) and int(pos.min()) < 0):
            return None
        if len(pos) < 2:
            return True
        starts = self.arrays.starts
        # each job's positions ascending (as placed): distinct; else sorted by job, then position
        rising = np.empty(len(pos), dtype=bool)
        rising[0] = True
        np.greater(pos[1:], pos[:-1], out=rising[1:])
        rising[starts[:-1][np.asarray(self.lengths) > 0]] = True
        if rising.all():
            return True
        size = len(self.order) + 1
        if len(self.lengths) * size >= 2**62:
            return None
        key = np.sort(np.repeat(np.arange(len(self.lengths), dtype=np.int64), self.lengths) * size + pos)
        return not bool((key[1:] == key[:-1]).any())

    def sums(self) -> "list[int] | None":
        """Each job's GPUs over its entries (None when the entries are not as made or the sums could
        overflow int64: then summed off the splits)."""
        gpus = self.arrays.gpus
        if not self._as_made() or (len(gpus) and int(np.abs(gpus).max()) * len(gpus) >= 2**62):
            return None
        total = np.zeros(len(gpus) + 1, dtype=np.int64)
        np.cumsum(gpus, out=total[1:])
        starts = self.arrays.starts
        return (total[starts[1:]] - total[starts[:-1]]).tolist()

    def in_service(self, k: int, gtype: str) -> bool:
        """Whether job ``k``'s nodes are all in service and of GPU type ``gtype`` (true for no node)."""
        one = self.one[k]
        return one == -2 or (one >= 0 and one == self.types.get(gtype, -3))

    def overfilled(self, nodes: list[str], gpus: list[int]) -> list[tuple[str, int]]:
        """:func:`_overfilled` over the entries of the jobs found in service and the known ``nodes``
        (with their ``gpus``) of the other jobs checked."""
        starts = self.arrays.starts
        jobs = np.asarray(self.placed, dtype=np.int64)
        lengths = starts[jobs + 1] - starts[jobs]
        # the entries of those jobs: each job's start repeated over its entries, plus 0, 1, 2...
        first = np.repeat(starts[jobs] - np.cumsum(lengths) + lengths, lengths)
        take = first + np.arange(int(lengths.sum()), dtype=np.int64)
        at, used = self.pos[take], self.arrays.gpus[take]
        if nodes:
            at = np.concatenate([at, np.fromiter(map(self.order.__getitem__, nodes), dtype=np.int64, count=len(nodes))])
            used = np.concatenate([used, np.asarray(gpus, dtype=np.int64)])
        self.used = node_totals(at, used, len(self.order))
        return _overfilled_at(self.state, self.used)


def _check_reasons(plan: Plan, facts, state, d_run: float, bad, always: bool = False, used=None):
    """Each job's ``reason``, ``why`` and ``keep_cost`` and the plan's ``changes``, where given, recomputed
    (:func:`unicron_plan.plan.reasons.explain_jobs` on the facts derived here); returns the recomputed
    reasons (None when the plan gives none and ``always`` is false)."""
    if not always and plan.changes is None and all(pj.reason is None for pj, _ in facts):
        return None
    recomputed = explain_jobs([f for _, f in facts], state.nodes, d_run, used)
    for (pj, f), r in zip(facts, recomputed):
        where = f"job {f.id!r}"
        if pj.reason is not None and pj.reason != r.reason:
            bad(f"{where}: reason {pj.reason!r}, expected {r.reason!r}")
        if pj.why is not None and pj.why != r.why:
            bad(f"{where}: why {pj.why!r}, expected {r.why!r}")
        if pj.reason is not None:
            if (pj.keep_cost is None) != (r.keep_cost is None):
                bad(f"{where}: keep_cost {pj.keep_cost}, expected {r.keep_cost} "
                    f"({'keeping it is feasible' if r.keep_cost is not None else 'keeping it is not feasible'})")
            elif r.keep_cost is not None and not math.isclose(
                    pj.keep_cost, r.keep_cost, rel_tol=REL_TOL, abs_tol=1e-6 + REL_TOL * abs(f.gain)):
                bad(f"{where}: keep_cost {pj.keep_cost} != recomputed {r.keep_cost}")
    if plan.changes is not None and len(facts) == len(state.hit):  # (a job not checked is reported above)
        counted = changes_of([r.reason for r in recomputed])
        if plan.changes != counted:
            bad(f"changes: {plan.changes} != recomputed {counted}")
    return recomputed


def _overfilled(state, nodes: list[str], gpus: list[int]) -> list[tuple[str, int]]:
    """(node, GPUs placed there) for every node given more than its healthy GPUs, in cluster order;
    ``nodes`` and ``gpus``: every share of every job (known nodes only)."""
    order = state.order
    if not gpus or max(gpus) * len(gpus) < 2**52:  # the sums are exact in float64
        at = np.fromiter(map(order.__getitem__, nodes), dtype=np.int64, count=len(nodes))
        used = np.bincount(at, weights=np.asarray(gpus, dtype=np.float64).reshape(len(gpus)), minlength=len(order))
        return _overfilled_at(state, used)
    totals: dict[str, int] = {}
    for nid, g in zip(nodes, gpus):
        totals[nid] = totals.get(nid, 0) + g
    return [(nid, u) for nid, u in sorted(totals.items(), key=lambda t: order[t[0]])
            if u > state.nodes[nid].healthy_after]


def _overfilled_at(state, used: np.ndarray) -> list[tuple[str, int]]:
    """:func:`_overfilled` of the GPUs ``used`` per node position."""
    over = np.flatnonzero(used > state.healthy_after_array()).tolist()
    if not over:
        return []
    ids = state.node_ids()
    return [(ids[k], int(used[k])) for k in over]


def _rack_of(state, nid: str):
    """The node's rack (a node without a rack is a rack of its own), read off the node itself:
    the cluster graph would import networkx, 0.25 s of CPU, to answer it."""
    rack = state.nodes[nid].rack
    return ("rack", rack) if rack is not None else ("node", nid)


def _check_constraints(job, where, state, split, x, y, hit, stay_gain, g, changed, bad) -> None:
    """The node-level and churn constraints (docs/solvers.md), each checked on the plan itself."""
    if job.tp is not None:
        for nid, n in split.items():
            if n % job.tp:
                bad(f"{where}: {n} GPUs on node {nid!r} is not a multiple of tp {job.tp}")
    if job.pinned and job.id not in state.exiting:
        previous = state.previous.get(job.id, {})
        if y != x or split != previous:
            bad(f"{where}: pinned, but the plan changes its allocation {previous} to {split}")
    if job.max_nodes is not None and len(split) > job.max_nodes:
        bad(f"{where}: runs on {len(split)} nodes, max_nodes is {job.max_nodes}")
    if job.same_rack and len({_rack_of(state, nid) for nid in split if nid in state.nodes}) > 1:
        bad(f"{where}: same_rack, but its nodes span racks")
    if job.min_gain_fraction is not None and not hit and changed:
        need = (1.0 + job.min_gain_fraction) * stay_gain
        if g < need and not _close(g, need):
            bad(f"{where}: changes with term {g}, below the hysteresis threshold {need} "
                f"(min_gain_fraction {job.min_gain_fraction})")
