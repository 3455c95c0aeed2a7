"""Forking a run: the engine's state at a re-plan, continued on futures drawn from the scenario's own model.

A fork is a copy of the engine (and of a policy that continues it) taken during a re-plan, with the
run's remaining events replaced by a *sampled future*: per node, from what the events up to now say
of it, the rest of its renewal process of failures and repairs (:func:`future_events`). Futures are
drawn from seeded generators, so every choice compared at a state meets the same futures (common
random numbers). Used by the rollout policy (``simulate/policies.py``) and by the fork analysis of
the scenario families (``scenarios/sweeps/forks.py``).

What a fork knows is what the engine holds at the re-plan: the past events and the reactions already
scheduled (the detection of a failure that has happened but is not detected yet is among them: the
in-band detection takes seconds to minutes). The sampled future is exact for exponential failures
and for Weibull ones (conditioned on the node's age); a repair under way is drawn conditioned on the
time it has lasted (by rejection, at most :data:`REJECTIONS` draws, then the time it has lasted plus
one fresh draw). Failure domains are not modelled here (ValueError).
"""

from __future__ import annotations

import copy
import heapq

import numpy as np

from unicron_plan.faults import severity
from unicron_plan.simulate.engine import Engine
from unicron_plan.simulate.trace import SimEvent, _repair_hours, node_renewal

REJECTIONS = 64


def node_states(events: list[SimEvent], t: float) -> dict[str, tuple[bool, float]]:
    """Per node with an event at or before ``t``: (out for a SEV1 repair, time its state began: the SEV1
    failure when out, else its latest renewal: a repair or a SEV2/SEV3 failure)."""
    out: dict[str, tuple[bool, float]] = {}
    for ev in events:
        if ev.time > t:
            break
        down = ev.kind == "failure" and ev.severity == "sev1"
        out[ev.node] = (down, ev.time)
    return out


def future_events(scenario, events: list[SimEvent], t: float, rng: np.random.Generator,
                  end: float | None = None) -> list[SimEvent]:
    """Events after ``t`` (seconds) up to ``end`` (default: the run's end), drawn from the scenario's failure
    model given what ``events`` (the run's, in time order) say of each node up to ``t``."""
    f = scenario.failures
    if f is None or f.domains:
        raise ValueError("a sampled future needs a failure model without failure domains")
    horizon = (scenario.duration_hours * 3600.0 if end is None else end) / 3600.0
    now = t / 3600.0
    p, sevs, k, mtbf, scale = node_renewal(scenario)
    states = node_states(events, t)
    raw = []
    for node in scenario.cluster.nodes:
        down, since = states.get(node.id, (False, 0.0))
        since /= 3600.0
        at = now
        if down:  # the repair under way, given that it has lasted now - since
            lasted = now - since
            for _ in range(REJECTIONS):
                r = _repair_hours(f.repair_hours, f.repair, rng)
                if r > lasted:
                    break
            else:
                r = lasted + _repair_hours(f.repair_hours, f.repair, rng)
            at = since + r
            if at >= horizon:
                continue
            raw.append((at, "repair", node.id, None, None))
            age = 0.0
        else:
            age = now - since
        while True:
            if k is None:
                ttf = float(rng.exponential(mtbf))
            else:  # the residual life of a Weibull renewal of age ``age``: P(T > age + s | T > age)
                ttf = scale * ((age / scale) ** k + float(rng.exponential())) ** (1.0 / k) - age
            age = 0.0
            at += ttf
            if at >= horizon:
                break
            sev = sevs[int(rng.choice(3, p=p))]
            raw.append((at, "failure", node.id, sev, severity.draw_error(rng, sev)))
            if sev == "sev1":
                at += _repair_hours(f.repair_hours, f.repair, rng)
                if at >= horizon:
                    break
                raw.append((at, "repair", node.id, None, None))
    raw.sort(key=lambda r: r[0])
    first = (events[-1].order + 1) if events else 0
    return [SimEvent(h * 3600.0, first + i, kind, node, sev, err) for i, (h, kind, node, sev, err) in enumerate(raw)]


def fork(eng: Engine, policy=None, share=()) -> Engine:
    """A copy of ``eng`` (paused inside a re-plan) continued by a copy of ``policy`` (default: its own); the
    scenario, the event list, the nodes and the objects in ``share`` are shared, not copied (they must be
    read-only, or valid in every copy: a policy's plan cache keyed by state, with its ids)."""
    memo = {id(x): x for x in (eng.scenario, eng.events, eng.nodes, eng.node_rank)}
    for obj in share:
        memo[id(obj)] = obj
    other = policy is not None and policy is not eng.policy
    if other:
        memo[id(eng.policy)] = None  # not copied: replaced below
    out = copy.deepcopy(eng, memo)
    if other:
        out.policy = copy.deepcopy(policy, memo)
    out.attach_jobs()  # the jobs' callbacks still point at the original engine's sets
    for j in out.jobs:
        j.waiting = set(j.waiting)  # the copy's watched set tells the copy's engine
    out.record, out.progress, out.checks = False, None, False
    return out


def continue_on(eng: Engine, future: list[SimEvent], end: float) -> float:
    """Run the fork ``eng`` on ``future`` (in place of the run's remaining events) to ``end`` seconds; the
    weighted TFLOP it produces from its current time to ``end``."""
    start = eng.output
    eng._heap = [e for e in eng._heap if e[3] != "event"]
    for ev in future:
        eng._heap.append((ev.time, 0, ev.order, "event", ev))
    heapq.heapify(eng._heap)
    eng.horizon = end
    while eng._heap:
        time, _, _, kind, payload = heapq.heappop(eng._heap)
        if time > end:
            break
        eng.advance(time)
        eng.handle(kind, payload)
    eng.advance(end)
    return eng.output - start
