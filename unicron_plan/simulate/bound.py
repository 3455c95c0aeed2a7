"""An upper bound on the weighted TFLOP any policy can earn on one run's events (docs/simulation.md,
"An upper bound").

At every instant a job produces only while it computes on GPUs of nodes that are in service (the
engine's invariants: no job computes on a node whose SEV1 failure is undetected or unrepaired, and no
node holds more GPUs than it has), at the rate of its count's table entry x its policy's healthy
factor. So the policy's rate at time t is at most

    V(C(t)) = max sum_i F_i(y_i)   s.t.  y_i in {0} ∪ counts_i,  sum_i y_i <= C(t)

times the largest healthy factor, with C(t) the usable GPUs of the nodes in service at t. C(t) here
counts a node out from each SEV1 failure's time to its node's next repair event, never longer than
the engine keeps it out (the engine also waits for the failure's detection), so it is at least the
engine's capacity; V grows with C. Integrated over the run:

    bound = factor x sum over intervals of V(C) x length  >=  weighted TFLOP of every policy

It leaves out everything a policy cannot avoid only in some runs (detection, transitions, queueing):
a valid bound, not a tight one. Single-type scenarios; a policy that runs a job degraded above its
GPUs (bamboo's absorbed failure) is not covered by the argument.
"""

from __future__ import annotations

import math
from functools import reduce

import numpy as np

from unicron_plan.schema.scenario import Scenario
from unicron_plan.simulate.trace import SimEvent


def best_rate_table(scenario: Scenario, capacity: int) -> tuple[np.ndarray, int]:
    """(V, step): V[c] = the best sum of weight x TFLOP/s over allowed counts (0 allowed) within c x step
    GPUs, for c = 0 .. capacity // step; step: the common divisor of every count."""
    tables = [(np.array(sorted(j.throughput.table_view())), j) for j in scenario.jobs]
    step = reduce(math.gcd, (int(c) for counts, _ in tables for c in counts.tolist() if c), 0) or 1
    n = capacity // step + 1
    best = np.zeros(n)
    for counts, job in tables:
        view = job.throughput.table_view()
        new = best.copy()
        for c in counts.tolist():
            u = int(c) // step
            if 0 < u < n:
                np.maximum(new[u:], best[:n - u] + job.weight * float(view[c]), out=new[u:])
        best = new
    return best, step


def capacity_epochs(scenario: Scenario, events: list[SimEvent]) -> list[tuple[float, float, int]]:
    """(start, end, usable GPUs of the nodes in service) over [0, duration]; a node is out from each SEV1
    failure to its next repair event. ValueError when a node fails SEV1 again before that repair (the
    argument above needs each failure's node back no earlier than its repair event)."""
    usable = {n.id: n.gpus - len(n.failed_gpus) for n in scenario.cluster.nodes}
    end = scenario.duration_hours * 3600.0
    capacity = sum(usable.values())
    out: set[str] = set()
    epochs, t = [], 0.0
    for ev in sorted(events, key=lambda e: (e.time, e.order)):
        if ev.time > end:
            break
        if ev.kind == "failure" and ev.severity == "sev1":
            if ev.node in out:
                raise ValueError(f"node {ev.node!r} fails (SEV1) at {ev.time:.0f} s while out of service")
            delta = -usable[ev.node]
            out.add(ev.node)
        elif ev.kind == "repair" and ev.node in out:
            delta = usable[ev.node]
            out.discard(ev.node)
        else:
            continue
        if ev.time > t:
            epochs.append((t, ev.time, capacity))
            t = ev.time
        capacity += delta
    if end > t:
        epochs.append((t, end, capacity))
    return epochs


def upper_bound(scenario: Scenario, events: list[SimEvent], factor: float = 1.0) -> float:
    """Weighted TFLOP no policy whose healthy factor is at most ``factor`` exceeds on ``events``."""
    types = {n.gpu_type for n in scenario.cluster.nodes}
    if len(types) > 1:
        raise ValueError("the upper bound is for single-type scenarios")
    full = sum(n.gpus - len(n.failed_gpus) for n in scenario.cluster.nodes)
    best, step = best_rate_table(scenario, full)
    total = math.fsum(float(best[c // step]) * (b - a) for a, b, c in capacity_epochs(scenario, events))
    return factor * total
