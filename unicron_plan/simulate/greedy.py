"""The greedy baseline's answer at any capacity from one recorded run with no limit on GPUs.

The greedy policy (``simulate/policies.py``, :class:`~unicron_plan.simulate.policies.GreedyPolicy`)
starts every job at its smallest count and repeatedly takes, from a max-heap, the step (a job to a
larger count) with the highest added F per added GPU; a step that no longer fits is looked up again
for the GPUs left. Its answer depends only on the capacity and on each job's counts and F, which
stay the same during a run without constraints while every count fits (the counts that fit are the
leading entries of each job's table).

:class:`UnlimitedRun` runs the same greedy once with no limit on GPUs and records every heap
operation with the GPUs in use it needs: a step taken at ``used`` GPUs that grows a job by ``grow``
GPUs, or a step pushed then, is the same at capacity C exactly when ``used + grow <= C`` (a step
whose gain is not positive is dropped at any capacity). So the greedy at capacity C follows the
recorded run up to its first operation that needs more than C, and only the rest is worked out
(from a snapshot of the heap and the counts taken every :attr:`UnlimitedRun.SNAPSHOT` pops, the
recorded operations replayed up to that point). Past the point where fewer GPUs are left than the
smallest step of any job, nothing can change and the greedy stops. The counts are those of the
plain greedy at every capacity (``tests/test_sim_greedy_memo.py``).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right

import numpy as np


def largest_ratio(c: list, f: list, k: int, end: int) -> tuple[float, int]:
    """The largest added F per added GPU from counts[k] to counts[i], k < i < end, and the first i
    with it."""
    x, fk = c[k], f[k]
    best, to = (f[k + 1] - fk) / (c[k + 1] - x), k + 1
    for i in range(k + 2, end):
        r = (f[i] - fk) / (c[i] - x)
        if r > best:
            best, to = r, i
    return best, to


def fitting_step(c: list, f: list, unlimited: dict, k: int, left: int) -> tuple[float, int] | None:
    """A job's best step from counts[k] with ``left`` GPUs to spare: (added F per added GPU, index
    of the count), None when no larger count fits or none gains. ``unlimited`` ({k: the step with no
    limit}, filled here) is looked up first: that step is the best whenever it fits (the first of the
    largest ratios over all larger counts, so also over the fitting ones)."""
    end = bisect_right(c, c[k] + left)
    if end <= k + 1:
        return None
    step = unlimited.get(k)
    if step is None:
        step = unlimited[k] = largest_ratio(c, f, k, len(c))
    if step[1] >= end:  # the step with no limit does not fit: the fitting ones are scanned
        step = largest_ratio(c, f, k, end)
    return None if step[0] <= 0 else step


def finish(heap: list, cs, fs, free, at, left: int, smallest: int = 1) -> None:
    """Run the greedy to its end: pop the step with the largest ratio from ``heap`` (entries
    (-ratio, job, index of the count)), take it if it still fits in ``left`` GPUs, and push the job's
    next step for what is left (a lazy max-heap: a stored ratio only overestimates a job's best step
    once GPUs run out). ``at`` (per job, the index of its count) is updated in place; ``cs``, ``fs``,
    ``free``: per job, its counts, F and steps with no limit. With fewer than ``smallest`` GPUs left
    no step fits, so the greedy stops."""
    while heap and left >= smallest:
        _, idx, to = heapq.heappop(heap)
        c = cs[idx]
        grow = c[to] - c[at[idx]]
        if grow <= left:  # else the job's step is looked up again for what is left
            left -= grow
            at[idx] = to
        step = fitting_step(c, fs[idx], free[idx], at[idx], left)
        if step is not None:
            heapq.heappush(heap, (-step[0], idx, step[1]))


class UnlimitedRun:
    """The greedy over jobs with counts ``cs`` and F ``fs`` (per job, in job order, lists, counts
    ascending) recorded with no limit on GPUs; :meth:`counts` gives its answer at a capacity.
    ``free``: per job, {k: its step from counts[k] with no limit} (the policy's memo, shared)."""

    SNAPSHOT = 2048  # pops between two snapshots of the heap and the counts

    def __init__(self, cs: list[list[int]], fs: list[list[float]], free: list[dict]):
        self.cs, self.fs, self.free = cs, fs, free
        m = len(cs)
        self.base = sum(c[0] for c in cs)  # GPUs of every job at its smallest count
        # the smallest step of any job: with fewer GPUs left no step fits
        self.smallest = min((b - a for c in cs for a, b in zip(c, c[1:])), default=1)
        at = [0] * m
        used = self.base
        ops: list = []  # heap operations in order: a pushed entry, or None for a pop
        need: list[int] = []  # the GPUs in use each needs to be the same at a capacity
        heap = []
        for k in range(m):
            step = self._unlimited(k, 0)
            if step is not None:
                heap.append(step)
                ops.append(step)
                need.append(used + cs[k][step[2]] - cs[k][0])
        self.start = len(ops)  # the first pushes, before the heap is made
        heapq.heapify(heap)
        snaps = [(len(ops), list(heap), list(at), used)]
        pops = 0
        while heap:
            _, idx, to = heapq.heappop(heap)
            c = cs[idx]
            grow = c[to] - c[at[idx]]
            ops.append(None)
            need.append(used + grow)
            used += grow
            at[idx] = to
            step = self._unlimited(idx, to)
            if step is not None:
                heapq.heappush(heap, step)
                ops.append(step)
                need.append(used + c[step[2]] - c[to])
            pops += 1
            if pops % self.SNAPSHOT == 0:
                snaps.append((len(ops), list(heap), list(at), used))
        self.ops, self.snaps, self.final = ops, snaps, at
        # the largest need up to each operation: the first above C is where a run at C departs
        self.need = np.maximum.accumulate(np.asarray(need, dtype=np.int64)) if need else np.zeros(0, np.int64)
        self.snap_at = [s[0] for s in snaps]

    def _unlimited(self, idx: int, k: int):
        """The heap entry of job ``idx``'s step from counts[k] with no limit (None: no step gains)."""
        c = self.cs[idx]
        if k + 1 >= len(c):
            return None
        memo = self.free[idx]
        step = memo.get(k)
        if step is None:
            step = memo[k] = largest_ratio(c, self.fs[idx], k, len(c))
        best, to = step
        return None if best <= 0 else (-best, idx, to)

    def counts(self, capacity: int) -> list[int] | None:
        """The greedy's count of every job at ``capacity`` (None when the run departs from the
        recorded one before its first pop: the caller runs the plain greedy)."""
        cs = self.cs
        s = int(np.searchsorted(self.need, capacity, side="right"))  # the first operation that needs more
        if s == len(self.ops):  # the whole run with no limit fits
            return [c[k] for c, k in zip(cs, self.final)]
        if s < self.start:
            return None
        q, heap, at, used = self.snaps[bisect_right(self.snap_at, s) - 1]
        heap, at = list(heap), list(at)
        ops = self.ops
        for op in ops[q:s]:  # the recorded operations up to the departure
            if op is None:
                _, idx, to = heapq.heappop(heap)
                used += cs[idx][to] - cs[idx][at[idx]]
                at[idx] = to
            else:
                heapq.heappush(heap, op)
        left = capacity - used
        op = ops[s]
        if op is not None:  # a push that needs more than the capacity: the step is looked up here
            idx = op[1]
            step = fitting_step(cs[idx], self.fs[idx], self.free[idx], at[idx], left)
            if step is not None:
                heapq.heappush(heap, (-step[0], idx, step[1]))
        finish(heap, cs, self.fs, self.free, at, left, self.smallest)
        return [c[k] for c, k in zip(cs, at)]
