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

from unicron_plan.constraints import dp_limitations
from unicron_plan.errors import InfeasibleError, SolverUnavailableError
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
        # counts[0] is 0 unless a constraint (pinned, hysteresis) forbids suspending the job;
        # then the cells below the smallest count stay -inf (infeasible).
        new = np.full(capacity + 1, -np.inf)
        choice = np.zeros(capacity + 1, dtype=dtype)
        for k in range(len(counts)):
            c = int(counts[k])
            cand = best[: capacity + 1 - c] + gains[k]
            better = cand > new[c:]
            np.copyto(new[c:], cand, where=better)
            choice[c:][better] = k
        best = new
        choices.append(choice)
    if not np.isfinite(best[capacity]):
        raise InfeasibleError(f"the constrained jobs ({', '.join(j.id for j in jobs)}) do not fit in "
                              f"{capacity} GPUs of their type")
    result: dict[str, int] = {}
    c = capacity
    for job, (counts, _), choice in zip(reversed(jobs), reversed(options), reversed(choices)):
        y = int(counts[choice[c]])
        result[job.id] = y
        c -= y
    return result, float(best[capacity])


def solve(problem: Problem, options: SolverOptions | None = None) -> RawSolution:
    """Solve each GPU type independently and add up the optima.

    Refuses (SolverUnavailableError) instances with constraints the DP cannot
    express (node-level tp, max_nodes, same_rack; max_changed_jobs): use milp,
    cpsat or auto for those.
    """
    limits = dp_limitations(problem)
    if limits:
        raise SolverUnavailableError(
            f"solver 'dp' cannot express {', '.join(limits)}; use --solver auto, milp or cpsat")
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


def relaxation(problem: Problem) -> tuple[dict[str, int], float]:
    """The DP optimum with the constraints it cannot express dropped: an upper bound for the IP backends."""
    counts: dict[str, int] = {}
    total = 0.0
    for gpu_type, cap in problem.capacity.items():
        jobs = problem.jobs_of_type(gpu_type)
        if jobs:
            part, value = solve_type(jobs, cap)
            counts.update(part)
            total += value
    return counts, total
