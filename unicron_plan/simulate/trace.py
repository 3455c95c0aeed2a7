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


def node_renewal(scenario):
    """Each node's renewal process of the scenario's failure model: (the severity mix as probabilities,
    the severity names in that order, the Weibull shape or None, the node MTBF in hours, the Weibull
    scale or None)."""
    f = scenario.failures
    mix = f.severity_mix
    k = f.weibull_shape
    mtbf = f.node_mtbf(len(scenario.cluster.nodes))
    scale = mtbf / math.gamma(1.0 + 1.0 / k) if k is not None else None
    return np.array([mix.sev1, mix.sev2, mix.sev3]), ("sev1", "sev2", "sev3"), k, mtbf, scale


def draw_events(scenario: Scenario, rng: np.random.Generator) -> list[SimEvent]:
    """Events over ``duration_hours``: each node is a renewal process of failures (and repairs).

    Per node, in cluster order: time to failure ~ exponential(mean MTBF) or
    Weibull(shape k, scale MTBF / Gamma(1 + 1/k)); the severity ~ severity_mix;
    the error kind ~ Unicron Figure 1 within the severity; a SEV1 failure takes
    the node out for a lognormal repair time (``repair_hours``, or automatic or
    manual with ``repair``), after which it is new. SEV2/SEV3 leave the node in
    service and its clock restarts. Then each failure domain (rack or switch) is
    a renewal process of its own that takes every node of the unit that is up
    out at once (SEV1) until the unit's repair; a node's own failure while it
    is out is dropped (with its repair).
    """
    if scenario.trace is not None:
        return trace_events(scenario)
    f = scenario.failures
    horizon = scenario.duration_hours
    p, sevs, k, mtbf, scale = node_renewal(scenario)
    raw = []  # (hours, kind, node, severity, error, pair): a SEV1 failure and its repair share a pair
    for node in scenario.cluster.nodes:
        t = 0.0
        while True:
            ttf = scale * rng.weibull(k) if k is not None else rng.exponential(mtbf)
            t += float(ttf)
            if t >= horizon:
                break
            sev = sevs[int(rng.choice(3, p=p))]
            err = severity.draw_error(rng, sev)
            raw.append((t, "failure", node.id, sev, err, len(raw)))
            if len(raw) > MAX_EVENTS:  # a heavy-tailed draw far above the expected count
                _too_many()
            if sev == "sev1":
                pair = raw[-1][5]
                t += _repair_hours(f.repair_hours, f.repair, rng)
                if t >= horizon:
                    break
                raw.append((t, "repair", node.id, None, None, pair))
    if f.domains:
        raw = _with_domains(scenario, raw, rng)
    raw.sort(key=lambda r: r[0])
    return [SimEvent(t * 3600.0, i, kind, node, sev, err) for i, (t, kind, node, sev, err, _) in enumerate(raw)]


def _too_many():
    raise InvalidInstanceError("failures", f"more than {MAX_EVENTS} events drawn for one run; "
                                           "raise node_mtbf_hours or shorten duration_hours")


def _repair_hours(single, mix, rng: np.random.Generator) -> float:
    """One repair time in hours: ``single`` (RepairHours), or automatic / manual per ``mix`` (RepairMix)."""
    if mix is not None:
        single = mix.automatic_hours if rng.random() < mix.automatic_fraction else mix.manual_hours
    return float(rng.lognormal(math.log(single.median), single.sigma))


def domain_units(scenario: Scenario, kind: str, racks_per_switch: int | None) -> list[list[str]]:
    """The node ids of each rack (a node without a rack is a rack of its own), or of each switch:
    ``racks_per_switch`` consecutive racks in order of first appearance."""
    racks: dict = {}
    for n in scenario.cluster.nodes:
        racks.setdefault(n.rack if n.rack is not None else ("node", n.id), []).append(n.id)
    units = list(racks.values())
    if kind == "switch":
        units = [sum(units[i:i + racks_per_switch], []) for i in range(0, len(units), racks_per_switch)]
    return units


def _with_domains(scenario: Scenario, raw: list, rng: np.random.Generator) -> list:
    """``raw`` node events merged with the failure domains' events (see :func:`draw_events`)."""
    f = scenario.failures
    horizon = scenario.duration_hours
    outages = []  # (start, end, nodes, error)
    for d in f.domains:
        for unit in domain_units(scenario, d.kind, d.racks_per_switch):
            t = 0.0
            while True:
                t += float(rng.exponential(d.mtbf_hours))
                if t >= horizon:
                    break
                end = t + (_repair_hours(d.repair_hours, None, rng) if d.repair_hours is not None
                           else _repair_hours(f.repair_hours, f.repair, rng))
                outages.append((t, end, unit, d.error))
                t = end
    # One pass in time order over node failures/repairs and outage starts/ends, tracking who holds each node.
    timeline = [(r[0], 1, i, "own") for i, r in enumerate(raw)]
    timeline += [(o[0], 1, i, "start") for i, o in enumerate(outages)]
    timeline += [(o[1], 0, i, "end") for i, o in enumerate(outages)]  # a unit returns before new failures
    timeline.sort(key=lambda e: (e[0], e[1], e[3] != "end", e[2]))
    held: dict[str, object] = {}  # node -> ("pair", id) or ("outage", i) while out of service
    dropped: set[int] = set()
    taken: dict[int, list[str]] = {}
    out = []
    for t, _, i, what in timeline:
        if what == "own":
            r = raw[i]
            node, pair = r[2], r[5]
            if r[1] == "failure":
                if node in held:
                    dropped.add(pair)
                    continue
                if r[3] == "sev1":
                    held[node] = ("pair", pair)
                out.append(r)
            elif pair not in dropped:
                held.pop(node, None)
                out.append(r)
        elif what == "start":
            if t >= horizon:
                continue
            start, end, unit, err = outages[i]
            taken[i] = [n for n in unit if n not in held]
            for n in taken[i]:
                held[n] = ("outage", i)
                out.append((t, "failure", n, "sev1", err, -1))
        else:
            if t >= horizon:
                continue
            for n in taken.get(i, ()):
                held.pop(n, None)
                out.append((t, "repair", n, None, None, -1))
        if len(out) > MAX_EVENTS:
            _too_many()
    return out


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
