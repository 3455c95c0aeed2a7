"""A node-level brute force for tiny instances, written independently of the solvers.

It re-derives every rule from the instance (allowed counts, tp, pinned, max_nodes,
same_rack, hysteresis, max_changed_jobs, and the stay rule: an unhit job that keeps
its count on another split than its previous one is changed and pays its transition), enumerates every per-job split of every
allowed count over the nodes, and combines the jobs exhaustively (memoised on the
GPUs left per node and the number of changed jobs, which is exact). Only the
objective terms come from cost.py, through JobTerms.gain_of, as everywhere.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

from unicron_plan.core.problem import build_problem


def splits(total: int, caps: list[int], unit: int):
    """Every vector a (a[n] multiple of unit, a[n] <= caps[n]) summing to total."""
    ranges = [range(0, c // unit * unit + 1, unit) for c in caps]
    for combo in itertools.product(*ranges):
        if sum(combo) == total:
            yield combo


def node_brute(instance) -> tuple[float, dict[str, int]] | None:
    """(optimal objective, counts) of the node-level problem, or None when infeasible."""
    problem = problem_without_precheck(instance)
    nodes = [n for n in problem.state.nodes.values() if not n.drained and n.healthy_after > 0]
    options = node_options(instance, problem, nodes)
    limit = instance.max_changed_jobs if instance.max_changed_jobs is not None else len(options)
    found = combine(options, tuple(n.healthy_after for n in nodes), limit)
    if found is None:
        return None
    return found[0], {j.id: c for j, c in zip(instance.jobs, found[1])}


def local_splits(job, total: int, caps: list[int], unit: int, racks: list):
    """The :func:`splits` of ``total`` that keep the job's max_nodes and same_rack (``racks``: per node)."""
    for a in splits(total, caps, unit):
        used = [k for k, v in enumerate(a) if v]
        if job.max_nodes is not None and len(used) > job.max_nodes:
            continue
        if job.same_rack and len({racks[k] for k in used}) > 1:
            continue
        yield a


def node_options(instance, problem, nodes) -> list[list[tuple]]:
    """Per job, every (gain, changed 0/1, GPUs per node of ``nodes``, count) on its own GPU type that
    the rules allow."""
    state = problem.state
    names = [n.id for n in nodes]
    racks = [n.rack if n.rack is not None else ("node", n.id) for n in nodes]
    options = []  # per job: list of (gain, changed, split vector, count)
    for job, terms in zip(instance.jobs, problem.jobs):
        x, hit = job.current.gpus, state.hit[job.id]
        tp = job.tp or 1
        own = job.throughput.tflops or job.throughput.by_type[job.throughput.gpu_type]
        table = {int(k): v for k, v in own.items()}
        cap = problem.capacity[job.throughput.gpu_type]
        counts = [0] + sorted(c for c in table if c <= cap)
        prev = tuple(state.previous.get(job.id, {}).get(nid, 0) for nid in names)
        stay = terms.f_of(x) * problem.d_run
        opts = []
        for c in counts:
            if c % tp:
                continue
            if job.pinned and c != x:
                continue
            g = terms.gain_of(c)
            if job.min_gain_fraction is not None and not hit and c != x \
                    and g < (1 + job.min_gain_fraction) * stay:
                continue
            caps = [n.healthy_after if n.gpu_type == job.throughput.gpu_type else 0 for n in nodes]
            for a in local_splits(job, c, caps, tp, racks):
                if job.pinned and (a != prev or any(state.nodes[n].drained for n in state.previous.get(job.id, {}))):
                    continue
                if not hit and c == x and x > 0 and a != prev:
                    # The stay rule: a move at the same count is a change and pays the transition.
                    moved = terms.gain_of(c, moved=True)
                    if job.min_gain_fraction is not None and moved < (1 + job.min_gain_fraction) * stay:
                        continue
                    opts.append((moved, 1, a, c))
                    continue
                opts.append((g, int(c != x or hit), a, c))
        if job.pinned and x > 0 and any(state.nodes[n].drained for n in state.previous.get(job.id, {})):
            opts = []
        options.append(opts)
    return options


def combine(options, free: tuple[int, ...], limit: int) -> tuple[float, tuple] | None:
    """(best total gain, a count per job) of one option per job, an option being (gain, changed 0/1,
    GPUs per node, count), within the GPUs ``free`` per node and at most ``limit`` changed jobs
    (exhaustive, memoised on the GPUs left and the jobs changed so far), or None when none fits."""

    @lru_cache(maxsize=None)
    def best(i: int, free: tuple[int, ...], changed: int):
        if i == len(options):
            return 0.0, ()
        top, arg = -math.inf, None
        for g, ch, a, c in options[i]:
            if changed + ch > limit or any(v > f for v, f in zip(a, free)):
                continue
            rest, counts = best(i + 1, tuple(f - v for f, v in zip(free, a)), changed + ch)
            if counts is not None and g + rest > top:
                top, arg = g + rest, (c,) + counts
        return top, arg

    value, counts = best(0, free, 0)
    return None if counts is None else (value, counts)


def problem_without_precheck(instance):
    """build_problem without its infeasibility precheck (the brute force finds infeasibility itself)."""
    from unittest import mock

    with mock.patch("unicron_plan.core.constraints.precheck", lambda p: None):
        return build_problem(instance)
