"""Constraints beyond the separable problem, in one place.

Per-job options (``tp``, ``pinned``, ``max_nodes``, ``same_rack``,
``min_gain_fraction``) and the instance's ``max_changed_jobs`` are read here;
solvers, placement and the validator ask this module what they mean:

* :func:`allowed_mask` - the count filters every solver sees through
  ``JobTerms.counts`` (tp multiples, pinned count, hysteresis);
* :func:`hysteresis_threshold` - the term a change must reach;
* :func:`dp_limitations` - the constraints the separable DP cannot express
  (``auto`` routes those instances to an IP backend);
* :func:`precheck` - infeasibility that can be named before any solve.

Semantics (docs/solvers.md, "Constraints"):

* *stay rule*: a job that is neither hit nor changes its count is charged
  nothing only on exactly its previous per-node split; on another split it is
  moved, a change that pays its transition (:func:`unicron_plan.core.cost.is_moved`);
* *hysteresis*: a job that was not hit may take a count y != x only if
  ``G(y) >= (1 + f) * G(x)`` where ``G(x) = F(x) * D_run >= 0``; when
  ``G(x) = 0`` any change with ``G(y) >= 0`` is allowed; hit jobs are exempt;
* *pinned*: count x and the previous split on the same nodes; a pinned job with
  a drained node, or whose split no longer fits its node, is infeasible;
* *leaving wins*: a job that leaves in a ``job_exit`` event is planned 0 and
  charged nothing; its ``pinned`` and ``min_gain_fraction`` do not apply.
"""

from __future__ import annotations

import numpy as np

from unicron_plan.core.cluster import rack_key
from unicron_plan.errors import InfeasibleError


def hysteresis_threshold(f_x: float, d_run: float, fraction: float) -> float:
    """The term a change of an unhit job must reach: (1 + f) * G(x), with G(x) = F(x) * D_run."""
    return (1.0 + fraction) * f_x * d_run


def allowed_mask(job, counts: np.ndarray, gains: np.ndarray, x: int, hit: bool, f_x: float,
                 d_run: float, exiting: bool = False) -> np.ndarray:
    """Which of ``counts`` job ``job`` (a schema Job) may take under tp, pinned and hysteresis.

    A job leaving in a job_exit event is planned 0 whatever its pinned or min_gain_fraction say:
    leaving wins."""
    mask = np.ones(len(counts), dtype=bool)
    if exiting:
        return mask
    if job.tp is not None and job.tp > 1:
        mask &= counts % job.tp == 0
    if job.pinned:
        mask &= counts == x
    if job.min_gain_fraction is not None and not hit:
        mask &= (counts == x) | (gains >= hysteresis_threshold(f_x, d_run, job.min_gain_fraction))
    return mask


def _type_nodes(problem, gpu_type: str) -> list:
    return [n for n in problem.state.nodes.values()
            if n.gpu_type == gpu_type and not n.drained and n.healthy_after > 0]


def tp_unit(problem, gpu_type: str) -> int:
    """T when tp holds by itself on ``gpu_type``, else 1.

    It does when every job of the type has the same tp T and every node of the
    type has a multiple of T usable GPUs: then counts (multiples of T), previous
    splits and free GPUs all come in blocks of T, and any counts within the
    capacity are placed in whole blocks (placement moves GPUs in units of T).
    This is the case of whole-node pods (T = the GPUs of a node).
    """
    tps = {j.tp for j in problem.jobs if j.gpu_type == gpu_type}
    if len(tps) != 1:
        return 1
    t = tps.pop()
    if t <= 1:
        return 1
    for n in problem.state.nodes.values():
        if n.gpu_type == gpu_type and not n.drained and n.healthy_after % t:
            return 1
    return t


def dp_limitations(problem) -> list[str]:
    """The constraints of ``problem`` that the separable DP cannot express (empty: DP is exact).

    Trivially satisfied limits (max_nodes at least the nodes of the type, one rack
    only, max_changed_jobs at least the number of jobs, tp 1, tp that holds by
    itself, see :func:`tp_unit`) are not listed.
    """
    out = []
    nodes_of: dict[str, list] = {}  # per GPU type, only when a locality limit asks
    units: dict[str, int] = {}
    for j in problem.jobs:
        if j.tp > 1:
            if j.gpu_type not in units:
                units[j.gpu_type] = tp_unit(problem, j.gpu_type)
            if units[j.gpu_type] != j.tp:
                out.append(f"jobs {j.id!r}: tp {j.tp}")
        if j.max_nodes is None and not j.same_rack:
            continue
        if j.gpu_type not in nodes_of:
            nodes_of[j.gpu_type] = _type_nodes(problem, j.gpu_type)
        nodes = nodes_of[j.gpu_type]
        if j.max_nodes is not None and j.max_nodes < len(nodes):
            out.append(f"jobs {j.id!r}: max_nodes {j.max_nodes}")
        if j.same_rack and len({rack_key(n.id, n.rack) for n in nodes}) > 1:
            out.append(f"jobs {j.id!r}: same_rack")
    if problem.max_changed_jobs is not None and problem.max_changed_jobs < len(problem.jobs):
        out.append(f"max_changed_jobs {problem.max_changed_jobs}")
    return out


def precheck(problem) -> None:
    """Raise InfeasibleError with the reason when the constraints obviously admit no plan."""
    state = problem.state
    pinned_use: dict[str, int] = {}
    for j in problem.jobs:
        if j.pinned and j.x > 0:
            for nid, g in state.previous[j.id].items():
                node = state.nodes[nid]
                if node.drained:
                    raise InfeasibleError(
                        f"job {j.id!r} is pinned but its node {nid!r} is failed or drained; "
                        f"unpin it (drop 'pinned') to let it move")
                pinned_use[nid] = pinned_use.get(nid, 0) + g
        if len(j.counts) == 0:
            raise InfeasibleError(f"job {j.id!r} has no allowed GPU count (pinned count {j.x} "
                                  f"exceeds the healthy capacity, or tp {j.tp} removes every count)")
    for nid, used in pinned_use.items():
        if used > state.nodes[nid].healthy_after:
            raise InfeasibleError(f"pinned jobs hold {used} GPUs on node {nid!r}, which has only "
                                  f"{state.nodes[nid].healthy_after} healthy GPUs after the event")
    if problem.max_changed_jobs is not None:
        hit = [j.id for j in problem.jobs if j.hit and not j.exiting]
        if len(hit) > problem.max_changed_jobs:
            raise InfeasibleError(
                f"max_changed_jobs is {problem.max_changed_jobs} but {len(hit)} jobs were hit by the "
                f"event and must change ({', '.join(hit)}); raise max_changed_jobs")


def eligible_nodes(problem, job) -> list[str]:
    """Nodes job ``job`` (JobTerms) may use: its GPU type, in service, room for one tp group."""
    return [n.id for n in _type_nodes(problem, job.gpu_type) if n.healthy_after >= job.tp]


def stays(job) -> bool:
    """Whether the stay rule can apply: the job was not hit and held GPUs."""
    return not job.hit and job.x > 0
