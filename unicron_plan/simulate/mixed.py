"""Mixed fleets in the simulator: jobs that may run on several GPU types (docs/simulation.md, "Mixed fleets").

A job of a scenario runs on one GPU type at a time; with ``throughput.by_type`` it may run on any of
the listed types. The engine keeps every such job's table per type (:func:`attach_type_tables`) and,
on a mixed fleet only, counts type changes and the GPU-hours each type's GPUs were held
(:func:`add_gpu_seconds`). Which policy may change a job's type:

- ``unicron``: the exact mixed-fleet solver (``solvers.mixed``) chooses every job's type and count at
  each re-plan; a job moved to another type pays its transition.
- ``type-bound``: the same planner restricted to each job's current type (the problem without its
  type alternatives), so a job keeps the type it started on.
- ``greedy``: marginal weight x TFLOP/s per added GPU over (job, type) steps (:func:`greedy_types`):
  a job's first step may be on any of its types, its later steps stay on that type.
- ``equal-share`` and the baselines that own their GPUs (megatron, oobleck, varuna, bamboo) keep each
  job on the type it started on.
"""

from __future__ import annotations

import heapq
from typing import Optional

import numpy as np

from unicron_plan.schema.scenario import Scenario

#: The extra policy of a mixed fleet: unicron restricted to each job's current GPU type.
TYPE_BOUND = "type-bound"


def job_types(scenario: Scenario) -> list[list[str]]:
    """The GPU types each job may run on (its current type first)."""
    return [j.throughput.allowed_types() for j in scenario.jobs]


def is_mixed(scenario: Scenario) -> bool:
    """Whether some job of ``scenario`` may run on more than one GPU type."""
    return any(len(t) > 1 for t in job_types(scenario))


def default_policies(scenario: Scenario, names: tuple[str, ...]) -> list[str]:
    """``names``, with ``type-bound`` after ``unicron`` when the scenario is a mixed fleet."""
    out = list(names)
    if is_mixed(scenario) and TYPE_BOUND not in out:
        out.insert(out.index("unicron") + 1 if "unicron" in out else len(out), TYPE_BOUND)
    return out


def attach_type_tables(jobs: list, scenario: Scenario, factor: float) -> Optional[dict[str, float]]:
    """Give every job of a mixed fleet its table per GPU type (x ``factor``, the policy's healthy speed);
    the GPU-seconds counters per type to fill (None when no job may change type: nothing is added)."""
    if not is_mixed(scenario):
        return None
    for run, job in zip(jobs, scenario.jobs):
        tp = job.throughput
        if len(tp.allowed_types()) > 1:
            run.tables = {t: ({c: v * factor for c, v in tp.type_table(t).items()} if t != tp.gpu_type
                              else run.table) for t in tp.allowed_types()}
    return {t: 0.0 for t in sorted({n.gpu_type for n in scenario.cluster.nodes})}


def add_gpu_seconds(counters: dict[str, float], jobs: list, span: float) -> None:
    """Add ``span`` seconds of every job's GPUs held to its current type's counter."""
    for j in jobs:
        if j.alloc:
            counters[j.gpu_type] += j.count * span


def greedy_types(problem) -> tuple[dict[str, int], dict[str, str]]:
    """(counts, GPU type per job): the greedy rule over every job's types, ignoring transition cost.

    From all jobs at 0, repeatedly apply the single step (a job to a larger allowed count that fits
    its type's GPUs left) with the highest added F per added GPU; a job at 0 may step onto any of its
    types (``problem.alternatives``), a job with GPUs only on the type it holds them on. Ties go to the
    job listed first, then to the type listed first (its current one). A job left at 0 keeps its type.
    """
    left = dict(problem.capacity)
    alts = [problem.alternatives.get(j.id, [j]) for j in problem.jobs]
    at = [0] * len(alts)  # index into the chosen option's counts
    on: list[Optional[int]] = [None] * len(alts)  # the chosen option (None: still at 0, type open)
    for i, options in enumerate(alts):
        if int(options[0].counts[0]) != 0:  # a job that may not suspend starts at its smallest count
            on[i] = 0
            left[options[0].gpu_type] -= int(options[0].counts[0])

    def best_step(i: int, a: int):
        jt = alts[i][a]
        k = at[i] if on[i] == a else 0
        x = int(jt.counts[k])
        room = left.get(jt.gpu_type, 0)
        end = int(np.searchsorted(jt.counts, x + room, side="right"))
        if end <= k + 1:
            return None
        base = jt.f[k] if on[i] == a else 0.0
        ratio = (jt.f[k + 1:end] - base) / (jt.counts[k + 1:end] - x)
        b = int(np.argmax(ratio))
        return None if ratio[b] <= 0 else (-float(ratio[b]), i, a, k + 1 + b)

    def steps(i: int):
        return [best_step(i, a) for a in (range(len(alts[i])) if on[i] is None else (on[i],))]

    heap = [s for i in range(len(alts)) for s in steps(i) if s is not None]
    heapq.heapify(heap)
    while heap:
        _, i, a, to = heapq.heappop(heap)
        if on[i] is not None and on[i] != a:  # the job took another type meanwhile
            continue
        jt = alts[i][a]
        k = at[i] if on[i] == a else 0
        grow = int(jt.counts[to]) - int(jt.counts[k])
        if to <= k or grow > left.get(jt.gpu_type, 0):  # stale: recompute this option's best step
            step = best_step(i, a)
            if step is not None:
                heapq.heappush(heap, step)
            continue
        left[jt.gpu_type] -= grow
        on[i], at[i] = a, to
        step = best_step(i, a)
        if step is not None:
            heapq.heappush(heap, step)
    counts, types = {}, {}
    for i, j in enumerate(problem.jobs):
        a = on[i] if on[i] is not None else 0
        counts[j.id] = int(alts[i][a].counts[at[i]]) if on[i] is not None else 0
        types[j.id] = alts[i][a].gpu_type if counts[j.id] > 0 else j.gpu_type
    return counts, types


def with_model_tables(scenario: Scenario) -> Scenario:
    """``scenario`` with every job that names a model of the library (``throughput.model``, with
    ``gpu_types`` for several types) given its derived tables instead: one per GPU type
    (``by_type``) or, on one type, ``tflops``; derived as for an instance (``core.problem``, each type
    up to its GPUs in the cluster). The scenario itself when every job gives tables. Raises
    InvalidInstanceError naming the job's field when a table cannot be derived."""
    if all(j.throughput.has_table for j in scenario.jobs):
        return scenario
    from unicron_plan.core.problem import resolve_tables, resolve_type_tables
    from unicron_plan.errors import InvalidInstanceError
    from unicron_plan.schema.instance import Cost, Instance, Throughput

    have = {n.gpu_type for n in scenario.cluster.nodes}
    for k, job in enumerate(scenario.jobs):
        for t in job.throughput.allowed_types() if not job.throughput.has_table else ():
            if t not in have:
                field = "gpu_type" if t == job.throughput.gpu_type else "gpu_types"
                raise InvalidInstanceError(f"jobs[{k}].throughput.{field}",
                                           f"{t!r}: no node of the cluster has this GPU type")

    inst = Instance.model_construct(
        schema_version="1", name=scenario.name, cluster=scenario.cluster, jobs=scenario.jobs, event=None,
        cost=Cost.model_construct(expected_run_seconds=1.0, node_mtbf_hours=None,
                                  default_transition_seconds=scenario.cost.default_transition_seconds),
        isolation=scenario.isolation, reference=None, efficiency=None, max_changed_jobs=None)
    tables, layouts = resolve_tables(inst)
    type_tables, _ = resolve_type_tables(inst, tables, layouts)
    jobs = []
    for job in scenario.jobs:
        tp = job.throughput
        if tp.has_table:
            jobs.append(job)
            continue
        per_type = type_tables.get(job.id) or {tp.gpu_type: tables[job.id]}
        as_keys = {t: {str(c): float(v) for c, v in sorted(tab.items())} for t, tab in per_type.items()}
        k = scenario.jobs.index(job)
        for t, tab in list(as_keys.items()):
            if not tab:  # the model has no layout on this type within its GPUs
                if t == tp.gpu_type:
                    raise InvalidInstanceError(f"jobs[{k}].throughput.model",
                                               f"{tp.model} has no layout on the cluster's {t} GPUs")
                del as_keys[t]
        new = Throughput(gpu_type=tp.gpu_type, by_type=as_keys) if len(as_keys) > 1 \
            else Throughput(gpu_type=tp.gpu_type, tflops=as_keys[tp.gpu_type])
        jobs.append(job.model_copy(update={"throughput": new}))
    return scenario.model_copy(update={"jobs": jobs})
