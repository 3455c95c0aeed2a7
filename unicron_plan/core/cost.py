"""The objective's terms, in one place (docs/format.md, "Objective").

Every solver and the validator compute WAF, D_run, the transition penalty and
a job's term G_i through these functions; nothing re-derives them.

    F_i(y)   = weight_i * tflops_i(y)                    (F_i(0) = 0)
    changed  = (y != x_i) or hit_i or moved_i
    G_i(y)   = F_i(y) * D_run - [changed] * F_i(x_i) * D_trans_i

With ``cost.horizon: "job"`` D_trans_i is the job's own times its horizon scale
nodes_i / H (:func:`horizon_scale`, docs/model.md "Planning horizon"): the
term is G_i with job i's own horizon T_i = node MTBF / nodes_i in place of
D_run, scaled by D_run / T_i so that every job's term is in the same units.
``"event"`` uses the cluster's D_run after an event that takes capacity away
(a failure, a job arrival) and the job's own horizon after one that returns it
(a repair, a job exit) or with no event.
``"lifetime"`` values each change over the expected lifetime L_i of the job's new
allocation: until one of its nodes fails or, after an event that takes capacity
away, until that capacity returns from repair (R, known from the event or the
fault data), when a job moved to another count is charged again. With
q_i = P(the repair comes first) = exp(-lambda_i R):

    G_i(y) = F_i(y) D_run - [changed] F_i(x) D_trans_i (D_run / L_i) - [changed, y != x] F_i(x) D_trans_i q_i (D_run / L_i)

(the job returns to x at the repair and loses F_i(x) for D_trans_i then)

(:func:`horizon_terms`; the last term's coefficient is ``d_repeat``, 0 for the other horizons).

moved_i: the job keeps its count but not its previous per-node split
(:func:`is_moved`); a move restarts the job, so it pays its transition.
A job that leaves in a ``job_exit`` event is planned y = 0 and is never
"changed" (it is charged nothing), so its G_i is 0: ``exiting=True`` below.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from unicron_plan.faults import faultdata
from unicron_plan.schema import Instance, Job


def d_run_seconds(instance: Instance, nodes_in_service: int) -> float:
    """D_run: given directly, or node_mtbf_hours * 3600 / H (H = nodes in service, at least 1)."""
    cost = instance.cost
    if cost.expected_run_seconds is not None:
        return float(cost.expected_run_seconds)
    return float(cost.node_mtbf_hours) * 3600.0 / max(nodes_in_service, 1)


#: Event kinds after which ``cost.horizon: "event"`` values choices over the job's own horizon:
#: they return capacity (or there is no event); the others (failure, job arrival) take it away.
RETURNING_EVENTS = frozenset({"repair", "job_exit"})


def job_horizon_after(horizon: str | None, event_kind: str | None) -> bool:
    """Whether ``cost.horizon`` = ``horizon`` charges transitions on each job's own horizon after an
    event of ``event_kind`` (None: no event): always for ``"job"``; for ``"event"`` after an event that
    returns capacity or none (docs/model.md, "Planning horizon"); never for ``"cluster"``."""
    if horizon == "job":
        return True
    return horizon == "event" and (event_kind is None or event_kind in RETURNING_EVENTS)


def uses_job_horizon(instance: Instance) -> bool:
    """Whether the instance's horizon scales any job's D_trans (:func:`job_horizon_after`, or ``"lifetime"``)."""
    return instance.cost.horizon == "lifetime" or \
        job_horizon_after(instance.cost.horizon, None if instance.event is None else instance.event.kind)


_OWN_EVENT = object()

#: Event kinds after which ``"lifetime"`` ends a change's value at the return of capacity under repair:
#: they take capacity away (the re-plan re-divides what the repair will give back).
TAKING_EVENTS = frozenset({"failure", "job_arrival"})


def _kind(instance: Instance, event_kind) -> str | None:
    return (None if instance.event is None else instance.event.kind) if event_kind is _OWN_EVENT else event_kind


def pending_repair_seconds(instance: Instance, event_kind=_OWN_EVENT) -> float:
    """R of the ``"lifetime"`` horizon: expected seconds until the capacity the re-plan re-divides returns.

    After a failure: the earliest expected return among the nodes lost in it (the event's
    ``expected_repair_seconds``, else ``cost.expected_repair_seconds``, else the fault data's mean repair).
    After a job arrival: the earliest ``expected_repair_seconds`` among the nodes under repair (none
    stated: infinite). After a repair, a job exit or no event: infinite (nothing given now is taken back
    by a return). ``event_kind``: value it as after an event of that kind (the instance's own when it
    is of that kind)."""
    kind = _kind(instance, event_kind)
    if kind not in TAKING_EVENTS:
        return float("inf")
    default = instance.cost.expected_repair_seconds or faultdata.REPAIR_MEAN_SECONDS
    event = instance.event
    if kind == "failure":
        if event is None or event.kind != "failure":
            return float(default)
        given = event.expected_repair_seconds or {}
        lost = list(event.failed_nodes) + [fg.node for fg in event.failed_gpus]
        return float(min((given.get(n, default) for n in lost), default=default))
    columns = instance.cluster.read_columns()
    if columns is not None:
        stated = [r for k, r in columns.repair.items() if columns.failed_of(k)]
    else:
        stated = [n.expected_repair_seconds for n in instance.cluster.nodes
                  if n.failed_gpus and n.expected_repair_seconds is not None]
    return float(min(stated, default=float("inf")))


def lifetime_terms(node_mtbf_hours: float, nodes_held: int, nodes_in_service: int,
                   repair_seconds: float) -> tuple[float, float]:
    """(D_run / L, q D_run / L) for an allocation on ``nodes_held`` nodes (at least one) whose own
    failures come at rate lambda = nodes_held / MTBF and that a return after ``repair_seconds`` (R)
    re-decides: L = E[min(Exp(lambda), R)] = (1 - exp(-lambda R)) / lambda and q = exp(-lambda R), the
    chance the return comes first (R infinite: L = MTBF / nodes_held, q = 0, the job horizon)."""
    mtbf = node_mtbf_hours * 3600.0
    lam = max(nodes_held, 1) / mtbf
    d_run = mtbf / max(nodes_in_service, 1)
    if not np.isfinite(repair_seconds):
        return d_run * lam, 0.0
    x = lam * repair_seconds
    scale = d_run * lam / -np.expm1(-x)
    return float(scale), float(scale * np.exp(-x))


def horizon_terms(instance: Instance, nodes_held: int, nodes_in_service: int, event_kind=_OWN_EVENT,
                  repair_seconds: float | None = None) -> tuple[float, float]:
    """(scale, repeat) of a job on ``nodes_held`` nodes: its D_trans is charged x scale, and a change to
    another count also F(y) D_trans x repeat. ``"cluster"`` (and ``expected_run_seconds``): (1, 0);
    ``"job"``: (nodes_held / H, 0) (T_i = node MTBF / nodes_held, at least one node; H at least 1);
    ``"event"`` the one or the other by the kind of the instance's event, or of ``event_kind`` when
    given (None: no event; :func:`job_horizon_after`); ``"lifetime"``: :func:`lifetime_terms` with
    ``repair_seconds`` (default :func:`pending_repair_seconds`)."""
    kind = _kind(instance, event_kind)
    if instance.cost.horizon == "lifetime":
        if repair_seconds is None:
            repair_seconds = pending_repair_seconds(instance, kind)
        return lifetime_terms(instance.cost.node_mtbf_hours, nodes_held, nodes_in_service, repair_seconds)
    if not job_horizon_after(instance.cost.horizon, kind):
        return 1.0, 0.0
    return max(nodes_held, 1) / max(nodes_in_service, 1), 0.0


def horizon_scale(instance: Instance, nodes_held: int, nodes_in_service: int, event_kind=_OWN_EVENT) -> float:
    """D_run / T_i for a job on ``nodes_held`` nodes: the scale of :func:`horizon_terms`."""
    return horizon_terms(instance, nodes_held, nodes_in_service, event_kind)[0]


def job_transition_terms(instance: Instance, job: Job, split: dict[str, int], nodes_in_service: int,
                         event_kind=_OWN_EVENT, repair_seconds: float | None = None) -> tuple[float, float]:
    """(d_trans, d_repeat) the objective charges ``job`` (previous per-node split ``split``): its D_trans
    (:func:`d_trans_seconds`) x each of :func:`horizon_terms` of the nodes it holds."""
    held = len(split) - list(split.values()).count(0)
    scale, repeat = horizon_terms(instance, held, nodes_in_service, event_kind, repair_seconds)
    d = d_trans_seconds(instance, job)
    return d * scale, d * repeat


def job_transition_seconds(instance: Instance, job: Job, split: dict[str, int], nodes_in_service: int,
                           event_kind=_OWN_EVENT) -> float:
    """The D_trans the objective charges ``job``: the first of :func:`job_transition_terms`."""
    return job_transition_terms(instance, job, split, nodes_in_service, event_kind)[0]


def d_trans_seconds(instance: Instance, job: Job) -> float:
    """D_trans of a job: its own transition_seconds; else, for a job that names a model when
    `cost.derive_transition_seconds` is set (or no default is given), the derived time
    (:func:`derived_transition_seconds`); else the instance default."""
    if job.transition_seconds is not None:
        return float(job.transition_seconds)
    c = instance.cost
    if job.throughput.model is not None and (c.derive_transition_seconds or c.default_transition_seconds is None):
        tp = job.throughput
        return derived_transition_seconds(tp.model, tp.gpu_type, tp.global_batch, tp.seq_len,
                                          tp.recompute or "full", job.current.gpus)
    return float(c.default_transition_seconds or 0.0)


@lru_cache(maxsize=4096)
def derived_transition_seconds(model: str, gpu_type: str, global_batch: int, seq_len: int,
                               recompute: str, gpus: int) -> float:
    """D_trans of a model-named job holding ``gpus`` GPUs: restart at its current layout with
    each GPU's state (weights and optimizer states) loaded from the nearest copy after a
    failure (a data-parallel replica, else the in-memory checkpoint), plus restart set-up.

    One value per job, as the objective's D_trans_i is (docs/format.md); 0 for a queued job,
    whose penalty F(0) * D_trans is 0 anyway.
    """
    if gpus == 0:
        return 0.0
    from unicron_plan.perf import derive_table, transition_seconds

    layout = derive_table(model, gpu_type, global_batch, seq_len, recompute=recompute, gpus=[gpus]).layout(gpus)
    return float(transition_seconds(model, gpu_type, gpus, gpus, layout, layout, hit=True))


def waf(weight: float, tflops: float | np.ndarray) -> float | np.ndarray:
    """F = weight x achieved TFLOP/s."""
    return weight * tflops


def transition_penalty(f_previous: float, d_trans: float, changed: bool | np.ndarray) -> float | np.ndarray:
    """WAF lost while a changed job transitions: [changed] * F(x) * D_trans."""
    return np.where(changed, f_previous * d_trans, 0.0) if isinstance(changed, np.ndarray) \
        else (f_previous * d_trans if changed else 0.0)


def is_moved(x: int, y: int, split: dict[str, int], previous: dict[str, int]) -> bool:
    """A job that keeps its count x > 0 on another per-node split than its previous one."""
    if not (y == x and x > 0):
        return False
    return (split if 0 not in split.values() else {n: g for n, g in split.items() if g}) != previous


def moved_on_arrays(xs: list, ys: list, starts: np.ndarray, pos: np.ndarray, gpus: np.ndarray, size: int,
                    previous) -> "list[bool] | None":
    """:func:`is_moved` of every job at once: job k (previous count ``xs[k]``, planned ``ys[k]``) holds
    ``gpus[starts[k]:starts[k + 1]]`` GPUs on the nodes at cluster positions ``pos[...]`` (0 <= pos < ``size``,
    no position twice in a job); ``previous``: the previous splits as
    :class:`unicron_plan.core.cluster.SplitArrays`, the same jobs in the same order. A job keeping its count
    x > 0 is moved when its (position, GPUs) pairs with GPUs are other than its previous split's: another
    number of them, or a pair that differs once both are sorted by position (the dicts' comparison, on
    arrays). None when ``previous`` is None or does not hold these jobs, or the keys would not fit int64."""
    m = len(xs)
    if previous is None or len(previous.starts) != m + 1 or len(starts) != m + 1 or (m + 1) * (size + 1) >= 2**62:
        return None
    size += 1
    keep = np.fromiter((y == x and x > 0 for x, y in zip(xs, ys)), dtype=bool, count=m)
    jobs = np.arange(m, dtype=np.int64)
    owner = np.repeat(jobs, np.diff(starts))
    take = keep[owner] & (gpus != 0)
    a_job, a_key, a_gpus = owner[take], owner[take] * size + pos[take], gpus[take]
    p_owner = np.repeat(jobs, np.diff(previous.starts))
    take = keep[p_owner]
    b_job, b_key, b_gpus = p_owner[take], p_owner[take] * size + previous.pos[take], previous.gpus[take]
    count_a, count_b = np.bincount(a_job, minlength=m), np.bincount(b_job, minlength=m)
    moved = keep & (count_a != count_b)
    same = keep & (count_a == count_b)
    take_a, take_b = same[a_job], same[b_job]
    a_key, a_gpus, b_key, b_gpus = a_key[take_a], a_gpus[take_a], b_key[take_b], b_gpus[take_b]
    order_a, order_b = np.argsort(a_key, kind="stable"), np.argsort(b_key, kind="stable")
    a_key, b_key = a_key[order_a], b_key[order_b]
    differ = (a_key != b_key) | (a_gpus[order_a] != b_gpus[order_b])
    moved[a_key[differ] // size] = True
    return moved.tolist()


def is_changed(y: int | np.ndarray, x: int, hit: bool, exiting: bool = False,
               moved: bool = False) -> bool | np.ndarray:
    """changed_i = (y != x) or hit or moved; never for a job that exits (it is charged nothing)."""
    if isinstance(y, np.ndarray):
        return ((y != x) | hit | moved) & (not exiting)
    return bool((y != x or hit or moved) and not exiting)


def repeat_penalty(f_x: float, y: int | np.ndarray, x: int, d_repeat: float,
                   changed: bool | np.ndarray) -> float | np.ndarray:
    """The transition charged again when the return of repaired capacity moves a job that changed to
    another count back to x: [changed and y != x] * F(x) * d_repeat (0 unless ``cost.horizon`` is
    ``"lifetime"``)."""
    if isinstance(changed, np.ndarray) or isinstance(y, np.ndarray):
        return np.where(np.logical_and(changed, np.asarray(y) != x), f_x * d_repeat, 0.0)
    return f_x * d_repeat if changed and y != x else 0.0


def charged(y, x: int, f_x: float, d_trans: float, d_repeat: float, changed):
    """Everything a plan charges a job for its transitions: :func:`transition_penalty` + :func:`repeat_penalty`
    (elementwise over jobs where every argument is an array of them: the repeat added only where its term
    is not 0)."""
    out = transition_penalty(f_x, d_trans, changed)
    if isinstance(d_repeat, np.ndarray):
        return np.where(d_repeat != 0, out + repeat_penalty(f_x, y, x, d_repeat, changed), out)
    return out + repeat_penalty(f_x, y, x, d_repeat, changed) if d_repeat else out


def gain(f_y: float | np.ndarray, y: int | np.ndarray, x: int, f_x: float, hit: bool,
         d_run: float, d_trans: float, exiting: bool = False, moved: bool = False,
         d_repeat: float = 0.0) -> float | np.ndarray:
    """G_i(y) = F_i(y) * D_run - [changed] * F_i(x) * D_trans - [changed, y != x] F_i(x) d_repeat (vectorised over y)."""
    return f_y * d_run - charged(y, x, f_x, d_trans, d_repeat, is_changed(y, x, hit, exiting, moved))



def lookahead_terms(f: np.ndarray, y: np.ndarray, x: int, f_x: float, hit: bool, w_now: float, w_after: float,
                    d_now: float, d_again: float, exiting: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(S, P, Q) over the counts ``y`` (F at them ``f``) of the two-stage objective over a known return
    (docs/model.md, "The lookahead over the known repair"): the plan y now, valued over ``w_now``
    seconds and charged its change at D_trans ``d_now``, and the plan z the return brings, valued over
    ``w_after`` and charged a move away from y at ``d_again``:

        G(y, z) = S(y)          if z = y:   F(y) (w_now + w_after) - [changed] F(x) d_now
        G(y, z) = P(y) + Q(z)   otherwise:  F(y) w_now - [changed] F(x) d_now - F(y) d_again  +  F(z) w_after

    An exiting job has only (0, 0) (S = 0 at y = 0, P = Q = -inf)."""
    f = np.asarray(f, dtype=float)
    charge = transition_penalty(f_x, d_now, is_changed(y, x, hit, exiting))
    stay = f * (w_now + w_after) - charge
    if exiting:
        return np.where(np.asarray(y) == 0, stay, -np.inf), np.full_like(stay, -np.inf), np.full_like(stay, -np.inf)
    return stay, f * w_now - charge - f * d_again, f * w_after
