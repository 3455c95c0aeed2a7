"""The coordinator's state and its transitions: pure functions, replayed from the log.

The state is the *applied* cluster (a v1 instance without event: node health,
jobs and their current allocations) plus the events recorded since the last
apply. Pending events combine into the one v1 event of the planning instance
(docs/service.md, "How pending events combine"):

- failures accumulate: every GPU failed since the last apply is in one
  ``failure`` event (nodes named in a ``failed_nodes`` stay there, the
  other GPUs are listed in ``failed_gpus``); the jobs on them are hit;
- a repair is folded into the cluster at once (a repair hits nothing and only
  returns GPUs, so an instance with the GPUs healthy and no event has the same
  objective); repairing a GPU of a pending failure cancels that failure;
- exits: with failures pending, leaving jobs are left out of the planning
  instance (a leaving job holds nothing and scores 0); otherwise the event is
  a ``job_exit`` of every pending exit;
- arrivals: the jobs are already in the state with ``current.gpus`` 0; with
  nothing else pending the event is a ``job_arrival`` of them.

Applying a plan makes its placement the jobs' current allocations, writes the
pending failures into the nodes' ``failed_gpus`` (a node the plan drains is
marked failed whole until it is repaired), drops the jobs that left and clears
the pending events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import TypeAdapter

from unicron_plan.core.checks import check_event
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import parse_model
from unicron_plan.schema import Instance
from unicron_plan.schema.base import StrictModel
from unicron_plan.schema.instance import AnyEvent, CurrentAllocation, Job

_EVENT = TypeAdapter(AnyEvent)


class NotFound(Exception):
    """A plan or job id the state does not know (HTTP 404)."""


_PLAN_ID = re.compile(r"p([1-9][0-9]{0,17})")  # "p" and a revision in ASCII digits, no leading zero


def plan_revision(plan_id: str) -> "int | None":
    """The revision a plan id names (``p12`` -> 12), or None when it is not a plan id as the service writes
    them (a leading zero, other digits than ASCII's, a sign or space: another spelling of an id is no id)."""
    found = _PLAN_ID.fullmatch(plan_id) if isinstance(plan_id, str) else None
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class State:
    """The applied instance, the pending events and the revision of the last change."""

    base: Instance | None = None
    failed: dict[str, frozenset] = field(default_factory=dict)  # node -> GPUs failed since the last apply
    whole: frozenset = frozenset()  # nodes failed as a whole (``failed_nodes``) since the last apply
    exits: tuple = ()
    arrivals: tuple = ()
    revision: int = 0
    base_version: int = 0  # bumped whenever `base` changes (the contingency index follows it)

    @property
    def pending(self) -> bool:
        return bool(self.failed or self.exits or self.arrivals)


def _check(instance: Instance) -> Instance:
    """Run the package's cross-field checks (the same the CLI runs)."""
    from unicron_plan.api import load_instance

    return load_instance(instance)


def _need_cluster(state: State) -> Instance:
    if state.base is None:
        raise InvalidInstanceError("cluster", "no cluster yet: PUT /v1/cluster first")
    return state.base


class _EventBody(StrictModel):
    event: AnyEvent


def parse_event(data: Any):
    """A v1 event object from JSON data; errors name ``event.<field>`` as the CLI's do."""
    return parse_model(_EventBody, {"event": data}).event


def set_cluster(state: State, data: Any) -> State:
    """The state after ``PUT /v1/cluster``: a new applied instance, nothing pending."""
    if isinstance(data, dict) and data.get("event") is not None:
        raise InvalidInstanceError("event", "not part of the cluster: POST events to /v1/events")
    inst = _check(parse_model(Instance, data))
    return State(base=inst, base_version=state.base_version + 1, revision=state.revision)


def combined_event(state: State) -> dict | None:
    """The one v1 event that stands for everything pending (module docstring)."""
    base = _need_cluster(state)
    if state.failed:
        nodes, gpus = [], []
        # in cluster order (a single node needs no ordering, and no walk over the whole cluster)
        ids = [n.id for n in base.cluster.nodes if n.id in state.failed] if len(state.failed) > 1 \
            else list(state.failed)
        for nid in ids:
            lost = state.failed[nid]
            if not lost:
                continue
            if nid in state.whole:
                nodes.append(nid)
            else:
                gpus += [{"node": nid, "gpu": g} for g in sorted(lost)]
        return {"kind": "failure", "failed_nodes": nodes, "failed_gpus": gpus}
    if state.exits:
        return {"kind": "job_exit", "jobs": list(state.exits)}
    if state.arrivals:
        return {"kind": "job_arrival", "jobs": list(state.arrivals)}
    return None


def pending_summary(state: State) -> dict | None:
    """The events pending in ``state`` (recorded since the last apply), which a plan made now includes
    besides the event it answers: ``failure`` (as combined), ``job_exit`` and ``job_arrival`` (job ids);
    None when nothing is pending."""
    if not state.pending:
        return None
    out: dict[str, Any] = {}
    if state.failed:
        out["failure"] = combined_event(replace(state, exits=(), arrivals=()))
    if state.exits:
        out["job_exit"] = list(state.exits)
    if state.arrivals:
        out["job_arrival"] = list(state.arrivals)
    return out


def planning_instance(state: State) -> Instance:
    """The v1 instance (with the combined event) that a plan of this state is solved from."""
    base = _need_cluster(state)
    ev = combined_event(state)
    update: dict[str, Any] = {"event": None if ev is None else _EVENT.validate_python(ev)}
    if state.failed and state.exits:
        update["jobs"] = [j for j in base.jobs if j.id not in state.exits]
    return base.model_copy(update=update)


def _with_nodes(base: Instance, failed: dict[str, set]) -> Instance:
    """``base`` with the nodes in ``failed`` given these failed_gpus (no re-validation: values are checked)."""
    nodes = [n.model_copy(update={"failed_gpus": sorted(failed[n.id])}) if n.id in failed else n
             for n in base.cluster.nodes]
    return base.model_copy(update={"cluster": base.cluster.model_copy(update={"nodes": nodes})})


def _health_view(state: State) -> Instance:
    """The applied instance with the pending failures written into failed_gpus."""
    base = _need_cluster(state)
    if not state.failed:
        return base
    by_id = {n.id: n for n in base.cluster.nodes}
    return _with_nodes(base, {nid: set(by_id[nid].failed_gpus) | set(g) for nid, g in state.failed.items()})


def record_event(state: State, data: Any, nodes: dict | None = None) -> tuple[State, Any]:
    """(the state after recording the event, the parsed event); raises InvalidInstanceError naming the field.
    ``nodes``: the applied cluster's nodes by id, when the caller keeps them."""
    base = _need_cluster(state)
    ev = parse_event(data)
    if ev.kind == "failure":
        check_event(base.model_copy(update={"event": ev}), nodes)  # the applied cluster was checked when set
        by_id = nodes if nodes is not None else {n.id: n for n in base.cluster.nodes}
        failed = {k: set(v) for k, v in state.failed.items()}
        for nid in ev.failed_nodes:
            node = by_id[nid]
            failed.setdefault(nid, set()).update(set(range(node.gpus)) - set(node.failed_gpus))
        for fg in ev.failed_gpus:
            failed.setdefault(fg.node, set()).add(fg.gpu)
        failed = {k: frozenset(v) for k, v in failed.items() if v}
        whole = state.whole | {n for n in ev.failed_nodes if n in failed}
        return replace(state, failed=failed, whole=frozenset(whole)), ev
    if ev.kind == "repair":
        view = _health_view(state)
        # The event's references are checked against the health including pending failures.
        check_event(view.model_copy(update={"event": ev}))
        by_id = {n.id: n for n in view.cluster.nodes}
        repaired: dict[str, set] = {}
        for nid in ev.repaired_nodes:
            repaired.setdefault(nid, set()).update(by_id[nid].failed_gpus)
        for rg in ev.repaired_gpus:
            repaired.setdefault(rg.node, set()).add(rg.gpu)
        base_nodes = {n.id: n for n in base.cluster.nodes}
        new_base = _with_nodes(base, {nid: set(base_nodes[nid].failed_gpus) - gpus
                                      for nid, gpus in repaired.items()})
        failed = {nid: frozenset(g - repaired.get(nid, set())) for nid, g in state.failed.items()}
        failed = {k: v for k, v in failed.items() if v}
        whole = frozenset(n for n in state.whole if n in failed and n not in repaired)
        return replace(state, base=new_base, failed=failed, whole=whole, base_version=state.base_version + 1), ev
    check_event(base.model_copy(update={"event": ev}), nodes)
    if ev.kind == "job_exit":
        exits = tuple(dict.fromkeys(state.exits + tuple(ev.jobs)))
        arrivals = tuple(j for j in state.arrivals if j not in exits)
        return replace(state, exits=exits, arrivals=arrivals), ev
    arrivals = tuple(dict.fromkeys(state.arrivals + tuple(j for j in ev.jobs if j not in state.exits)))
    return replace(state, arrivals=arrivals), ev


def add_job(state: State, data: Any) -> tuple[State, Job]:
    """The state after ``POST /v1/jobs``: a queued job (``current.gpus`` 0, no nodes)."""
    base = _need_cluster(state)
    job = parse_model(Job, data, "job")
    if job.current.gpus != 0 or job.current.nodes:
        raise InvalidInstanceError("job.current", "a new job is queued: current.gpus 0 and no nodes")
    if any(j.id == job.id for j in base.jobs):
        raise InvalidInstanceError("job.id", f"{job.id!r} is already a job of the cluster")
    try:
        new_base = _check(base.model_copy(update={"jobs": [*base.jobs, job]}))
    except InvalidInstanceError as exc:
        raise as_new_job(exc, len(base.jobs)) from None
    return replace(state, base=new_base, base_version=state.base_version + 1), job


def as_new_job(exc: InvalidInstanceError, index: int) -> InvalidInstanceError:
    """``exc`` about the cluster whose job ``index`` is the one ``POST /v1/jobs`` adds, naming that job's
    fields as its body's (``job.throughput...``, not ``jobs[N].throughput...``)."""
    last = f"jobs[{index}]"
    if exc.field == last or exc.field.startswith((last + ".", last + "[")):
        return InvalidInstanceError("job" + exc.field[len(last):], exc.message)
    return exc


def remove_job(state: State, job_id: str) -> State:
    """The state after ``DELETE /v1/jobs/{id}``: the job is gone and its GPUs are free."""
    base = _need_cluster(state)
    if not any(j.id == job_id for j in base.jobs):
        raise NotFound(f"job {job_id!r}")
    jobs = [j for j in base.jobs if j.id != job_id]
    return replace(state, base=base.model_copy(update={"jobs": jobs}), base_version=state.base_version + 1,
                   exits=tuple(j for j in state.exits if j != job_id),
                   arrivals=tuple(j for j in state.arrivals if j != job_id))


def apply_plan(state: State, plan: dict) -> State:
    """The state after the scheduler carried out ``plan`` (made at this state's revision)."""
    base = _need_cluster(state)
    planned = {j["id"]: j for j in plan["jobs"]}
    jobs = []
    for j in base.jobs:
        if j.id in state.exits:
            continue
        p = planned.get(j.id)
        if p is not None:
            update = {"current": CurrentAllocation(gpus=p["gpus"], nodes=list(p["nodes"]))}
            if p["gpus"] and p.get("gpu_type") not in (None, j.throughput.gpu_type):  # moved to another type
                update["throughput"] = j.throughput.on_type(p["gpu_type"])
            j = j.model_copy(update=update)
        jobs.append(j)
    drained = set(plan.get("drained_nodes") or ())
    failed: dict[str, set] = {}
    for n in base.cluster.nodes:
        if n.id in drained:
            failed[n.id] = set(range(n.gpus))
        elif n.id in state.failed:
            failed[n.id] = set(n.failed_gpus) | set(state.failed[n.id])
    new_base = _with_nodes(base, failed).model_copy(update={"jobs": jobs})
    return State(base=new_base, revision=state.revision, base_version=state.base_version + 1)


def state_document(state: State) -> dict:
    """``GET /v1/state``: the revision and the planning instance (its event is the combined pending one)."""
    inst = planning_instance(state) if state.base is not None else None
    return {"revision": state.revision,
            "instance": None if inst is None else inst.model_dump(mode="json", exclude_none=True)}


#: History entries that record what was seen or done and change no state (docs/detection.md).
ENTRIES_WITHOUT_STATE = ("signal", "action")


def replay(entries) -> State:
    """The state from log entries ``(revision, type, body)`` in order (plan entries change nothing)."""
    state, plans = State(), {}
    for revision, kind, body in entries:
        if kind == "plan":
            plans[body["plan_id"]] = body
            continue
        if kind in ENTRIES_WITHOUT_STATE:
            continue
        if kind == "cluster":
            state = set_cluster(state, body)
        elif kind == "event":
            state = record_event(state, body)[0]
        elif kind == "apply":  # (a log written before ids were checked may name the plan as p03: its revision)
            named = body["plan_id"]
            plan = plans.get(named)
            if plan is None and isinstance(named, str) and named[:1] == "p" and named[1:].isdecimal():
                plan = plans.get(f"p{int(named[1:])}")
            if plan is None:
                raise ValueError(f"history revision {revision}: 'apply' names plan {named!r}, which the history "
                                 f"does not hold")
            state = apply_plan(state, plan)
        elif kind == "job":
            state = add_job(state, body["job"])[0] if body["op"] == "add" else remove_job(state, body["id"])
        state = replace(state, revision=revision)
    return state
