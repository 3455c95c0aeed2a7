"""The contingency solver: the optimal plan of every single failure of a cluster (a node, a rack), ahead
of time. :mod:`unicron_plan.plan.contingency` stores its answers as the contingency index.

:func:`solve` takes the base problem (the instance without an event) and the failures, and answers each
with its optimal counts and value, or the reason it admits no plan.

A node failure changes (a) one GPU type's capacity, (b) which jobs are hit (their gain vectors lose the
"unchanged" option, and they are exempt from hysteresis) and, with ``cost.node_mtbf_hours``, (c) D_run,
which moves the hysteresis thresholds too. Nodes that hold the same jobs and lose the same GPUs are one
equivalence class: in the separable case (no constraint beyond the DP's) failures are grouped by
(D_run, hit jobs, capacities) and each group is solved once, on each job's options under the failure's
own rules (:func:`_job_options`). Per D_run and GPU type:

* a group that hits no job of the type is the type's DP (``dp.solve_options``, with all of its pruning)
  at the group's capacity, once per capacity;
* groups that hit jobs are solved by the structure of the failure, not by the jobs' order
  (:func:`_cores`): on prefix and suffix tables shared by the groups, folding each group's span
  (its first to its last hit job) between them, or by the DP on their own, whichever is less
  work; the DP's work does not depend on where the hit jobs sit (docs/solvers.md, "Contingency").

Constraints the DP cannot express (node-level tp, max_nodes, same_rack, max_changed_jobs), and mixed
fleets (GPU type and count per job), have each failure solved on its own by the exact solver ``auto``
picks for it, under the full rules; failures one up to renaming two nodes (:func:`node_classes`) are
solved once. A pinned job on a failed node, or jobs that may not suspend no longer fitting, make the
failure infeasible: it is answered with the reason.

:func:`proven_optimal` is the check a stored plan passes before it is used.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from unicron_plan.core import constraints, cost
from unicron_plan.core.problem import JobTerms, build_problem
from unicron_plan.errors import InfeasibleError, SolverUnavailableError
from unicron_plan.schema import Instance
from unicron_plan.solvers import SolverOptions, dp

DIRECT_GROUPS = 4  # per D_run and GPU type, at most this many groups that hit jobs are solved by the DP each
ALONE_COST_SCALE = 1.0  # a group is solved on its own when its span costs more than this x the DP's pass (_cores)


def node_classes(instance: Instance, previous: dict[str, dict[str, int]] | None = None) -> list[list[str]]:
    """The nodes whose single failures are one up to renaming, largest class first, each in cluster order.

    Two nodes are in one class when they have the same GPU type, GPUs and failed GPUs and hold the
    same jobs with the same GPUs each (``previous``: every job's GPUs per node, as
    ``core.problem.prepare`` keeps them; derived here when not given; a node a job lists without
    GPUs of it counts as holding 0 of them, for its failure hits the job) and, when a job asks for
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
    for job in instance.jobs:  # a node the job lists but holds no GPU of: its failure still hits the job
        split = previous.get(job.id, {})
        for nid in job.current.nodes:
            if split.get(nid, 0) <= 0:
                held[nid].append((job.id, 0))
    racks = any(j.same_rack for j in instance.jobs)
    classes: dict[tuple, list[str]] = {}
    for n in instance.cluster.nodes:
        key = (n.gpu_type, n.gpus, tuple(sorted(n.failed_gpus)), n.rack if racks else None,
               tuple(sorted(held.get(n.id, ()))))
        classes.setdefault(key, []).append(n.id)
    return sorted(classes.values(), key=len, reverse=True)  # stable: ties stay in cluster order


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
        V, suffix_choice[k] = dp.fold(V, *opts[k], cap)
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
                W, _ = dp.fold(W, *opts[i], cap, want_choice=False)
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
            P, t.prefix_choice[k + 1] = dp.fold(P, *opts[k], cap)
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
        V, ch = dp.fold(V, y, g, cap)
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


def _cores(opts: list, work: list, capacity: int) -> tuple[list, list, list]:
    """(each job's options that can be in an optimal plan of a group solved on the tables, those groups
    with their hit options cut the same way, the groups cheaper to solve by the DP on their own).

    With one multiplier lam >= 0 (the LP's at full capacity), a group's optimum is at most
    UB = lam C' + sum_i max_y (G_i(y) - lam y), and a count's slack max_y (G_i - lam y) - (G_i(y) - lam y)
    summed over a plan is at most UB - value. So with LB a feasible plan's value, every optimal plan of
    the group uses only counts of slack <= UB - LB. LB: the no-failure optimum with the hit jobs' gains,
    shrinking the one job that loses least to fit the group's capacity.

    The work of a group on the tables is its span (the jobs from its first hit job to its last, in type
    order) folded over the capacity; that of the DP on its own is about the options its final pass
    keeps at no failure (the same for every group, wherever its hit jobs sit). A group goes where its
    work is smaller, counted in options: on the tables its span's options within its own gap (every
    option when it has no LB), on its own the no-failure DP's. The groups on their own do not widen
    the tables' cores.
    """
    if not opts or not work:
        return opts, work, []
    lam = dp.lp_multiplier(opts, capacity)
    red = [g - lam * y for y, g in opts]
    h = np.array([float(r.max()) for r in red])
    slack = [np.sort(hi - r) for hi, r in zip(h, red)]  # per job, ascending: options within a gap by bisection
    stats: dict = {}
    base, _ = dp.solve_options(opts, capacity, stats)
    direct_cost = stats.get("kept", len(opts))
    at = [int(np.searchsorted(y, c)) for (y, _), c in zip(opts, base)]
    scale = lam * capacity + sum(float(np.abs(g).max()) for _, g in opts) + 1.0
    tol = dp.REL_TOL * scale
    gaps, tabled, direct = [], [], []
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
        span = range(hit_idx[0], hit_idx[-1] + 1)
        if np.isfinite(gap):
            span_cost = sum(int(np.searchsorted(slack[i], gap, side="right")) for i in span)
        else:
            span_cost = sum(len(slack[i]) for i in span)
        if span_cost > ALONE_COST_SCALE * direct_cost:
            direct.append((key, hit_idx, cap, hit_opts))
            continue
        gaps.append(gap)
        cut = {i: _within(y, g, lam, gap) for i, (y, g) in hit_opts.items()}
        tabled.append((key, hit_idx, cap, cut))
    widest = max(gaps, default=np.inf)
    return ([_within(y, g, lam, widest) for y, g in opts] if np.isfinite(widest) else opts), tabled, direct


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
                 hit: bool, d_trans: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Pareto (counts, gains) of one job at ``d_run`` and charged (D_trans, repeat) ``d_trans``
    (:func:`cost.job_transition_terms`), hit or not, under its count rules (tp, pinned, and hysteresis
    for an unhit job only): what ``tabulate`` gives it in that failure."""
    gains = np.asarray(cost.gain(f, counts, job.x, job.f_x, hit, d_run, d_trans[0], d_repeat=d_trans[1]),
                       dtype=float)
    keep = constraints.allowed_mask(schema_job, counts, gains, job.x, hit, job.f_x, d_run)
    return dp.pareto_arrays(counts[keep], gains[keep])


def _raw_counts(prepared, job: JobTerms, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """(every count of the job's table that fits ``capacity``, 0 first; F at them)."""
    flat = prepared.flat
    lo, hi = int(flat.off[job.index]), int(flat.off[job.index + 1])
    counts, f = flat.counts[lo:hi], flat.f[lo:hi]
    n = int(np.searchsorted(counts, capacity, side="right"))
    return counts[:n], f[:n]


#: A failure's answer: (failed nodes, value, counts, GPU types of the jobs that change type or None), or
#: (failed nodes, None, the reason it admits no plan, None).
Answer = tuple


def solve(problem, failures: list[tuple[str, list[str]]], prepared, options: SolverOptions | None = None,
          evaluate: Optional[Callable] = None, advance: Optional[Callable[[], None]] = None) -> tuple[dict, dict]:
    """({failure key: :data:`Answer`}, stats) of every failure (key, failed nodes) of the base ``problem``
    (built from ``prepared``, :func:`unicron_plan.core.problem.prepare` of the instance without event).

    ``evaluate(failure problem, RawSolution) -> value``: the value of a per-failure solution once placed
    (a node-level plan may move a job and pay its transition); by default its objective. ``advance`` is
    called once per failure (a progress bar). ``stats["not_stored"]``: failures left unanswered, with
    why (no IP backend installed, no proven optimum): they are solved when they happen."""
    advance = advance or (lambda: None)
    base = problem.instance
    results: dict = {}
    stats: dict = {}
    # Mixed fleets by the instance's tables, not the base problem's alternatives: a job whose moves are
    # all filtered by its hysteresis before a failure may move once the failure hits it.
    if prepared.type_tables or problem.alternatives or constraints.dp_limitations(problem):
        left_out = _solve_each(base, prepared, failures, results, advance, options, evaluate, stats)
        stats.update(method="full solve per class of failures", not_stored=left_out)
    else:
        _solve_groups(base, prepared, problem, failures, results, advance, stats)
    return results, stats


def _with_failure(base: Instance, failed: list[str]) -> Instance:
    from unicron_plan.schema.instance import Event

    return base.model_copy(update={"event": Event(kind="failure", failed_nodes=list(failed))})


def _solve_each(base: Instance, prepared, failures: list, results: dict, advance, options, evaluate,
                stats: dict) -> dict[str, str]:
    """Each failure solved on its own by the exact solver ``auto`` picks for it (the mixed solver on a
    mixed fleet), under every rule; a node's failure that is another's up to renaming (:func:`node_classes`)
    takes that one's answer. Returns the failures left unanswered, with why."""
    from unicron_plan.solvers import get_solver

    representative = {nid: cls[0] for cls in node_classes(base, prepared.previous) for nid in cls}
    left_out: dict[str, str] = {}
    stats["groups"] = 0
    for key, failed in failures:
        advance()
        if key.startswith("node:") and representative[failed[0]] != failed[0]:
            same = f"node:{representative[failed[0]]}"  # classes list cluster order: answered already
            if same in results:
                _, value, counts, types = results[same]
                results[key] = (failed, value, counts, types)
            elif same in left_out:
                left_out[key] = left_out[same]
            continue
        stats["groups"] += 1
        try:
            p = build_problem(_with_failure(base, failed), prepared)
            raw = get_solver("auto")(p, options or SolverOptions())
        except InfeasibleError as exc:
            results[key] = (failed, None, str(exc), None)
            continue
        except SolverUnavailableError as exc:
            left_out[key] = str(exc)
            continue
        if raw.solution != "optimal":
            left_out[key] = f"the solver stopped with a {raw.solution} plan"
            continue
        value = evaluate(p, raw) if evaluate is not None else raw.objective
        moved = {j.id: raw.types[j.id] for j in p.jobs if raw.types and raw.types[j.id] != j.gpu_type} or None
        results[key] = (failed, float(value), {k: int(c) for k, c in raw.counts.items()}, moved)
    return left_out


def _solve_groups(base: Instance, prepared, problem, candidates: list, results: dict, advance, stats: dict) -> None:
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
    kept = total = tables = direct = 0
    for d_run, keys in by_d_run.items():
        for t, js in by_type.items():
            capacity = problem.capacity[t]
            raw = [_raw_counts(prepared, j, capacity) for j in js]
            # each job's D_trans as charged after a failure that leaves h_after[d_run] nodes in service
            # (its horizon scale, docs/model.md "Planning horizon"; the base problem has no event)
            dt = [cost.job_transition_terms(base, base.jobs[j.index], state.previous.get(j.id, {}),
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
            cores, work, alone = _cores(opts, work, capacity)
            for key, hit_idx, cap, hit_opts in alone:
                answers[key] = _add(answers[key], _solve_direct(js, t, opts, hit_opts, cap))
            direct += len(alone)
            if not work:
                continue
            kept += sum(len(y) for y, _ in cores)
            tables += 1
            solved = _solve_on_tables(js, cores, capacity, work)
            for key, hit_idx, cap, hit_opts in work:
                v, part = solved[key]
                answers[key] = _add(answers[key], (v, part) if np.isfinite(v) else (None, _no_fit(js, t, cap)))
    for key, members in groups.items():
        value, counts = answers[key]
        for fkey, failed in members:
            results[fkey] = (failed, value, counts, None)
            advance()
    stats.update(groups=len(groups), d_run_values=len(by_d_run), options=total, options_in_cores=kept,
                 tables=tables, groups_alone=direct, method="groups")


def _solve_direct(js: list, gpu_type: str, opts: list, hit_opts: dict, cap: int) -> tuple:
    """(value, counts) of one GPU type by its DP with the hit jobs' options, or (None, reason)."""
    options = [hit_opts.get(i, o) for i, o in enumerate(opts)]
    if any(len(y) == 0 for y, _ in options) or sum(int(y[0]) for y, _ in options) > cap:
        return None, _no_fit(js, gpu_type, cap)
    counts, value = dp.solve_options(options, cap)
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


def proven_optimal(problem, counts: dict[str, int], multipliers: dict[str, float] | None = None) -> bool:
    """Whether no plan of ``problem`` is worth more than ``counts`` (to the DP's tolerance): the check a
    stored plan passes before it is used.

    Per GPU type, first the certificates checked in one pass over the table entries
    (:func:`certified_optimal`: the Lagrangian bound at the index's stored multiplier and at one read off
    the counts, then a pass over the options a better plan could use); when they do not decide, the
    full proof: the stored counts' value against the Lagrangian bound of the Pareto options and, when
    below it, one pruned DP pass at the stored value looks for a better plan
    (:func:`unicron_plan.solvers.dp.can_beat`). With constraints the DP cannot express, only the bounds
    apply (those of the DP relaxation): a plan they cannot prove is not used.
    """
    search = not constraints.dp_limitations(problem)
    for gpu_type in problem.capacity:
        jobs = problem.jobs_of_type(gpu_type)
        if not jobs:
            continue
        verdict = certified_optimal(jobs, problem.capacity[gpu_type], counts,
                                    (multipliers or {}).get(gpu_type), search)
        if verdict is None:  # the certificates do not decide: the full proof
            value = 0.0
            for j in jobs:
                at = int(j.counts.searchsorted(counts[j.id]))
                if at >= len(j.counts) or int(j.counts[at]) != counts[j.id]:
                    return False
                value += float(j.gains[at])
            verdict = not dp.can_beat(dp.pareto_all(jobs), problem.capacity[gpu_type], value, search)
        if not verdict:
            return False
    return True


def certified_optimal(jobs: list[JobTerms], capacity: int, counts: dict[str, int],
                      multiplier: float | None = None, search: bool = True) -> bool | None:
    """True when ``counts`` of ``jobs`` (one GPU type, ``capacity`` GPUs) are proven optimal by a
    certificate checked in time linear in the table entries, False when they are not a plan of the
    jobs (a count not allowed, or more GPUs than ``capacity``), None when no certificate decides.

    Any multiplier lam >= 0 bounds every plan: with the counts' common step s and C' = s floor(C / s)
    (every plan uses a multiple of s GPUs), no plan is worth more than
    UB(lam) = lam C' + sum_i max_y (G_i(y) - lam y). The multiplier is only a candidate (the bound
    holds for any, so a wrong or edited one only fails to prove):

    * ``multiplier``, the index's (the LP multiplier of the failure-free problem, stored at build time);
    * the counts' own: the smallest lam >= 0 at which each job's chosen count maximises G_i(y) - lam y
      (their largest right-hand slope), which closes the bound whenever any multiplier does.

    When neither closes the bound and ``search``, a count whose slack at ``multiplier``,
    max_y (G_i - lam y) - (G_i(y) - lam y), exceeds UB - value can be in no better plan, so one pruned
    DP pass (:func:`unicron_plan.solvers.dp.can_beat`) over the remaining options decides, when they are
    few (usually a few per job)."""
    m = len(jobs)
    sizes = np.fromiter(map(len, (j.counts for j in jobs)), dtype=np.int64, count=m)
    if m == 0 or not sizes.all():
        return None
    y = np.concatenate([j.counts for j in jobs]).astype(np.int64, copy=False)
    g = np.concatenate([j.gains for j in jobs]).astype(np.float64, copy=False)
    off = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(sizes, out=off[1:])
    want = np.fromiter((counts[j.id] for j in jobs), dtype=np.int64, count=m)
    scale = int(max(int(y.max()), int(want.max()))) + 1
    base = np.arange(m, dtype=np.int64) * scale
    key = np.repeat(base, sizes) + y  # ascending: each job's counts ascend, jobs apart by scale
    at = np.minimum(np.searchsorted(key, base + want), len(key) - 1)
    if (want < 0).any() or (key[at] != base + want).any():
        return False
    step = int(np.gcd.reduce(y[:64]))  # the counts' gcd: that of the first few when it divides every count
    if step != 1 and (step == 0 or (y % step).any()):
        step = int(np.gcd.reduce(y))
    step = step or 1
    cap = capacity // step * step
    if int(want.sum()) > cap:
        return False
    chosen = g[at]
    value = math.fsum(chosen.tolist())
    width = float(np.maximum.reduceat(np.abs(g), off[:-1]).sum())

    def bound(lam: float) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(G - lam y per entry, its maximum per job, UB(lam), the tolerance at lam). A multiplier so large
        that lam y overflows gives a bound that is not a number, which proves nothing (no comparison holds)."""
        with np.errstate(over="ignore", invalid="ignore"):
            red = g - lam * y
        top = np.maximum.reduceat(red, off[:-1])
        return red, top, lam * cap + math.fsum(top.tolist()), dp.REL_TOL * (lam * cap + width + 1.0)

    stored = multiplier is not None and math.isfinite(multiplier) and multiplier >= 0
    if stored:
        red, top, ub, tol = bound(float(multiplier))
        if value >= ub - tol:
            return True
    dy = y - np.repeat(want, sizes)  # the counts' own multiplier: their largest right-hand slope
    slope = np.divide(g - np.repeat(chosen, sizes), dy, out=np.full(len(y), -np.inf), where=dy > 0)
    _, _, own_ub, own_tol = bound(max(float(slope.max()), 0.0))
    if value >= own_ub - own_tol:
        return True
    if not stored or not search:
        return None
    # A plan using an option of slack s is worth at most UB - s: beyond UB - value + tol, none beats the counts.
    keep = (np.repeat(top, sizes) - red) <= (ub - value) + tol
    kept = np.add.reduceat(keep.astype(np.int64), off[:-1])
    if not kept.all() or int(kept.sum()) > len(y) // 4:  # little cut: the full proof's Pareto options do better
        return None
    # Each job shifted to its smallest kept count (0 first, as the DP takes options): a better plan
    # beats the value less the shifts' within the capacity less theirs.
    first = np.flatnonzero(keep)[np.concatenate(([0], np.cumsum(kept)[:-1]))]
    room = cap - int(y[first].sum())
    if room < 0:
        return True  # no plan of the kept options fits: none beats the counts
    options = []
    for i in np.flatnonzero(kept > 1).tolist():
        a, b = int(off[i]), int(off[i + 1])
        k = keep[a:b]
        options.append(dp.pareto_arrays(y[a:b][k] - y[first[i]], g[a:b][k] - g[first[i]]))
    return True if not dp.can_beat(options, room, value - math.fsum(g[first].tolist()), True) else None
