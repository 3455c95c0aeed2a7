"""Contingency plans: the optimal plan for the failure of every single node (or rack), ahead of time.

A node failure changes (a) one GPU type's capacity, (b) which jobs are hit
(their gain vectors lose the "unchanged" option, and they are exempt from
hysteresis) and, with ``cost.node_mtbf_hours``, (c) D_run, which moves the
hysteresis thresholds too. Nodes that hold the same jobs and lose the same
GPUs are one equivalence class: failures are grouped by (D_run, hit jobs,
capacities) and each group is solved once, on each job's options under the
failure's own rules (:func:`_job_options`). Per D_run and GPU type:

* a group that hits no job of the type is the type's DP (``dp.solve_options``,
  with all of its pruning) at the group's capacity, once per capacity;
* groups that hit jobs share prefix tables P_k (DP over the type's jobs
  0..k-1) and suffix tables S_k (jobs k..m-1) over capacities 0..C, built only
  as far as some group needs them; a group hitting jobs a..b (in type order)
  folds the span a..b with the hit jobs' new gains onto P_a, and meets S_{b+1}
  at the failure's capacity C':

    opt = max_c  (P_a (+) span)[c] + S_{b+1}[C' - c]          (O(C) per group)

  The tables are built on Lagrangian cores (:func:`_cores`): options that no
  group's optimum can use, by the bound gap of every group, are dropped first,
  and in bounded memory (:func:`_solve_on_tables`): every table's choices are
  kept for the trace-back, but of the values only the current prefix table and
  every sqrt(m)-th suffix table (a block of suffix tables is rebuilt when a
  group needs one).

For the whole answers of the service, :func:`node_classes` groups the nodes
whose failures are one up to swapping the two nodes (same type, size, failed
GPUs and jobs with their GPUs), and :func:`relabel_plan` turns one node's plan
into another's of its class.

A pinned job on a failed node, or jobs that may not suspend no longer fitting,
make the failure infeasible: it is listed under ``infeasible`` with the reason.
An instance with constraints the DP cannot express has each failure solved on
its own (``auto``). The tests compare every entry with a fresh solve.

Output (``DIR/contingency.json``, canonical JSON): the base instance's name and
fingerprint, ``failures`` mapping each failure key (``node:ID`` or
``rack:ID``) to its failed nodes, objective and plan id, ``infeasible`` mapping
the keys that admit no plan to their failed nodes and reason, and ``plans``
mapping plan ids to the optimal counts per job (identical count vectors are
stored once). Placement is deterministic and fast, so it is redone when a plan
is used: :func:`lookup` (``unicron-plan solve --contingency DIR``) finds the
counts, :func:`proven_optimal` re-checks them on the instance as it is, and
:func:`unicron_plan.api.solve` places and validates them.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unicron_plan.core import constraints, cost
from unicron_plan.core.problem import JobTerms, build_problem
from unicron_plan.errors import InfeasibleError, InvalidInstanceError, SolverUnavailableError
from unicron_plan.schema import Instance

INDEX_FILE = "contingency.json"
DIRECT_GROUPS = 4  # per D_run and GPU type, at most this many groups that hit jobs are solved by the DP each


def fingerprint(instance: Instance) -> str:
    """sha256 of the instance without its name, event and reference: what a plan depends on.

    The instance is encoded by pydantic's compiled serializer (fields in the schema's order, tables
    in their own order): for tables of half a million counts, sorting every key in Python's encoder
    took seconds."""
    text = instance.model_dump_json(exclude={"name", "event", "reference"}, exclude_none=True)
    return hashlib.sha256(text.encode()).hexdigest()


def failure_key(failed_nodes: list[str], instance: Instance, by_id: dict | None = None) -> str | None:
    """The contingency key of a set of failed nodes: ``node:ID``, ``rack:ID``, or None.

    ``by_id``: the instance's nodes by id, when the caller keeps them; then nodes of several racks
    (or none) are told apart without a walk over the cluster."""
    nodes = sorted(set(failed_nodes))
    if len(nodes) == 1:
        return f"node:{nodes[0]}"
    if by_id is not None:
        found = [by_id.get(n) for n in nodes]
        if any(n is None or n.rack is None for n in found) or len({n.rack for n in found}) != 1:
            return None
    racks = defaultdict(list)
    for n in instance.cluster.nodes:
        if n.rack is not None:
            racks[n.rack].append(n.id)
    for rack, members in racks.items():
        if sorted(members) == nodes:
            return f"rack:{rack}"
    return None


def candidate_failures(instance: Instance, racks: bool = False) -> list[tuple[str, list[str]]]:
    """(key, failed nodes) for every single node, and every rack when ``racks``."""
    out = [(f"node:{n.id}", [n.id]) for n in instance.cluster.nodes]
    if racks:
        members = defaultdict(list)
        for n in instance.cluster.nodes:
            if n.rack is not None:
                members[n.rack].append(n.id)
        out += [(f"rack:{r}", ids) for r, ids in members.items()]
    return out


def node_classes(instance: Instance, previous: dict[str, dict[str, int]] | None = None) -> list[list[str]]:
    """The nodes whose single failures are one up to renaming, largest class first, each in cluster order.

    Two nodes are in one class when they have the same GPU type, GPUs and failed GPUs and hold the
    same jobs with the same GPUs each (``previous``: every job's GPUs per node, as
    ``core.problem.prepare`` keeps them; derived here when not given) and, when a job asks for
    ``same_rack``, sit in the same rack. Swapping two such nodes maps the instance onto itself but
    for node order and racks, which no objective term or constraint reads except ``same_rack``: the
    failure of one has as its optimal plans those of the other's failure with the two nodes swapped
    (:func:`relabel_plan`).
    """
    if previous is None:
        from unicron_plan.core.problem import prepare

        previous = prepare(instance).previous
    held: dict[str, list] = defaultdict(list)
    for jid, split in previous.items():
        for nid, g in split.items():
            if g > 0:
                held[nid].append((jid, g))
    racks = any(j.same_rack for j in instance.jobs)
    classes: dict[tuple, list[str]] = {}
    for n in instance.cluster.nodes:
        key = (n.gpu_type, n.gpus, tuple(sorted(n.failed_gpus)), n.rack if racks else None,
               tuple(sorted(held.get(n.id, ()))))
        classes.setdefault(key, []).append(n.id)
    return sorted(classes.values(), key=len, reverse=True)  # stable: ties stay in cluster order


def relabel_plan(plan: dict, a: str, b: str, order: dict[str, int]) -> dict:
    """The plan (JSON form) of the failure of ``a`` made the plan of ``b``'s failure, ``a`` and ``b``
    being of one :func:`node_classes` class: the two nodes swapped wherever a node is named, lists
    kept in cluster order (``order``: node id -> position). Changes ``plan`` in place and returns it."""
    from unicron_plan.plan.reasons import relabel_hit

    swap = {a: b, b: a}
    for job in plan["jobs"]:
        if a in job["nodes"] or b in job["nodes"]:
            job["nodes"] = sorted((swap.get(n, n) for n in job["nodes"]), key=order.__getitem__)
            job["placement"] = sorted(({**p, "node": swap.get(p["node"], p["node"])} for p in job["placement"]),
                                      key=lambda p: order[p["node"]])
        if job.get("reason") == "hit" and "why" in job:
            job["why"] = relabel_hit(job["why"], a, b)
    if plan.get("drained_nodes"):
        plan["drained_nodes"] = sorted((swap.get(n, n) for n in plan["drained_nodes"]), key=order.__getitem__)
    options = plan.get("solver", {}).get("options") or {}
    if options.get("contingency_key") == f"node:{a}":
        options["contingency_key"] = f"node:{b}"
    return plan


def _fold_full(V: np.ndarray, y: np.ndarray, g: np.ndarray, cap: int, want_choice: bool = True):
    """Max-plus fold of one job onto V (at-most semantics, plateau beyond its end), up to cap.

    The DP's windowed fold (compiled when built) over the whole range 0..min(cap, len(V) - 1 + y[-1]).
    """
    from unicron_plan.solvers.dp import _fold

    n_old = len(V) - 1
    n_new = min(cap, n_old + int(y[-1]))
    return _fold(V[: n_new + 1], 0, min(n_old, n_new), y, g, 0, n_new, want_choice)


@dataclass
class _TypeTables:
    """The choices of the prefix and suffix DP tables of one GPU type at one D_run (their values are
    kept only where a group meets them: :func:`_solve_on_tables`)."""

    jobs: list  # JobTerms of this type, in order
    opts: list  # Pareto (counts, gains) per job, not hit
    prefix_choice: list  # prefix_choice[k]: job k-1's option index in the table over jobs 0..k-1
    suffix_choice: list  # suffix_choice[k]: job k's option index in the table over jobs k..m-1


def _solve_on_tables(jobs, opts, cap: int, work: list, block: int | None = None) -> dict:
    """{group key: (value, counts)} of the groups of ``work`` (key, hit indices, capacity, hit options)
    by prefix tables P_a and suffix tables S_{b+1} (module docstring), in bounded memory.

    Every table's choices are kept (one small integer per capacity, for the trace-back), but values
    only where needed: the prefix tables are swept upwards and each group is solved when its P_a is
    the current one; of the suffix tables (built downwards first) every ``block``-th is kept, and a
    block of them is rebuilt from the one above when a group needs one of it. So at 1,024 jobs the
    values held are about 3 sqrt(1,024) tables instead of 2,048, for one more fold per suffix table.
    """
    m = len(jobs)
    block = block or max(16, int(np.sqrt(m)))
    prefix_to = max(w[1][0] for w in work)
    suffix_from = min(w[1][-1] for w in work) + 1
    suffix_choice = [None] * (m + 1)
    kept = {m: np.zeros(1)}
    V = kept[m]
    for k in range(m - 1, suffix_from - 1, -1):
        V, suffix_choice[k] = _fold_full(V, *opts[k], cap)
        if k % block == 0 or k == suffix_from:
            kept[k] = V
    del V
    near: dict[int, np.ndarray] = {}  # the suffix tables of the block last rebuilt

    def suffix(k: int) -> np.ndarray:
        if k in kept:
            return kept[k]
        if k not in near:
            near.clear()
            top = min(m, (k // block + 1) * block)
            W = kept[top]
            for i in range(top - 1, max(k // block * block, suffix_from) - 1, -1):
                W, _ = _fold_full(W, *opts[i], cap, want_choice=False)
                near[i] = W
        return near[k]

    starts: dict[int, list] = defaultdict(list)
    for w in work:
        starts[w[1][0]].append(w)
    t = _TypeTables(jobs, opts, [None] * (prefix_to + 1), suffix_choice)
    out = {}
    P = np.zeros(1)
    for k in range(prefix_to + 1):
        for key, hit_idx, c, hit_opts in sorted(starts.get(k, ()), key=lambda w: w[1][-1]):
            out[key] = _solve_group(t, P, suffix(hit_idx[-1] + 1), hit_idx, c, hit_opts)
        if k < prefix_to:
            P, t.prefix_choice[k + 1] = _fold_full(P, *opts[k], cap)
    return out


def _back_prefix(t: _TypeTables, k: int, c: int, out: dict) -> None:
    """Counts of jobs 0..k-1 from the prefix table over them at capacity c."""
    for i in range(k, 0, -1):
        c = min(c, len(t.prefix_choice[i]) - 1)
        y = int(t.opts[i - 1][0][t.prefix_choice[i][c]])
        out[t.jobs[i - 1].id] = y
        c -= y


def _back_suffix(t: _TypeTables, k: int, c: int, out: dict) -> None:
    """Counts of jobs k..m-1 from the suffix table over them at capacity c."""
    for i in range(k, len(t.jobs)):
        c = min(c, len(t.suffix_choice[i]) - 1)
        y = int(t.opts[i][0][t.suffix_choice[i][c]])
        out[t.jobs[i].id] = y
        c -= y


def _solve_group(t: _TypeTables, P: np.ndarray, S: np.ndarray, hit_idx: list[int], cap: int,
                 hit_opts: dict) -> tuple[float, dict]:
    """Optimum of one GPU type when jobs ``hit_idx`` (type order, a..b) are hit and capacity is ``cap``,
    from P = P_a and S = S_{b+1}."""
    out: dict[str, int] = {}
    a, b = min(hit_idx), max(hit_idx)
    V = P[: cap + 1]
    span = []
    for i in range(a, b + 1):
        y, g = hit_opts[i] if i in hit_opts else t.opts[i]
        V, ch = _fold_full(V, y, g, cap)
        span.append((V, ch, y))
    c = np.arange(cap + 1)
    total = V[np.minimum(c, len(V) - 1)] + S[np.minimum(cap - c, len(S) - 1)]
    best = int(np.argmax(total))
    value = float(total[best])
    if not np.isfinite(value):  # no plan fits: nothing to trace back
        return -np.inf, out
    _back_suffix(t, b + 1, cap - best, out)
    cc = best
    for off in range(len(span) - 1, -1, -1):
        Vi, ch, y = span[off]
        cc = min(cc, len(Vi) - 1)
        yk = int(y[ch[cc]])
        out[t.jobs[a + off].id] = yk
        cc -= yk
    _back_prefix(t, a, cc, out)
    return value, out


def _cores(opts: list, work: list, capacity: int) -> tuple[list, list]:
    """Each job's options that can be in an optimal plan of any group of ``work``, and ``work`` with
    each group's hit options cut the same way.

    With one multiplier lam >= 0 (the LP's at full capacity), a group's optimum is at most
    UB = lam C' + sum_i max_y (G_i(y) - lam y), and a count's slack max_y (G_i - lam y) - (G_i(y) - lam y)
    summed over a plan is at most UB - value. So with LB a feasible plan's value, every optimal plan of
    the group uses only counts of slack <= UB - LB. LB: the no-failure optimum with the hit jobs' gains,
    shrinking the one job that loses least to fit the group's capacity. A group with no such plan keeps
    every option (no cut).
    """
    from unicron_plan.solvers.dp import REL_TOL, lp_multiplier, solve_options

    if not opts or not work:
        return opts, work
    lam = lp_multiplier(opts, capacity)
    red = [g - lam * y for y, g in opts]
    h = np.array([float(r.max()) for r in red])
    base, _ = solve_options(opts, capacity)
    at = [int(np.searchsorted(y, c)) for (y, _), c in zip(opts, base)]
    scale = lam * capacity + sum(float(np.abs(g).max()) for _, g in opts) + 1.0
    tol = REL_TOL * scale
    gaps, cut_work = [], []
    for key, hit_idx, cap, hit_opts in work:
        counts = list(base)
        values = [float(g[k]) for (_, g), k in zip(opts, at)]
        ub = lam * cap + float(h.sum())
        lb = 0.0
        for i, (y, g) in hit_opts.items():
            k = int(np.searchsorted(y, base[i], side="right")) - 1  # best hit option within the base count
            if k < 0:
                lb = -np.inf
            else:
                counts[i], values[i] = int(y[k]), float(g[k])
            ub += float((g - lam * y).max()) - h[i]
        lb += max(_shrunk_value(opts, hit_opts, counts, values, cap),
                  _refilled_value(base, values, hit_opts, cap))
        gap = ub - lb + tol
        gaps.append(gap)
        cut = {i: _within(y, g, lam, gap) for i, (y, g) in hit_opts.items()}
        cut_work.append((key, hit_idx, cap, cut))
    widest = max(gaps)
    if not np.isfinite(widest):
        return opts, work
    return [_within(y, g, lam, widest) for y, g in opts], cut_work


def _within(y: np.ndarray, g: np.ndarray, lam: float, gap: float) -> tuple[np.ndarray, np.ndarray]:
    """The options whose slack (max of G - lam y, less their own) is at most ``gap``."""
    r = g - lam * y
    keep = (float(r.max()) - r) <= gap
    return y[keep], g[keep]


def _refilled_value(base: list, values: list, hit_opts: dict, cap: int) -> float:
    """Value of the base counts with the hit jobs re-chosen one by one in the GPUs the others leave
    (-inf when the others alone exceed ``cap``)."""
    counts = list(base)
    values = list(values)
    for i in hit_opts:
        counts[i], values[i] = 0, 0.0
    free = cap - sum(counts)
    if free < 0:
        return -np.inf
    for i, (y, g) in hit_opts.items():
        k = int(np.searchsorted(y, free, side="right")) - 1
        if k < 0:
            return -np.inf
        free -= int(y[k])
        values[i] = float(g[k])
    return float(sum(values))


def _shrunk_value(opts, hit_opts, counts: list, values: list, cap: int) -> float:
    """Value of ``counts`` (with ``values``) made to fit ``cap`` by shrinking the one job that loses least;
    -inf when no single job can absorb the excess."""
    excess = sum(counts) - cap
    total = float(sum(values))
    if excess <= 0:
        return total
    best_loss = np.inf
    for i, (y, g) in enumerate(opts):
        y, g = hit_opts.get(i, (y, g))
        k = int(np.searchsorted(y, counts[i] - excess, side="right")) - 1
        if k >= 0:
            best_loss = min(best_loss, values[i] - float(g[k]))
    return total - best_loss


def _job_options(job: JobTerms, schema_job, counts: np.ndarray, f: np.ndarray, d_run: float,
                 hit: bool, d_trans: float) -> tuple[np.ndarray, np.ndarray]:
    """Pareto (counts, gains) of one job at ``d_run`` and charged D_trans ``d_trans``, hit or not, under
    its count rules (tp, pinned, and hysteresis for an unhit job only): what ``tabulate`` gives it in
    that failure."""
    from unicron_plan.solvers.dp import pareto_arrays

    gains = np.asarray(cost.gain(f, counts, job.x, job.f_x, hit, d_run, d_trans), dtype=float)
    keep = constraints.allowed_mask(schema_job, counts, gains, job.x, hit, job.f_x, d_run)
    return pareto_arrays(counts[keep], gains[keep])


def _raw_counts(prepared, job: JobTerms, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """(every count of the job's table that fits ``capacity``, 0 first; F at them)."""
    flat = prepared.flat
    lo, hi = int(flat.off[job.index]), int(flat.off[job.index + 1])
    counts, f = flat.counts[lo:hi], flat.f[lo:hi]
    n = int(np.searchsorted(counts, capacity, side="right"))
    return counts[:n], f[:n]


def build_contingency(instance: Instance, racks: bool = False, progress: bool = False) -> dict:
    """Optimal counts for every single-node (and, with ``racks``, rack) failure of ``instance``.

    The instance's own event, if any, is ignored: contingencies are planned
    from the state before any failure. Every stored plan is the optimum of its
    failure under the instance's full rules; a failure that admits no plan is
    listed under ``infeasible`` with the reason. Returns the JSON-ready index.
    """
    from unicron_plan.core.problem import prepare

    start = time.perf_counter()
    base = instance.model_copy(update={"event": None})
    prepared = prepare(base)
    problem = build_problem(base, prepared)
    if problem.alternatives:  # mixed fleets: solved over types and counts
        return _mixed_contingency(base, racks, start)
    candidates = candidate_failures(base, racks)
    bar = _progress(progress, len(candidates))
    results: dict[str, tuple] = {}  # failure key -> (failed nodes, value, counts) or (failed, None, reason)
    stats: dict = {}
    if constraints.dp_limitations(problem):
        unsolved = _solve_each(base, prepared, candidates, results, bar)
        stats.update(groups=len(candidates), method="full solve per failure", not_stored=unsolved)
    else:
        _solve_groups(base, prepared, problem, candidates, results, bar, stats)
    bar.close()
    failures, infeasible, plans, plan_ids = {}, {}, {}, {}
    ids = [j.id for j in problem.jobs]
    seen: dict[int, tuple] = {}  # id of a counts dict (one per group) -> its vector
    for fkey, (failed, value, counts) in results.items():
        if value is None:
            infeasible[fkey] = {"failed_nodes": sorted(failed), "reason": counts}
            continue
        vector = seen.get(id(counts))
        if vector is None:
            vector = seen[id(counts)] = tuple(map(counts.__getitem__, ids))
        if vector not in plan_ids:
            plan_ids[vector] = f"p{len(plan_ids):05d}"
            plans[plan_ids[vector]] = {"counts": {j.id: counts[j.id] for j in problem.jobs}}
        failures[fkey] = {"failed_nodes": sorted(failed), "objective": value, "plan": plan_ids[vector]}
    stats.update(failures=len(failures), infeasible=len(infeasible), plans=len(plans),
                 wall_seconds=time.perf_counter() - start)
    return _with_changes(base, {
        "schema_version": "1", "kind": "contingency", "instance": base.name,
        "fingerprint": fingerprint(base), "racks": racks,
        "failures": failures, "infeasible": infeasible, "plans": plans, "stats": stats,
    })


def _with_changes(base: Instance, index: dict) -> dict:
    """``index`` with each failure's ``changes`` (hit, chosen, unchanged jobs: :mod:`unicron_plan.plan.reasons`)."""
    from unicron_plan.plan.reasons import failure_changes

    for entry in index["failures"].values():
        stored = index["plans"][entry["plan"]]
        entry["changes"] = failure_changes(base, entry["failed_nodes"], stored["counts"], stored.get("types"))
    return index


def _with_failure(base: Instance, failed: list[str]) -> Instance:
    from unicron_plan.schema.instance import Event

    return base.model_copy(update={"event": Event(kind="failure", failed_nodes=list(failed))})


def _solve_each(base: Instance, prepared, candidates: list, results: dict, bar) -> dict[str, str]:
    """Constraints the DP cannot express (node-level tp, max_nodes, same_rack, max_changed_jobs):
    each failure is solved on its own by the exact solver ``auto`` picks for it. Returns the failures
    left out of the index, with why (no IP backend installed, no proven optimum): they are solved
    when they happen."""
    from unicron_plan.plan.assemble import to_plan
    from unicron_plan.solvers import SolverOptions, get_solver

    left_out: dict[str, str] = {}
    for key, failed in candidates:
        bar.advance()
        try:
            p = build_problem(_with_failure(base, failed), prepared)
            raw = get_solver("auto" if constraints.dp_limitations(p) else "dp")(p, SolverOptions())
        except InfeasibleError as exc:
            results[key] = (failed, None, str(exc))
            continue
        except SolverUnavailableError as exc:
            left_out[key] = str(exc)
            continue
        if raw.solution != "optimal":
            left_out[key] = f"the solver stopped with a {raw.solution} plan"
            continue
        value = to_plan(p, raw, "contingency", 0.0).objective  # of the placed plan: a move pays its transition
        results[key] = (failed, float(value), {k: int(c) for k, c in raw.counts.items()})
    return left_out


def _solve_groups(base: Instance, prepared, problem, candidates: list, results: dict, bar, stats: dict) -> None:
    """The separable case: failures grouped by what their optimum depends on, each group solved once.

    A group is (D_run, hit jobs, capacity per type): nodes that hold the same jobs and lose the same
    GPUs fall in one class. Per D_run and GPU type, a group that hits no job of the type is the DP
    over the type's options at the group's capacity (solved once per capacity); groups that hit jobs
    share prefix and suffix tables over Lagrangian cores, built only as far as some group needs them.
    """
    state = problem.state
    in_service = state.nodes_in_service()
    node_of = state.nodes
    jobs_on: dict[str, list[str]] = defaultdict(list)
    for j in base.jobs:
        for n in j.current.nodes:
            jobs_on[n].append(j.id)
    by_type: dict[str, list] = defaultdict(list)
    for j in problem.jobs:
        by_type[j.gpu_type].append(j)
    pos = {j.id: (j.gpu_type, k) for t, js in by_type.items() for k, j in enumerate(js)}
    # a pinned job keeps its previous split: a failure of a node of that split admits no plan (precheck)
    pinned_on: dict[str, list[str]] = defaultdict(list)
    for j in problem.jobs:
        if j.pinned and j.x > 0:
            for nid, g in state.previous[j.id].items():
                if g > 0:
                    pinned_on[nid].append(j.id)

    groups: dict[tuple, list[tuple[str, list[str]]]] = defaultdict(list)
    h_after: dict[float, int] = {}  # D_run -> nodes in service after the failure (one-to-one)
    for key, failed in candidates:
        lost = defaultdict(int)
        out_of_service = 0
        for n in failed:
            h = node_of[n]
            if not h.drained:
                lost[h.gpu_type] += h.healthy_after
                out_of_service += h.healthy_after > 0
        d_run = cost.d_run_seconds(base, in_service - out_of_service)
        h_after[d_run] = in_service - out_of_service
        hit = frozenset(jid for n in failed for jid in jobs_on.get(n, ()))
        caps = tuple(sorted((t, problem.capacity[t] - lost.get(t, 0)) for t in problem.capacity))
        held = tuple(sorted({jid for n in failed for jid in pinned_on.get(n, ())}))
        groups[(d_run, hit, caps, held)].append((key, failed))

    answers: dict[tuple, tuple] = {}  # group -> (value, counts) or (None, reason)
    by_d_run: dict[float, list] = defaultdict(list)
    for key in sorted(groups, key=lambda g: (g[0], sorted(g[1]), g[2], g[3])):
        if key[3]:
            answers[key] = (None, f"job {key[3][0]!r} is pinned but a node of its allocation failed")
        else:
            by_d_run[key[0]].append(key)
            answers[key] = (0.0, {})
    kept = total = tables = 0
    for d_run, keys in by_d_run.items():
        for t, js in by_type.items():
            capacity = problem.capacity[t]
            raw = [_raw_counts(prepared, j, capacity) for j in js]
            # each job's D_trans as charged after a failure that leaves h_after[d_run] nodes in service
            # (its horizon scale, docs/model.md "Planning horizon"; the base problem has no event)
            dt = [cost.job_transition_seconds(base, base.jobs[j.index], state.previous.get(j.id, {}),
                                              h_after[d_run], event_kind="failure") for j in js]
            opts = [_job_options(j, base.jobs[j.index], *raw[i], d_run, False, dt[i]) for i, j in enumerate(js)]
            hit_cache: dict[int, tuple] = {}
            plain: dict[int, list] = defaultdict(list)  # capacity -> groups that hit no job of this type
            work = []  # (group key, hit indices, capacity, hit options)
            for key in keys:
                cap = dict(key[2])[t]
                hit_idx = sorted(pos[jid][1] for jid in key[1] if pos[jid][0] == t)
                if not hit_idx:
                    plain[cap].append(key)
                    continue
                for i in hit_idx:
                    if i not in hit_cache:
                        hit_cache[i] = _job_options(js[i], base.jobs[js[i].index], *raw[i], d_run, True, dt[i])
                work.append((key, hit_idx, cap, {i: hit_cache[i] for i in hit_idx}))
            total += sum(len(y) for y, _ in opts)
            for cap, members in plain.items():
                part = _solve_direct(js, t, opts, {}, cap)
                for key in members:
                    answers[key] = _add(answers[key], part)
            if len(work) <= DIRECT_GROUPS:  # too few groups to pay for the tables: the DP per group
                for key, hit_idx, cap, hit_opts in work:
                    answers[key] = _add(answers[key], _solve_direct(js, t, opts, hit_opts, cap))
                continue
            cores, work = _cores(opts, work, capacity)
            kept += sum(len(y) for y, _ in cores)
            tables += 1
            solved = _solve_on_tables(js, cores, capacity, work)
            for key, hit_idx, cap, hit_opts in work:
                v, part = solved[key]
                answers[key] = _add(answers[key], (v, part) if np.isfinite(v) else (None, _no_fit(js, t, cap)))
    for key, members in groups.items():
        value, counts = answers[key]
        for fkey, failed in members:
            results[fkey] = (failed, value, counts)
            bar.advance()
    stats.update(groups=len(groups), d_run_values=len(by_d_run), options=total, options_in_cores=kept,
                 tables=tables, method="groups")


def _solve_direct(js: list, gpu_type: str, opts: list, hit_opts: dict, cap: int) -> tuple:
    """(value, counts) of one GPU type by its DP with the hit jobs' options, or (None, reason)."""
    from unicron_plan.solvers.dp import solve_options

    options = [hit_opts.get(i, o) for i, o in enumerate(opts)]
    if any(len(y) == 0 for y, _ in options) or sum(int(y[0]) for y, _ in options) > cap:
        return None, _no_fit(js, gpu_type, cap)
    counts, value = solve_options(options, cap)
    return value, {j.id: int(c) for j, c in zip(js, counts)}


def _add(acc: tuple, part: tuple) -> tuple:
    """A group's answer so far plus one GPU type's: values add, counts merge; infeasible wins."""
    if acc[0] is None:
        return acc
    if part[0] is None:
        return part
    return acc[0] + part[0], {**acc[1], **part[1]}


def _no_fit(js: list, gpu_type: str, cap: int) -> str:
    return (f"the {gpu_type} jobs that may not suspend (pinned, hysteresis) do not fit in the "
            f"{cap} GPUs left")


def _mixed_contingency(base: Instance, racks: bool, start: float) -> dict:
    """Mixed fleets: every failure solved exactly over GPU types and counts
    (:func:`unicron_plan.solvers.mixed.solve_types`); a stored plan also lists the jobs that
    change type (``types``). A failure that leaves no feasible plan is listed in ``infeasible``."""
    from unicron_plan.core.problem import build_problem, prepare
    from unicron_plan.errors import InfeasibleError
    from unicron_plan.schema.instance import Event
    from unicron_plan.solvers.mixed import solve_types

    prepared = prepare(base)
    # One solve per class of nodes whose failures are one problem up to renaming (node_classes): the
    # index stores counts, types and objectives, which renaming does not change.
    representative = {nid: cls[0] for cls in node_classes(base, prepared.previous) for nid in cls}
    # A node down as a whole cannot fail again (such an event is bad input): no key names it.
    down = {n.id for n in base.cluster.nodes if len(n.failed_gpus) == n.gpus}
    failures, infeasible, plans, plan_ids, solved = {}, {}, {}, {}, 0
    for key, failed in candidate_failures(base, racks):
        if down.intersection(failed):
            continue
        if key.startswith("node:") and representative[failed[0]] != failed[0]:
            same = f"node:{representative[failed[0]]}"  # solved already: classes list cluster order
            if same in failures:
                failures[key] = {**failures[same], "failed_nodes": sorted(failed)}
            else:
                infeasible[key] = {**infeasible[same], "failed_nodes": sorted(failed)}
            continue
        solved += 1
        try:  # building checks the constraints too (a pinned job on a failed node: infeasible)
            problem = build_problem(
                base.model_copy(update={"event": Event(kind="failure", failed_nodes=list(failed))}), prepared)
            counts, types, value, _, _, _ = solve_types(problem)
        except InfeasibleError as exc:
            infeasible[key] = {"failed_nodes": sorted(failed), "reason": str(exc)}
            continue
        moved = {j.id: types[j.id] for j in problem.jobs if types[j.id] != j.gpu_type}
        vector = (tuple(counts[j.id] for j in problem.jobs), tuple(sorted(moved.items())))
        if vector not in plan_ids:
            plan_ids[vector] = f"p{len(plan_ids):05d}"
            plans[plan_ids[vector]] = {"counts": {j.id: counts[j.id] for j in problem.jobs},
                                       **({"types": moved} if moved else {})}
        failures[key] = {"failed_nodes": sorted(failed), "objective": value, "plan": plan_ids[vector]}
    return _with_changes(base, {
        "schema_version": "1", "kind": "contingency", "instance": base.name,
        "fingerprint": fingerprint(base), "racks": racks, "failures": failures, "infeasible": infeasible,
        "plans": plans,
        "stats": {"failures": len(failures), "infeasible": len(infeasible), "plans": len(plans),
                  "groups": solved, "method": "full solve per class of failures",
                  "mixed_types": True,
                  "wall_seconds": time.perf_counter() - start},
    })


class _progress:
    """A rich progress bar on stderr when asked for (rich is imported only then)."""

    def __init__(self, enabled: bool, total: int):
        self.p = None
        if enabled:
            from rich.progress import Progress

            self.p = Progress(transient=True)
            self.p.start()
            self.task = self.p.add_task("contingency groups", total=total)

    def advance(self) -> None:
        if self.p:
            self.p.advance(self.task)

    def close(self) -> None:
        if self.p:
            self.p.stop()


def write_contingency(index: dict, out_dir: str | Path) -> Path:
    """Write the index atomically as canonical JSON to ``out_dir/contingency.json``."""
    from unicron_plan.io import dumps, write_atomic

    path = Path(out_dir) / INDEX_FILE
    write_atomic(path, dumps(index))
    return path


def read_contingency(source: str | Path) -> dict:
    """Read a contingency index from a directory (or the index file itself)."""
    from unicron_plan.io import read_json

    p = Path(source)
    path = p / INDEX_FILE if p.is_dir() else p
    data = read_json(path)
    if not isinstance(data, dict) or data.get("kind") != "contingency":
        raise InvalidInstanceError(str(p), "not a contingency index (kind != 'contingency')")
    try:
        return check_index(data, "index")
    except InvalidInstanceError as exc:  # named as "FILE: plans.p00001.counts.job", not "DIR.plans..."
        field = exc.field[len("index."):] if exc.field.startswith("index.") else exc.field
        raise InvalidInstanceError(f"{path}: {field}", exc.message) from None


_CHECKED: list = []  # [the last index dict that passed, its shape]: kept alive, so its id stays its own


def _shape(data: dict) -> tuple:
    return tuple((k, id(v), len(v) if isinstance(v, dict) else None) for k, v in data.items())


def check_index(data, source: str = "contingency") -> dict:
    """``data`` checked against the index schema (schema.contingency); bad input names the field.

    The dict checked last is not checked again while its top level is unchanged (a caller that plans
    many events with one index, as the service does); what a stored plan must satisfy is checked
    on every use anyway (``api.solve``)."""
    from unicron_plan.io import parse_model
    from unicron_plan.schema.contingency import ContingencyIndex

    if isinstance(data, dict) and _CHECKED and _CHECKED[0] is data and _CHECKED[1] == _shape(data):
        return data
    parse_model(ContingencyIndex, data, prefix=source)
    if isinstance(data, dict):
        _CHECKED[:] = [data, _shape(data)]
    return data


def lookup(instance: Instance, index: dict,
           instance_fingerprint: str | None = None) -> tuple[str, dict[str, int] | None, float | None] | None:
    """(key, counts, objective) of the precomputed plan for the instance's event, (key, None, None)
    when the index lists that failure as infeasible, or None.

    Matches only a failure event of whole nodes on the same cluster and jobs
    (same fingerprint; ``instance_fingerprint`` is the instance's when the caller
    already computed it).
    """
    ev = instance.event
    if ev is None or ev.kind != "failure" or ev.failed_gpus or not ev.failed_nodes:
        return None
    key = failure_key(ev.failed_nodes, instance)
    if key is None:
        return None
    entry = index.get("failures", {}).get(key)
    if entry is None and key not in index.get("infeasible", {}):
        return None
    if index.get("fingerprint") != (instance_fingerprint or fingerprint(instance)):
        return None
    if entry is None:
        return key, None, None
    plan = index.get("plans", {}).get(entry.get("plan"))  # (re-checked: the dict may have changed since)
    counts = plan.get("counts") if isinstance(plan, dict) else None
    if not isinstance(counts, dict) or not all(type(c) is int and c >= 0 for c in counts.values()) \
            or type(entry.get("objective")) not in (int, float):
        return None
    return key, dict(counts), float(entry["objective"])


def proven_optimal(problem, counts: dict[str, int]) -> bool:
    """Whether no plan of ``problem`` is worth more than ``counts`` (to the DP's tolerance): the check a
    stored plan passes before it is used.

    Per GPU type, the stored counts' value v is compared with the Lagrangian bound; when it is below,
    one DP pass over the options whose bound reaches v (reduced-cost fixing at the stored value, the
    DP's cheapest exact pass) finds whether a better plan exists. With constraints the DP cannot express,
    only the first test applies (against the DP relaxation): a plan it cannot prove is not used.
    """
    import math

    from unicron_plan.solvers.dp import REL_TOL, _attempt, _flatten, lp_multiplier, pareto_all

    relaxed = bool(constraints.dp_limitations(problem))
    for gpu_type, capacity in problem.capacity.items():
        jobs = problem.jobs_of_type(gpu_type)
        if not jobs:
            continue
        value = 0.0
        for j in jobs:
            at = int(j.counts.searchsorted(counts[j.id]))
            if at >= len(j.counts) or int(j.counts[at]) != counts[j.id]:
                return False
            value += float(j.gains[at])
        options = pareto_all(jobs)
        if sum(int(y[-1]) for y, _ in options) <= capacity:  # every job at its best count
            best = math.fsum(float(g[-1]) for _, g in options)
            scale = abs(best) + 1.0
            if value < best - REL_TOL * scale:
                return False
            continue
        lam = lp_multiplier(options, capacity)
        flat, red_max = _flatten(options, lam)
        ub = lam * capacity + math.fsum(red_max)
        scale = lam * capacity + sum(float(np.abs(g).max()) for _, g in options) + 1.0
        tol = REL_TOL * scale
        if value >= ub - tol:
            continue
        if relaxed:
            return False
        found = _attempt(options, red_max, lam, capacity, value + tol, {}, flat=flat)
        if found is not None and found[1] > value + tol:
            return False
    return True
