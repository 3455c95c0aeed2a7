"""Exact dynamic program for the separable problem (the default solver).

Per GPU type with capacity C, jobs are folded in one at a time over a value
array best[c] = max objective of the jobs so far using at most c GPUs:

    best_j[c] = max_k best_{j-1}[c - y_k] + G_j(y_k)      over the job's kept counts y_k

Only counts on the job's *Pareto staircase* are kept (exact dominance pruning:
a count is useless when a smaller one is worth at least as much), so the work
is O(C x sum of kept counts), with one vectorised numpy pass per kept count.
The argmax per (job, c) is stored in the smallest integer type that fits and
backtracked from c = C.
"""

from __future__ import annotations

import numpy as np

from unicron_plan.problem import JobTerms, Problem, RawSolution
from unicron_plan.solvers import SolverOptions


def available() -> bool:
    """The DP needs only numpy."""
    return True


def pareto_options(job: JobTerms) -> tuple[np.ndarray, np.ndarray]:
    """Counts (0 first) whose gain beats every smaller count's: exact dominance pruning."""
    keep_counts, keep_gains = [], []
    best = -np.inf
    for c, g in zip(job.counts.tolist(), job.gains.tolist()):
        if g > best:
            keep_counts.append(c)
            keep_gains.append(g)
            best = g
    return np.array(keep_counts, dtype=np.int64), np.array(keep_gains, dtype=float)


def solve_type(jobs: list[JobTerms], capacity: int) -> tuple[dict[str, int], float]:
    """Optimal counts for the jobs of one GPU type sharing ``capacity`` GPUs."""
    best = np.zeros(capacity + 1)
    choices = []
    options = [pareto_options(j) for j in jobs]
    for counts, gains in options:
        dtype = np.uint8 if len(counts) <= 256 else (np.uint16 if len(counts) <= 65536 else np.uint32)
        new = best + gains[0]  # counts[0] == 0 always
        choice = np.zeros(capacity + 1, dtype=dtype)
        for k in range(1, len(counts)):
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


def solve(problem: Problem, options: SolverOptions | None = None) -> RawSolution:
    """Solve each GPU type independently and add up the optima."""
    counts: dict[str, int] = {}
    total = 0.0
    for gpu_type, cap in problem.capacity.items():
        jobs = problem.jobs_of_type(gpu_type)
        if not jobs:
            continue
        part, value = solve_type(jobs, cap)
        counts.update(part)
        total += value
    return RawSolution(counts=counts, objective=total, bound=total)
