"""The planner policies' problem of each re-plan, built from what stays the same during a run.

:func:`unicron_plan.core.problem.tabulate` derives every job's fixed data (id, type, weight,
constraints, the position of its table in the flat tables) at every call and works out each job's
gains with several passes over all table entries. The jobs and their tables do not change during a
simulation: :class:`RunTerms` keeps the fixed data as lists and arrays, keeps each job's D_trans
until its Job object (replaced only when its allocation changes) is replaced, and computes all gains
in one pass, F x D_run minus the job's transition term, with the one entry at the job's own count
put back where it is not a change. The result is the Problem ``tabulate`` returns (the same values
to the last bit; ``tests/test_sim_terms.py`` compares them field by field).

It also keeps the gains of every table entry and the counts that fit (:meth:`RunTerms.flat_options`),
so that the DP takes every job's options as one set of arrays instead of joining them again
(:func:`unicron_plan.solvers.dp.solve_type_joined`).

An event changes the terms of a few jobs, yet D_run (and, under the job horizon, D_trans) moves
for all of them: the JobTerms of one problem are kept for the next, remade only for the jobs whose
count, hit, F at the count, leaving or counts that fit changed. They are :class:`KeptTerms`: D_run,
D_trans and the gains are read from the run's last problem (the gains views of one buffer, written
the first time any of them is read: the greedy baseline never reads them, and the DP takes them at
its options alone, :meth:`RunTerms.dp_counts`). So a problem built here is valid
until the next call of :meth:`RunTerms.tabulate` (the planner policies use each at once); a copy of
a RunTerms (a forked run) makes its own. :meth:`RunTerms.placement_start` finds the jobs that stay
(count kept, not hit) with arrays, so that placement visits only the others.

Cases it does not cover are passed to ``tabulate`` itself: the ``"lifetime"`` horizon, a gain that
overflows a float (``tabulate`` names the job).
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from typing import NamedTuple

import numpy as np

from unicron_plan.core import constraints, cost
from unicron_plan.core.problem import FlatTables, JobTerms, Problem, tabulate
from unicron_plan.solvers.dp import pareto_mask, solve_type_joined


class FlatOptions(NamedTuple):
    """Every job's terms over its flat table entries: gains at each entry, the number of leading
    entries that fit (job i's counts are ``counts[off[i]:off[i] + fits[i]]``), and whether a
    constraint removed counts from any job (then the jobs' terms are not these prefixes)."""

    counts: np.ndarray
    gains: np.ndarray
    off: np.ndarray
    fits: np.ndarray
    filtered: bool
    x_at: np.ndarray  # each job's entry at its own count (-1: not in its table)
    charges: bool  # D_run > 0 and every transition term >= 0 (RunTerms.dp_counts)


class _Shared:
    """What the kept JobTerms of one RunTerms read from the last problem built: D_run, every job's
    D_trans (a list in job order) and the gains, written into the run's buffer on first read."""

    __slots__ = ("d_run", "d_trans", "pending")

    def __init__(self):
        self.d_run, self.d_trans, self.pending = 0.0, [], None

    def fill(self) -> None:
        """Write the last problem's gains into the buffer the JobTerms view (once per problem)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending[0]._write_gains(*pending[1:])


def _plain(fields: dict) -> JobTerms:
    t = object.__new__(JobTerms)
    t.__dict__ = fields
    return t


class KeptTerms(JobTerms):
    """The JobTerms :class:`RunTerms` keeps between problems: ``d_run``, ``d_trans`` and ``gains`` read
    the last problem's values from the run (one D_run set once, not on 8,192 objects; the gains
    written only when something reads them: the greedy baseline never does). Set, they are the
    object's own (``dataclasses.replace`` sets every field); a copy or pickle is a plain JobTerms
    with the values read at that moment."""

    @property
    def d_run(self) -> float:
        d = self.__dict__
        return d["_d_run"] if "_d_run" in d else d["_shared"].d_run

    @d_run.setter
    def d_run(self, value: float) -> None:
        self.__dict__["_d_run"] = value

    @property
    def d_trans(self) -> float:
        d = self.__dict__
        return d["_d_trans"] if "_d_trans" in d else d["_shared"].d_trans[d["index"]]

    @d_trans.setter
    def d_trans(self, value: float) -> None:
        self.__dict__["_d_trans"] = value

    @property
    def gains(self) -> np.ndarray:
        d = self.__dict__
        shared = d.get("_shared")
        if shared is not None and shared.pending is not None:
            shared.fill()
        return d["_gains"]

    @gains.setter
    def gains(self, value: np.ndarray) -> None:
        self.__dict__["_gains"] = value

    def __reduce_ex__(self, protocol):
        return _plain, ({f.name: getattr(self, f.name) for f in dataclasses.fields(JobTerms)},)


class RunTerms:
    """:func:`tabulate` for the jobs of one run (``base``: the run's instance without event; its jobs,
    tables and flat tables never change during the run)."""

    def __init__(self, base, tables, layouts, flat: FlatTables):
        jobs = base.jobs
        m = self.m = len(jobs)
        self.tables, self.layouts, self.flat = tables, layouts, flat
        sizes = self.sizes = np.diff(flat.off)
        self.starts = flat.off[:-1]
        self.job_of = np.repeat(np.arange(m, dtype=np.intp), sizes)
        self.scale = int(flat.counts.max()) + 1 if len(flat.counts) else 1
        # job i's entries are the keys i * scale + count, ascending over the whole flat array
        self.keys = self.job_of.astype(np.int64) * self.scale + flat.counts
        self.first_key = np.arange(m, dtype=np.int64) * self.scale
        self.ids = [j.id for j in jobs]
        self.types = [j.throughput.gpu_type for j in jobs]
        self.type_set = set(self.types)
        self.fixed = [(j.weight, tables[j.id], layouts.get(j.id, {}), j.tp, j.pinned, j.max_nodes,
                       bool(j.same_rack), j.min_gain_fraction) for j in jobs]
        # Each job's JobTerms attributes that never change, JobTerms' defaults first (see tabulate)
        defaults = {f.name: f.default for f in dataclasses.fields(JobTerms)
                    if f.default is not dataclasses.MISSING and f.name not in ("d_run", "d_trans", "gains")}
        self.templates = [{**defaults, "index": k, "id": j.id, "gpu_type": j.throughput.gpu_type, "weight": j.weight,
                           "table": tables[j.id], "layouts": layouts.get(j.id, {}), "tp": j.tp or 1,
                           "max_nodes": j.max_nodes, "same_rack": bool(j.same_rack)}
                          for k, j in enumerate(jobs)]
        self.pinned = [k for k, j in enumerate(jobs) if j.pinned]
        # jobs whose counts a constraint may filter (tp > 1, pinned, hysteresis), in job order
        self.constrained = [k for k, j in enumerate(jobs)
                            if (j.tp is not None and j.tp > 1) or j.pinned or j.min_gain_fraction is not None]
        # no job with a constraint the DP folds in or cannot express, all of one GPU type: the DP can
        # take the flat options as they are (dp_counts)
        self.plain = not self.constrained and all(j.max_nodes is None and not j.same_rack for j in jobs) \
            and len(set(self.types)) <= 1
        # the entries worth more than every smaller count of the job (F alone), see dp_counts
        self.f_pareto = pareto_mask(flat.f, flat.off)
        self.f_pareto_at = np.flatnonzero(self.f_pareto)
        self._job_seen: list = [None] * m  # the Job object each D_trans below was made from
        self._d = [0.0] * m  # cost.d_trans_seconds of that Job
        self._x = [0] * m  # and its current count
        self._split_seen: list = [None] * m  # the previous split each node count below was made from
        self._held = [0] * m
        self._listed = np.zeros(m, dtype=bool)  # the previous split lists a node (see _splits)
        self._options: tuple | None = None  # (weak reference to the last problem built here, its FlatOptions)
        # The JobTerms of the last problem built by the array path, reused by the next one (see tabulate),
        # with what each was made from: own count, hit, F there (bits), leaving, end of its entries.
        self._made: list | None = None
        self._shared = _Shared()  # the D_run, D_trans and gains the kept JobTerms read (KeptTerms)
        self._made_from: tuple | None = None
        self._gains = np.empty(len(flat.f))  # every re-plan's gains, written in place
        self.placed: list[int] | None = None  # the jobs the last placement_start left to place (ascending)
        self._want = self._at = None  # the last call's keys of each job's own count and their entries
        self._pen_rep: np.ndarray | None = None  # see _repeated
        self._pen_bits: np.ndarray | None = None
        self._dp_at: tuple | None = None  # the DP's entries for the last own counts off the F Pareto set
        self._at_kept: tuple | None = None  # see _gains_at
        self._last_counts: tuple[dict, np.ndarray] | None = None  # see _counts_dict
        self._handed: tuple[dict, np.ndarray] | None = None  # see dp_counts_array
        finite_f = np.isfinite(flat.f).all() if len(flat.f) else True
        self._f_max = float(np.abs(flat.f).max()) if len(flat.f) and finite_f else (0.0 if finite_f else math.inf)

    def __getstate__(self):
        """A copy (a forked run's policy, a pickle) makes its own JobTerms: the kept ones hold views of
        this object's gains buffer, which a copy would turn into arrays of their own."""
        state = dict(self.__dict__)
        state["_made"] = state["_made_from"] = state["_options"] = None
        state["_shared"] = _Shared()
        return state

    def _d_trans(self, instance, changed) -> list[float]:
        """cost.d_trans_seconds of every job, re-derived only for replaced Job objects (looked for among
        ``changed``, the jobs whose Job object may have been replaced since the last call; None: all)."""
        seen, d, x, jobs = self._job_seen, self._d, self._x, instance.jobs
        for k in range(self.m) if changed is None else changed:
            job = jobs[k]
            if job is not seen[k]:
                seen[k], d[k], x[k] = job, cost.d_trans_seconds(instance, job), job.current.gpus
        return d

    def _repeated(self, pen: np.ndarray) -> np.ndarray:
        """``np.repeat(pen, sizes)`` (each job's transition term over its entries), kept between calls and
        rewritten only over the jobs whose term changed (to the bit)."""
        bits = pen.view(np.int64)
        kept = self._pen_rep
        if kept is None or self._pen_bits is None:
            kept = self._pen_rep = np.repeat(pen, self.sizes)
        else:
            moved = np.flatnonzero(bits != self._pen_bits).tolist()
            if len(moved) > self.m // 16:  # (a new array rather than a copy of one into the kept one)
                kept = self._pen_rep = np.repeat(pen, self.sizes)
            else:
                off = self.flat.off
                for i in moved:
                    kept[off[i]:off[i + 1]] = pen[i]
        self._pen_bits = bits.copy()
        return kept

    @np.errstate(over="ignore", invalid="ignore")
    def _write_gains(self, d_run: float, pen: np.ndarray, back: np.ndarray, exiting: list[int]) -> None:
        """Every entry's gain into the buffer: G(y) = F(y) D_run - [changed] F(x) D_trans, changed =
        (y != x or hit) and not leaving. Every entry pays, then the entries ``back`` (at x of a job neither
        hit nor leaving) and the entries of the ``exiting`` jobs get F(y) D_run (the same floats as
        subtracting 0)."""
        f = self.flat.f
        gains = np.multiply(f, d_run, out=self._gains)
        gains -= self._repeated(pen)
        gains[back] = f[back] * d_run
        off = self.flat.off
        for i in exiting:
            a, b = int(off[i]), int(off[i + 1])
            gains[a:b] = f[a:b] * d_run

    def _fits(self, capacity: dict[str, int]) -> np.ndarray:
        """How many leading entries of each job's table fit its GPU type's capacity (all of them
        where the capacity reaches the largest count of any job, the usual case: no search)."""
        if min((capacity.get(t, -1) for t in self.type_set), default=-1) >= self.scale - 1:
            return self.sizes.copy()
        cap = np.fromiter(map(capacity.__getitem__, self.types), dtype=np.int64, count=self.m)
        return np.searchsorted(self.keys, self.first_key + np.minimum(cap, self.scale - 1), side="right") - self.starts

    def _splits(self, state, changed) -> None:
        """Each job's nodes with GPUs in its previous split (as cost.job_transition_terms counts them) and
        whether the split lists any node, re-counted only for replaced splits (a split is replaced, never
        changed in place), looked for among ``changed`` (None: every job)."""
        seen, held, listed, previous, ids = self._split_seen, self._held, self._listed, state.previous, self.ids
        for k in range(self.m) if changed is None else changed:
            split = previous.get(ids[k])
            if split is None:
                split = {}
            if split is not seen[k]:
                seen[k], held[k] = split, len(split) - list(split.values()).count(0)
                listed[k] = len(split) > 0

    @np.errstate(over="ignore", invalid="ignore")
    def tabulate(self, instance, state, changed: list[int] | None = None, hit_at: list[int] | None = None) -> Problem:
        """The Problem ``core.problem.tabulate(instance, state, tables, layouts, flat)`` returns (valid
        until the next call: its JobTerms are kept and updated by it, module docstring). ``changed``: the
        jobs whose Job object or previous split may differ from the last call's (None: any job);
        ``hit_at``: the jobs ``state.hit`` holds True for, where the caller knows them (None: read it)."""
        self._options = None
        self.placed = None
        d = np.asarray(self._d_trans(instance, changed), dtype=float)  # kept up to date on every path
        self._splits(state, changed)
        if instance.cost.horizon == "lifetime":
            return self._reference(instance, state)
        flat, m, ids = self.flat, self.m, self.ids
        d_run = cost.d_run_seconds(instance, state.nodes_in_service())
        capacity = state.capacity()
        x_list = self._x
        xs = np.asarray(x_list, dtype=np.int64).reshape(m)
        if hit_at is None:
            hit = np.fromiter(map(state.hit.__getitem__, ids), dtype=bool, count=m)
        else:  # the caller names the hit jobs
            hit = np.zeros(m, dtype=bool)
            hit[hit_at] = True
        exiting = np.fromiter(map(state.exiting.__contains__, ids), dtype=bool, count=m) if state.exiting \
            else np.zeros(m, dtype=bool)
        # F at each job's own count: its entry where the count is in its table
        want = self.first_key + np.minimum(xs, self.scale - 1)
        if not m:
            at = want
        elif self._want is None:
            at = np.minimum(np.searchsorted(self.keys, want), len(self.keys) - 1)
        else:  # searched again only for the jobs whose count moved since the last call
            at = self._at.copy()
            moved = np.flatnonzero(want != self._want)
            at[moved] = np.minimum(np.searchsorted(self.keys, want[moved]), len(self.keys) - 1)
        self._want, self._at = want, at
        found = (self.keys[at] == want) & (xs < self.scale) if m else np.zeros(0, dtype=bool)
        f_x = np.where(found, flat.f[at] if m else 0.0, np.nan)
        for i in np.flatnonzero(~found).tolist():  # not in the table: the lookup names the count
            f_x[i] = float(cost.waf(self.fixed[i][0], self.tables[ids[i]][x_list[i]]))
        if cost.uses_job_horizon(instance):  # D_trans x max(nodes held, 1) / max(H, 1) (cost.horizon_terms)
            d_trans = d * (np.maximum(np.asarray(self._held, dtype=np.int64), 1) / max(state.nodes_in_service(), 1))
        else:
            d_trans = d
        pen = f_x * d_trans
        # the gains (_write_gains) are written when first read (KeptTerms.gains, flat_options)
        gains, shared = self._gains, self._shared
        shared.pending = (self, d_run, pen, at[found & ~hit & ~exiting], np.flatnonzero(exiting).tolist())
        # every gain is finite where |F| x |D_run| + |pen| stays far below the largest float, else checked
        finite = np.isfinite(pen).all()
        if finite and not (math.isfinite(d_run) and self._f_max * abs(d_run) + float(np.abs(pen).max(initial=0.0)) < 1e300):
            shared.fill()
            finite = np.isfinite(gains).all()
        if not finite:  # tabulate reports it (or not, past the fit)
            shared.pending = None
            return self._reference(instance, state)
        # counts ascend: the counts that fit are a prefix (only the leading 0 for a leaving job)
        fits = self._fits(capacity)
        fits[exiting] = 1
        ends_a = self.starts + fits
        made_from = (xs, hit, f_x.view(np.int64), exiting, ends_a)
        jobs = self._made
        if jobs is None:
            redo = range(m)
        else:  # the jobs whose terms other than D_run and D_trans differ from the last problem's
            before = self._made_from
            diff = np.zeros(m, dtype=bool)
            for a, b in zip(made_from, before):
                diff |= a != b
            diff[self.constrained] = True  # their counts may be filtered: made again every time
            redo = np.flatnonzero(diff).tolist()
            jobs = list(jobs)
        if len(redo):
            if jobs is None:
                jobs = [None] * m
            all_counts, all_f = flat.counts, flat.f
            new, fixed, templates, starts, ends = object.__new__, self.fixed, self.templates, self.starts, ends_a
            # JobTerms(...) with the same attributes, set as one dict: the constructor's keyword
            # handling is most of the time of building 8,192 of them. D_run, D_trans and the gains (views
            # of the buffer) are read from the run (KeptTerms)
            for i in redo:
                lo, hi, exits = int(starts[i]), int(ends[i]), bool(exiting[i])
                t = new(KeptTerms)
                t.__dict__ = {**templates[i], "x": x_list[i], "hit": bool(hit[i]),
                              "f_x": float(f_x[i]), "counts": all_counts[lo:hi], "f": all_f[lo:hi],
                              "_gains": gains[lo:hi], "_shared": shared, "pinned": bool(fixed[i][4]) and not exits,
                              "min_gain_fraction": None if exits else fixed[i][7], "exiting": exits}
                jobs[i] = t
        shared.d_run, shared.d_trans = d_run, d_trans.tolist()
        self._made, self._made_from = jobs, made_from
        jobs = list(jobs)
        filtered = False
        for i in self.constrained:
            j = jobs[i]
            job = instance.jobs[i]
            if j.exiting or not ((j.tp > 1) or j.pinned or (job.min_gain_fraction is not None and not j.hit)):
                continue
            keep = constraints.allowed_mask(job, j.counts, j.gains, j.x, j.hit, j.f_x, d_run, False)
            if not keep.all():
                j.counts, j.f, j.gains = j.counts[keep], j.f[keep], j.gains[keep]
                filtered = True
        limit = instance.max_changed_jobs
        if limit is not None:
            limit = min(limit, len(jobs))
        problem = Problem(instance, state, d_run, capacity, jobs, max_changed_jobs=limit)
        if limit is None:  # only pinned jobs and jobs without a count can fail the precheck, in job order
            suspects = sorted({*self.pinned, *self.constrained, *np.flatnonzero(fits == 0).tolist()})
            constraints.precheck(dataclasses.replace(problem, jobs=[jobs[i] for i in suspects]))
        else:
            constraints.precheck(problem)
        self._options = (weakref.ref(problem), FlatOptions(flat.counts, gains, flat.off, fits, filtered,
                                                           np.where(found, at, -1), d_run > 0 and bool((pen >= 0).all())))
        return problem

    def flat_options(self, problem: Problem, gains: bool = True) -> FlatOptions | None:
        """The FlatOptions of ``problem`` when it is the last one built here by the array path (else None);
        ``gains=False``: its gains may not be written yet (the caller reads the other fields only)."""
        if self._options is None or self._options[0]() is not problem:
            return None
        if gains:
            self._shared.fill()
        return self._options[1]

    def placement_start(self, problem: Problem, counts: dict[str, int], y: np.ndarray | None = None) -> tuple | None:
        """``plan.placement``'s first step for ``counts`` (what its ``_stays_idle`` returns, less the
        staying jobs: free GPUs per node, {job id: {}} of the jobs that do not stay, those to place) for
        the last problem built here by the array path; the jobs that stay (their count kept, not hit)
        are found with arrays, and only the others are visited. None where this does not apply (pinned
        jobs, GPU-type alternatives, a state without its idle GPUs). ``y``: ``counts`` in job order where
        the caller has them as an array (dp_counts_array): read from there, not by the 8,192 job ids."""
        if self.flat_options(problem, gains=False) is None or self.pinned or problem.alternatives or problem.state.idle is None:
            return None
        xs, hit = self._made_from[0], self._made_from[1]
        if y is None:
            y = np.fromiter(map(counts.__getitem__, self.ids), dtype=np.int64, count=self.m)
        previous, jobs = problem.state.previous, problem.jobs
        free = dict(problem.state.idle)
        result: dict[str, dict[str, int]] = {}
        movers = []
        # in job order, as _stays_idle; a job planned at 0 that held no node and is not hit is left out
        # (placement gives it an empty split: its previous one, equal)
        placed = np.flatnonzero(((y == 0) & self._listed) | (y != xs) | hit).tolist()
        for i in placed:
            j = jobs[i]
            result[j.id] = {}
            if y[i] != 0:
                movers.append(j)
            for nid, g in previous[j.id].items():
                free[nid] = free.get(nid, 0) + g
        self.placed = placed
        return free, result, movers

    def dp_counts(self, problem: Problem) -> dict[str, int] | None:
        """``dp.solve(problem).counts`` from the flat options, or None where this does not apply (a
        problem not built here by the array path, constraints, several GPU types, a change limit)."""
        flat = self.flat_options(problem, gains=False)
        if flat is None or not self.plain or problem.max_changed_jobs is not None or problem.alternatives \
                or list(problem.capacity) != self.types[:1]:
            return None
        every = (flat.fits == self.sizes).all()
        if flat.charges:
            # A count below which another count has F at least as large is never an option (worth no
            # more than that one, even when that one is the job's own count x, which pays nothing
            # here), so the options are among the entries of f_pareto and x: the same Pareto options
            # from a quarter of the entries (dp.pareto_mask keeps the first of a prefix's largest).
            x_at = flat.x_at[flat.x_at >= 0]
            extra = x_at[~self.f_pareto[x_at]]  # ascending: one per job, in job order
            if every and self._dp_at is not None and np.array_equal(self._dp_at[0], extra):
                _, at, counts, off, job_at, f_at = self._dp_at  # the same entries as the last call's
            else:
                at = self.f_pareto_at if not len(extra) else \
                    np.insert(self.f_pareto_at, np.searchsorted(self.f_pareto_at, extra), extra)
                if not every:  # each job's entries that fit
                    at = at[at < (self.starts + flat.fits)[self.job_of[at]]]
                counts = flat.counts[at]
                off = np.searchsorted(at, flat.off)  # every job's first entry (count 0) is in ``at``
                job_at, f_at = self.job_of[at], self.flat.f[at]
                self._dp_at = (extra, at, counts, off, job_at, f_at) if every else None
            gains = self._gains_at(at, job_at, f_at, off)
        elif every:  # the flat arrays as they are
            self._shared.fill()
            counts, gains, off = flat.counts, flat.gains, flat.off
        else:  # each job's leading entries that fit
            self._shared.fill()
            keep = np.arange(len(flat.counts)) - np.repeat(self.starts, self.sizes) < np.repeat(flat.fits, self.sizes)
            counts, gains = flat.counts[keep], flat.gains[keep]
            off = np.zeros(self.m + 1, dtype=np.int64)
            np.cumsum(flat.fits, out=off[1:])
        found, _ = solve_type_joined(counts, gains, off, problem.capacity[self.types[0]])
        return self._counts_dict(np.array(found, dtype=np.int64))  # its own copy (kept for the next call)

    def _counts_dict(self, y: np.ndarray) -> dict[str, int]:
        """``dict(zip(self.ids, y.tolist()))``, a new dict, made from the last one where it can: a copy of
        the last call's (the same keys in the same order) with the counts that moved rewritten. Building
        it afresh hashes 8,192 job ids scattered over the heap (about 2 ms a re-plan at 1,048,576 GPUs,
        right after the DP has been through the caches); an event moves a few counts."""
        last = self._last_counts
        if last is None or len(last[1]) != len(y):
            kept = dict(zip(self.ids, y.tolist()))
        else:
            kept, before = last
            moved = np.flatnonzero(y != before)
            ids = self.ids
            for i, v in zip(moved.tolist(), y[moved].tolist()):
                kept[ids[i]] = v
        out = kept.copy()  # the caller's own: the kept one is never handed out
        self._last_counts, self._handed = (kept, y), (out, y)
        return out

    def dp_counts_array(self, counts: dict[str, int]) -> np.ndarray | None:
        """The counts of ``counts`` in job order, as an array (not to be changed), where ``counts`` is the
        dict the last dp_counts call returned and the caller knows it unchanged since; else None."""
        handed = self._handed
        return handed[1] if handed is not None and handed[0] is counts else None

    @np.errstate(over="ignore", invalid="ignore")
    def _gains_at(self, at: np.ndarray, job_at: np.ndarray, f_at: np.ndarray, off: np.ndarray) -> np.ndarray:
        """The last problem's gains at the entries ``at`` (ascending; ``job_at``, ``f_at``: their jobs and
        F; job i's are at ``off[i]:off[i + 1]``): read from the buffer where it is written, else worked
        out there alone, entry by entry the floats _write_gains writes. The result is valid until the
        next call (for the same ``at``, its arrays are written over: no fresh pages at every re-plan)."""
        pending = self._shared.pending
        if pending is None:
            return self._gains[at]
        _, d_run, pen, back, exiting = pending
        kept = self._at_kept
        bits = pen.view(np.int64)
        if kept is None or kept[0] is not at:  # each job's transition term over its entries in ``at``
            kept = self._at_kept = (at, np.take(pen, job_at), bits.copy(), np.empty(len(at)), np.empty(len(at)))
        else:  # rewritten over the jobs whose term moved (to the bit)
            moved = np.flatnonzero(bits != kept[2]).tolist()
            if len(moved) > self.m // 16:
                np.take(pen, job_at, out=kept[1])
            else:
                for i in moved:
                    kept[1][off[i]:off[i + 1]] = pen[i]
            kept[2][:] = bits
        _, pen_at, _, paid, gains = kept
        np.multiply(f_at, d_run, out=paid)
        np.subtract(paid, pen_at, out=gains)
        # the entries that pay nothing: back (at x), and every entry of a leaving job
        pos = np.minimum(np.searchsorted(at, back), max(len(at) - 1, 0))
        pos = pos[at[pos] == back] if len(at) else pos[:0]
        gains[pos] = paid[pos]
        if exiting:
            free = np.isin(job_at, exiting)
            gains[free] = paid[free]
        return gains

    def _reference(self, instance, state) -> Problem:
        return tabulate(instance, state, self.tables, self.layouts, self.flat)
