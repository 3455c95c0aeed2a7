"""Why each job of a plan is as it is (docs/format.md, "Reasons").

One function, :func:`explain_jobs`, turns each job's facts (its counts, whether the event hit it,
whether it changed, its terms and its split before and after) into its ``reason``, ``why`` and
``keep_cost``. The plan's assembler and the validator both call it, each with the facts it derived
itself, so every producer of plans writes the same reasons and the validator recomputes them.

- ``reason``: ``hit`` (the event took GPUs from one of its nodes, or drained one), ``chosen``
  (changed though not hit: the planner chose it for the gain), ``unchanged`` (not changed: kept,
  idle, or leaving in a ``job_exit`` event, which is charged nothing).
- ``keep_cost``: objective (TFLOP) lost if this job alone were kept at its previous count and
  split while every other job stays as planned: G_i(plan) - F_i(x) D_run. It is 0 for an
  unchanged job and None where keeping it is not feasible: the job was hit, it leaves, or its
  previous GPUs are given to other jobs (or are no longer healthy) under the plan.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import chain
from operator import methodcaller
from typing import Mapping, Optional, Sequence

from unicron_plan.text import shown

REASONS = ("hit", "chosen", "unchanged")


@dataclass(frozen=True)
class JobFacts:
    """What :func:`explain_jobs` needs of one job; numbers are the plan's own (weighted TFLOP/s, s)."""

    id: str
    action: str
    x: int  # GPUs before the event
    y: int  # GPUs planned
    hit: bool
    exiting: bool
    changed: bool
    f_x: float  # F(x): weighted TFLOP/s before, on its current GPU type
    f_y: float  # F(y): weighted TFLOP/s planned
    d_trans: float  # D_trans charged, seconds
    gain: float  # G_i(y), TFLOP
    split: Mapping[str, int]  # planned GPUs per node
    previous: Mapping[str, int]  # GPUs per node before the event


@dataclass(frozen=True)
class JobReason:
    """A job's ``reason``, ``why`` and ``keep_cost`` (None: keeping it is not feasible)."""

    reason: str
    why: str
    keep_cost: Optional[float]


def num(value: float) -> str:
    """A number for a sentence: thousands separated, no more digits than a person reads."""
    if value != value or abs(value) >= 1e15:
        return f"{value:.4g}"
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.3g}"


def nodes_text(nodes: Sequence[str], limit: int = 3) -> str:
    """Up to ``limit`` node names (escaped, cut) and how many more."""
    names = ",".join(shown(n, 40) for n in nodes[:limit])
    return names + (f" (+{len(nodes) - limit} more)" if len(nodes) > limit else "")


#: The sentence of each action, formatted with the job's GPU counts before (x) and after (y).
_DOING = {
    "keep": "kept at {x} GPUs",
    "shrink": "shrunk from {x} to {y} GPUs",
    "grow": "grown from {x} to {y} GPUs",
    "restart": "restarted at {y} GPUs",
    "suspend": "suspended ({x} GPUs to 0)",
    "resume": "resumed on {y} GPUs",
    "idle": "left at 0 GPUs",
}


def doing(action: str, x: int, y: int) -> str:
    """What the plan does to the job, in words with its GPU counts (only the action's own sentence
    is formatted: this runs for every job of a plan, twice)."""
    return _DOING.get(action, "{action} ({x} to {y} GPUs)").format(action=action, x=x, y=y)


def transition_text(f: JobFacts) -> str:
    """The transition the job pays: seconds and the GPU-minutes of its previous GPUs lost."""
    if not f.changed or f.x == 0:
        return "no transition charged"
    return f"{num(f.d_trans)} s of transition ({num(f.x * f.d_trans / 60.0)} GPU-min lost)"


def keep_feasible(f: JobFacts, nodes: Mapping, used: Mapping[str, int]) -> bool:
    """Whether the job's previous split fits in the GPUs the plan leaves to it (every other job as planned)."""
    if f.hit or f.exiting:
        return False
    return previous_fits(f.previous, f.split, nodes, used)


def previous_fits(previous: Mapping[str, int], split: Mapping[str, int], nodes: Mapping,
                  used: Mapping[str, int]) -> bool:
    """Whether a job's ``previous`` split fits in the GPUs a plan leaves to it (its planned ``split``
    taken out of ``used``): :func:`keep_feasible` of a job neither hit nor leaving."""
    usable = _usable_gpus(nodes)
    for nid, g in previous.items():
        free = usable(nid)
        if free is None or free - used.get(nid, 0) + split.get(nid, 0) < g:
            return False
    return True


def _usable_gpus(nodes: Mapping):
    """A lookup of a node's healthy GPUs after the event, None where it is drained or not in ``nodes``: a
    :class:`unicron_plan.core.cluster.NodeTable`'s own (which makes no record per node), else read from
    the records."""
    table = getattr(nodes, "usable_gpus", None)
    if table is not None:
        return table

    def usable(nid):
        node = nodes.get(nid)
        return None if node is None or node.drained else node.healthy_after
    return usable


def explain_jobs(facts: Sequence[JobFacts], nodes: Mapping, d_run: float,
                 used: Mapping[str, int] | None = None) -> list[JobReason]:
    """The reason, sentence and keep cost of every job. ``nodes``: node id -> its health after the event
    (:class:`unicron_plan.core.cluster.NodeHealth`: ``healthy_after``, ``drained``, ``lost_in_event``);
    ``d_run``: the plan's D_run. ``used``: GPUs planned per node over the whole plan (``.get``), for
    a caller that explains only some of its jobs (by default summed over ``facts``)."""
    out = []
    for f in facts:
        if f.hit or (not f.exiting and f.changed):
            delta = f"{'+' if f.f_y >= f.f_x else '-'}{num(abs(f.f_y - f.f_x))} weighted TFLOP/s"
        if f.hit:
            where = [n for n in f.previous if n in nodes and (nodes[n].drained or nodes[n].lost_in_event)]
            held = sum(f.previous[n] for n in where)
            how = "drained" if all(nodes[n].drained for n in where) else "lost GPUs"
            out.append(JobReason("hit", f"hit: {nodes_text(where)} {how} ({held} of its GPUs there); "
                                        f"{doing(f.action, f.x, f.y)}: {delta}, {transition_text(f)}.", None))
        elif f.exiting:
            out.append(JobReason("unchanged", "leaves in the job_exit event: 0 GPUs, nothing charged.", None))
        elif not f.changed:
            what = doing(f.action, f.x, f.y)
            out.append(JobReason("unchanged", f"not hit; {what}" + (
                f": {num(f.f_y)} weighted TFLOP/s, no transition." if f.y else "."), 0.0))
        else:
            if used is None:
                used = _used(facts)
            feasible = keep_feasible(f, nodes, used)
            keep_cost = f.gain - f.f_x * d_run if feasible else None
            keep = (f"keeping it would lose {num(keep_cost)} TFLOP ({num(keep_cost / d_run)} weighted TFLOP/s "
                    f"over the {num(d_run / 3600.0)} h horizon)") if feasible else \
                "keeping it is not feasible: the plan gives its previous GPUs to other jobs"
            out.append(JobReason("chosen", f"not hit, chosen for the gain; {doing(f.action, f.x, f.y)}: {delta}, "
                                           f"{transition_text(f)}; {keep}.", keep_cost))
    return out


def _used(facts: Sequence[JobFacts]) -> Mapping[str, int]:
    """GPUs the plan places on each node, over every job's split: one merge in C when no node is in
    two splits, else summed."""
    merged = dict(chain.from_iterable(map(methodcaller("items"), (f.split for f in facts))))
    if len(merged) == sum(len(f.split) for f in facts):
        return merged
    used: Counter = Counter()
    for f in facts:
        used.update(f.split)
    return used


def relabel_hit(why: str, a: str, b: str) -> str:
    """The ``why`` of a job hit by the failure of node ``a`` alone, made that of ``b``'s failure."""
    before = f"hit: {nodes_text([a])} drained"
    return f"hit: {nodes_text([b])} drained" + why[len(before):] if why.startswith(before) else why


def changes_of(reasons: Sequence[str]) -> dict[str, int]:
    """The plan's ``changes``: how many jobs have each reason."""
    counted = Counter(reasons)
    return {r: counted.get(r, 0) for r in REASONS}


def failure_changes(instance, failed: Sequence[str], counts: Mapping[str, int],
                    types: Mapping[str, str] | None = None) -> dict[str, int]:
    """``changes`` of a stored contingency plan (counts, and the jobs it moves to another GPU type) for
    the failure of the nodes ``failed``, at the level of counts: a job on a failed node is hit, another
    job is chosen when its count or type changes, unchanged otherwise. Equal to the placed plan's
    ``changes`` when no job is moved within its count, which never pays without node-level
    constraints (docs/format.md, "The stay rule")."""
    down = set(failed)
    reasons = []
    for job in instance.jobs:
        if down.intersection(job.current.nodes):
            reasons.append("hit")
        elif counts[job.id] != job.current.gpus or (types and job.id in types):
            reasons.append("chosen")
        else:
            reasons.append("unchanged")
    return changes_of(reasons)
