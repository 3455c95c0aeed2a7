"""The events of one simulated run: drawn from the failure model, or read from the trace.

Every policy replays the same events (a paired comparison). Randomness comes
only from the numpy Generator passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.faults import severity
from unicron_plan.schema.scenario import MAX_EVENTS, Scenario


@dataclass(frozen=True, order=True)
class SimEvent:
    """A failure (with severity and error kind) or a repair of one node, at ``time`` seconds."""

    time: float
    order: int  # tie-break: the position in the generated or given trace
    kind: str  # "failure" | "repair"
    node: str
    severity: str | None = None
    error: str | None = None


def _most_frequent(sev: str) -> str:
    from unicron_plan.faults import faultdata

    return max(severity.errors_of(sev), key=lambda e: faultdata.FIGURE1_PERCENT[e])


def draw_events(scenario: Scenario, rng: np.random.Generator) -> list[SimEvent]:
    """Events over ``duration_hours``: each node is a renewal process of failures (and repairs).

    Per node, in cluster order: time to failure ~ exponential(mean MTBF) or
    Weibull(shape k, scale MTBF / Gamma(1 + 1/k)); the severity ~ severity_mix;
    the error kind ~ Unicron Figure 1 within the severity; a SEV1 failure takes
    the node out for lognormal(ln median, sigma) hours, after which it is new.
    SEV2/SEV3 leave the node in service and its clock restarts.
    """
    if scenario.trace is not None:
        return trace_events(scenario)
    f = scenario.failures
    horizon = scenario.duration_hours
    mix = f.severity_mix
    p = np.array([mix.sev1, mix.sev2, mix.sev3])
    sevs = ("sev1", "sev2", "sev3")
    k = f.weibull_shape
    mtbf = f.node_mtbf(len(scenario.cluster.nodes))
    scale = mtbf / math.gamma(1.0 + 1.0 / k) if k is not None else None
    raw = []
    for node in scenario.cluster.nodes:
        t = 0.0
        while True:
            ttf = scale * rng.weibull(k) if k is not None else rng.exponential(mtbf)
            t += float(ttf)
            if t >= horizon:
                break
            sev = sevs[int(rng.choice(3, p=p))]
            err = severity.draw_error(rng, sev)
            raw.append((t, "failure", node.id, sev, err))
            if len(raw) > MAX_EVENTS:  # a heavy-tailed draw far above the expected count
                raise InvalidInstanceError("failures", f"more than {MAX_EVENTS} events drawn for one run; "
                                                       "raise node_mtbf_hours or shorten duration_hours")
            if sev == "sev1":
                t += float(rng.lognormal(math.log(f.repair_hours.median), f.repair_hours.sigma))
                if t >= horizon:
                    break
                raw.append((t, "repair", node.id, None, None))
    raw.sort(key=lambda r: r[0])
    return [SimEvent(t * 3600.0, i, kind, node, sev, err) for i, (t, kind, node, sev, err) in enumerate(raw)]


def trace_events(scenario: Scenario) -> list[SimEvent]:
    """The scenario's trace in time order (ties keep the file's order)."""
    order = sorted(range(len(scenario.trace)), key=lambda i: (scenario.trace[i].time_hours, i))
    out = []
    for rank, i in enumerate(order):
        ev = scenario.trace[i]
        err = ev.error or (_most_frequent(ev.severity) if ev.kind == "failure" else None)
        out.append(SimEvent(ev.time_hours * 3600.0, rank, ev.kind, ev.node, ev.severity, err))
    return out


def planning_mtbf_hours(scenario: Scenario) -> float:
    """The node MTBF the planner assumes: cost.node_mtbf_hours, the failure model's (``Failures.node_mtbf``), or
    the trace's rate."""
    if scenario.cost.node_mtbf_hours is not None:
        return scenario.cost.node_mtbf_hours
    if scenario.failures is not None:
        return scenario.failures.node_mtbf(len(scenario.cluster.nodes))
    n_fail = sum(1 for e in scenario.trace if e.kind == "failure")
    return len(scenario.cluster.nodes) * scenario.duration_hours / max(n_fail, 1)
