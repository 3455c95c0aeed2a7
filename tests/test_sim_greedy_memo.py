"""The greedy policy's memo of best steps (kept between re-plans of a run) gives exactly the counts
of a plain scan of every step, over problems that share jobs and differ in capacity."""

from __future__ import annotations

import dataclasses
import heapq
from bisect import bisect_right

import numpy as np
import pytest

from unicron_plan.api import load_instance
from unicron_plan.core.problem import build_problem
from unicron_plan.simulate.policies import GreedyPolicy
from unicron_plan.tools.generate import generate_instance


def plain_greedy(problem) -> dict[str, int]:
    """The greedy with every step scanned over the counts that fit (no memo)."""
    counts = {}
    for gtype, cap in problem.capacity.items():
        jobs = problem.jobs_of_type(gtype)
        at = {j.id: 0 for j in jobs}
        left = cap - sum(int(j.counts[0]) for j in jobs)
        table = {j.id: (j.counts.tolist(), j.f.tolist()) for j in jobs}

        def best_step(jid):
            c, f = table[jid]
            k = at[jid]
            end = bisect_right(c, c[k] + left)
            if end <= k + 1:
                return None
            best, to = (f[k + 1] - f[k]) / (c[k + 1] - c[k]), k + 1
            for i in range(k + 2, end):
                r = (f[i] - f[k]) / (c[i] - c[k])
                if r > best:
                    best, to = r, i
            return None if best <= 0 else (-best, order[jid], to)

        order = {j.id: j.index for j in jobs}
        ids = {j.index: j.id for j in jobs}
        heap = [s for s in (best_step(j.id) for j in jobs) if s is not None]
        heapq.heapify(heap)
        while heap:
            _, idx, to = heapq.heappop(heap)
            jid = ids[idx]
            c = table[jid][0]
            grow = c[to] - c[at[jid]]
            if grow <= left:
                left -= grow
                at[jid] = to
            step = best_step(jid)
            if step is not None:
                heapq.heappush(heap, step)
        counts.update({j.id: int(j.counts[at[j.id]]) for j in jobs})
    return counts


@pytest.mark.parametrize("curves", ["synthetic", "equal-per-gpu", "linear-step"])
def test_the_memo_gives_the_plain_greedy_counts_as_capacity_changes(curves):
    rng = np.random.default_rng(7)
    doc = generate_instance(3, gpus=2048, jobs=24, failed_nodes=0, curves=curves)
    nodes = [n["id"] for n in doc["cluster"]["nodes"]]
    memo: dict = {}
    for trial in range(12):
        k = int(rng.integers(1, 40))  # from one node to a large share of the cluster
        failed = [nodes[int(i)] for i in rng.choice(len(nodes), k, replace=False)]
        problem = build_problem(load_instance({**doc, "event": {"kind": "failure", "failed_nodes": failed}}))
        assert GreedyPolicy._greedy(problem, memo) == plain_greedy(problem)
        assert GreedyPolicy._greedy(problem) == plain_greedy(problem)
    assert memo  # the memo was filled and reused across the problems


@pytest.mark.long
@pytest.mark.parametrize("curves", ["synthetic", "equal-per-gpu", "linear-step", "near-linear", "dense"])
def test_the_recorded_run_gives_the_plain_greedy_counts_at_every_capacity(curves):
    """simulate/greedy.py: the run with no limit, replayed up to where a capacity departs from it and
    finished there, gives the plain greedy's counts at capacities from none to more than every job's
    largest count (the departure in the first pushes is reported as None)."""
    from unicron_plan.simulate.greedy import UnlimitedRun

    rng = np.random.default_rng(11)
    for seed in range(3):
        doc = generate_instance(seed, gpus=2048, jobs=40, failed_nodes=0, curves=curves, max_counts=200)
        problem = build_problem(load_instance(doc))
        assert len(problem.capacity) == 1
        jobs = problem.jobs
        UnlimitedRun.SNAPSHOT = 7  # many snapshots: the replay from each is checked
        try:
            run = UnlimitedRun([j.counts.tolist() for j in jobs], [j.f.tolist() for j in jobs], [{} for _ in jobs])
        finally:
            UnlimitedRun.SNAPSHOT = 2048
        assert len(run.snaps) > 3
        top = sum(int(j.counts[-1]) for j in jobs)
        caps = sorted({0, 1, 7, 8, top, top + 8, *rng.integers(0, top + 16, 60).tolist(),
                       *(int(n) for n in run.need[::max(1, len(run.need) // 40)])})
        replayed = 0
        for cap in caps:
            p = dataclasses.replace(problem, capacity={t: cap for t in problem.capacity})
            got = run.counts(cap)
            if got is None:
                continue
            replayed += 1
            assert dict(zip((j.id for j in jobs), got)) == plain_greedy(p), (curves, seed, cap)
        assert replayed > len(caps) // 2
