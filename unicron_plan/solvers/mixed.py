"""Exact solver for mixed fleets: each job chooses its GPU type and its count (docs/solvers.md).

Job i may run on the types T_i (``Problem.alternatives``); on type t its options are the
Pareto counts of its terms there, y = 0 (suspended) being common to all its types. The
problem is max sum_i G_i^{t_i}(y_i) s.t. sum_{i: t_i = t} y_i <= C_t for every type t.

1. Lagrangian bound. For multipliers mu_t >= 0 on the capacities,
   UB(mu) = sum_t mu_t C_t + sum_i m_i,  m_i = max(G_i(0), max_{t, y > 0} G_i^t(y) - mu_t y),
   bounds every plan (only the concave envelopes of the options matter). mu is the dual of
   the LP relaxation over those envelopes (HiGHS), the best such mu; any mu >= 0 is valid.
2. Lower bound: fix a type per job (its current type; its best Lagrangian type) and solve each
   type exactly with the DP (:func:`unicron_plan.solvers.dp.solve_options`).
3. Type fixing: a plan worth v has sum_i (m_i - reduced gain of its option) <= UB - v, so job i
   can use type t in a plan worth >= LB only if UB - (m_i - r_it) >= LB, with r_it the best
   reduced gain of a count > 0 on t. Types that fail are removed, at the start of every node
   and, at the root, again whenever the subgradient steps of 4 raise LB.
4. A tighter bound at each node: relax "one type per job" with multipliers pi_i and solve every
   type exactly with the DP (:meth:`_Search._dual`). At the root, subgradient steps on pi first
   (their step doubled after 3 improving steps, halved after 3 stalls; LAGRANGE_STEPS, and up to
   LAGRANGE_EXTRA more while the bound still falls fast; each relaxed plan, repaired, is tried).
   Then, at every node (a child from its parent's pi), column generation (:meth:`_Search._colgen`): a master LP over every type plan the DPs returned so far (one row
   per undecided job, one per type), its duals kept in a box around the best pi that shrinks
   while the bound stalls, gives the next pi. The master's solution, each job on the type of its
   largest share and every type re-solved by the DP, is tried as a plan at every step; at the
   end the master without its box, so rounded, is improved by moving the jobs it splits between
   types (:meth:`_Search._improve`).
5. When every job has at most one type left, each type is one exact DP: the optimum. Otherwise
   branch and bound on the type of an undecided job the master splits over types (rule 10),
   best bound first; each node repeats 1-4 on its restricted types. ``optimal`` only when the
   best plan meets the largest open bound.
6. Symmetry. Jobs with the same options on the same types (and the same constraints) are
   interchangeable: permuting their (type, count) among them keeps a plan's value and every
   type's load. So some optimum has, among each such group in job order, the jobs that run
   first, on non-decreasing type indices, and the suspended ones last. Each node keeps only the
   types that order allows, and branching takes a group's first undecided job: a group of k
   jobs on two types is searched as its k + 1 splits, not 2^k assignments.
7. Probing (at the root, when some jobs are interchangeable and rule 8 will run). After the
   steps of 4, each undecided job's types are tried one at a time with
   the node's multipliers (the bound of 4 with the job on that type); a type whose bound cannot
   beat the best plan is dropped before branching.
8. The root's integer program (the same condition, at most IP_VARIABLES choices left): the types
   and counts left go to HiGHS, interchangeable jobs merged into counts (:meth:`_Search._exact_ip`).
9. Slot reassignment (:meth:`_Search._reassign`): a new best plan's slots, the (type, count) of
   each running job, are dealt out again to the jobs allowed there by a maximum-weight assignment
   (a job in a slot is worth its gain at its largest count that fits, less its gain suspended;
   a slot may stay empty), and each type is re-solved by the DP; repeated while it raises the
   best plan, at most once every REASSIGN_EVERY dual steps. The deal keeps every type's load,
   so the plan stays feasible, and it finds in one step what moving one job at a time cannot:
   two jobs that should trade types.
10. Branching (:meth:`_Search._strong_branch`): of the jobs the master splits most over types
   (ties: whose two best types are closest), up to STRONG_CANDIDATES are tried: each child's
   bound is the bound of 4 at the node's multipliers with the job on that child's type only, a
   valid bound of the child, which the child keeps. The job whose two smallest falls of the
   bound have the largest product is branched on.

Under a deadline the best plan found comes back ``feasible`` with the largest open bound.
"""

from __future__ import annotations

import heapq
import math
import time
from typing import NamedTuple

import numpy as np

from unicron_plan.core.problem import JobTerms, Problem, RawSolution
from unicron_plan.errors import InfeasibleError, SolverUnavailableError
from unicron_plan.solvers import SolverOptions, dp
from unicron_plan.solvers.mixed_place import PLACED_AT_ASSEMBLY, place_count_level

REL_TOL = 1e-9
MAX_NODES = 100_000  # branch-and-bound nodes before the search stops with a bound and a gap
MU_STEPS = 120  # cutting-plane steps for the capacity multipliers (at most)
MU_TOL = 1e-7  # ... stopped when UB is within this fraction of its minimum
LAGRANGE_STEPS = 40  # subgradient steps at the root on the one-type-per-job multipliers ...
LAGRANGE_EXTRA = 120  # ... and up to this many more while the bound falls by EXTRA_FALL of the gap
EXTRA_WINDOW = 10  # ... over the last this many steps
EXTRA_FALL = 0.1
CHILD_STEPS = 0  # ... at a node other than the root
COLGEN_STEPS = 80  # column-generation steps per node after them
BOX = 0.01  # half-width of the multipliers' box, a fraction of their mean at the node's start
SHRINK = 0.7  # the box's factor after a step that does not lower the bound
IMPROVE_JOBS = 32  # local search moves the jobs the master splits most, at most this many
FLOOR_GAP = 1e-3  # column generation stops when the bound can fall by less than this part of the gap
DP_CACHE = 1024  # type DPs of tried plans kept (exact ones, keyed by type and pairs)
REASSIGN_ROUNDS = 4  # rounds of rule 9's slot reassignment after a new best plan (0: none) ...
REASSIGN_EVERY = 4  # ... at most once every this many dual steps
REFIX = True  # rule 3 again when a better plan arrives during the root's subgradient steps (False: never)
STRONG_CANDIDATES = 4  # rule 10: jobs whose children are bounded before branching (0: none)
IP_VARIABLES = 50_000  # rule 8: the root's remaining choices go to HiGHS up to this many (0: never)


def _lp(deadline: float | None):
    """A silent one-thread HiGHS object for the LPs here, made as the IP backends make theirs: the
    process-wide scheduler set for one thread, after any HiGHS run abandoned at a deadline ends."""
    from unicron_plan.solvers import milp

    milp._wait_for_abandoned(SolverOptions(deadline=deadline))
    return milp._highs(1)


def _pricing(inputs, cap, deadline):
    """Each type's exact DP of :meth:`_Search._dual` ((type, decided, undecided, options, their envelopes'
    vertices) per type): (counts, value, stats) per type, in order."""
    out = []
    for t, _, _, opts, vertex in inputs:
        stats: dict = {}
        # pricing DPs: their greedy plans are near their optima, and core passes rarely prove them
        counts, value = dp.solve_options(opts, int(cap[t]), stats, deadline=deadline, joined=opts.joined,
                                         cores=False, hull_hint=vertex)
        out.append((counts, value, stats))
    return out


def _solved(h) -> bool:
    """Run the master LP ``h``; True when it is solved to optimality. A simplex run that ends without
    a verdict (numerical trouble on a warm basis) is run once more from scratch."""
    import highspy

    h.run()
    if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
        return True
    if h.getModelStatus() == highspy.HighsModelStatus.kUnknown:
        h.clearSolver()
        h.run()
    return h.getModelStatus() == highspy.HighsModelStatus.kOptimal


NEEDS = ("highspy", "ortools")  # HiGHS for the LPs, OR-Tools' min-cost flow for rule 9: the extra [ip]


def available() -> bool:
    """The packages of :data:`NEEDS` importable."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in NEEDS)


class _Model:
    """Every job's options per allowed type, their envelopes and zero gains, in flat arrays."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.types = list(problem.capacity)
        self.type_index = {t: k for k, t in enumerate(self.types)}
        self.cap = np.asarray([problem.capacity[t] for t in self.types], dtype=np.int64)
        self.terms: list[list[JobTerms]] = [problem.alternatives.get(j.id, [j]) for j in problem.jobs]
        self.m = len(self.terms)
        # one "pair" per (job, type): its Pareto options; the envelope of its counts > 0
        self.pair_job, self.pair_type, self.options = [], [], []
        self.pairs_of: list[list[int]] = []
        zero = np.full(self.m, -np.inf)
        for i, alts in enumerate(self.terms):
            mine = []
            for jt in alts:
                y, g = dp.pareto_options(jt)
                if len(y) and y[0] == 0:
                    zero[i] = float(g[0])
                mine.append(len(self.options))
                self.pair_job.append(i)
                self.pair_type.append(self.type_index[jt.gpu_type])
                self.options.append((y, g))
            self.pairs_of.append(mine)
        self.zero = zero
        self.first_gain = np.asarray([float(g[0]) for _, g in self.options])  # each pair's gain at its least count
        self.pair_job = np.asarray(self.pair_job, dtype=np.int64)
        self.pair_type = np.asarray(self.pair_type, dtype=np.int64)
        positive = [(y[1:], g[1:]) if len(y) and y[0] == 0 else (y, g) for y, g in self.options]
        self.has_positive = np.asarray([len(y) > 0 for y, _ in positive], dtype=bool)
        nonempty = [p for p, (y, _) in enumerate(positive) if len(y)]
        if nonempty:
            hy, hg, seg = dp._upper_hulls([positive[p] for p in nonempty])
            self.hy, self.hg = hy.astype(float), hg
            self.hpair = np.asarray(nonempty, dtype=np.int64)[seg]
        else:
            self.hy, self.hg, self.hpair = np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
        self.htype = self.pair_type[self.hpair]
        scale = float(np.abs(self.hg).max()) if len(self.hg) else 0.0
        finite = np.abs(zero[np.isfinite(zero)])
        self.scale = max(scale, float(finite.max()) if len(finite) else 0.0) * max(self.m, 1) + 1.0
        self.sym_prev = self._symmetric_predecessors()
        self._dp_cache: dict[tuple[int, tuple[int, ...]], tuple] = {}

    def _symmetric_predecessors(self) -> np.ndarray:
        """For each job, the previous job (by index) it is interchangeable with, or -1.

        Two jobs are interchangeable when they have the same options (counts and gains) on the same
        types and the same constraints and change status: swapping their (type, count) keeps every
        plan's value and every type's load, so some optimum lists their types in non-decreasing order
        with the suspended ones last (module docstring, rule 6)."""
        prev = np.full(self.m, -1, dtype=np.int64)
        self.sym_class = np.arange(self.m, dtype=np.int64)  # the first job of each job's group
        last: dict[tuple, int] = {}
        for i, alts in enumerate(self.terms):
            key = tuple((jt.gpu_type, jt.tp, jt.pinned, jt.max_nodes, jt.same_rack, jt.min_gain_fraction,
                         jt.exiting, jt.off_type, jt.x, jt.hit, y.tobytes(), np.asarray(g, dtype=float).tobytes())
                        for jt, (y, g) in zip(alts, (self.options[p] for p in self.pairs_of[i])))
            prev[i] = last.get(key, -1)
            if prev[i] >= 0:
                self.sym_class[i] = self.sym_class[prev[i]]
            last[key] = i
        return prev

    def reduced(self, mu: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """(r per pair: best reduced gain of a count > 0, -inf when none or not allowed;
        m per job; UB(mu)) with the pairs of ``allowed`` (bool per pair) only."""
        r = np.full(len(self.pair_job), -np.inf)
        if len(self.hg):
            red = self.hg - mu[self.htype] * self.hy
            np.maximum.at(r, self.hpair, red)
        r[~allowed] = -np.inf
        best = np.full(self.m, -np.inf)
        np.maximum.at(best, self.pair_job, r)
        m_i = np.maximum(best, self.zero)
        return r, m_i, float(mu @ self.cap) + math.fsum(m_i.tolist())

    def _value(self, mu: np.ndarray, sel: np.ndarray, starts: np.ndarray, sizes: np.ndarray, pairs: np.ndarray):
        """(UB(mu), a subgradient) over the envelope vertices ``sel`` (``starts``/``sizes``: each pair's run)."""
        hy, hg = self.hy[sel], self.hg[sel]
        red = hg - mu[self.htype[sel]] * hy
        best = np.maximum.reduceat(red, starts)
        at = red == np.repeat(best, sizes)
        y = np.minimum.reduceat(np.where(at, hy, np.inf), starts)
        per_job = self.zero.copy()
        np.maximum.at(per_job, self.pair_job[pairs], best)
        value = float(mu @ self.cap) + math.fsum(per_job.tolist())
        # the pair that attains each job's maximum (none when suspending does): its count, on its type
        wins = best >= per_job[self.pair_job[pairs]]
        wins &= best > self.zero[self.pair_job[pairs]]
        first = np.zeros(len(pairs), dtype=bool)
        seen = set()
        for k in np.flatnonzero(wins).tolist():
            i = int(self.pair_job[pairs[k]])
            if i not in seen:
                seen.add(i)
                first[k] = True
        demand = np.bincount(self.pair_type[pairs[first]], weights=y[first], minlength=len(self.types))
        return value, self.cap - demand

    def multipliers(self, allowed: np.ndarray) -> np.ndarray:
        """The mu >= 0 that minimises UB(mu), the LP dual of the capacities over the allowed envelopes:
        UB is convex and piecewise linear in T variables, minimised by Kelley's cutting planes (a
        master LP of T + 1 variables per step, HiGHS) until UB is within MU_TOL of the master's lower bound."""
        import highspy

        T = len(self.types)
        sel = allowed[self.hpair]
        if not sel.any():
            return np.zeros(T)
        hp = self.hpair[sel]
        starts = np.flatnonzero(np.r_[True, hp[1:] != hp[:-1]])
        sizes = np.diff(np.r_[starts, len(hp)])
        pairs = hp[starts]
        slope = self.hg[sel] / np.maximum(self.hy[sel], 1.0)
        top = np.zeros(T)  # above the steepest envelope slope a type's demand is 0: UB only grows
        np.maximum.at(top, self.htype[sel], np.maximum(slope, 0.0))
        top = top + 1.0
        mu = np.zeros(T)
        best_mu, best = mu, math.inf
        cols = np.arange(T + 1, dtype=np.int32)
        unit = None  # values in units of UB(0), multipliers in units of their box: coefficients near 1
        # master: min theta s.t. theta >= value_k + sub_k (mu - mu_k), 0 <= mu <= top (scaled), one row per step
        h = _lp(None)
        inf = highspy.kHighsInf
        h.addVars(T + 1, np.r_[np.zeros(T), -inf], np.r_[np.ones(T), inf])
        h.changeColsCost(T + 1, cols, np.r_[np.zeros(T), 1.0])
        for _ in range(MU_STEPS):
            value, sub = self._value(mu, sel, starts, sizes, pairs)
            if unit is None:
                unit = max(abs(value), 1.0)
            if value < best:
                best, best_mu = value, mu.copy()
            g = sub.astype(float)  # theta' - (g top / unit) mu' >= (value - g mu) / unit
            h.addRow((value - float(g @ mu)) / unit, inf, T + 1, cols, np.r_[-g * top / unit, 1.0])
            h.run()
            if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
                break
            sol = np.asarray(h.getSolution().col_value, dtype=float)
            if best - sol[T] * unit <= MU_TOL * unit:
                break
            mu = np.clip(sol[:T], 0.0, 1.0) * top
        return best_mu

    def solve_type(self, t: int, jobs: list[int], chosen: list[int], deadline: float | None):
        """(value, counts, timed out) of type ``t``'s exact DP over ``jobs`` on their pairs ``chosen[i]``,
        or None when they do not fit."""
        got = self._type_dp(t, [chosen[i] for i in jobs], deadline)
        return None if got is None else (got[1], got[0], got[2])

    def _type_dp(self, t: int, pairs: list[int], deadline: float | None):
        """(counts, value, timed out, bound) of type ``t``'s exact DP over ``pairs`` (one per job, in
        job order), or None when they do not fit. Exact answers are kept: a search tries the same
        type plan many times (plans that differ only on other types)."""
        key = (t, tuple(pairs))
        got = self._dp_cache.get(key)
        if got is not None:
            return got
        opts = [self.options[p] for p in pairs]
        if sum(int(y[0]) for y, _ in opts) > self.cap[t]:
            return None
        stats: dict = {}
        part, v = dp.solve_options(opts, int(self.cap[t]), stats, deadline=deadline)
        timed_out = bool(stats.get("timed_out"))
        got = (part, v, timed_out, max(float(stats.get("ub", v)), v) if timed_out else v)
        if not timed_out and DP_CACHE:
            if len(self._dp_cache) >= DP_CACHE:
                self._dp_cache.clear()
            self._dp_cache[key] = got
        return got

    def solve_assignment(self, chosen: list[int], deadline: float | None):
        """Each job on the type of its pair ``chosen[i]``: every type's exact DP.
        Returns (counts per job, value, bound, timed out) or None when the jobs do not fit."""
        chosen_arr = np.asarray(chosen, dtype=np.int64)
        types = self.pair_type[chosen_arr]
        order = np.argsort(types, kind="stable")  # jobs by type, in job order within each
        present, first = np.unique(types[order], return_index=True)
        ends = np.r_[first[1:], len(order)]
        counts_arr = np.zeros(self.m, dtype=np.int64)
        value = bound = 0.0
        timed_out = False
        columns = []  # each type's plan: (type, jobs with a count > 0, their gains)
        for k in np.argsort(order[first], kind="stable").tolist():  # types in the order of their first job
            t, jobs = int(present[k]), order[first[k]:ends[k]]
            got = self._type_dp(t, chosen_arr[jobs].tolist(), deadline)
            if got is None:
                return None
            part, v, late, ub = got
            part = np.asarray(part, dtype=np.int64)
            counts_arr[jobs] = part
            value += v
            bound += ub
            timed_out |= late
            # the plan's own gains: its value less the gains of the jobs it leaves at 0
            idle = chosen_arr[jobs[part == 0]]
            columns.append((t, tuple(jobs[part > 0].tolist()), v - math.fsum(self.first_gain[idle].tolist())))
        counts = counts_arr.tolist()
        return counts, value, bound, timed_out, columns


_EXPIRED = object()  # what a dual step returns once the deadline has passed


class _Decided(NamedTuple):
    """The jobs decided on one type at a node, their options in flat arrays."""

    jobs: np.ndarray  # ascending
    y: np.ndarray
    g: np.ndarray
    sizes: np.ndarray  # options per job
    zero: np.ndarray  # each job's gain at its smallest count (count 0 when it may suspend)
    least: int  # their smallest counts added up
    vertex: np.ndarray  # their envelopes' vertices (a mask over y and g)


class _Prepared(NamedTuple):
    """What :meth:`_Search._dual` reuses at every step of one node (:meth:`_Search._prepare_dual`)."""

    decided: dict  # type -> :class:`_Decided`
    const: float  # the zero gains of the jobs left without a type
    pair_ids: np.ndarray  # the undecided jobs' pairs, by type then job ...
    pair_jobs: np.ndarray  # ... and their jobs
    spans: dict  # type -> (first pair, end pair, first entry, end entry) of its pairs
    starts: np.ndarray  # each pair's run in the flat arrays, led by a count 0 ...
    sizes: np.ndarray  # ... and its length
    flat_y: np.ndarray
    flat_g: np.ndarray
    owner: np.ndarray  # the job of every flat entry
    lead: np.ndarray  # the count-0 entries
    undecided: np.ndarray  # the undecided jobs, ascending
    vertex: np.ndarray  # the count-0 entries and the vertices of each pair's envelope of its counts > 0


class _Search:
    """The branch and bound of the module docstring over allowed (job, type) pairs."""

    def __init__(self, model: _Model, deadline: float | None):
        self.model = model
        self.deadline = deadline
        self.best: tuple[list[int], list[int], float] | None = None  # (counts, chosen pairs, value)
        self.open_bound = -math.inf  # largest bound of a node left unexplored (deadline, node limit)
        self.nodes = 0
        self.lagrange_steps = 0
        self.timed_out = False
        self.probed: dict = {}
        self.master_failed = False  # the last column generation's master LP did not solve
        self.grouped = bool((model.sym_prev >= 0).any())  # rules 7-8 run only with interchangeable jobs
        self.ip_runs = 0
        self.tol = REL_TOL * model.scale
        # y > 0 options of every pair (Pareto among themselves, so also after a shift of their gains)
        self.positive = [(y[1:], g[1:]) if len(y) and y[0] == 0 else (y, g) for y, g in model.options]
        self.z = np.where(np.isfinite(model.zero), model.zero, 0.0)
        #: every type plan seen (a DP of :meth:`_dual`, a plan tried): (type, jobs with a count > 0) -> their gains
        self.pool: dict[tuple[int, tuple[int, ...]], float] = {(t, ()): 0.0 for t in range(len(model.types))}
        self.eq = ~np.isfinite(model.zero)  # may not suspend: "on exactly one type"
        self.live: list[list[int]] | None = None  # the allowed pairs per job at the node being solved
        self.reassigning = False
        self.next_reassign = REASSIGN_EVERY
        self.reassign_pending = False

    def _lb(self) -> float:
        return self.best[2] if self.best is not None else -math.inf

    def _try(self, chosen: list[int]) -> None:
        got = self.model.solve_assignment(chosen, self.deadline)
        if got is None:
            return
        counts, value, bound, timed_out, columns = got
        for t, rows, v in columns:
            self.pool[(t, rows)] = v
        if timed_out:
            self.timed_out = True
            self.open_bound = max(self.open_bound, bound)
        if value > self._lb():
            self.best = (counts, list(chosen), value)
            self._reassign()

    def _reassign(self) -> None:
        """Rule 9: the best plan's slots (type, count) dealt out again to the jobs by an assignment
        problem, each type re-solved by the DP, while that raises the best plan; once every
        REASSIGN_EVERY dual steps (the first after as many)."""
        if self.reassigning or self.live is None:
            return
        if self.lagrange_steps < self.next_reassign:
            self.reassign_pending = True
            return
        self.reassign_pending = False
        self.reassigning = True
        self.next_reassign = self.lagrange_steps + REASSIGN_EVERY
        try:
            for _ in range(REASSIGN_ROUNDS):
                if self._expired():
                    break
                before = self._lb()
                self._try(self._slot_assignment(*self.best[:2]))
                if self._lb() <= before + self.tol:
                    break
        finally:
            self.reassigning = False

    def _slot_assignment(self, counts: list[int], chosen: list[int]) -> list[int]:
        """A pair per job: the running jobs' slots (type, count) dealt out to the jobs allowed there by a
        maximum-weight assignment (a min-cost flow over the distinct slots, OR-Tools), a job in a slot
        worth its gain at its largest count that fits it less its gain suspended, a slot free to stay
        empty, jobs that may not suspend first; a job left without a slot keeps its type."""
        from ortools.graph.python import min_cost_flow

        model, live = self.model, self.live
        counts_arr = np.asarray(counts, dtype=np.int64)
        running = np.flatnonzero(counts_arr > 0)
        slots = np.stack([model.pair_type[np.asarray(chosen, dtype=np.int64)[running]], counts_arr[running]], axis=1)
        kinds, room = np.unique(slots, axis=0, return_counts=True)  # distinct (type, count), how many of each
        out = [p if p in live[i] else (live[i][0] if live[i] else p) for i, p in enumerate(chosen)]
        if not len(kinds):
            return out
        weight = np.zeros((model.m, len(kinds)))  # 0: no deal (not allowed, or worth no more than suspended)
        for t in np.unique(kinds[:, 0]).tolist():
            cols = np.flatnonzero(kinds[:, 0] == t)
            pairs = [p for ps in live for p in ps if model.pair_type[p] == t]
            if not pairs:
                continue
            joined = dp._join([model.options[p] for p in pairs])
            # each pair's largest count <= each slot's: one search over (pair, count) keys
            top = int(max(int(joined.y.max()), int(kinds[cols, 1].max()))) + 1
            owner = np.repeat(np.arange(len(pairs), dtype=np.int64), np.diff(joined.off))
            at = np.searchsorted(owner * top + joined.y, np.arange(len(pairs))[:, None] * top + kinds[cols, 1][None, :],
                                 side="right") - 1
            jobs = model.pair_job[np.asarray(pairs, dtype=np.int64)]
            gain = np.where(at >= joined.off[:-1, None], joined.g[np.maximum(at, 0)] - self.z[jobs][:, None], 0.0)
            weight[jobs[:, None], cols[None, :]] = np.maximum(gain, 0.0)
        if self.eq.any():  # jobs that may not suspend first: above every other deal
            weight[self.eq] = np.where(weight[self.eq] > 0, weight[self.eq] + model.m * weight.max(), 0.0)
        job, kind = np.nonzero(weight > 0)
        if not len(job):
            return out
        # integral costs for the flow: the largest weight 2^42 (OR-Tools' cost range holds it times the nodes)
        cost = -np.rint(weight[job, kind] * (2.0 ** 42 / weight.max())).astype(np.int64)
        m, n = model.m, len(kinds)
        source, sink = m + n, m + n + 1  # jobs 0..m-1, slot kinds m..m+n-1
        flow = min_cost_flow.SimpleMinCostFlow()
        deals = flow.add_arcs_with_capacity_and_unit_cost(job, m + kind, np.ones(len(job), dtype=np.int64), cost)
        flow.add_arcs_with_capacity_and_unit_cost(
            np.r_[np.full(m, source), m + np.arange(n), source], np.r_[np.arange(m), np.full(n, sink), sink],
            np.r_[np.ones(m, dtype=np.int64), room, m], np.zeros(m + n + 1, dtype=np.int64))
        flow.set_nodes_supplies(np.asarray([source, sink]), np.asarray([m, -m]))
        if flow.solve() != flow.OPTIMAL:
            return out
        for k in np.flatnonzero(flow.flows(deals)).tolist():
            i, t = int(job[k]), int(kinds[kind[k], 0])
            out[i] = next(p for p in live[i] if int(model.pair_type[p]) == t)
        return out

    def _choice(self, r: np.ndarray, allowed: np.ndarray, prefer_current: bool) -> list[int]:
        """A pair per job: its current type's (when allowed and ``prefer_current``), else its best reduced."""
        chosen = []
        for i, pairs in enumerate(self.model.pairs_of):
            ok = [p for p in pairs if allowed[p]] or pairs[:1]
            if prefer_current and allowed[pairs[0]]:
                chosen.append(pairs[0])
            else:
                chosen.append(max(ok, key=lambda p: r[p]))
        return chosen

    def _prepare_dual(self, live: list[list[int]]):
        """What :meth:`_dual` reuses at every step for these allowed types: the decided jobs per type
        with their options in flat arrays, the constant of the jobs left without a type, and the counts
        > 0 of the undecided jobs' pairs in flat arrays, each pair's run led by a count 0 (None: infeasible)."""
        model = self.model
        fixed: dict[int, list] = {}
        const = 0.0
        pairs, jobs = [], []
        for i, ps in enumerate(live):
            if len(ps) == 1:
                fixed.setdefault(int(model.pair_type[ps[0]]), []).append((i, ps[0]))
            elif not ps:
                if self.eq[i]:
                    return None
                const += self.z[i]
            else:
                pairs += ps
                jobs += [i] * len(ps)
        decided = {}
        for t, items in fixed.items():
            opts = [model.options[p] for _, p in items]
            joined = dp._join(opts)
            decided[t] = _Decided(np.asarray([i for i, _ in items], dtype=np.int64), joined.y, joined.g,
                                  np.diff(joined.off), joined.g[joined.off[:-1]], int(joined.y[joined.off[:-1]].sum()),
                                  dp.envelope_mask(joined))
        order = sorted(range(len(pairs)), key=lambda k: (int(model.pair_type[pairs[k]]), jobs[k]))  # by type
        pairs, jobs = [pairs[k] for k in order], [jobs[k] for k in order]
        ys = [np.concatenate([[0], self.positive[p][0]]) for p in pairs]
        gs = [np.concatenate([[0.0], self.positive[p][1]]) for p in pairs]
        sizes = np.asarray([len(y) for y in ys], dtype=np.int64)
        ends = np.cumsum(sizes)
        starts = (ends - sizes).astype(np.int64)
        flat_y = np.concatenate(ys).astype(np.int64) if ys else np.zeros(0, dtype=np.int64)
        flat_g = np.concatenate(gs) if gs else np.zeros(0)
        pair_ids = np.asarray(pairs, dtype=np.int64)
        pair_jobs = np.asarray(jobs, dtype=np.int64)
        pair_types = model.pair_type[pair_ids] if pairs else np.zeros(0, dtype=np.int64)
        spans = {}  # type -> (first pair, end pair, first entry, end entry) of its undecided pairs
        for t in np.unique(pair_types).tolist():
            a, b = (int(x) for x in np.searchsorted(pair_types, [t, t + 1]))
            spans[t] = (a, b, int(starts[a]), int(ends[b - 1]))
        lead = np.zeros(len(flat_y), dtype=bool)
        lead[starts] = True
        undecided = np.asarray(sorted(set(jobs)), dtype=np.int64)
        # A pair's DP options at a step are its count 0 and a suffix of its counts > 0 (gains shifted by
        # one constant): their envelope's vertices are among the count 0 and the vertices of the pair's
        # envelope of its counts > 0, which the DP is told (dp.solve_options's hull_hint).
        vertex = lead.copy()
        positive = np.flatnonzero(~lead)
        if len(positive):
            off = np.searchsorted(positive, np.r_[starts, len(flat_y)])
            vertex[positive] = dp.envelope_mask(dp._Joined(flat_y[positive], flat_g[positive], off))
        return _Prepared(decided, const, pair_ids, pair_jobs, spans, starts, sizes, flat_y, flat_g,
                         np.repeat(pair_jobs, sizes), lead, undecided, vertex)

    def _dual(self, prepared, pi: np.ndarray, without: np.ndarray | None = None):
        """The bound of relaxing "job i on at most (exactly) one type" with multipliers ``pi``:
        sum_i (z_i + pi_i) + sum_t DP_t, where DP_t is the exact DP of type t over the jobs decided
        on t (their own options) and the undecided jobs allowed there (gains G - z_i - pi_i, or
        nothing). Returns (bound, times each undecided job is used, the pair each used job took),
        or None when the jobs that may not suspend cannot fit. A DP stopped by the deadline adds
        its own upper bound, so the total stays a bound."""
        model = self.model
        pre = prepared
        shift = self.z + pi
        total = pre.const + float(shift[pre.undecided].sum())
        if len(pre.pair_ids):
            shifted = pre.flat_g - shift[pre.owner]
            shifted[pre.lead] = 0.0
            keep = pre.lead | (shifted > 0)
            kept = np.add.reduceat(keep.astype(np.int64), pre.starts)
            live = kept > 1  # a pair with only its 0 adds nothing
            if without is not None:  # pairs left out (positions in pair_ids)
                live[without] = False
            keep &= np.repeat(live, pre.sizes)
        use = np.zeros(model.m)
        took = {}
        none = np.zeros(0, dtype=np.int64)
        inputs = []  # per type: (type, its decided jobs, its undecided pairs, its DP's options)
        for t in sorted(set(pre.decided) | set(pre.spans)):
            fix = pre.decided.get(t)
            if fix is not None and fix.least > model.cap[t]:  # undecided jobs start at 0
                return None
            parts = [(fix.y, fix.g, fix.sizes, fix.vertex)] if fix is not None else []
            und = none
            if t in pre.spans:
                pa, pb, ea, eb = pre.spans[t]
                und = pa + np.flatnonzero(live[pa:pb])
                if len(und):
                    sel = keep[ea:eb]
                    parts.append((pre.flat_y[ea:eb][sel], shifted[ea:eb][sel], kept[und], pre.vertex[ea:eb][sel]))
            if not parts:
                continue
            y, g, sizes, vertex = (np.concatenate(a) for a in zip(*parts)) if len(parts) > 1 else parts[0]
            off = np.zeros(len(sizes) + 1, dtype=np.int64)
            np.cumsum(sizes, out=off[1:])
            inputs.append((t, fix, und, dp.JoinedOptions(y, g, off), vertex))
        for (t, fix, und, _, _), (counts, value, stats) in zip(inputs, _pricing(inputs, model.cap, self.deadline)):
            exact = not stats.get("timed_out")
            total += value if exact else max(value, float(stats.get("ub", value)))
            counts = np.asarray(counts, dtype=np.int64)
            nf = len(fix.jobs) if fix is not None else 0
            used = und[counts[nf:] > 0]
            jobs_used = pre.pair_jobs[used]
            use[jobs_used] += 1  # a job has one pair per type
            took.update(zip(jobs_used.tolist(), pre.pair_ids[used].tolist()))
            if exact:  # the type's plan, a column of the master (:meth:`_colgen`): its own gains, from the
                # DP's value less the shifts of the undecided jobs and the zero gains of the decided ones left at 0
                column = value + float(shift[jobs_used].sum())
                rows = jobs_used
                if fix is not None:
                    column -= float(fix.zero[counts[:nf] == 0].sum())
                    rows = np.sort(np.concatenate([fix.jobs[counts[:nf] > 0], jobs_used]))
                self.pool[(t, tuple(rows.tolist()))] = column
        return total, use, took

    def _counted_dual(self, prepared, pi, without=None):
        """One step of a dual method: :meth:`_dual` at ``pi``, counted; ``_EXPIRED`` once the deadline passed."""
        if self._expired():
            return _EXPIRED
        if self.reassign_pending and self.lagrange_steps >= self.next_reassign:
            self._reassign()
        self.lagrange_steps += 1
        return self._dual(prepared, pi, without)

    def _lagrange(self, allowed, live, pi, ub, steps, refix=None):
        """Subgradient steps on the multipliers of :meth:`_dual`; (best bound, its multipliers,
        the last use counts, the allowed pairs per job); each solution, repaired to one type per
        job, is tried as a plan. ``refix``: called when the best plan has risen, it fixes types
        again with it (rule 3) and returns the pairs left per job, or None when none went."""
        undecided = np.asarray([len(p) > 1 for p in live])
        best_pi, theta, stall, run = pi.copy(), 1.0, 0, 0
        use = None
        prepared = self._prepare_dual(live)
        if prepared is None:
            return -math.inf, pi, None, live
        fixed_at = self._lb()
        bounds = []  # the best bound after each step
        for step in range(steps + (LAGRANGE_EXTRA if steps else 0)):
            if step >= steps and (len(bounds) <= EXTRA_WINDOW
                                  or bounds[-EXTRA_WINDOW - 1] - ub < EXTRA_FALL * (ub - self._lb())):
                break  # past the planned steps, on only while the bound still falls fast
            if refix is not None and self._lb() > fixed_at + self.tol:
                fixed_at = self._lb()
                fewer = refix()
                if fewer is not None:
                    live, undecided = fewer, np.asarray([len(p) > 1 for p in fewer])
                    prepared = self._prepare_dual(live)
                    if prepared is None or not undecided.any():
                        return (-math.inf if prepared is None else ub), best_pi, None, live
            got = self._counted_dual(prepared, pi)
            if got is _EXPIRED:
                break
            if got is None:
                return -math.inf, pi, None, live
            value, use, took = got
            if value < ub:  # steps that keep improving grow, steps that stall shrink
                ub, best_pi, stall, run = value, pi.copy(), 0, run + 1
                if run >= 3:
                    theta, run = theta * 2, 0
            else:
                stall, run = stall + 1, 0
                if stall >= 3:
                    theta, stall = theta / 2, 0
            if step % 4 == 0:
                self._try([took.get(i, next((p for p in live[i]), self.model.pairs_of[i][0]))
                           if undecided[i] else (live[i][0] if live[i] else self.model.pairs_of[i][0])
                           for i in range(self.model.m)])
            bounds.append(ub)
            gap = ub - self._lb()
            if gap <= self.tol:
                break
            s = np.where(undecided, 1.0 - use, 0.0)
            norm = float(s @ s)
            if norm == 0:
                break
            pi = pi - theta * max(value - self._lb(), self.tol) / norm * s
            pi = np.where(self.eq, pi, np.maximum(pi, 0.0))
        return ub, best_pi, use, live

    def _colgen(self, allowed, live, pi, ub, steps):
        """The bound of :meth:`_dual` minimised by column generation. The master LP is over the type
        plans in the pool (every DP of :meth:`_dual`, every plan tried, at this node or another, when
        this node allows it): one convexity row per type, one row per undecided job (used on at most
        one type, exactly one when it may not suspend). Its duals are the next multipliers, kept in a
        box around the best ones found: a job row may also be over-used at the box's upper end and
        sold at its lower end (BoxStep); the box follows each lower bound and shrinks after a step
        without one. Every evaluation is an exact DP per type, so every bound is valid whatever the
        LP does. Stops when the bound meets the best plan or after ``steps``. Each step repairs the
        master's solution (each job on the type of its largest share) into a plan and tries it.
        Returns (best bound, its multipliers, per job its share off its largest type, or None)."""
        import highspy

        model = self.model
        prepared = self._prepare_dual(live)
        if prepared is None:
            return -math.inf, pi, None
        undecided = prepared.undecided
        if not len(undecided):
            return ub, pi, None
        T, nu = len(model.types), len(undecided)
        row_of = np.full(model.m, -1, dtype=np.int64)
        row_of[undecided] = np.arange(nu)
        ok = np.zeros((model.m, T), dtype=bool)
        for i, ps in enumerate(live):
            ok[i, model.pair_type[ps]] = True
        fixed_z = np.zeros(T)
        fixed_eq = np.zeros(T, dtype=np.int64)
        for t, fix in prepared.decided.items():
            fixed_z[t] = float(self.z[fix.jobs].sum())
            fixed_eq[t] = int(self.eq[fix.jobs].sum())
        base = float(prepared.const + self.z[undecided].sum())  # const + sum z: the master's value is on top
        unit = max(abs(ub - base), 1.0) / nu
        big = 1e6  # a unit-scaled penalty far above any multiplier of a feasible master
        h = _lp(self.deadline)
        eq = self.eq[undecided]
        inf = highspy.kHighsInf
        n_rows = nu + T
        h.addRows(n_rows, np.r_[np.where(eq, 1.0, -inf), np.ones(T)], np.ones(n_rows), 0,
                  np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
        # a box around the best multipliers (BoxStep): a job row may be over-used at a price of its
        # upper end and sold at its lower end, so the master's duals stay in the box; a type row
        # may be left unmet at a prohibitive price
        for k in range(nu):
            h.addCol(big, 0.0, inf, 1, np.asarray([k], dtype=np.int32), np.asarray([-1.0]))
            h.addCol(0.0, 0.0, inf, 1, np.asarray([k], dtype=np.int32), np.asarray([1.0]))
        for t in range(T):
            h.addCol(big, 0.0, inf, 1, np.asarray([nu + t], dtype=np.int32), np.asarray([1.0]))
        n_art = h.getNumCol()
        over, under = np.arange(0, 2 * nu, 2, dtype=np.int32), np.arange(1, 2 * nu, 2, dtype=np.int32)
        width = max(float(np.abs(pi[undecided]).mean()), unit) * BOX
        box_edges: list = [None, None]

        def box(c):
            hi = c[undecided] + width
            lo = c[undecided] - width
            lo = np.where(eq, lo, np.maximum(lo, 0.0))
            h.changeColsCost(nu, over, hi / unit)
            h.changeColsCost(nu, under, -lo / unit)
            box_edges[:] = [hi, lo]
        cols: list[tuple[int, float, np.ndarray]] = []  # (type, master value, its undecided rows)
        done = 0

        def add_new() -> list[tuple[int, float, np.ndarray]]:
            nonlocal done
            new = []
            keys = list(self.pool.items())[done:]
            done += len(keys)
            for (t, rows), v in keys:
                r = np.asarray(rows, dtype=np.int64)
                if not ok[r, t].all():
                    continue
                und = row_of[r]
                fix = r[und < 0]
                if int(self.eq[fix].sum()) != fixed_eq[t]:  # a job that may not suspend is missing
                    continue
                und = und[und >= 0]
                value = v - float(self.z[undecided[und]].sum()) + fixed_z[t] - float(self.z[fix].sum())
                idx = np.r_[und, nu + t].astype(np.int32)
                h.addCol(-value / unit, 0.0, inf, len(idx), idx, np.ones(len(idx)))
                cols.append((t, value, und))
                new.append((t, value, und))
            return new

        own = np.asarray([ps[0] if ps else model.pairs_of[i][0] for i, ps in enumerate(live)], dtype=np.int64)
        pad = np.full((nu, max(len(live[i]) for i in undecided.tolist())), -1, dtype=np.int64)
        for k, i in enumerate(undecided.tolist()):
            pad[k, :len(live[i])] = live[i]
        center, best_pi, x_off = pi.copy(), pi.copy(), None
        pi_eval = pi.copy()
        box(center)
        for step in range(steps):
            got = self._counted_dual(prepared, pi_eval)
            if got is _EXPIRED:
                break
            if got is None:
                return -math.inf, pi, None
            value, _, took = got
            if value < ub - self.tol:  # a serious step: the box follows
                ub, best_pi, center = value, pi_eval.copy(), pi_eval.copy()
                box(center)
            elif step:
                width *= SHRINK
                box(center)
            add_new()
            if ub - self._lb() <= self.tol:
                break
            if not _solved(h):
                self.master_failed = True
                break
            sol = h.getSolution()
            lam = np.asarray(sol.col_value)[n_art:]
            dual = -np.asarray(sol.row_dual) * unit
            # the master's value is the least the cutting-plane model of the bound takes in the box; when
            # it meets the bound at the box's centre and no multiplier sits on the box's edge, the centre
            # minimises the (convex) bound: stop; on the edge, the box grows instead
            floor = base - h.getInfo().objective_function_value * unit
            if ub - floor <= max(self.tol, FLOOR_GAP * (ub - self._lb())):
                hi, lo = box_edges
                edge = (np.abs(dual[:nu] - hi) <= 1e-9 * unit) | ((np.abs(dual[:nu] - lo) <= 1e-9 * unit) & (lo > 0))
                if not edge.any():
                    break
                width *= 4
                box(center)
            share = np.zeros((nu, T))
            for (t, _, r), v in zip(cols, lam):
                if v > 1e-9 and len(r):
                    share[r, t] += v
            x_off = np.zeros(model.m)
            x_off[undecided] = share.sum(axis=1) - share.max(axis=1)
            self._try(self._rounded(own, pad, undecided, share, took))
            add_new()
            if ub - self._lb() <= self.tol:
                break
            pi_eval = np.zeros(model.m)
            pi_eval[undecided] = np.where(eq, dual[:nu], np.maximum(dual[:nu], 0.0))
        if ub - self._lb() > self.tol and cols and not self._expired():
            # the master without its box: a solution of the relaxation itself, repaired and improved
            h.changeColsCost(nu, over, np.full(nu, big))
            h.changeColsCost(nu, under, np.zeros(nu))
            if _solved(h):
                lam = np.asarray(h.getSolution().col_value)[n_art:]
                share = np.zeros((nu, T))
                for (t, _, r), v in zip(cols, lam):
                    if v > 1e-9 and len(r):
                        share[r, t] += v
                spread = share.sum(axis=1) - share.max(axis=1)
                x_off = np.zeros(model.m)
                x_off[undecided] = spread
                chosen = self._rounded(own, pad, undecided, share, took)
                split = np.flatnonzero(spread > 1e-6)
                split = split[np.argsort(-spread[split], kind="stable")][:IMPROVE_JOBS]
                self._improve(chosen, live, undecided[split].tolist())
        return ub, best_pi, x_off

    def _rounded(self, own: np.ndarray, pad: np.ndarray, undecided, share, took) -> list[int]:
        """A pair per job: a decided job's own (``own``), an undecided one's on the type of its largest
        share (``share``: per undecided job and type; ``pad``: its allowed pairs, in order, -1 after
        them; the first of equal shares), the type ``took`` names when it has none."""
        rows = np.arange(len(undecided))
        vals = np.where(pad >= 0, share[rows[:, None], self.model.pair_type[np.maximum(pad, 0)]], -np.inf)
        at = vals.argmax(axis=1)
        fallback = own.copy()
        if took:
            fallback[np.fromiter(took.keys(), dtype=np.int64)] = np.fromiter(took.values(), dtype=np.int64)
        chosen = own.copy()
        chosen[undecided] = np.where(vals[rows, at] > 0, pad[rows, at], fallback[undecided])
        return chosen.tolist()

    def _improve(self, chosen: list[int], live, candidates: list[int]) -> None:
        """Local search from the plan ``chosen``: move one of ``candidates`` to another type it may
        use while that raises the value (the two types re-solved by the DP each time); every plan
        reached is tried."""
        model = self.model
        chosen = list(chosen)
        per: dict[int, float] = {}
        for t in range(len(model.types)):
            got = model.solve_type(t, [i for i, p in enumerate(chosen) if model.pair_type[p] == t], chosen, self.deadline)
            if got is None:
                return
            per[t] = got[0]
        better = True
        while better and not self._expired():
            better = False
            for i in candidates:
                a = int(model.pair_type[chosen[i]])
                for p in live[i]:
                    b = int(model.pair_type[p])
                    if b == a or self._expired():
                        continue
                    trial = list(chosen)
                    trial[i] = p
                    ga = model.solve_type(a, [j for j, q in enumerate(trial) if model.pair_type[q] == a], trial,
                                          self.deadline)
                    gb = model.solve_type(b, [j for j, q in enumerate(trial) if model.pair_type[q] == b], trial,
                                          self.deadline)
                    if ga is None or gb is None or ga[0] + gb[0] <= per[a] + per[b] + self.tol:
                        continue
                    chosen, per[a], per[b], better = trial, ga[0], gb[0], True
                    a = b
        self._try(chosen)

    def run(self) -> None:
        model = self.model
        root = np.ones(len(model.pair_job), dtype=bool)
        mu = model.multipliers(root)
        r, m_i, ub = model.reduced(mu, root)
        self.live = [list(pairs) for pairs in model.pairs_of]
        self._try(self._choice(r, root, True))
        self._try(self._choice(r, root, False))
        pi0 = np.where(self.eq, m_i, np.maximum(m_i - self.z, 0.0))
        heap = [(-ub, 0, root, pi0)]
        counter = 1
        while heap:
            neg_ub, _, allowed, pi = heapq.heappop(heap)
            if -neg_ub <= self._lb() + self.tol:
                continue
            if self._expired() or self.nodes >= MAX_NODES:
                self.open_bound = max(self.open_bound, -neg_ub, *(-h[0] for h in heap))
                return
            self.nodes += 1
            mu = model.multipliers(allowed) if self.nodes > 1 else mu
            r, m_i, ub_lp = model.reduced(mu, allowed)
            ub = min(ub_lp, -neg_ub)
            if ub <= self._lb() + self.tol:
                continue
            # type fixing (module docstring, rule 3): with this node's own UB(mu), whose deficits it uses
            allowed, live = self._fixed(allowed, m_i, r, ub_lp)
            self.live = live
            undecided = [i for i, ps in enumerate(live) if len(ps) > 1]
            self._try(self._choice(r, allowed, False))
            if not undecided:
                continue
            if self.nodes > 1:
                pi = np.where(self.eq, pi, np.maximum(pi, 0.0))
            else:
                pi = np.where(self.eq, m_i, np.maximum(m_i - self.z, 0.0))
            def refix():  # rule 3 again with a better plan: the pairs left per job, or None
                nonlocal allowed, live
                fewer, left = self._fixed(allowed, m_i, r, ub_lp)
                if fewer.sum() == allowed.sum():
                    return None
                allowed, live = fewer, left
                self.live = live
                return live

            # subgradient steps at the root; a child starts from its parent's multipliers and columns
            before = self._lb()
            ub, pi, use, live = self._lagrange(allowed, live, pi, ub, LAGRANGE_STEPS if self.nodes == 1 else CHILD_STEPS,
                                               refix if REFIX else None)
            if REFIX and self._lb() > before + self.tol and ub > self._lb() + self.tol:
                refix()
            undecided = [i for i, ps in enumerate(live) if len(ps) > 1]
            if not undecided:
                self._try(self._choice(r, allowed, False))
                continue
            if ub > self._lb() + self.tol:
                self.master_failed = False
                ub, pi, use = self._colgen(allowed, live, pi, ub, COLGEN_STEPS)
                if self.master_failed and ub > self._lb() + self.tol:  # no LP: the subgradient's steps instead
                    ub, pi, use, _ = self._lagrange(allowed, live, pi, ub, LAGRANGE_STEPS)
            if ub <= self._lb() + self.tol:
                continue
            if self.nodes == 1 and self.grouped and 0 < self._choices(live) <= IP_VARIABLES:  # rules 7-8, root
                live = self._probe(live, pi)
                if live is None:
                    continue
                if self._exact_ip(live):
                    return
                allowed = self._mask(live)
                undecided = [i for i, ps in enumerate(live) if len(ps) > 1]
                if not undecided:
                    self._try(self._choice(r, allowed, False))
                    continue
            if self._expired():
                self.open_bound = max(self.open_bound, ub, *(-h[0] for h in heap))
                return

            def conflict(i):  # the job the relaxation spreads most over types first, then the closest types
                vals = sorted((r[p] for p in live[i]), reverse=True)
                off = 0 if use is None else use[i]
                return (-off, vals[0] - vals[1])
            def group_first(i):  # of interchangeable jobs, the first undecided one (rule 6)
                k = int(model.sym_prev[i])
                while k >= 0:
                    if len(live[k]) > 1:
                        i = k
                    k = int(model.sym_prev[k])
                return i
            ranked = sorted(undecided, key=conflict)
            i, bounds = group_first(ranked[0]), {}
            if STRONG_CANDIDATES and use is not None:
                i, bounds = self._strong_branch(live, pi, ub, ranked, group_first, use)
            for p in live[i]:
                child = allowed.copy()
                child[[q for q in model.pairs_of[i] if q != p]] = False
                # a root probe's bound holds for every node below the root with job i on p's type
                bound = min(ub, self.probed.get((i, p), ub), bounds.get(p, ub))
                heapq.heappush(heap, (-bound, counter, child, pi))
                counter += 1

    def _strong_branch(self, live, pi, ub, ranked, group_first, split):
        """Rule 10: of the jobs the master splits most (up to STRONG_CANDIDATES, ``ranked`` first), the one
        whose children's bounds fall most: each child's bound is :meth:`_dual` at the node's ``pi`` with the
        job on that child's type only (a valid bound of the child). Scored by the product of the two
        smallest falls. Returns (job, {pair: its child's bound})."""
        prepared = self._prepare_dual(live)
        best, best_score, best_bounds = group_first(ranked[0]), -math.inf, {}
        if prepared is None:
            return best, best_bounds
        seen = set()
        for i in ranked:
            if len(seen) >= STRONG_CANDIDATES or split[i] <= 1e-6 or self._expired():
                break
            i = group_first(i)
            if i in seen:
                continue
            seen.add(i)
            at = np.flatnonzero(prepared.pair_jobs == i)
            bounds, falls = {}, []
            for k in at.tolist():
                got = self._counted_dual(prepared, pi, at[at != k])
                if got is _EXPIRED or got is None:
                    bounds[int(prepared.pair_ids[k])] = -math.inf if got is None else ub
                    falls.append(math.inf if got is None else 0.0)
                    continue
                bounds[int(prepared.pair_ids[k])] = min(ub, got[0])
                falls.append(max(ub - got[0], 0.0))
            falls.sort()
            score = (falls[0] + self.tol) * (falls[1] + self.tol) if len(falls) > 1 else falls[0]
            if score > best_score:
                best, best_score, best_bounds = i, score, bounds
        return best, best_bounds

    def _fixed(self, allowed: np.ndarray, m_i: np.ndarray, r: np.ndarray, ub_lp: float):
        """Rule 3 with the best plan so far: (the allowed pairs as a mask, the pairs left per job with
        rule 6's order imposed), keeping a pair only if UB(mu) less its deficit reaches the best plan."""
        kept = allowed & (m_i[self.model.pair_job] - r <= ub_lp - self._lb() + self.tol)
        live = self._ordered([[p for p in pairs if kept[p]] for pairs in self.model.pairs_of])
        return self._mask(live), live

    def _mask(self, live: list[list[int]]) -> np.ndarray:
        """The allowed (job, type) pairs as a mask over every pair, from the pairs left per job."""
        allowed = np.zeros(len(self.model.pair_job), dtype=bool)
        allowed[[p for ps in live for p in ps]] = True
        return allowed

    def _choices(self, live: list[list[int]]) -> int:
        """How many (job, type, count > 0) choices are left: the size of rule 8's integer program."""
        return sum(len(self.positive[p][0]) for ps in live for p in ps)

    def _exact_ip(self, live: list[list[int]]) -> bool:
        """Rule 8: the types and Pareto counts left at the root as an integer program, solved by HiGHS
        to a zero gap (the caller keeps it to IP_VARIABLES (job, type, count) choices). Its plan is re-solved per type by the
        DP (so its value is the DP's) and kept if better. True when the best plan then meets HiGHS's
        bound: no plan can beat it (the types dropped before could not), so the search is over."""
        from unicron_plan.solvers import ipmodel, milp

        model = self.model
        if self._expired():
            return False
        form = ipmodel.Formulation(model.problem, node_level=False)
        # Interchangeable jobs with the same types left form one group, its variables counting how
        # many of them run on a type at a count (no symmetric copies for HiGHS to branch over).
        groups: dict[tuple, list[int]] = {}
        for i, ps in enumerate(live):
            groups.setdefault((int(model.sym_class[i]), tuple(int(model.pair_type[p]) for p in ps)), []).append(i)
        meaning: list[tuple[list[int], int, int]] = []  # variable -> (its group's jobs, type, count)
        per_type: list[dict[int, int]] = [{} for _ in model.types]
        const = 0.0
        for jobs in groups.values():
            i, k = jobs[0], len(jobs)
            z = 0.0 if self.eq[i] else float(self.z[i])  # suspending: the job's constant, none of its variables
            const += z * k
            one = {}
            for p in live[i]:
                y, g = self.positive[p]
                t = int(model.pair_type[p])
                for count, gain in zip(y.tolist(), g.tolist()):
                    v = form.var(f"n_{i}_{t}_{count}", 0, k)
                    form.objective[v] = float(gain) - z
                    meaning.append((jobs, t, int(count)))
                    one[v] = 1
                    per_type[t][v] = int(count)
            if one:
                form.row(one, lo=k if self.eq[i] else None, hi=k)
            elif self.eq[i]:
                return False
        for t, coefs in enumerate(per_type):
            if coefs:
                form.row(coefs, hi=int(model.cap[t]))
        result, values = milp._call_highs(form, SolverOptions(deadline=self.deadline, threads=1))
        self.ip_runs += 1
        if result["termination"] == "infeasible":  # no plan in what is left: the best plan is optimal
            return self.best is not None
        if result["termination"] != "optimal" or values is None:
            return False
        chosen = [ps[0] if ps else model.pairs_of[i][0] for i, ps in enumerate(live)]
        given: dict[int, int] = {}  # jobs of each group handed a type so far
        for v, x in enumerate(values):
            jobs, t, _ = meaning[v]
            for _ in range(int(round(x))):
                at = given.get(jobs[0], 0)
                if at < len(jobs):
                    i = jobs[at]
                    chosen[i] = next(p for p in live[i] if int(model.pair_type[p]) == t)
                    given[jobs[0]] = at + 1
        self._try(chosen)
        return const + float(result["bound"]) <= self._lb() + self.tol

    def _probe(self, live: list[list[int]], pi: np.ndarray) -> list[list[int]] | None:
        """Rule 7: each undecided job's types, each tried alone under the node's multipliers ``pi``; a type
        whose bound (:meth:`_dual` with the job on it) cannot beat the best plan is dropped. Returns the
        types left (the order of rule 6 imposed again), or None when the node cannot beat the best plan."""
        changed = False
        self.probed = {}  # (job, pair) -> the bound with the job on that pair's type
        for i in range(self.model.m):
            if len(live[i]) < 2:
                continue
            keep = []
            for p in live[i]:
                if self._expired():
                    return live
                trial = list(live)
                trial[i] = [p]
                prepared = self._prepare_dual(trial)
                got = None if prepared is None else self._dual(prepared, pi)
                self.lagrange_steps += 1
                if got is not None and got[0] > self._lb() + self.tol:
                    keep.append(p)
                    self.probed[i, p] = got[0]
            if len(keep) < len(live[i]):
                changed = True
                if not keep and self.eq[i]:
                    return None
                live[i] = keep
        return self._ordered(live) if changed else live

    def _ordered(self, live: list[list[int]]) -> list[list[int]]:
        """The allowed pairs per job with the order of interchangeable jobs imposed (rule 6): a job
        after one that must suspend (no pair left, and allowed to suspend) suspends too; a job after
        one whose types are all at least t keeps only its types >= t."""
        model = self.model
        for b in range(model.m):
            a = int(model.sym_prev[b])
            if a < 0 or not live[b]:
                continue
            if not live[a]:
                if not self.eq[b]:
                    live[b] = []
                continue
            low = min(int(model.pair_type[p]) for p in live[a])
            live[b] = [p for p in live[b] if int(model.pair_type[p]) >= low]
        return live

    def _expired(self) -> bool:
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            self.timed_out = True
            return True
        return False


def _limitations(problem: Problem) -> list[str]:
    """What the count-level search cannot express, on any type a job may use (dp_limitations of
    every choice of types would say the same): node-level tp, max_nodes, same_rack, the churn limit."""
    from unicron_plan.core.constraints import dp_limitations

    out = list(dp_limitations(problem))
    for alts in problem.alternatives.values():
        j = alts[0]
        if j.tp > 1 or j.max_nodes is not None or j.same_rack:
            label = f"jobs {j.id!r}: tp {j.tp}" if j.tp > 1 else f"jobs {j.id!r}: locality on another GPU type"
            if label not in out:
                out.append(label)
    return out


def solve_types(problem: Problem, deadline: float | None = None) -> tuple[dict[str, int], dict[str, str], float,
                                                                          float, bool, dict]:
    """(counts, GPU type per job, value, bound, timed out, stats) of the separable mixed problem."""
    from unicron_plan.extras import require

    for module in NEEDS:
        require(module, "a plan for a mixed fleet", load=False)
    model = _Model(problem)
    search = _Search(model, deadline)
    search.run()
    if search.best is None:
        if search.timed_out:
            raise InfeasibleError("no plan found before the time limit; raise it")
        raise InfeasibleError("the jobs that may not suspend (pinned, hysteresis) do not fit on any choice of "
                              "GPU types")
    counts, chosen, value = search.best
    types = {}
    for j, y, p in zip(problem.jobs, counts, chosen):
        types[j.id] = model.types[int(model.pair_type[p])] if y > 0 else j.gpu_type
    bound = max(value, search.open_bound)
    stats = {"nodes": search.nodes, "lagrange_steps": search.lagrange_steps, "ip_runs": search.ip_runs, "types": len(model.types),
             "pairs": int(len(model.pair_job)), "envelope_points": int(len(model.hy))}
    return ({j.id: int(y) for j, y in zip(problem.jobs, counts)}, types, value, bound,
            search.timed_out or bound > value + search.tol, stats)


def solve(problem: Problem, options: SolverOptions | None = None, single=None) -> RawSolution:
    """Choose every job's GPU type and count exactly (module docstring).

    A single-type problem goes to the DP unchanged. With node-level or churn constraints, the
    optimum of the count-level problem is returned when its counts can be placed under them
    (then it is optimal for the constrained problem too); otherwise the node-level model over
    types (:mod:`unicron_plan.solvers.mixed_place`) decides, the count-level optimum bounding it,
    its candidates solved by ``single`` (the router's single-type solver,
    :func:`unicron_plan.solvers.auto.solve_single`: the router hands it over, nothing here imports it).
    """
    if not problem.alternatives:
        return dp.solve(problem, options)
    options = options or SolverOptions()
    deadline = options.deadline
    counts, types, value, bound, stopped, stats = solve_types(problem, deadline)
    placement = None
    limits = _limitations(problem)
    if limits:
        placement = place_count_level(problem, counts, types, options)
        if placement is None:
            if single is None:
                raise TypeError("mixed.solve: node-level or churn constraints need single= (solvers.auto routes)")
            return _solve_node_level(problem, options, bound, types, stats, single)
        if placement is PLACED_AT_ASSEMBLY:
            placement = None
        stats["backend"] = "mixed+place"
    resolved = problem.with_types(types)
    objective = resolved.objective(counts, placement)
    if stopped:
        return RawSolution(counts=counts, objective=objective, bound=max(bound, objective), termination="time_limit",
                           solution="feasible", placement=placement, types=types,
                           options={"stopped": "time limit", **stats})
    return RawSolution(counts=counts, objective=objective, bound=objective, placement=placement, types=types,
                       options=stats)


def relaxation(problem: Problem, deadline: float | None = None) -> tuple[dict[str, int], float]:
    """The optimum over types and counts with node-level and churn constraints dropped: an upper bound."""
    counts, _, value, bound, _, _ = solve_types(problem, deadline)
    return counts, bound


def _solve_node_level(problem: Problem, options: SolverOptions, bound: float, types: dict[str, str],
                      stats: dict, single) -> RawSolution:
    """The count-level optimum cannot be placed: the node-level model over types and counts
    (:func:`unicron_plan.solvers.mixed_place.solve`), bounded by ``bound`` too, its first
    candidate the count-level optimum's ``types``."""
    from unicron_plan.solvers import mixed_place

    raw = mixed_place.solve(problem, options, bound=bound, types=types, single=single, relax=solve_types)
    raw.options = {**stats, "count_level_bound": bound, **raw.options, "backend": "mixed+node-level"}
    return raw
