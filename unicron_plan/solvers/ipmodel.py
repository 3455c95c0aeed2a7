"""The integer program, built once and independent of the backend that solves it.

As in OR-Tools, the model is data (integer variables with bounds, linear rows
with integer coefficients, a float objective to maximise) and never knows which
solver runs it; :mod:`unicron_plan.solvers.milp` (PuLP: HiGHS or CBC) and
:mod:`unicron_plan.solvers.cpsat` (OR-Tools CP-SAT) only translate it, call
their solver and hand the values back to :meth:`Formulation.extract`.
The mathematics is in docs/solvers.md. Two forms:

* count level (no node-level constraint): binaries z[i,k] (job i takes its k-th
  allowed count c_ik), sum_k z[i,k] = 1, per GPU type sum c_ik z[i,k] <= capacity,
  and, with ``max_changed_jobs``, sum of changed indicators <= K; counts are
  then placed by :mod:`unicron_plan.plan.placement`;
* node level (tp, max_nodes or same_rack present): in addition integer
  b[i,n] tp-groups of job i on node n, sum_n tp_i b[i,n] = sum_k c_ik z[i,k],
  sum_i tp_i b[i,n] <= healthy_n, binaries u[i,n] (uses node n) for max_nodes,
  r[i,R] (uses rack R) for same_rack, the stay rule
  tp_i b[i,n] >= prev_in (z[i,k_x] - w[i]) for unhit jobs, where the binary
  w[i] <= z[i,k_x] marks a move at the same count, which pays the transition
  (objective -F_i(x_i) D_trans_i on w[i]), and pinned splits fixed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from unicron_plan.core.cluster import rack_key
from unicron_plan.core.constraints import dp_limitations, eligible_nodes, hysteresis_threshold, stays
from unicron_plan.core.problem import Problem
from unicron_plan.solvers import check_deadline


@dataclass
class Row:
    """A linear row lo <= sum coef * var <= hi (None: unbounded side); coefficients are integers."""

    coefs: dict[int, int]
    lo: int | None
    hi: int | None


@dataclass
class Formulation:
    """Backend-neutral integer program of a :class:`Problem` (maximise ``objective``)."""

    problem: Problem
    node_level: bool
    names: list[str] = field(default_factory=list)
    lb: list[int] = field(default_factory=list)
    ub: list[int] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    objective: dict[int, float] = field(default_factory=dict)
    z: dict[tuple[int, int], int] = field(default_factory=dict)  # (job index, count index) -> var
    b: dict[tuple[int, str], int] = field(default_factory=dict)  # (job index, node id) -> var
    w: dict[int, int] = field(default_factory=dict)  # job index -> var: moved at its own count
    hint: dict[int, int] = field(default_factory=dict)  # a feasible solution (keep or suspend)
    #: A feasible solution from an exact solver (the DP's or the mixed solver's plan), as values:
    #: engines start from it, and extraction never returns a plan worse than it.
    start: list[int] | None = None
    _csr: tuple | None = field(default=None, repr=False)
    _zjoined: tuple | None = field(default=None, repr=False)

    def var(self, name: str, lb: int, ub: int) -> int:
        """Add an integer variable lb..ub and return its index."""
        self.names.append(name)
        self.lb.append(int(lb))
        self.ub.append(int(ub))
        return len(self.names) - 1

    def row(self, coefs: dict[int, int], lo: int | None = None, hi: int | None = None) -> None:
        """Add the row lo <= sum coefs <= hi."""
        self.rows.append(Row({v: int(c) for v, c in coefs.items() if c}, lo, hi))
        self._csr = None

    def counts(self, values) -> dict[str, int]:
        """The count of every job from variable values (the first z with the largest value wins)."""
        jobs = self.problem.jobs
        if not len(jobs):
            return {}
        if self._zjoined is None or self._zjoined[4] != len(self.z):
            sizes = np.fromiter((len(j.counts) for j in jobs), dtype=np.int64, count=len(jobs))
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            cols = self._z_columns(sizes, starts)
            allowed = np.concatenate([j.counts for j in jobs])
            self._zjoined = (cols, sizes, starts, allowed, len(self.z))
        cols, sizes, starts, allowed, _ = self._zjoined
        vals = np.asarray(values, dtype=np.float64)[cols]
        top = np.repeat(np.maximum.reduceat(vals, starts), sizes)
        at = np.flatnonzero(vals == top)
        first = at[np.unique(np.searchsorted(starts, at, side="right") - 1, return_index=True)[1]]
        return {j.id: int(c) for j, c in zip(jobs, allowed[first].tolist())}

    def _z_columns(self, sizes: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The z variable of every (job, count), jobs in order and counts in order, read from
        :attr:`z` in one vectorised pass (a lookup per pair takes over a second at 1.9 M pairs).
        Raises KeyError when a pair has no variable."""
        import itertools

        jobs, n = self.problem.jobs, len(self.z)
        keys = np.fromiter(itertools.chain.from_iterable(self.z), dtype=np.int64, count=2 * n).reshape(n, 2)
        found = np.fromiter(self.z.values(), dtype=np.int64, count=n)
        index = np.fromiter((j.index for j in jobs), dtype=np.int64, count=len(jobs))
        position = np.full(int(max(index.max(initial=-1), keys[:, 0].max(initial=-1))) + 1, -1, dtype=np.int64)
        position[index] = np.arange(len(jobs))
        at = position[keys[:, 0]]
        wanted = (at >= 0) & (keys[:, 1] >= 0) & (keys[:, 1] < sizes[np.maximum(at, 0)])
        cols = np.full(int(sizes.sum()), -1, dtype=np.int64)
        cols[starts[at[wanted]] + keys[wanted, 1]] = found[wanted]
        if np.any(cols < 0):
            raise KeyError("a (job, count) pair has no z variable")
        return cols

    def placement(self, values) -> dict[str, dict[str, int]] | None:
        """{job: {node: GPUs}} at node level, in cluster order; None at count level."""
        if not self.node_level:
            return None
        keys = list(self.b)
        cols = np.fromiter(self.b.values(), dtype=np.int64, count=len(keys))
        groups = np.rint(np.asarray(values, dtype=np.float64)[cols]).astype(np.int64)
        rank = {nid: k for k, nid in enumerate(self.problem.state.nodes)}
        out: dict[str, dict[str, int]] = {j.id: {} for j in self.problem.jobs}
        for at in np.flatnonzero(groups > 0).tolist():
            i, nid = keys[at]
            j = self.problem.jobs[i]
            out[j.id][nid] = int(groups[at]) * j.tp
        return {jid: dict(sorted(s.items(), key=lambda kv: rank[kv[0]])) for jid, s in out.items()}

    def matrix(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The rows as arrays, built once: (row starts, column indices, coefficients, row lower
        bounds, row upper bounds), rowwise (CSR); a missing side is -inf / +inf."""
        if self._csr is None:
            sizes = np.fromiter((len(r.coefs) for r in self.rows), dtype=np.int64, count=len(self.rows))
            start = np.zeros(len(self.rows) + 1, dtype=np.int64)
            np.cumsum(sizes, out=start[1:])
            index = np.fromiter((v for r in self.rows for v in r.coefs), dtype=np.int64, count=int(start[-1]))
            value = np.fromiter((c for r in self.rows for c in r.coefs.values()), dtype=np.float64,
                                count=int(start[-1]))
            lo = np.array([-np.inf if r.lo is None else r.lo for r in self.rows], dtype=np.float64)
            hi = np.array([np.inf if r.hi is None else r.hi for r in self.rows], dtype=np.float64)
            self._csr = (start, index, value, lo, hi)
        return self._csr

    def feasible(self, values) -> bool:
        """Whether integer ``values`` satisfy every bound and row (used to vet a fallback)."""
        vals = np.rint(np.asarray(values, dtype=np.float64))
        if len(vals) != len(self.names) or np.any(vals < np.asarray(self.lb)) or np.any(vals > np.asarray(self.ub)):
            return False
        start, index, value, lo, hi = self.matrix()
        if not len(self.rows):
            return True
        sums = np.zeros(len(self.rows))
        nonempty = start[:-1] < start[1:]
        if len(index):
            sums[nonempty] = np.add.reduceat(value * vals[index], start[:-1][nonempty])
        return bool(np.all(sums >= lo) and np.all(sums <= hi))

    def hint_values(self) -> list[int]:
        """The hint as a full value vector."""
        out = [0] * len(self.names)
        for v, val in self.hint.items():
            out[v] = val
        return out

    def start_values(self) -> list[int]:
        """The values an engine starts from: :attr:`start` when set, else the hint."""
        return self.start if self.start is not None else self.hint_values()

    def stats(self) -> dict[str, int]:
        """Size of the model, for SolverInfo.options."""
        return {"variables": len(self.names), "rows": len(self.rows)}


def solution_values(model: Formulation, counts: dict[str, int],
                    placement: dict[str, dict[str, int]] | None = None) -> list[int] | None:
    """The values of ``model`` for a plan (counts and, at node level, its placement): the node and
    rack indicators set where the plan uses them, a move at the same count where it leaves the
    previous split. None when a count is not allowed or a node-level plan has no placement; the
    caller checks :meth:`Formulation.feasible`."""
    problem = model.problem
    values = [0] * len(model.names)
    for j in problem.jobs:
        at = np.flatnonzero(j.counts == counts[j.id])
        if not len(at):
            return None
        values[model.z[(j.index, int(at[0]))]] = 1
    if not model.node_level:
        return values
    if placement is None:
        return None
    for (i, nid), v in model.b.items():
        j = problem.jobs[i]
        values[v] = placement.get(j.id, {}).get(nid, 0) // j.tp
    for r in model.rows:  # indicator rows b - h * ind <= 0 (node use, rack use)
        if r.lo is None and r.hi == 0 and len(r.coefs) == 2:
            (v1, c1), (v2, c2) = r.coefs.items()
            b, ind = (v1, v2) if c2 < 0 < c1 else (v2, v1)
            if model.names[ind][:2] in ("u_", "r_") and values[b] > 0:
                values[ind] = 1
    previous = problem.state.previous
    for i, w in model.w.items():
        j = problem.jobs[i]
        if counts[j.id] == j.x and any(placement.get(j.id, {}).get(nid, 0) < p for nid, p in previous[j.id].items()):
            values[w] = 1
    return values


def extract_cpu_seconds(model: Formulation) -> float:
    """CPU seconds the work after a solver run on ``model`` may take (reading the values back,
    checking them against every row, the counts and the placement): about twice what it took
    at 8,192-16,384 GPUs (0.08 s for 161,916 variables and 359,045 nonzeros)."""
    return 0.005 + 6e-7 * len(model.names) + 2e-7 * len(model.matrix()[1])


def needs_node_level(problem: Problem) -> bool:
    """Whether any node-level constraint (tp, max_nodes, same_rack) binds."""
    return any(not s.startswith("max_changed_jobs") for s in dp_limitations(problem))


def keep_or_suspend(problem: Problem) -> tuple[dict[str, int], dict[str, dict[str, int]] | None] | None:
    """The plan every backend falls back to, without building a model: unhit and pinned jobs keep
    their count (and, at node level, their split), hit jobs suspend; the same plan as
    :meth:`Formulation.hint_values`. None when some job can do neither."""
    counts: dict[str, int] = {}
    for j in problem.jobs:
        keep = (not j.hit or j.pinned) and bool(np.any(j.counts == j.x))
        if keep:
            counts[j.id] = int(j.x)
        elif int(j.counts[0]) == 0:
            counts[j.id] = 0
        else:
            return None
    if not needs_node_level(problem):
        return counts, None
    previous = problem.state.previous
    placement: dict[str, dict[str, int]] = {}
    for j in problem.jobs:
        split = {nid: g // j.tp * j.tp for nid, g in previous.get(j.id, {}).items() if g >= j.tp} \
            if counts[j.id] else {}
        if sum(split.values()) != counts[j.id]:
            return None
        placement[j.id] = split
    return counts, placement


def build(problem: Problem, node_level: bool | None = None, deadline: float | None = None) -> Formulation:
    """Build the integer program of ``problem`` (node level when a node-level constraint binds).

    Raises :class:`unicron_plan.solvers.DeadlineReached` when ``deadline`` passes on the way."""
    if node_level is None:
        node_level = needs_node_level(problem)
    m = Formulation(problem, node_level)
    x_index: dict[int, int | None] = {}
    for j in problem.jobs:
        check_deadline(deadline)
        pick = {}
        for k, (c, g) in enumerate(zip(j.counts.tolist(), j.gains.tolist())):
            v = m.var(f"z_{j.index}_{k}", 0, 1)
            m.z[(j.index, k)] = v
            m.objective[v] = float(g)
            pick[v] = 1
        m.row(pick, 1, 1)
        hits = [k for k, c in enumerate(j.counts.tolist()) if c == j.x]
        x_index[j.index] = hits[0] if hits else None
        # Hint: unhit and pinned jobs keep their count, hit jobs suspend.
        keep = (not j.hit or j.pinned) and x_index[j.index] is not None
        k_hint = x_index[j.index] if keep else (0 if j.counts[0] == 0 else None)
        if k_hint is not None:
            m.hint[m.z[(j.index, k_hint)]] = 1
    if not node_level:
        for gpu_type, cap in problem.capacity.items():
            coefs = {m.z[(j.index, k)]: int(c) for j in problem.jobs_of_type(gpu_type)
                     for k, c in enumerate(j.counts.tolist()) if c}
            if coefs:
                m.row(coefs, None, cap)
    else:
        _node_rows(m, problem, x_index, deadline)
    if problem.max_changed_jobs is not None:
        # changed_i = 1 - z[i, k_x] for unhit jobs (1 for hit ones, and when x is not allowed).
        # Exiting jobs are never changed (cost.is_changed).
        fixed = sum(1 for j in problem.jobs if not j.exiting and (j.hit or x_index[j.index] is None))
        unhit = [j for j in problem.jobs if not j.exiting and not j.hit and x_index[j.index] is not None]
        coefs = {m.z[(j.index, x_index[j.index])]: -1 for j in unhit}
        coefs.update({m.w[j.index]: 1 for j in unhit if j.index in m.w})  # a move is a change
        m.row(coefs, None, problem.max_changed_jobs - fixed - len(unhit))
    return m


def moves_allowed(j) -> bool:
    """Whether an unhit job may move at its own count: always, unless hysteresis forbids the
    (charged) move, which it does whenever the move's term is below its threshold."""
    if j.min_gain_fraction is None:
        return True
    return j.gain_of(j.x, moved=True) >= hysteresis_threshold(j.f_x, j.d_run, j.min_gain_fraction)


def _node_rows(m: Formulation, problem: Problem, x_index: dict[int, int | None], deadline: float | None) -> None:
    state = problem.state
    per_node: dict[str, dict[int, int]] = {}
    for j in problem.jobs:
        check_deadline(deadline)
        nodes = eligible_nodes(problem, j)
        previous = state.previous.get(j.id, {})
        keeps_hint = m.hint.get(m.z[(j.index, x_index[j.index])], 0) if x_index[j.index] is not None else 0
        total = {}
        for nid in nodes:
            h = state.nodes[nid].healthy_after
            lo = hi = None
            if j.pinned:
                lo = hi = previous.get(nid, 0) // j.tp
            v = m.var(f"b_{j.index}_{nid}", lo if lo is not None else 0, hi if hi is not None else h // j.tp)
            m.b[(j.index, nid)] = v
            total[v] = j.tp
            per_node.setdefault(nid, {})[v] = j.tp
            if keeps_hint and j.x > 0:
                m.hint[v] = previous.get(nid, 0) // j.tp
        m.row(total | {m.z[(j.index, k)]: -int(c) for k, c in enumerate(j.counts.tolist()) if c}, 0, 0)
        if stays(j) and x_index[j.index] is not None:
            zx = m.z[(j.index, x_index[j.index])]
            w = None
            if not j.pinned and moves_allowed(j):
                w = m.w[j.index] = m.var(f"w_{j.index}", 0, 1)
                m.row({w: 1, zx: -1}, None, 0)
                m.objective[w] = -float(j.f_x * j.d_trans)
            for nid, p in previous.items():
                m.row({m.b[(j.index, nid)]: j.tp, zx: -p} | ({w: p} if w is not None else {}), 0, None)
        if j.max_nodes is not None and j.max_nodes < len(nodes):
            use = {}
            for nid in nodes:
                u = m.var(f"u_{j.index}_{nid}", 0, 1)
                use[u] = 1
                h = state.nodes[nid].healthy_after // j.tp
                m.row({m.b[(j.index, nid)]: 1, u: -h}, None, 0)
                if m.hint.get(m.b[(j.index, nid)], 0) > 0:
                    m.hint[u] = 1
            m.row(use, None, j.max_nodes)
        racks: dict = {}
        for nid in nodes:
            racks.setdefault(rack_key(nid, state.nodes[nid].rack), []).append(nid)
        if j.same_rack and len(racks) > 1:
            pick = {}
            for k, (rack, members) in enumerate(racks.items()):
                r = m.var(f"r_{j.index}_{k}", 0, 1)
                pick[r] = 1
                for nid in members:
                    h = state.nodes[nid].healthy_after // j.tp
                    m.row({m.b[(j.index, nid)]: 1, r: -h}, None, 0)
                if any(m.hint.get(m.b[(j.index, nid)], 0) > 0 for nid in members):
                    m.hint[r] = 1
            m.row(pick, None, 1)
    for nid, coefs in per_node.items():
        m.row(coefs, None, state.nodes[nid].healthy_after)


def build_placement(problem: Problem, counts: dict[str, int], moved: set[str] | frozenset = frozenset(),
                    deadline: float | None = None) -> Formulation:
    """Phase 2 of the node-level backends: counts fixed, place them moving as few GPUs as possible.

    Only the jobs in ``moved`` (which already pay for a move) may leave their previous split.

    Same rows as :func:`build` with every job's count fixed; new integer k[i,n] <= prev_in,
    k[i,n] <= tp_i b[i,n] (GPUs job i keeps on node n), and the objective

        maximise  sum_i (y_i + 1) * sum_n k[i,n]  +  sum_i sum_{n in racks_i} tp_i b[i,n]

    (retained GPUs first, lexicographically, then GPUs in the job's previous racks).
    The objective terms are integers, so CP-SAT's scaling is exact here.
    """
    import dataclasses

    import numpy as np

    jobs = []
    for j in problem.jobs:
        k = int(np.flatnonzero(j.counts == counts[j.id])[0])
        jobs.append(dataclasses.replace(j, counts=j.counts[k:k + 1], f=j.f[k:k + 1], gains=j.gains[k:k + 1]))
    fixed = dataclasses.replace(problem, jobs=jobs)
    m = build(fixed, node_level=True, deadline=deadline)
    m.problem = problem
    m.objective = {}
    state = problem.state
    for j in jobs:
        check_deadline(deadline)
        y = counts[j.id]
        previous = state.previous.get(j.id, {})
        racks = {rack_key(n, state.nodes[n].rack) for n in previous}
        for nid in eligible_nodes(problem, j):
            b = m.b[(j.index, nid)]
            if rack_key(nid, state.nodes[nid].rack) in racks:
                m.objective[b] = float(j.tp)
            p = previous.get(nid, 0)
            if p > 0 and y > 0:
                kv = m.var(f"k_{j.index}_{nid}", 0, min(p, y))
                m.row({kv: 1, b: -j.tp}, None, 0)
                m.objective[kv] = float(y + 1)
    # z is fixed (one count each): keep the variables at 1 in objective-free form.
    for (i, k), v in m.z.items():
        m.lb[v] = m.ub[v] = 1
    for i, v in m.w.items():
        if problem.jobs[i].id not in moved:
            m.ub[v] = 0
    return m


def retained_gpus(problem: Problem, placement: dict[str, dict[str, int]]) -> int:
    """GPUs that stay where the job had them before (the complement of GPUs moved)."""
    state = problem.state
    return sum(min(g, state.previous.get(jid, {}).get(nid, 0))
               for jid, split in placement.items() for nid, g in split.items())


def _rack_score(problem: Problem, placement: dict[str, dict[str, int]]) -> int:
    state = problem.state
    total = 0
    for jid, split in placement.items():
        racks = {rack_key(n, state.nodes[n].rack) for n in state.previous.get(jid, {})}
        total += sum(g for nid, g in split.items() if rack_key(nid, state.nodes[nid].rack) in racks)
    return total


def replace_migration_aware(problem: Problem, raw, run, options, started: float):
    """Re-place a node-level solution with its counts fixed (:func:`build_placement`), when time is left.

    ``run(model, options) -> values or None`` solves a Formulation with the backend
    of phase 1. The new placement is kept only if it retains at least as many GPUs.
    Records ``gpus_moved`` in ``raw.options``.
    """
    import time


    if raw.placement is None:
        return raw
    remaining = None if options.deadline is None else options.deadline - time.perf_counter()
    moved = sum(raw.counts.values()) - retained_gpus(problem, raw.placement)
    phase2 = time.perf_counter()
    raw.options = {**raw.options, "phase1_seconds": round(phase2 - started, 3)}
    if remaining is None or remaining > 0.05:
        from unicron_plan.solvers import DeadlineReached

        try:
            model = build_placement(problem, raw.counts, problem.moved(raw.counts, raw.placement),
                                    deadline=options.deadline)
            values = run(model, options)
        except DeadlineReached:
            model = values = None
        if values is not None and model.feasible(values):
            new = model.placement(values)
            old_key = (retained_gpus(problem, raw.placement), _rack_score(problem, raw.placement))
            new_key = (retained_gpus(problem, new), _rack_score(problem, new))
            if new_key >= old_key:
                raw.placement = new
                moved = sum(raw.counts.values()) - new_key[0]
    raw.options = {**raw.options, "gpus_moved": int(moved),
                   "phase2_seconds": round(time.perf_counter() - phase2, 3)}
    return raw
