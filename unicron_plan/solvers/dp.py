"""Exact dynamic program for the separable problem (the default solver).

Per GPU type with capacity C, jobs are folded in one at a time over a value
array V[c] = best objective of the jobs so far using at most c GPUs:

    V_j[c] = max_k V_{j-1}[c - y_k] + G_j(y_k)      over the job's kept counts y_k

What makes it fast, every rule exact (docs/performance.md has the proofs):

1. Pareto pruning: a count is dropped when a smaller one is worth at least as much.
2. Early exit: when every job's best count fits together, that is the optimum.
   Reachable capacity: every plan uses a multiple of the gcd of all allowed counts,
   so C is cut to the largest such multiple (the bounds below are then tighter, and
   with equal values per GPU a greedy plan filling it meets the bound at once).
   Count step: when that gcd g exceeds 1 (whole nodes), the DP runs on units of g GPUs,
   C // g states instead of C, and its counts are multiplied back.
3. Lagrangian bound: for the LP multiplier lam >= 0 of the capacity (from the
   jobs' concave envelopes), any plan's value is at most
   UB = lam C + sum_i m_i with m_i = max_y G_i(y) - lam y, and a plan using
   count y for job i is worth at most UB - (m_i - (G_i(y) - lam y)).
   A greedy plan gives a lower bound LB; counts whose bound is below LB are
   dropped (reduced-cost fixing), so the optimum survives.
4. Windows: after job j only capacities in [sum of the kept minimum counts,
   min(C - the later jobs' minimum counts, sum of kept maximum counts)] are
   stored (beyond the top the array is a plateau), and the ends of the window
   whose states cannot reach LB (V[c] + lam (C - c) + sum_{i>j} m_i < LB) are cut.
   The jobs are folded narrowest first (by the spread of their kept counts): each job widens
   the window by its spread until the capacity caps it, so that order stores the fewest states.
   A pass that would hold at least ``SPLIT_MIN_CELLS`` states before its cuts runs as two
   passes, over the jobs at even and at odd places of that order (each cutting by the same
   bound over the jobs it has not folded, the other half's included), joined by the best pair
   of final states c1 + c2 <= C: about half the states while the windows grow.
5. Linear stretches (equal values per GPU): call an option whose Lagrangian deficit
   m_i - (G_i(y) - lam y) is zero (to float rounding) tight; a job whose envelope runs at slope
   lam has a whole arithmetic run of tight counts, and any choice among them is worth the same
   at the same total. A plan of tight options using T GPUs is worth UB - lam (C - T); every plan
   of tight options uses at most T* GPUs, the largest such total (a bitset over the GPUs above
   every job's smallest tight count, 0..C less their sum; one shift-or per doubling of each run,
   none for a job with one tight count), and every other plan has a deficit of at least d, the
   smallest positive one. So OPT <= max(UB - lam (C - T*), UB - d), and a tight plan reaching
   T* that meets this bound is optimal with no DP pass; it is read back from the bitsets.
   When it does not meet it, it still raises LB for rules 3-4.
6. Backtracking memory is bounded: the argmax per (job, c) is stored in the
   smallest unsigned type; when that would exceed ``MEMORY_BUDGET_BYTES`` (the
   compiled pass: its windows after the cuts; without it, a bound on them before
   the cuts) the value arrays are checkpointed every B jobs and each segment's
   choices are recomputed during the backtrack (O(sqrt(m)) arrays alive).

:func:`solve_type_reference` is the straightforward DP kept for the tests.
"""

from __future__ import annotations

import math
import operator
import threading
import time
from typing import NamedTuple

import numpy as np

from unicron_plan.core.constraints import dp_limitations
from unicron_plan.errors import InfeasibleError, SolverUnavailableError
from unicron_plan.core.problem import JobTerms, Problem, RawSolution
from unicron_plan.solvers import SolverOptions

MEMORY_BUDGET_BYTES = 512 * 2**20
REL_TOL = 1e-9  # relative tolerance of callers comparing objectives (the DP's own margin: ROUNDING_ULPS)
CORE_DIVISORS = (2**20, 2**14, 2**8, 2**4)  # core widths tried, as fractions 1/div of the bound's gap
ROUNDING_ULPS = 8  # float error allowed per added gain when a plan is compared with the bound


def _load_native():
    """The compiled fold, pass, dominance pruning, envelopes and option keys
    (unicron_plan/solvers/_maxplus.c) through ctypes, or Nones when not built."""
    try:
        import ctypes

        from unicron_plan.solvers import _maxplus
        lib = ctypes.CDLL(_maxplus.__file__)
        fold, whole, pareto, hull = lib.maxplus_fold, lib.maxplus_pass, lib.pareto_keep, lib.upper_hull_keep
        key, back = lib.option_key, lib.maxplus_back
    except (ImportError, OSError, AttributeError):
        return None, None, None, None, None, None
    i64, ptr, f64 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
    fold.argtypes = [ptr, i64, ptr, ptr, i64, i64, i64, ptr, ptr]
    fold.restype = None
    whole.argtypes = [i64, ptr, ptr, ptr, ptr, ptr, ptr, ptr, f64, i64, f64, i64, f64, ptr, i64, i64, ptr,
                      ptr, ptr, ptr]
    whole.restype = i64
    back.argtypes = [i64, ptr, ptr, ptr, i64, ptr, i64, ptr]
    back.restype = None
    pareto.argtypes = [i64, ptr, ptr, ptr]
    pareto.restype = None
    hull.argtypes = [i64, ptr, ptr, ptr, ptr, ptr]
    hull.restype = None
    key.argtypes = [i64, ptr, ptr, i64, ptr]
    key.restype = None
    return fold, whole, pareto, hull, key, back


# The compiled fold, whole pass, dominance pruning, envelopes, option keys (:func:`_option_key`) and a
# pass's backtrack from a chosen capacity; set them to None to force the numpy fallback (the same values).
NATIVE, NATIVE_PASS, NATIVE_PARETO, NATIVE_HULL, NATIVE_KEY, NATIVE_BACK = _load_native()


def available() -> bool:
    """The DP needs only numpy."""
    return True


def pareto_arrays(counts: np.ndarray, gains: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts (ascending, 0 first) whose gain beats every smaller count's."""
    prev = np.maximum.accumulate(gains)
    keep = np.empty(len(gains), dtype=bool)
    keep[0] = True
    keep[1:] = gains[1:] > prev[:-1]
    return counts[keep], gains[keep]


def pareto_options(job: JobTerms) -> tuple[np.ndarray, np.ndarray]:
    """Counts (0 first) whose gain beats every smaller count's: exact dominance pruning."""
    return pareto_arrays(job.counts, job.gains)


class _Joined(NamedTuple):
    """Every job's options in one pair of arrays: job j's at ``off[j]:off[j + 1]``."""

    y: np.ndarray  # int64
    g: np.ndarray  # float64
    off: np.ndarray  # int64, m + 1 entries


class JoinedOptions:
    """Options held as one :class:`_Joined` (job j's at ``off[j]:off[j + 1]``), read as a list of
    (counts, gains) pairs: what :func:`solve_options` takes with ``joined=`` from a caller that
    builds its options in flat arrays."""

    def __init__(self, y: np.ndarray, g: np.ndarray, off: np.ndarray):
        self.joined = _Joined(y, g, off)

    def __len__(self) -> int:
        return len(self.joined.off) - 1

    def __getitem__(self, j):
        if not 0 <= j < len(self):
            raise IndexError(j)
        a, b = int(self.joined.off[j]), int(self.joined.off[j + 1])
        return self.joined.y[a:b], self.joined.g[a:b]


def _join(options: list[tuple[np.ndarray, np.ndarray]]) -> _Joined:
    """The options of every job as one :class:`_Joined`."""
    if not len(options):
        return _Joined(np.zeros(0, np.int64), np.zeros(0), np.zeros(1, dtype=np.int64))
    ys, gs = zip(*options)
    off = np.zeros(len(ys) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, ys), dtype=np.int64, count=len(ys)), out=off[1:])
    y = np.concatenate(ys).astype(np.int64, copy=False)
    g = np.concatenate(gs).astype(np.float64, copy=False)
    return _Joined(y, g, off)


def pareto_all(jobs: list[JobTerms]) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`pareto_options` of every job (in one compiled call when it is built)."""
    return _pareto_joined(jobs)[0]


def _pareto_joined(jobs: list[JobTerms]) -> tuple[list[tuple[np.ndarray, np.ndarray]], _Joined | None]:
    """(:func:`pareto_all`, the same options joined, or None when not joined on the way)."""
    if NATIVE_PARETO is None or not jobs or any(len(j.counts) == 0 for j in jobs):
        return [pareto_options(j) for j in jobs], None
    return _pareto_of(_join([(j.counts, j.gains) for j in jobs]))


def pareto_mask(gains: np.ndarray, off: np.ndarray) -> np.ndarray:
    """Per job j (``gains[off[j]:off[j + 1]]``, at least one entry each, counts ascending), True at the
    first entry and at each entry worth more than every earlier one: the Pareto options' mask."""
    m = len(off) - 1
    if NATIVE_PARETO is None:
        keep = np.zeros(len(gains), dtype=bool)
        for a, b in zip(off[:-1].tolist(), off[1:].tolist()):
            prev = np.maximum.accumulate(gains[a:b])
            keep[a] = True
            keep[a + 1:b] = gains[a + 1:b] > prev[:-1]
        return keep
    gains = np.ascontiguousarray(gains, dtype=np.float64)
    off = np.ascontiguousarray(off, dtype=np.int64)
    keep = np.zeros(len(gains), dtype=np.uint8)
    NATIVE_PARETO(m, off.ctypes.data, gains.ctypes.data, keep.ctypes.data)
    return keep.view(bool)


def _pareto_kept(joined: _Joined) -> _Joined:
    """The Pareto options of options already joined (every job with a count; the compiled pass),
    joined the same way."""
    counts, gains, off = joined
    keep = pareto_mask(gains, off)
    if keep.all():  # every count beats the smaller ones (near-linear tables): no copy
        return joined
    kept_off = np.zeros(len(off), dtype=np.int64)
    np.cumsum(np.add.reduceat(keep.astype(np.int64), off[:-1]), out=kept_off[1:])
    return _Joined(counts[keep], gains[keep], kept_off)


def _pareto_of(joined: _Joined) -> tuple[list[tuple[np.ndarray, np.ndarray]], _Joined]:
    """:func:`_pareto_joined` of options already joined (every job with a count; the compiled pass)."""
    ys, gs, kept_off = kept = _pareto_kept(joined)
    return [(ys[a:b], gs[a:b]) for a, b in zip(kept_off[:-1].tolist(), kept_off[1:].tolist())], kept


#: The public name of :func:`_pareto_joined` (callers that keep options between problems).
pareto_joined = _pareto_joined


def _dtype(n: int):
    return np.uint8 if n <= 256 else (np.uint16 if n <= 65536 else np.uint32)


# ---------------------------------------------------------------------------
# Reference: the straightforward DP (one pass per Pareto count over 0..C).
# ---------------------------------------------------------------------------

def solve_type_reference(jobs: list[JobTerms], capacity: int) -> tuple[dict[str, int], float]:
    """Optimal counts for one GPU type by the plain O(C x sum of kept counts) DP (for tests)."""
    best = np.zeros(capacity + 1)
    choices = []
    options = [pareto_options(j) for j in jobs]
    for counts, gains in options:
        # counts[0] is 0 unless a constraint (pinned, hysteresis) forbids suspending the job;
        # then the cells below the smallest count stay -inf (infeasible).
        new = np.full(capacity + 1, -np.inf)
        choice = np.zeros(capacity + 1, dtype=_dtype(len(counts)))
        for k in range(len(counts)):
            c = int(counts[k])
            cand = best[: capacity + 1 - c] + gains[k]
            better = cand > new[c:]
            np.copyto(new[c:], cand, where=better)
            choice[c:][better] = k
        best = new
        choices.append(choice)
    result: dict[str, int] = {}
    c = capacity
    for job, (counts, _), choice in zip(reversed(jobs), reversed(options), reversed(choices)):
        y = int(counts[choice[c]])
        result[job.id] = y
        c -= y
    return result, float(best[capacity])


# ---------------------------------------------------------------------------
# Bounds: LP multiplier, upper bound, greedy lower bound.
# ---------------------------------------------------------------------------

def _upper_hull_loop(y: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Monotone-chain concave envelope (the sequential reference of :func:`_upper_hulls`)."""
    hy, hg = [int(y[0])], [float(g[0])]
    for a, b in zip(y[1:].tolist(), g[1:].tolist()):
        while len(hy) >= 2 and (hg[-1] - hg[-2]) * (a - hy[-1]) <= (b - hg[-1]) * (hy[-1] - hy[-2]):
            hy.pop()
            hg.pop()
        hy.append(a)
        hg.append(b)
    return np.array(hy, dtype=np.int64), np.array(hg)


def _native_envelopes(joined: _Joined):
    """:func:`_upper_hulls`' compiled case: (y, g, job) of the vertices, job by job, and their
    positions among the joined options."""
    y, g, off = joined
    at = np.flatnonzero(envelope_mask(joined))
    return y[at], g[at], np.searchsorted(off, at, side="right") - 1, at


def _upper_hulls(options: list[tuple[np.ndarray, np.ndarray]], passes: int = 8, joined: _Joined | None = None,
                 hint: np.ndarray | None = None):
    """Concave envelopes of every job's options at once: (y, g, job) of the vertices, job by job.

    Compiled when built (each job's monotone chain, as :func:`_upper_hull_loop`). Otherwise
    vectorised: each pass drops, at once, every point on or below the chord of its two
    neighbours within its job (such a point is no vertex, and dropping non-vertices leaves
    the envelope unchanged); points left after ``passes`` go through the sequential loop.
    One set of numpy calls for all jobs instead of one per job. ``joined``: :func:`_join` of the
    options, when the caller has it. ``hint``: a mask over the joined options holding every vertex of
    every job's envelope (a caller that knows them); the envelopes are then built from those alone.
    """
    y, g, off = joined if joined is not None else _join(options)
    if hint is not None:
        sub = np.flatnonzero(hint)
        hy, hg, seg = _upper_hulls(options, passes, _Joined(y[sub], g[sub], np.searchsorted(sub, off)))
        return hy, hg, seg
    if NATIVE_HULL is not None:  # every job's monotone chain in one compiled call
        return _native_envelopes(_Joined(y, g, off))[:3]
    seg = np.repeat(np.arange(len(options)), np.diff(off))
    for _ in range(passes):
        if len(y) < 3:
            return y, g, seg
        drop = (seg[:-2] == seg[2:]) & ((g[1:-1] - g[:-2]) * (y[2:] - y[1:-1]) <= (g[2:] - g[1:-1]) * (y[1:-1] - y[:-2]))
        if not drop.any():
            return y, g, seg
        keep = np.ones(len(y), dtype=bool)
        keep[1:-1] = ~drop
        y, g, seg = y[keep], g[keep], seg[keep]
    # Rare: points left after the passes; finish every job with the sequential loop.
    ys, gs, segs = [], [], []
    for k in range(len(options)):
        at = seg == k
        if at.any():
            hy, hg = _upper_hull_loop(y[at], g[at])
            ys.append(hy)
            gs.append(hg)
            segs.append(np.full(len(hy), k))
    return np.concatenate(ys), np.concatenate(gs), np.concatenate(segs)


def envelope_mask(joined: _Joined) -> np.ndarray:
    """A mask over the joined options holding every vertex of every job's concave envelope (the
    ``hull_hint`` of :func:`solve_options`): exactly the vertices when compiled, else every option."""
    if NATIVE_HULL is None:
        return np.ones(len(joined.y), dtype=bool)
    y = np.ascontiguousarray(joined.y, dtype=np.int64)
    g = np.ascontiguousarray(joined.g, dtype=np.float64)
    off = np.ascontiguousarray(joined.off, dtype=np.int64)
    keep = np.zeros(len(y), dtype=np.uint8)
    stack = np.empty(max(len(y), 1), dtype=np.int64)
    NATIVE_HULL(len(off) - 1, off.ctypes.data, y.ctypes.data, g.ctypes.data, stack.ctypes.data, keep.ctypes.data)
    return keep.view(bool)


def count_step(counts: np.ndarray) -> int:
    """The gcd of ``counts`` (0 when there are none or all are 0): of the first few when that is
    already 1, the usual case, which spares a pass over every count."""
    if not len(counts):
        return 0
    head = int(np.gcd.reduce(counts[:64]))
    return 1 if head == 1 else int(np.gcd.reduce(counts))


def reachable_capacity(counts: np.ndarray, capacity: int) -> int:
    """The largest number of GPUs <= ``capacity`` that the allowed counts can add up to, bounded
    by their gcd: every plan uses a multiple of the gcd of all counts (exact when the counts
    are the multiples of one step and the jobs can fill the capacity)."""
    g = count_step(counts)
    return capacity if g <= 1 else capacity // g * g


def lp_multiplier(options: list[tuple[np.ndarray, np.ndarray]], capacity: int,
                  joined: _Joined | None = None) -> float:
    """lam minimising lam C + sum_i max_y (G_i(y) - lam y): the slope where the LP fills C."""
    return _lp(options, capacity, joined)[0]


def _lp(options, capacity: int, joined: _Joined | None = None, hint: np.ndarray | None = None):
    """(:func:`lp_multiplier`, the envelopes or None when there are none: their vertices (y, g, job),
    then their segments (first vertex, length, slope) and the segments' order by decreasing slope)."""
    if not options:
        return 0.0, None
    if hint is None and NATIVE_HULL is not None:  # (_upper_hulls' compiled case, the vertices' positions kept)
        hy, hg, seg, at = _native_envelopes(_Joined(*(joined if joined is not None else _join(options))))
        return _lp_of_hull(hy, hg, seg, capacity, at)
    return _lp_of_hull(*_upper_hulls(options, joined=joined, hint=hint), capacity)


def _lp_of_hull(hy: np.ndarray, hg: np.ndarray, seg: np.ndarray, capacity: int, at: np.ndarray | None = None,
                segments: tuple | None = None):
    """:func:`_lp` from the envelopes' vertices (y, g, job), job by job; ``at``: their positions among
    the joined options, when known (the last item of the envelopes returned). ``segments``: (the
    segments' first vertices, sizes and slopes, a k-th largest slope function) when known
    (:meth:`Splice.segments`: the same values)."""
    if segments is None:
        (within, n, s), kth = _segments(hy, hg, seg), None
    else:
        within, n, s, kth = segments
    order = SlopeOrder(s, n, capacity, kth)
    hull = (hy, hg, seg, within, n, s, order, at)
    if not len(within):
        return 0.0, hull
    read, _, fill = order.filled_to(n, capacity, "left")
    return (0.0 if fill >= len(read) else max(float(s[read[fill]]), 0.0)), hull


def _segments(vy: np.ndarray, vg: np.ndarray, job: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The envelopes' segments, from vertices (count ``vy``, gain ``vg``, ``job`` in job order): segment k
    joins vertex ``within[k]`` to the next one, of the same job; (within, sizes, slopes)."""
    within = np.flatnonzero(job[1:] == job[:-1])
    n = vy[within + 1] - vy[within]
    return within, n, (vg[within + 1] - vg[within]) / n


class SlopeOrder:
    """The envelope segments' order by decreasing slope, ties by position (``np.argsort(-s,
    kind="stable")``), made on demand: ``head`` is its leading part, the segments of slope at least a
    threshold chosen so that their sizes add up to more than ``capacity`` (the multiplier and the
    greedy starts read only about that far), ``full()`` the whole order. The head is the whole order's
    prefix exactly: every segment of slope >= t comes before every other in the stable order, and
    among them the stable sort of their slopes, taken in ascending position, keeps the same ties."""

    HEAD = 4096  # segments taken at first (doubled while their sizes do not cover the capacity)

    def __init__(self, s: np.ndarray, n: np.ndarray, capacity: int, kth=None):
        """``kth``: k -> the k-th largest of ``s`` (``s`` without NaN), when known otherwise."""
        self.s, self._full = s, None
        k = self.HEAD
        while True:
            if k >= len(s) or np.isnan(s).any():
                self.head = self.full()
                break
            t = np.partition(s, len(s) - k)[len(s) - k] if kth is None else kth(k)  # the k-th largest slope
            sel = np.flatnonzero(s >= t)
            if int(n[sel].sum()) > capacity:
                self.head = sel[np.argsort(-s[sel], kind="stable")]
                break
            k *= 4

    @property
    def whole(self) -> bool:
        return len(self.head) == len(self.s)

    def full(self) -> np.ndarray:
        if self._full is None:
            self._full = np.argsort(-self.s, kind="stable")
        return self._full

    def filled_to(self, n: np.ndarray, amount, side: str) -> tuple[np.ndarray, np.ndarray, int]:
        """(the order read, the running total of its segments' sizes ``n``, the place
        ``np.searchsorted(total, amount, side)``), on the head, or on the whole order when the place
        is past the head (its sizes do not reach ``amount``)."""
        order = self.head
        filled = np.cumsum(n[order])
        place = int(np.searchsorted(filled, amount, side=side))
        if place == len(order) and not self.whole:
            order = self.full()
            filled = np.cumsum(n[order])
            place = int(np.searchsorted(filled, amount, side=side))
        return order, filled, place


def _option_key(flat: "_Flat", capacity: int) -> np.ndarray:
    """job x (capacity + 2) + min(count, capacity + 1) of every flat option: ascending, so that a
    job's largest count <= c is one search."""
    m = len(flat.off) - 1
    y, off = flat.y, flat.off
    if (NATIVE_KEY is not None and y.dtype == np.int64 and off.dtype == np.int64 and y.flags.c_contiguous
            and off.flags.c_contiguous and len(y) == int(off[-1])):
        key = np.empty(len(y), dtype=np.int64)
        NATIVE_KEY(m, off.ctypes.data, y.ctypes.data, capacity, key.ctypes.data)
        return key
    return np.repeat(np.arange(m, dtype=np.int64) * (capacity + 2), np.diff(off)) + np.minimum(y, capacity + 1)


def _starts(hull, flat: "_Flat", capacity: int, lam: float, key: np.ndarray) -> list[np.ndarray]:
    """Feasible starts for :func:`_greedy` (flat option indices, one per job) from the envelopes:
    (1) every job at its largest vertex reached by segments of slope > lam (no tie taken);
    (2) every job at its first vertex, then envelope segments in decreasing slope, each taken whole
    when it fits (a job whose segment does not fit takes none of its later ones). Where the LP takes
    a fraction of one segment among many of equal slope (identical jobs), (2) fills the capacity with
    whole segments where (1) stops every job before the tied ones. A start that does not fit is left out."""
    hy, hg, seg, within, n, s, slopes, at = hull
    m = len(flat.off) - 1
    if at is None:
        vert = np.searchsorted(key, seg.astype(np.int64) * (capacity + 2) + np.minimum(hy, capacity + 1))
    else:  # a vertex within the capacity is its own first key (a job's keys ascend up to C + 1)
        vert = at.copy()
        big = np.flatnonzero(hy > capacity)
        vert[big] = np.searchsorted(key, seg[big].astype(np.int64) * (capacity + 2) + (capacity + 1))
    first = np.flatnonzero(np.concatenate([[True], seg[1:] != seg[:-1]]))
    if len(first) != m:
        return []
    out = []
    up = np.zeros(m, dtype=np.int64)
    np.add.at(up, seg[within[s > lam * (1 + 1e-12) + 1e-12]], 1)
    if int(hy[first + up].sum()) <= capacity:
        out.append(vert[first + up])
    at = first.copy()  # each job's vertex (an index into the hull arrays)
    left = capacity - int(hy[first].sum())
    if left < 0:
        return out
    if len(within):
        order, filled, p = slopes.filled_to(n, left, "right")  # the first p segments fit whole
        if p:
            np.add.at(at, seg[within[order[:p]]], 1)
            left -= int(filled[p - 1])
        blocked = np.zeros(m, dtype=bool)
        for b in range(p, len(s), 256):  # the rest in slope order, a block at a time until full
            if left <= 0:
                break
            if b + 256 > len(order):  # past the head: the whole order (whose prefix the head is)
                order = slopes.full()
            ks = order[b:b + 256]
            for j, size, first_vertex in zip(seg[within[ks]].tolist(), n[ks].tolist(), within[ks].tolist()):
                if left <= 0:
                    break
                if blocked[j] or at[j] != first_vertex:
                    continue
                if size <= left:
                    at[j] += 1
                    left -= size
                else:
                    blocked[j] = True
    out.append(vert[at])
    return out


def _greedy(flat: "_Flat", capacity: int, start: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, float]:
    """A feasible plan: every job at ``start`` (flat option indices, fitting together), then the best
    single upgrades into the GPUs left. ``flat``: the options flattened (:func:`_flatten`); ``key``:
    :func:`_option_key`."""
    offs, ally, allg = flat.off, flat.y, flat.g
    m = len(offs) - 1
    pick = start.copy()
    used = int(ally[pick].sum())
    base = np.arange(m, dtype=np.int64) * (capacity + 2)
    ends = offs[1:]
    last = len(key) - 1
    for _ in range(2 * m + 1):
        left = capacity - used
        want = base + np.minimum(ally[pick] + left, capacity + 1)
        # the largest count <= y + left: the job's own while its next count's key exceeds that (the
        # keys of a job ascend, and every later job's are larger); searched for the others only
        nxt = pick + 1
        moves = np.flatnonzero((nxt < ends) & (key[np.minimum(nxt, last)] <= want))
        best_idx = pick.copy()
        best_idx[moves] = np.searchsorted(key, want[moves], side="right") - 1
        delta = allg[best_idx] - allg[pick]
        i = int(np.argmax(delta))
        if delta[i] <= 0:
            break
        used += int(ally[best_idx[i]] - ally[pick[i]])
        pick[i] = best_idx[i]
    return pick - offs[:-1], float(allg[pick].sum())


# ---------------------------------------------------------------------------
# The windowed, pruned fold.
# ---------------------------------------------------------------------------

def _fold(V: np.ndarray, L: int, U: int, y: np.ndarray, g: np.ndarray, L2: int, U2: int,
          want_choice: bool):
    """new[c] = max_k Vext[c - y_k] + g_k for c in [L2, U2]; Vext is -inf below L, V[U] above U."""
    W = U2 - L2 + 1
    need_top = U2 - int(y[0])
    if need_top > U:
        Vx = np.empty(need_top - L + 1)
        Vx[: U - L + 1] = V
        Vx[U - L + 1:] = V[-1]
    else:
        Vx = V
    if NATIVE is not None:
        Vx = np.ascontiguousarray(Vx, dtype=np.float64)
        yy = np.ascontiguousarray(y, dtype=np.int64)
        gg = np.ascontiguousarray(g, dtype=np.float64)
        new = np.empty(W)
        ch32 = np.empty(W, dtype=np.uint32) if want_choice else None
        NATIVE(Vx.ctypes.data, L, yy.ctypes.data, gg.ctypes.data, len(yy), L2, W, new.ctypes.data,
               ch32.ctypes.data if want_choice else None)
        return new, (ch32.astype(_dtype(len(y))) if want_choice else None)
    new = np.full(W, -np.inf)
    choice = np.zeros(W, dtype=_dtype(len(y))) if want_choice else None
    for k in range(len(y)):
        yk = int(y[k])
        lo = max(L2, L + yk)  # c with c - yk >= L
        hi = U2
        if lo > hi:
            continue
        cand = Vx[lo - yk - L: hi - yk - L + 1] + g[k]
        dst = new[lo - L2: hi - L2 + 1]
        if want_choice:
            better = cand > dst
            np.copyto(dst, cand, where=better)
            choice[lo - L2: hi - L2 + 1][better] = k
        else:
            np.maximum(dst, cand, out=dst)
    return new, choice


def _bounds(options, joined: _Joined, capacity: int, hint: np.ndarray | None = None, shared: "Splice | None" = None):
    """(lam, the options flattened, each job's m_i, UB, the greedy plan's option indices, its value,
    the float margin) at ``capacity``: rule 3 of the module docstring. ``hint``: see :func:`_upper_hulls`.
    ``shared``: the options as a :class:`Splice` of kept ones (the same values, from their parts kept;
    the flattened options then carry no deficits)."""
    m = len(options)
    if shared is not None:
        hy, hg, seg, at = shared.hull()
        lam, hull = _lp_of_hull(hy, hg, seg, capacity, at, shared.segments(seg))
        red_max = shared.red_max(lam)
        flat = _Flat(joined.y, joined.g, joined.off, None)
        key = shared.keys(capacity)
        low = shared.low()
    else:
        lam, hull = _lp(options, capacity, joined, hint)
        flat, red_max = _flatten(options, lam, joined=joined)
        key = _option_key(flat, capacity)
        low = np.minimum.reduceat(flat.g, flat.off[:-1])
    ub = lam * capacity + math.fsum(red_max)
    lb_pick, lb = flat.off[:-1] - flat.off[:-1], -math.inf
    for start in (_starts(hull, flat, capacity, lam, key) if hull is not None else []):
        pick, value = _greedy(flat, capacity, start, key)
        if value > lb:  # the better feasible plan
            lb_pick, lb = pick, value
    if lb == -math.inf:  # every job at its smallest count (the DP reports it when that does not fit)
        lb_pick, lb = _greedy(flat, capacity, flat.off[:-1].copy(), key)
    # Float error margin of every cut and proof. A comparison involves one option's deficit
    # (m_i - (g - lam y), each term at most ``scale``), the slack lam C + sum m_i - T and a
    # DP value (a sum of m gains whose partial sums are at most the plan's sum of |g|, below
    # |UB| + twice the losses of the negative gains): each rounding is at most one ulp of
    # ``scale``, and there are fewer than ROUNDING_ULPS * (m + 1) of them. Far below any
    # relative tolerance, so gains that differ by 1e-9 relative are still told apart.
    losses = float(np.maximum(-low, 0.0).sum())
    scale = abs(ub) + lam * capacity + float(np.abs(red_max).sum()) + 2.0 * losses + 1.0
    rounding = ROUNDING_ULPS * (m + 1) * float(np.finfo(float).eps) * scale
    return lam, flat, red_max, ub, lb_pick, lb, rounding


MAX_REACH_WORDS = 50_000_000  # 64-bit words shifted by the reachability pass at most (else: C stands)


def _runs(y: np.ndarray) -> list[tuple[int, int, int]]:
    """Ascending counts as arithmetic runs (first, step, length) covering them all: one per stretch of
    equal steps (neighbouring runs share their end count, which is harmless to a union)."""
    if len(y) < 2:
        return [(int(v), 1, 1) for v in y.tolist()]
    d = np.diff(y)
    starts = np.concatenate([[0], np.flatnonzero(d[1:] != d[:-1]) + 1])
    ends = np.concatenate([starts[1:], [len(d)]])  # group k: steps d[starts[k]:ends[k]]
    return list(zip(y[starts].tolist(), d[starts].tolist(), (ends - starts + 1).tolist()))


def _runs_of(y: list[int]) -> list[tuple[int, int, int]]:
    """:func:`_runs` of ascending counts given as a list (in Python: a job has few zero-deficit counts)."""
    if len(y) > 64:
        return _runs(np.asarray(y, dtype=np.int64))
    if len(y) < 2:
        return [(v, 1, 1) for v in y]
    out, start = [], 0
    for i in range(1, len(y) - 1):
        if y[i + 1] - y[i] != y[i] - y[i - 1]:
            out.append((y[start], y[start + 1] - y[start], i - start + 1))
            start = i
    out.append((y[start], y[start + 1] - y[start], len(y) - start))
    return out


def reachable_sum(options: list[tuple[np.ndarray, np.ndarray]], capacity: int,
                  deadline: float | None = None) -> int:
    """The largest total <= ``capacity`` of one allowed count per job (every plan uses at most that
    many GPUs), by a bitset over 0..capacity: job by job, the totals reachable so far shifted by each
    of its counts, an arithmetic run of counts taken in log2(length) shift-ors. Returns ``capacity``
    unchanged when that would shift more than MAX_REACH_WORDS words, or the deadline passes."""
    runs = [_runs(np.asarray(y, dtype=np.int64)) for y, _ in options]
    shifts = sum(1 + max(n, 1).bit_length() for r in runs for _, _, n in r)
    if shifts * (capacity // 64 + 1) > MAX_REACH_WORDS:
        return capacity
    mask = (1 << (capacity + 1)) - 1
    all_zero = all(int(y[0]) == 0 for y, _ in options)
    reach = 1  # bit t: a total of t GPUs is reachable
    for job_runs in runs:
        if deadline is not None and time.perf_counter() >= deadline:
            return capacity
        new = 0
        for first, step, n in job_runs:
            t = (reach << first) & mask
            cover = 1  # t holds the shifts by first + step * k for k < cover
            while cover < n and t:
                take = min(cover, n - cover)
                t |= (t << (take * step)) & mask
                cover += take
            new |= t
        reach = new
        if not reach:
            return capacity  # nothing fits (the DP reports it)
        if all_zero and reach >> capacity:  # every later job can add 0: the capacity is reachable
            return capacity
    return reach.bit_length() - 1


def solve_type(jobs: list[JobTerms], capacity: int, stats: dict | None = None,
               deadline: float | None = None, pareto=None) -> tuple[dict[str, int], float]:
    """Optimal counts for the jobs of one GPU type sharing ``capacity`` GPUs (exact).

    With a ``deadline`` (a :func:`time.perf_counter` instant) that passes during the
    search, the best plan known then is returned and ``stats["timed_out"]`` is set,
    with the Lagrangian upper bound in ``stats["ub"]``. ``pareto``: :attr:`SolverOptions.pareto`.
    """
    made = (pareto or _pareto_joined)(jobs)
    options, joined = made[0], made[1]
    counts, value = solve_options(options, capacity, stats, deadline=deadline, joined=joined,
                                  shared=made[2] if len(made) > 2 else None)
    return dict(zip(map(_ID, jobs), map(int, counts))), value


_ID = operator.attrgetter("id")


class SharedOptions:
    """What the bounds of rule 3 read of each job of one set of options (joined), kept for problems whose
    options are these but for a few jobs' (:class:`Splice`): every job's envelope vertices, smallest gain
    and gcd of counts; per capacity the options' search keys (:func:`_option_key`), and per multiplier
    (the last one) every job's largest reduced gain. Made once (one pass over every option); a problem
    of the set then reads them with its few jobs' own spliced in, the very values its own computation
    gives (each is a function of one job's options)."""

    def __init__(self, joined: _Joined):
        y, g, off = joined
        m = len(off) - 1
        self.joined = joined
        at = np.flatnonzero(envelope_mask(joined))
        self.hy, self.hg = y[at], g[at]
        self.hseg = np.searchsorted(off, at, side="right") - 1
        self.hloc = at - off[self.hseg]  # each vertex's position among its job's options
        self.hoff = np.searchsorted(self.hseg, np.arange(m + 1))  # job j's vertices: hoff[j]:hoff[j + 1]
        self.low = np.minimum.reduceat(g, off[:-1])
        self.gcd = np.gcd.reduceat(y, off[:-1])
        self.keys: dict[int, np.ndarray] = {}  # capacity -> option keys
        self.red: tuple = (None, None)  # (multiplier, each job's largest reduced gain)
        self._segments: tuple | None = None  # (sizes, slopes, job j's segments' offsets, slopes sorted)
        self._scaled: dict[int, SharedOptions] = {}  # step -> the options on step-GPU units (solve_options)

    def scaled(self, step: int) -> "SharedOptions":
        """These options on ``step``-GPU units (every count divided by ``step``), made once per step."""
        made = self._scaled.get(step)
        if made is None:
            y, g, off = self.joined
            made = self._scaled[step] = SharedOptions(_Joined(y // step, g, off))
        return made

    def segments(self) -> tuple:
        """The envelopes' segments (between consecutive vertices of one job, as :func:`_lp_of_hull`
        makes them): their sizes and slopes, job j's at ``off[j]:off[j + 1]``, and the slopes sorted
        (None where one is NaN); made on first use."""
        if self._segments is None:
            with np.errstate(divide="ignore", invalid="ignore"):  # (a job a splice replaces may have none on
                within, n, s = _segments(self.hy, self.hg, self.hseg)  # scaled units: its slopes are not read)
            off = np.searchsorted(self.hseg[within], np.arange(len(self.hoff)))
            self._segments = (n, s, off, None if np.isnan(s).any() else np.sort(s))
        return self._segments

    def splice(self, new: list[int], joined_new: _Joined, joined: _Joined) -> "Splice":
        """The options ``joined``: these with the jobs at positions ``new`` (ascending) given
        ``joined_new`` (theirs, in that order)."""
        return Splice(self, new, joined_new, joined)


class Splice:
    """Options that are a :class:`SharedOptions`'s but for the jobs at ``new`` (their options
    ``joined_new``); ``joined``: all of them joined. :func:`solve_options` reads its bounds from the
    kept parts (rule 3: the multiplier, the greedy plan and the upper bound, the same values); where
    those do not prove the greedy plan optimal it solves the options as any others."""

    def __init__(self, shared: SharedOptions, new: list[int], joined_new: _Joined, joined: _Joined):
        self.shared, self.new, self.joined_new, self.joined = shared, list(new), joined_new, joined

    def _per_job(self, kept: np.ndarray, values) -> np.ndarray:
        out = kept.copy()
        if self.new:
            out[self.new] = values
        return out

    def _pieces(self, kept_off: np.ndarray, kept: list[np.ndarray], new_off: np.ndarray, new: list[np.ndarray]):
        """Per-option arrays of every job: the kept ones' (rows ``kept_off[j]:kept_off[j + 1]`` of
        ``kept``) with the new jobs' (rows ``new_off[k]:new_off[k + 1]`` of ``new``) in their place."""
        parts: list[list[np.ndarray]] = [[] for _ in kept]
        at = 0
        for k, j in enumerate(self.new):
            for part, a, b in zip(parts, kept, new):
                part += [a[kept_off[at]:kept_off[j]], b[new_off[k]:new_off[k + 1]]]
            at = j + 1
        for part, a in zip(parts, kept):
            part.append(a[kept_off[at]:])
        return [np.concatenate(p) for p in parts]

    def scaled(self, step: int, joined: _Joined) -> "Splice":
        """These options on ``step``-GPU units (``joined``: all of them so, as the DP solves them):
        the shared options' scaled parts with the new jobs' counts divided too."""
        jn = self.joined_new
        return Splice(self.shared.scaled(step), self.new, _Joined(jn.y // step, jn.g, jn.off), joined)

    def step(self) -> int:
        """:func:`count_step` of the options."""
        if not len(self.joined.y):
            return 0
        gcd = self._per_job(self.shared.gcd, np.gcd.reduceat(self.joined_new.y, self.joined_new.off[:-1])
                            if self.new else [])
        return int(np.gcd.reduce(gcd))

    def hull(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:func:`_upper_hulls` of the options: vertices (y, g, job), and their positions among the
        joined options."""
        sh, jn = self.shared, self.joined_new
        at = np.flatnonzero(envelope_mask(jn)) if self.new else np.zeros(0, dtype=np.int64)
        local = np.searchsorted(jn.off, at, side="right") - 1
        voff = np.searchsorted(local, np.arange(len(self.new) + 1))
        job = np.asarray(self.new, dtype=sh.hseg.dtype)[local]
        hy, hg, seg, loc = self._pieces(sh.hoff, [sh.hy, sh.hg, sh.hseg, sh.hloc], voff,
                                        [jn.y[at], jn.g[at], job, at - jn.off[local]])
        return hy, hg, seg, loc + self.joined.off[seg]

    def segments(self, seg: np.ndarray) -> tuple | None:
        """(first vertices, sizes, slopes, k-th largest slope) of the envelopes' segments of
        :meth:`hull` (``seg``: its vertices' jobs): the kept jobs' sizes and slopes are the shared
        ones (a segment's are a function of its two vertices), the k-th largest slope is found among
        the shared slopes sorted with the replaced jobs' taken out and the new ones' put in; None
        where a slope is NaN or the pieces do not add up (then computed whole)."""
        sh, jn = self.shared, self.joined_new
        n_kept, s_kept, off_kept, s_sorted = sh.segments()
        within = np.flatnonzero(seg[1:] == seg[:-1])
        if s_sorted is None:
            return None
        if self.new:
            at = np.flatnonzero(envelope_mask(jn))
            local = np.searchsorted(jn.off, at, side="right") - 1
            vy, vg = jn.y[at], jn.g[at]
            w, n_new, s_new = _segments(vy, vg, local)
            off_new = np.searchsorted(local[w], np.arange(len(self.new) + 1))
            n, s = self._pieces(off_kept, [n_kept, s_kept], off_new, [n_new, s_new])
            gone = np.concatenate([s_kept[off_kept[j]:off_kept[j + 1]] for j in self.new])
        else:
            n, s, s_new, gone = n_kept, s_kept, s_kept[:0], s_kept[:0]
        if len(n) != len(within) or np.isnan(s_new).any():
            return None
        gone, added = np.sort(gone), np.sort(s_new)

        def kth(k: int):
            # the k-th largest of (shared - gone + added) is among the k + len(gone) largest shared ones
            # or the added ones: the largest candidate with at least k of them at or above it
            top = s_sorted[max(len(s_sorted) - (k + len(gone)), 0):]
            cand = np.concatenate([top, added])
            at_least = ((len(s_sorted) - np.searchsorted(s_sorted, cand, "left"))
                        - (len(gone) - np.searchsorted(gone, cand, "left"))
                        + (len(added) - np.searchsorted(added, cand, "left")))
            return cand[at_least >= k].max()

        return within, n, s, kth

    def red_max(self, lam: float) -> list[float]:
        """Each job's largest reduced gain ``max(g - lam y)`` (:func:`_flatten`)."""
        sh, jn = self.shared, self.joined_new
        if sh.red[0] != lam:
            sh.red = (lam, np.maximum.reduceat(sh.joined.g - lam * sh.joined.y, sh.joined.off[:-1]))
        new = np.maximum.reduceat(jn.g - lam * jn.y, jn.off[:-1]) if self.new else []
        return self._per_job(sh.red[1], new).tolist()

    def keys(self, capacity: int) -> np.ndarray:
        """:func:`_option_key` of the options at ``capacity``."""
        sh, jn = self.shared, self.joined_new
        kept = sh.keys.get(capacity)
        if kept is None:
            sh.keys.clear()
            kept = sh.keys[capacity] = _option_key(_Flat(*sh.joined, None), capacity)
        job = np.repeat(np.asarray(self.new, dtype=np.int64), np.diff(jn.off))
        new = job * (capacity + 2) + np.minimum(jn.y, capacity + 1)
        return self._pieces(sh.joined.off, [kept], jn.off, [new])[0]

    def low(self) -> np.ndarray:
        """Each job's smallest gain."""
        jn = self.joined_new
        return self._per_job(self.shared.low, np.minimum.reduceat(jn.g, jn.off[:-1]) if self.new else [])


def solve_type_joined(counts: np.ndarray, gains: np.ndarray, off: np.ndarray, capacity: int,
                      stats: dict | None = None, deadline: float | None = None) -> tuple[list[int], float]:
    """:func:`solve_type` for jobs whose allowed counts (int64, ascending, 0 first unless a constraint
    forbids it) and gains come joined already: job j's at ``off[j]:off[j + 1]``, at least one each.
    Returns the counts in job order and the value (the same as :func:`solve_type` on those jobs)."""
    if NATIVE_PARETO is None or len(off) < 2:
        options, joined = [pareto_arrays(counts[a:b], gains[a:b]) for a, b in zip(off[:-1].tolist(), off[1:].tolist())], None
    else:  # the options read lazily from the joined arrays (no list of per-job slices)
        options = JoinedOptions(*_pareto_kept(_Joined(counts, gains, off)))
        joined = options.joined
    return solve_options(options, capacity, stats, deadline=deadline, joined=joined)


def solve_options(options: list[tuple[np.ndarray, np.ndarray]], capacity: int,
                  stats: dict | None = None, prune: bool = True,
                  deadline: float | None = None, joined: _Joined | None = None,
                  cores: bool = True, hull_hint: np.ndarray | None = None,
                  shared: Splice | None = None) -> tuple[list[int], float]:
    """Exact optimum of max sum_i g_i(y_i) s.t. sum y_i <= C over Pareto options (0 first).

    ``prune=False`` disables the bound-based rules 3-4 (used as a numerical safety net).
    ``joined``: :func:`_join` of the options, when the caller has it. ``cores=False`` skips the
    narrow core passes of rule 4 (for callers whose greedy plan is known to be near the optimum,
    where those passes find it without proving it). ``hull_hint``: a mask over the joined options
    holding every vertex of every job's concave envelope, when the caller knows them (the
    envelopes are then built from those alone). ``shared``: the options as a :class:`Splice` of
    kept ones (``joined`` its joined options): the bounds are read from the kept parts.
    A ``deadline`` that passes stops the search: the best known plan (the greedy one, or
    the core optimum when it was reached) is returned and ``stats["timed_out"]`` set.
    """
    stats = stats if stats is not None else {}
    m = len(options)
    if m == 0:
        return [], 0.0
    joined = joined if joined is not None else _join(options)
    tops = joined.off[1:] - 1
    top_y = joined.y[tops]
    if int(top_y.sum()) <= capacity:  # every job at its best count: exact optimum
        stats.update(early_exit=True, kept=m)
        return top_y.tolist(), float(sum(joined.g[tops].tolist()))
    if shared is not None and (shared.joined is not joined or NATIVE_HULL is None or hull_hint is not None
                               or not prune):
        shared = None
    step = count_step(joined.y) if shared is None else shared.step()
    if step > 1:  # every count a multiple of ``step`` (whole nodes): the same DP on step-GPU units
        scaled = JoinedOptions(joined.y // step, joined.g, joined.off)
        counts, value = _solve_joined(scaled, capacity // step, stats, prune, deadline, scaled.joined, cores,
                                      hull_hint, None if shared is None else shared.scaled(step, scaled.joined))
        if "reachable" in stats:
            stats["reachable"] *= step
        elif capacity // step * step < capacity:
            stats["reachable"] = capacity // step * step
        if "lam" in stats:
            stats["lam"] /= step
        stats["count_step"] = step
        return [c * step for c in counts], value
    return _solve_joined(options, capacity, stats, prune, deadline, joined, cores, hull_hint, shared)


def _solve_joined(options, capacity: int, stats: dict, prune: bool, deadline: float | None, joined: _Joined,
                  cores: bool = True, hull_hint: np.ndarray | None = None, shared: Splice | None = None):
    """:func:`solve_options` past its early exit and count step (the counts' gcd is 1 here, so the
    capacity is its own multiple of it). ``shared``: a :class:`Splice` of the options, whose bounds
    are read from its kept parts (the same values as the options' own); where the greedy plan does
    not meet them, the options are flattened with their deficits at that multiplier and solved on."""
    lam, flat, red_max, ub, lb_pick, lb, rounding = _bounds(options, joined, capacity, hull_hint, shared)
    if shared is not None and lb < ub - rounding:
        flat = _flatten(options, lam, red_max, joined=joined)[0]
    used = int(flat.y[flat.off[:-1] + lb_pick].sum())
    if lb < ub - rounding and used < capacity:
        # The greedy plan leaves GPUs unused and does not meet the bound: the largest total the
        # allowed counts can reach may be below C, and then the bounds at that total are tighter.
        top = reachable_sum(options, capacity, deadline)
        if top < capacity:
            stats["reachable"] = capacity = top
            lam, flat, red_max, ub, lb_pick, lb, rounding = _bounds(options, joined, capacity, hull_hint)
    tol = rounding
    stats.update(early_exit=False, lam=lam, ub=ub, lb=lb, options=int(joined.off[-1]), rounding=rounding)
    best = (flat.y[flat.off[:-1] + lb_pick].tolist(), lb)
    if lb >= ub - rounding:
        # The greedy plan meets the upper bound up to float rounding: optimal. With equal values per
        # GPU (linear stretches along the envelope), any plan filling the reachable capacity does.
        stats["bound_met"] = "greedy"
        return best
    packed = _packing(flat, lam, capacity, ub, rounding, deadline)
    if packed is not None:  # rule 5: a packing of the zero-deficit options
        counts, value, proven = packed
        if value > lb:
            best, lb = (counts, value), value
            stats["lb"] = lb
        if proven:
            stats["bound_met"] = "packing"
            return best
    try:
        return _search(options, red_max, lam, capacity, lb, ub, tol, stats, prune, deadline, flat, cores)
    except _TimeUp:
        stats["timed_out"] = True
        core = stats.get("core_plan")
        return core if core is not None and core[1] > best[1] else best


def _packing(flat: "_Flat", lam: float, capacity: int, ub: float, rounding: float, deadline: float | None):
    """Rule 5 of the module docstring: (counts, value, proven optimal) of the fullest plan made of
    zero-deficit options only, or None (no job has two such options, the bitsets would exceed
    MEMORY_BUDGET_BYTES, or the deadline passed).

    Bitsets over the GPUs above every job's smallest zero-deficit count (0..C less their sum), job by
    job (an arithmetic run of a job's zero-deficit counts, a linear stretch of its envelope, in
    log2(length) shift-ors, as :func:`reachable_sum`; a job with one such count adds nothing), give
    the largest total T <= C of such a plan; one plan reaching T is read back from the stored bitsets."""
    m = len(flat.off) - 1
    zero = flat.deficit <= rounding / (m + 1)  # float noise on an exactly linear stretch
    per_job = np.add.reduceat(zero.astype(np.int64), flat.off[:-1])
    if not per_job.all() or int(per_job.max()) < 2 or m * (capacity // 8 + 16) > MEMORY_BUDGET_BYTES:
        return None
    at = np.flatnonzero(zero)  # the zero-deficit options, job by job, counts ascending
    zoff = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(per_job, out=zoff[1:])
    bounds = zoff.tolist()
    zy = flat.y[at].tolist()
    # each job's counts above its smallest: the bitsets run over the GPUs left after every job's
    # smallest count (a partial total that leaves the later jobs less than theirs is never completed)
    lows = [zy[b] for b in bounds[:-1]]
    span = capacity - sum(lows)
    if span < 0:
        return None
    ups = [[y - low for y in zy[bounds[j]:bounds[j + 1]]] for j, low in enumerate(lows)]
    mask = (1 << (span + 1)) - 1
    reach = [1]  # reach[j]: bit t set when the first j jobs' counts above their smallest can total t
    for j in range(m):
        if deadline is not None and time.perf_counter() >= deadline:
            return None
        if len(ups[j]) == 1:  # (one count: the job adds nothing above it)
            reach.append(reach[-1])
            continue
        new = 0
        for first, step, n in _runs_of(ups[j]):
            t = (reach[-1] << first) & mask
            cover = 1
            while cover < n and t:
                take = min(cover, n - cover)
                t |= (t << (take * step)) & mask
                cover += take
            new |= t
        if not new:
            return None
        reach.append(new)
    total = reach[-1].bit_length() - 1
    top = total + capacity - span
    chosen = [0] * m
    for j in range(m - 1, -1, -1):  # read a plan back: job j's smallest count y with total - y reachable before it
        before, up = reach[j], ups[j]
        k = next(k for k, y in enumerate(up) if y <= total and (before >> (total - y)) & 1)
        chosen[j] = bounds[j] + k
        total -= up[k]
    picks = at[chosen]
    value = float(flat.g[picks].sum())
    positive = flat.deficit[~zero]
    # Every plan of zero-deficit options uses at most top GPUs: worth at most ub - lam (C - top);
    # any other plan gives up at least the smallest positive deficit.
    bound = max(ub - lam * (capacity - top), ub - float(positive.min()) if len(positive) else -math.inf)
    return flat.y[picks].tolist(), value, value >= bound - rounding


def _search(options, red_max, lam, capacity, lb, ub, tol, stats, prune, deadline, flat=None, cores=True):
    """Rules 3-4 of the module docstring: the core DP, then the pruned exact DP."""
    if not prune:
        return _attempt(options, red_max, lam, capacity, -math.inf, stats, deadline=deadline, flat=flat)
    # Threshold T: every plan worth >= T survives the pruning, so a run that finds a plan worth
    # >= T has found the optimum. First, growing cores: a run at T = UB - delta (options and
    # states cut at T) for small deltas. A plan worth v has reduced-cost deficits adding up to at
    # most UB - v, so when a run finds v with UB - v <= delta (less the tolerance), every plan
    # worth >= v lies in that run: v is optimal. When the gap to UB is an integrality artefact
    # (near-linear curves, identical jobs) the first deltas settle it at a fraction of the cost;
    # otherwise their best plan (or greedy's) is the lower bound of the full run.
    gap = max(ub - lb, 0.0)
    core = None
    if flat is None:
        flat, _ = _flatten(options, lam, red_max)
    # Core widths: fractions of the gap, and a few rounding margins (the narrowest core that can
    # prove a plan whose value is within float rounding of the bound).
    deltas = sorted(d for d in {gap / div for div in CORE_DIVISORS} | {4 * tol} if 2 * tol < d < gap)
    deltas = deltas if cores else []
    full = int(np.count_nonzero(flat.deficit <= gap + tol))  # options the full pass keeps
    kept = [int(np.count_nonzero(flat.deficit <= d)) for d in deltas] + [full]
    for at, delta in enumerate(deltas):
        if 2 * kept[at] > full:
            # This core keeps over half of the full pass's options (so would every wider one):
            # it would cost about as much as the full pass, so run the full pass once instead.
            stats["cores_skipped"] = True
            break
        if kept[at] == kept[at + 1]:
            # The next wider core (or the full pass) has the same options and a lower threshold: any
            # plan that proves this core optimal proves that one too, so only that one runs.
            continue
        found = _attempt(options, red_max, lam, capacity, ub - delta, stats, deadline=deadline, flat=flat)
        if found is None:
            continue
        if found[1] > lb:
            lb, core = found[1], found
            stats["core_plan"] = core  # the best plan held if the deadline passes
        if ub - found[1] <= delta - tol:
            stats.update(core_lb=found[1], bound_met="core", core_delta=delta)
            return found
    stats["core_lb"] = core[1] if core is not None else None
    threshold = lb - tol
    found = _attempt(options, red_max, lam, capacity, threshold, stats, deadline=deadline, flat=flat)
    if found is not None and found[1] >= threshold:
        return found
    stats["fallback"] = True  # rounding defeated the threshold (never observed)
    return _attempt(options, red_max, lam, capacity, -math.inf, stats, deadline=deadline, flat=flat)


class _Flat:
    """Every job's options in one pair of arrays (job j's at ``off[j]:off[j + 1]``) with their
    Lagrangian deficits ``red_max[j] - (g - lam y)``, so that a pass selects its options in one step.
    The deficits are made on first reading from the reduced gains ``red = g - lam y`` and ``red_max``
    (a plan proven by the bounds alone never reads them); None when neither was given."""

    __slots__ = ("y", "g", "off", "_deficit", "_red", "_red_max")

    def __init__(self, y: np.ndarray, g: np.ndarray, off: np.ndarray, deficit: np.ndarray | None = None,
                 red: np.ndarray | None = None, red_max=None):
        self.y, self.g, self.off = y, g, off
        self._deficit, self._red, self._red_max = deficit, red, red_max

    @property
    def deficit(self) -> np.ndarray | None:
        if self._deficit is None and self._red is not None:
            deficit = np.repeat(np.asarray(self._red_max, dtype=np.float64), np.diff(self.off))
            red = self._red
            self._deficit = np.subtract(deficit, red, out=deficit) if red.dtype == np.float64 else deficit - red
            self._red = self._red_max = None
        return self._deficit


def _flatten(options, lam: float, red_max=None, joined: _Joined | None = None) -> tuple[_Flat, list[float]]:
    """(the options flattened, each job's largest reduced gain ``max(g - lam y)``; ``red_max`` when given).
    ``joined``: :func:`_join` of the options, when the caller has it."""
    ys, gs, off = joined if joined is not None else _join(options)
    red = lam * ys
    red = np.subtract(gs, red, out=red) if red.dtype == np.result_type(gs, red) else gs - red  # g - lam y
    if red_max is None:
        red_max = np.maximum.reduceat(red, off[:-1]).tolist()
    return _Flat(ys, gs, off, None, red, red_max), red_max


def _attempt(options, red_max, lam: float, capacity: int, threshold: float, stats: dict,
             cut: bool = True, deadline: float | None = None, flat: _Flat | None = None):
    """The DP over the options (and, with ``cut``, states) whose Lagrangian bound reaches ``threshold``.

    ``flat``: :func:`_flatten` of these options, multiplier and ``red_max`` (made here when not given).
    Returns (counts, value), or None when no plan can reach the threshold.
    The pass folds the jobs in :func:`_pass_order`; the counts are returned in the jobs' order.
    """
    m = len(options)
    if flat is None:
        flat, _ = _flatten(options, lam, red_max)
    slack = math.fsum(red_max) + lam * capacity - threshold  # m_i - (g - lam y) <= slack survives
    keep = flat.deficit <= slack
    per_job = np.add.reduceat(keep.astype(np.int64), flat.off[:-1])
    if not per_job.all():
        return None
    ky, kg = flat.y[keep], flat.g[keep]
    koff = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(per_job, out=koff[1:])
    stats["kept"] = int(koff[-1])
    lo = ky[koff[:-1]]
    hi = ky[koff[1:] - 1]
    if int(lo.sum()) > capacity:
        return None
    red_max = np.asarray(red_max, dtype=np.float64)
    order = _pass_order(lo, hi)
    if order is not None:
        ky, kg, koff = _reordered(ky, kg, koff, order)
        lo, hi, red_max = lo[order], hi[order], red_max[order]
    found = _attempt_in_order(ky, kg, koff, lo, hi, red_max, lam, capacity, threshold, cut, deadline, stats)
    if found is None or order is None:
        return found
    counts = np.empty(m, dtype=np.int64)
    counts[order] = found[0]
    return counts.tolist(), found[1]


def _pass_order(lo: np.ndarray, hi: np.ndarray) -> np.ndarray | None:
    """The order a pass folds the jobs in: by the spread of their kept counts (``hi - lo``), narrowest
    first (stable), or None when they are in that order already. Each folded job widens the window by
    its spread until the capacity caps it, so the pass's work (the sum of its windows, a sum of prefix
    sums) is least with the narrow jobs first: queued jobs choosing among a few small counts no longer
    fold over windows as wide as the running jobs before them made."""
    spread = hi - lo
    if len(spread) < 2 or bool((spread[1:] >= spread[:-1]).all()):
        return None
    return np.argsort(spread, kind="stable")


def _reordered(y: np.ndarray, g: np.ndarray, off: np.ndarray, order: np.ndarray):
    """Flattened options (job j's at ``off[j]:off[j + 1]``) of the jobs ``order`` lists, in that order:
    (y, g, off)."""
    per = np.diff(off)[order]
    new_off = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(per, out=new_off[1:])
    at = np.arange(int(new_off[-1]), dtype=np.int64) + np.repeat(off[:-1][order] - new_off[:-1], per)
    return y[at], g[at], new_off


def _suffix_sums(a: np.ndarray, extra=0):
    """``out[j] = sum(a[j + 1:]) + extra``: what the jobs after j (and ``extra``, the jobs of another
    part) hold."""
    return np.concatenate([np.cumsum(a[::-1])[::-1][1:], [0]]).astype(a.dtype) + extra


def _attempt_in_order(ky, kg, koff, lo, hi, red_max, lam, capacity, threshold, cut, deadline, stats):
    """:func:`_attempt`'s pass over the kept options, the jobs folded in the order given; (counts in that
    order, value) or None."""
    m = len(koff) - 1
    after_lo = _suffix_sums(lo)
    after_m = _suffix_sums(red_max)
    # Store every choice array, or checkpoint, by a safe estimate of their size.
    itemsize = np.dtype(_dtype(int(np.diff(koff).max()))).itemsize
    entries = _entries_bound(hi, capacity)
    est = entries * itemsize
    if NATIVE_PASS is not None:
        # ``est`` bounds the windows before the cuts, which are often far narrower: past the budget the
        # compiled pass runs within it and the checkpointed Python pass only when its choices overflow.
        try:
            if NATIVE_BACK is not None and m >= 2 and _spread_cells(lo, hi, capacity) >= SPLIT_MIN_CELLS:
                return _native_halves(ky, kg, koff, lo, hi, red_max, lam, capacity, threshold, cut, deadline,
                                      itemsize, stats)
            return _native_pass(ky, kg, koff, lo, hi, after_lo, after_m, lam, capacity, threshold, cut, deadline,
                                min(entries, MEMORY_BUDGET_BYTES // itemsize), itemsize, stats)
        except _ChoicesOverflow:
            pass
    kept = [(ky[koff[j]: koff[j + 1]], kg[koff[j]: koff[j + 1]]) for j in range(m)]

    def step(V, L, U, j, want_choice):
        if deadline is not None and time.perf_counter() >= deadline:
            raise _TimeUp
        y, g = kept[j]
        L2 = L + int(lo[j])
        U2 = min(U + int(hi[j]), capacity - int(after_lo[j]))
        if U2 < L2:
            raise _LostPath
        new, choice = _fold(V, L, U, y, g, L2, U2, want_choice)
        if not cut:
            return new, L2, U2, choice
        # Cut the ends of the window that cannot reach the threshold (no such plan goes there).
        c = np.arange(L2, U2 + 1)
        alive = np.flatnonzero(new + lam * (capacity - c) + after_m[j] >= threshold)
        if len(alive) == 0:
            raise _LostPath
        a, b = int(alive[0]), int(alive[-1])
        return new[a: b + 1], L2 + a, L2 + b, (choice[a: b + 1] if want_choice else None)

    widths: list[int] = []
    try:
        return _run(kept, step, m, est, widths, stats, L=0)
    except _LostPath:
        return None


def _entries_bound(hi: np.ndarray, capacity: int) -> int:
    """A bound on the choices a pass stores with its jobs in this order: each window at most as wide as the
    largest counts folded so far, and the capacity."""
    return int((np.minimum(np.cumsum(hi), capacity) + 1).sum())


def _widths(win: np.ndarray) -> np.ndarray:
    """Each job's window width in a compiled pass's windows (``win``: L, U per job)."""
    return win[1::2] - win[0::2] + 1


# A pass whose windows before the cuts would hold at least this many states runs as two halves
# (:func:`_native_halves`); below it, as one.
SPLIT_MIN_CELLS = 1 << 21


def _spread_cells(lo: np.ndarray, hi: np.ndarray, capacity: int) -> int:
    """The states a pass in this order would hold before its cuts: each window as wide as the spreads
    (``hi - lo``) folded so far, at most the capacity left above every job's smallest count."""
    room = capacity - int(lo.sum())
    return int((np.minimum(np.cumsum(hi - lo), room) + 1).sum())


def _native_halves(ky, kg, koff, lo, hi, red_max, lam, capacity, threshold, cut, deadline, itemsize, stats):
    """The pass as two compiled passes, over the jobs at even and at odd places of the order, joined at
    the end: the best plan is the best pair of a state c1 of the first pass's last window and a state
    c2 <= C - c1 of the second's, each backtracked in its own pass. Each pass holds half of the jobs,
    so while the windows grow with the jobs folded, the two hold about half of the one pass's states.
    Each pass cuts its states by the same bound as the one pass (the jobs it has not folded, its own
    later ones and all of the other half's, add ``after_m`` and take ``after_lo``), so every state of
    a plan reaching the threshold is kept in both. (counts in the order given, value) or None."""
    m = len(koff) - 1
    halves = (np.arange(0, m, 2), np.arange(1, m, 2))
    inputs = []
    for part, other in (halves, halves[::-1]):
        y, g, off = _reordered(ky, kg, koff, part)
        plo, phi = lo[part], hi[part]
        inputs.append((y, g, off, plo, phi, _suffix_sums(plo, int(lo[other].sum())),
                       _suffix_sums(red_max[part], float(red_max[other].sum()))))
    entries = sum(_entries_bound(x[4], capacity) for x in inputs)
    buf = _choices_buffer(min(entries, MEMORY_BUDGET_BYTES // itemsize) * itemsize)
    runs, used = [], 0
    for y, g, off, plo, phi, after_lo, after_m in inputs:
        last = np.empty(capacity + 1)
        choice = buf[used * itemsize:].view(np.dtype(f"u{itemsize}"))
        run = _native_call(y, g, off, plo, phi, after_lo, after_m, lam, capacity, threshold, cut, deadline, choice,
                           last)
        if run is None:
            return None
        win = run[0]
        runs.append((np.ascontiguousarray(y, dtype=np.int64), off, win, choice, last))
        used += int(_widths(win).sum())
    (_, _, win1, _, last1), (_, _, win2, _, last2) = runs
    L1, U1, L2, U2 = int(win1[-2]), int(win1[-1]), int(win2[-2]), int(win2[-1])
    v1, v2 = last1[: U1 - L1 + 1], last2[: U2 - L2 + 1]
    top = np.minimum(U2, capacity - np.arange(L1, U1 + 1)) - L2  # for each c1, the largest c2 index allowed
    ok = top >= 0
    if not ok.any():
        return None
    best2 = np.maximum.accumulate(v2)
    total = np.full(len(v1), -np.inf)
    total[ok] = v1[ok] + best2[top[ok]]
    i = int(np.argmax(total))
    c2 = int(np.argmax(v2[: int(top[i]) + 1]))
    counts = np.empty(m, dtype=np.int64)
    for part, (y, off, win, choice, _), c in zip(halves, runs, (L1 + i, L2 + c2)):
        result = np.empty(len(part), dtype=np.int64)
        NATIVE_BACK(len(part), off.ctypes.data, y.ctypes.data, choice.ctypes.data, itemsize, win.ctypes.data, c,
                    result.ctypes.data)
        counts[part] = result
    widths = np.concatenate([_widths(win1), _widths(win2)])
    stats.update(checkpointed=False, max_width=int(widths.max()), sum_width=int(widths.sum()), halves=True)
    _keep_choices(buf, used * itemsize)
    return counts.tolist(), float(v1[i] + v2[c2])


def _native_pass(ky, kg, koff, lo, hi, after_lo, after_m, lam, capacity, threshold, cut, deadline,
                 entries, itemsize, stats):
    """The pass of :func:`_attempt` in one compiled call (same windows, cuts and choices as ``_run``)
    over the kept options flattened (job j's at ``koff[j]:koff[j + 1]``): (counts, value), or None."""
    buf = _choices_buffer(max(entries, 1) * itemsize)
    run = _native_call(ky, kg, koff, lo, hi, after_lo, after_m, lam, capacity, threshold, cut, deadline,
                       buf.view(np.dtype(f"u{itemsize}")))
    if run is None:
        return None
    win, result, value = run
    widths = _widths(win)
    stats.update(checkpointed=False, max_width=int(widths.max()), sum_width=int(widths.sum()))
    _keep_choices(buf, stats["sum_width"] * itemsize)
    return result.tolist(), value


def _native_call(ky, kg, koff, lo, hi, after_lo, after_m, lam, capacity, threshold, cut, deadline, choice,
                 last: np.ndarray | None = None):
    """One compiled pass (:data:`NATIVE_PASS`) storing its choices in ``choice``: (windows, counts, value),
    or with ``last`` (room for capacity + 1 values, which receives the last window's values instead of
    a backtrack) (windows,); None when no plan reaches the threshold."""
    m = len(koff) - 1
    ys = np.ascontiguousarray(ky, dtype=np.int64)
    gs = np.ascontiguousarray(kg, dtype=np.float64)
    off = np.ascontiguousarray(koff, dtype=np.int64)
    lo, hi, after_lo = (np.ascontiguousarray(a, dtype=np.int64) for a in (lo, hi, after_lo))
    after_m = np.ascontiguousarray(after_m, dtype=np.float64)
    win = np.empty(2 * m, dtype=np.int64)
    result = np.empty(m, dtype=np.int64)
    value = np.zeros(1)
    status = NATIVE_PASS(m, off.ctypes.data, ys.ctypes.data, gs.ctypes.data, lo.ctypes.data, hi.ctypes.data,
                         after_lo.ctypes.data, after_m.ctypes.data, float(lam), int(capacity), float(threshold),
                         int(bool(cut)), -1.0 if deadline is None else float(deadline), choice.ctypes.data,
                         len(choice), choice.itemsize, win.ctypes.data, result.ctypes.data, value.ctypes.data,
                         None if last is None else last.ctypes.data)
    if status == 1:
        return None
    if status == 2:
        raise _TimeUp
    if status == 3:
        raise _ChoicesOverflow
    if status:  # pragma: no cover - the buffer is sized from the same bound as the Python path's
        raise MemoryError(f"compiled DP pass failed (status {status})")
    return (win,) if last is not None else (win, result, float(value[0]))


def _choices_buffer(nbytes: int) -> np.ndarray:
    """Bytes for a compiled pass's choices: the buffer kept from the last pass when it is large enough.
    A new one of this size would be mapped afresh and its pages faulted in again at every pass; only the
    pages a pass writes become resident. The caller hands it back with :func:`_keep_choices`."""
    buf = getattr(_CHOICES, "buf", None)
    if buf is None or len(buf) < nbytes:
        buf = _CHOICES.buf = None  # (the old one freed first)
        buf = np.empty(nbytes, dtype=np.uint8)
    _CHOICES.buf = None
    return buf[:nbytes]


def _keep_choices(buf: np.ndarray, written: int) -> None:
    """Keep ``buf`` for the next pass unless its pass wrote more than CHOICE_KEPT_BYTES (a buffer whose
    pass did not finish is not handed back, and let go)."""
    if written <= CHOICE_KEPT_BYTES:
        _CHOICES.buf = buf.base if buf.base is not None else buf


_CHOICES = threading.local()  # .buf: the choices' buffer kept for the next pass (_native_pass)
CHOICE_KEPT_BYTES = 64 * 2**20


class _LostPath(Exception):
    """No plan reaches the threshold: a window became empty."""


class _TimeUp(Exception):
    """The deadline passed during a fold."""


class _ChoicesOverflow(Exception):
    """The compiled pass's choices did not fit in the buffer it was given."""


def _run(kept, step, m, est, widths, stats, L):
    V, U = np.zeros(1), 0
    if est <= MEMORY_BUDGET_BYTES:
        windows, choices = [], []
        for j in range(m):
            V, L, U, ch = step(V, L, U, j, True)
            windows.append((L, U))
            choices.append(ch)
            widths.append(U - L + 1)
        stats.update(checkpointed=False)
    else:
        block = max(1, int(math.sqrt(m)))
        checkpoints = {}
        for j in range(m):
            if j % block == 0:
                checkpoints[j] = (V, L, U)
            V, L, U, _ = step(V, L, U, j, False)
            widths.append(U - L + 1)
        stats.update(checkpointed=True, block=block)
    best_at = int(np.argmax(V))
    value = float(V[best_at])
    c = L + best_at
    result = [0] * m
    if est <= MEMORY_BUDGET_BYTES:
        for j in range(m - 1, -1, -1):
            result[j], c = _back(kept[j], windows[j], choices[j], c, windows[j - 1] if j else (0, 0))
    else:
        for start in sorted(checkpoints, reverse=True):
            V0, L0, U0 = checkpoints[start]
            seg_w, seg_c = [], []
            Vs, Ls, Us = V0, L0, U0
            for j in range(start, min(start + block, m)):
                prev = (Ls, Us)
                Vs, Ls, Us, ch = step(Vs, Ls, Us, j, True)
                seg_w.append((prev, (Ls, Us)))
                seg_c.append(ch)
            for off in range(len(seg_c) - 1, -1, -1):
                j = start + off
                prev, win = seg_w[off]
                result[j], c = _back(kept[j], win, seg_c[off], c, prev)
    stats.update(max_width=int(max(widths)), sum_width=int(sum(widths)))
    return result, value


def _back(opt, win, choice, c, prev_win) -> tuple[int, int]:
    """One backtracking step: the count chosen at capacity c, and the predecessor capacity."""
    y, _ = opt
    L, U = win
    c = min(c, U)
    yk = int(y[choice[c - L]])
    return yk, min(c - yk, prev_win[1])


def _check_fits(jobs: list[JobTerms], capacity: int) -> None:
    """Jobs that may not suspend (pinned, hysteresis) must fit with their smallest counts."""
    if sum(int(j.counts[0]) for j in jobs) > capacity:
        raise InfeasibleError(f"the constrained jobs ({', '.join(j.id for j in jobs if j.counts[0] > 0)}) "
                              f"do not fit in {capacity} GPUs of their type")


def relaxation(problem: Problem, deadline: float | None = None) -> tuple[dict[str, int], float]:
    """The DP optimum with the constraints it cannot express dropped: an upper bound for the IP backends."""
    if problem.alternatives:  # mixed fleets: solvers.mixed.relaxation
        raise SolverUnavailableError("mixed GPU types go through solvers.get_solver (or solvers.mixed / solvers.mixed_ip)")
    counts, total, _, _ = _solve_types(problem, deadline)
    return counts, total


def relaxation_bound(problem: Problem, deadline: float | None = None) -> tuple[dict[str, int], float, float, bool]:
    """(counts, their value, an upper bound, exact) of the relaxation of :func:`relaxation`; when
    ``deadline`` passes first, the best counts held and the Lagrangian bound (exact False)."""
    counts, total, bound, timed_out = _solve_types(problem, deadline)
    return counts, total, bound, not timed_out


def _solve_types(problem: Problem, deadline: float | None, pareto=None) -> tuple[dict[str, int], float, float, bool]:
    """(counts, value, upper bound, timed out) over every GPU type, each solved on its own."""
    counts: dict[str, int] = {}
    total, bound, timed_out = 0.0, 0.0, False
    for gpu_type, cap in problem.capacity.items():
        jobs = problem.jobs_of_type(gpu_type)
        if not jobs:
            continue
        made = (pareto or _pareto_joined)(jobs)
        memo = made[3] if len(made) > 3 else None  # capacity -> (counts, value) solved on these options
        if memo is not None and cap in memo:
            part, value = memo[cap]
            counts.update(part)
            total += value
            bound += value
            continue
        joined = made[1]  # (each job's first Pareto option is its smallest count)
        if joined is None or len(joined.off) != len(jobs) + 1 or int(joined.y[joined.off[:-1]].sum()) > cap:
            _check_fits(jobs, cap)
        stats: dict = {}
        part, value = solve_type(jobs, cap, stats, deadline=deadline, pareto=lambda _: made)
        counts.update(part)
        total += value
        if stats.get("timed_out"):
            timed_out = True
            bound += max(float(stats["ub"]), value)
        else:
            bound += value
            if memo is not None:  # (exact: the same options and capacity give these counts again)
                memo[cap] = (part, value)
    return counts, total, bound, timed_out


def solve(problem: Problem, options: SolverOptions | None = None) -> RawSolution:
    """Solve each GPU type independently and add up the optima.

    Refuses (SolverUnavailableError) instances with constraints the DP cannot
    express (node-level tp, max_nodes, same_rack; max_changed_jobs): use milp,
    cpsat or auto for those. When ``options`` carry a deadline that passes, the
    best plan known then is returned as ``feasible`` (termination ``time_limit``)
    with the Lagrangian upper bound.
    """
    if problem.alternatives:  # mixed fleets: solvers/mixed.py wraps this DP (routed by get_solver)
        raise SolverUnavailableError("mixed GPU types go through solvers.get_solver (or solvers.mixed / solvers.mixed_ip)")
    limits = dp_limitations(problem)
    if limits:
        raise SolverUnavailableError(
            f"solver 'dp' cannot express {', '.join(limits)}; use --solver auto, milp or cpsat")
    deadline = options.deadline if options is not None else None
    counts, total, bound, timed_out = _solve_types(problem, deadline, options.pareto if options is not None else None)
    if timed_out:
        return RawSolution(counts=counts, objective=total, bound=bound, termination="time_limit",
                           solution="feasible", options={"stopped": "time limit"})
    return RawSolution(counts=counts, objective=total, bound=total)


# ---------------------------------------------------------------------------
# Public steps for the contingency solver (solvers/contingency.py).
# ---------------------------------------------------------------------------

def fold(V: np.ndarray, y: np.ndarray, g: np.ndarray, cap: int, want_choice: bool = True):
    """(new, choice): the max-plus fold of one job's options (``y`` ascending, gains ``g``) onto the table
    ``V`` over 0..len(V) - 1 (at-most semantics: V[c] is the best within c GPUs), over the whole range
    0..min(cap, len(V) - 1 + y[-1]); ``choice[c]`` is the option taken at c (with ``want_choice``)."""
    n_old = len(V) - 1
    n_new = min(cap, n_old + int(y[-1]))
    return _fold(V[: n_new + 1], 0, min(n_old, n_new), y, g, 0, n_new, want_choice)


def can_beat(options: list[tuple[np.ndarray, np.ndarray]], capacity: int, value: float,
             search: bool = True) -> bool:
    """Whether a plan of ``options`` (Pareto per job, 0 first) within ``capacity`` may be worth more than
    ``value`` beyond the DP's tolerance; False proves that none is.

    The Lagrangian bound decides first (linear in the options). When it cannot, and ``search``, one pass
    of the pruned DP at threshold ``value`` (in units of the counts' common step, as the DP solves)
    looks for a better plan; without ``search`` an undecided bound answers True."""
    if not options:
        return False
    joined = _join(options)
    tops = joined.off[1:] - 1
    if int(joined.y[tops].sum()) <= capacity:  # every job at its best count
        best = math.fsum(joined.g[tops].tolist())
        return value < best - REL_TOL * (abs(best) + 1.0)
    tol = None
    step = 1
    while True:
        lam = _lp(options, capacity, joined)[0]
        red_max = np.maximum.reduceat(joined.g - lam * joined.y, joined.off[:-1]).tolist()
        if tol is None:  # one tolerance for both units: lam C is the same in either
            tol = REL_TOL * (lam * capacity + sum(float(np.abs(g).max()) for _, g in options) + 1.0)
        if value >= lam * capacity + math.fsum(red_max) - tol:
            return False
        if not search:
            return True
        if step == 1 and count_step(joined.y) > 1:  # the bound at whole steps may be tighter: once more
            step = count_step(joined.y)
            options = [(y // step, g) for y, g in options]
            joined = _Joined(joined.y // step, joined.g, joined.off)
            capacity //= step
            continue
        break
    flat, red_max = _flatten(options, lam, red_max, joined=joined)
    found = _attempt(options, red_max, lam, capacity, value + tol, {}, flat=flat)
    return found is not None and found[1] > value + tol
