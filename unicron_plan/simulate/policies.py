"""The policies compared by the simulator, each a small class behind one interface.

A policy sets the time-0 allocation (:meth:`Policy.setup`), says how long an
error takes to detect, and reacts to a detected failure (:meth:`on_failure`,
with the jobs that were on the node) and to a repaired node (:meth:`on_repair`).

- ``unicron``: in-band detection; SEV1 -> the planner's optimal re-plan
  (v1 Instance -> problem -> exact DP -> placement), SEV2 -> restart the
  process (D_trans), SEV3 -> reattempt in place; re-plans on every capacity
  change, valuing each job's choice over the paper's D_run = node MTBF x 3600
  / H after a failure and over the job's own horizon (node MTBF / nodes held)
  after a repair (``cost.horizon: "event"``, the default), or over one of the
  two always (``"cluster"``, ``"job"``).
- ``lookahead``: unicron that, after a failure, values the plan now and the plan the failed
  node's return will bring together (exact DP over pairs of counts where its table is small,
  else the ``"lifetime"`` objective); ``clairvoyant``: a reference that reads the run's future.
- ``rollout`` / ``rollout-to-end``: unicron choosing among the plans of those horizons, where they
  differ, by forking the run onto futures sampled from the scenario's failure model.
- ``type-bound`` (mixed fleets): unicron restricted to each job's current GPU
  type (the same planner on the problem without type alternatives,
  ``simulate/mixed.py``), so that the gap to ``unicron`` is what type choice earns.
- ``greedy`` and ``equal-share``: the same detection and severity handling,
  but their own allocation rule (ignoring transition cost), so that the gap to
  ``unicron`` isolates the planner.
- ``megatron``: NCCL-timeout detection; SEV1 stops the job until its node is
  repaired, SEV2/SEV3 restart it; a restart costs resubmission + set-up + the
  work since the last checkpoint (Unicron Fig. 2).
- ``oobleck``: NCCL-timeout detection; each job shrinks onto its own surviving
  GPUs (its best allowed count there) and grows back on repair, never taking
  another job's GPUs; restarts and reconfigurations cost D_trans, with no work
  lost (it recovers from pipeline replicas).
- ``varuna``: as oobleck, but each shrink or grow is a restart from the last
  checkpoint; ``bamboo``: a node failure is absorbed by redundant computation
  (same count, degraded speed, no restart) once per pipeline; a second one in
  a pipeline restarts it from the checkpoint on its surviving GPUs.

Each policy runs at its own failure-free speed and recovery constants
(``models/policies.json``, overridable per scenario); Megatron may be
down-scaled by hand after a timeout (``manual_downscale_after_hours``).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
import operator
from typing import NamedTuple

import numpy as np

from unicron_plan.faults import faultdata, severity
from unicron_plan.schema.policies import PolicyModel, PolicyModels
from unicron_plan.schema.scenario import Scenario
from unicron_plan.simulate.engine import Engine, JobRun
from unicron_plan.simulate.greedy import UnlimitedRun, finish, fitting_step
from unicron_plan.simulate.trace import SimEvent


_ALLOC = operator.attrgetter("alloc")


CHUNK = 128  # jobs per chunk of the planner policies' allocs (see PlannerPolicy._sync)


class _PlacedPlan(NamedTuple):
    """A plan in the planner policies' cache whose placement placed only some jobs (PlannerPolicy._packed)."""

    chunks: tuple  # the alloc dicts of every job at the plan, CHUNK jobs a chunk
    placed: tuple  # the jobs placed (ascending) and their splits
    splits: tuple
    hit: tuple  # the hit jobs (ascending)
    types: dict


class _PackedPlan(NamedTuple):
    """A plan in the planner policies' cache (PlannerPolicy._packed)."""

    splits: tuple
    hit: np.ndarray
    types: dict

#: The planner policies' horizon when the scenario gives none (docs/model.md, "Planning horizon";
#: chosen by the horizon sweep, docs/simulation.md).
DEFAULT_HORIZON = "event"


@functools.lru_cache(maxsize=1)
def packaged_models() -> PolicyModels:
    """models/policies.json, validated."""
    from unicron_plan.perf.library import read_data

    return PolicyModels.model_validate(read_data("policies.json"))


#: Policies that take another policy's constants (and its scenario overrides, then their own).
MODEL_OF = {"type-bound": "unicron", "clairvoyant": "unicron", "lookahead": "unicron", "rollout": "unicron",
            "rollout-to-end": "unicron"}


def policy_model(name: str, scenario: Scenario | None = None) -> PolicyModel:
    """The constants of policy ``name``: the packaged ones with the scenario's overrides applied."""
    model = packaged_models().policies[MODEL_OF.get(name, name)]
    for key in dict.fromkeys((MODEL_OF.get(name, name), name)):
        override = (scenario.policy_models or {}).get(key) if scenario is not None else None
        if override is not None:
            model = model.model_copy(update=override.model_dump(exclude_none=True))
    return model


class Policy:
    """Interface of a policy; subclasses override the reactions."""

    name = "policy"
    in_band = True

    def __init__(self, model: PolicyModel | None = None):
        self.model = model if model is not None else policy_model(self.name)

    def healthy_factor(self) -> float:
        """Failure-free throughput relative to the scenario's (Megatron-LM's) tables, checkpoint saves included."""
        m = self.model
        factor = m.healthy_throughput_factor
        if m.checkpoint_save_seconds and m.checkpoint_interval_seconds:
            factor *= m.checkpoint_interval_seconds / (m.checkpoint_interval_seconds + m.checkpoint_save_seconds)
        return factor

    def detection_seconds(self, error: str) -> float:
        """Seconds from the error to its detection under this policy (its model's value for the error
        kind when it gives one)."""
        given = (self.model.detection_seconds or {}).get(error)
        return given if given is not None else severity.detection_seconds(error, in_band=self.in_band)

    def setup(self, eng: Engine) -> None:
        """Set every job's allocation at time 0 (default: the scenario's ``current``, split as FORMAT's
        cluster state splits it)."""
        from unicron_plan.core.cluster import previous_distribution

        healthy = {n.id: n.gpus - len(n.failed_gpus) for n in eng.scenario.cluster.nodes}
        split = previous_distribution(eng.scenario, healthy)
        for j in eng.jobs:
            j.alloc = dict(sorted(split[j.id].items(), key=lambda kv: eng.node_rank[kv[0]]))

    def on_failure(self, eng: Engine, ev: SimEvent, hit: list[JobRun]) -> None:
        """React to a detected failure of ``ev.node`` that hit the jobs ``hit``."""
        raise NotImplementedError

    def on_repair(self, eng: Engine, node: str) -> None:
        """React to ``node`` returning to service."""
        raise NotImplementedError

    def on_timer(self, eng: Engine, payload) -> None:
        """A time the policy scheduled with ``eng.push(time, "timer", payload)`` has come."""


def mean_repair_seconds(failures) -> float:
    """The mean of a failure model's node repair time (lognormal: median x exp(sigma^2 / 2); a mix: the
    mean of its two kinds by their shares): what the ``"lifetime"`` planner expects of a failed node."""
    def mean(r) -> float:
        return r.median * 3600.0 * math.exp(r.sigma ** 2 / 2)
    if failures.repair is not None:
        mix = failures.repair
        return mix.automatic_fraction * mean(mix.automatic_hours) + (1 - mix.automatic_fraction) * mean(mix.manual_hours)
    if failures.repair_hours is not None:
        return mean(failures.repair_hours)
    return faultdata.REPAIR_MEAN_SECONDS


def lost_since_checkpoint(model: PolicyModel, job: JobRun, t_fail: float) -> float:
    """Seconds of training since ``job``'s last checkpoint at ``t_fail`` (checkpoints every interval of its run)."""
    if t_fail <= job.run_start:
        return 0.0
    return (t_fail - job.run_start) % model.checkpoint_interval_seconds


def checkpoint_restart(model: PolicyModel, eng: Engine, job: JobRun, lost: float) -> None:
    """A restart from the last checkpoint: ``queue_seconds`` in the scheduler's queue, ``restart_seconds``
    (transition), then ``lost`` seconds recomputed."""
    eng.transition(job, eng.t, model.restart_seconds, queue=model.queue_seconds or 0.0)
    if lost > 0:
        job.run_start = eng.append_block(job, lost, "recompute")


def best_own_alloc(eng: Engine, job: JobRun, own: dict[str, int]) -> dict[str, int]:
    """``job``'s best allowed count on the GPUs ``own`` of nodes in service, placed on them in order."""
    # Not on nodes that are down, nor on failed ones whose failure is not detected yet.
    usable = {n: g for n, g in own.items() if n not in eng.down and n not in eng.pending}
    avail = sum(usable.values())
    best_c, best_f = 0, 0.0
    for c in sorted(job.table):
        if c <= avail and job.f(c) > best_f:
            best_c, best_f = c, job.f(c)
    out, left = {}, best_c
    for n, g in usable.items():
        take = min(left, g)
        if take:
            out[n] = take
            left -= take
    return out


def restarted_since(job: JobRun, ev: SimEvent) -> bool:
    """The job already began a restart or reconfiguration after the error: that one covers it."""
    return job.last_restart >= ev.time


# --------------------------------------------------------------------------- planners
def free_problem(problem):
    """``problem`` with no transition charged: G_i(y) = F_i(y) D_run (the GPU-type alternatives too)."""
    from unicron_plan.core import cost

    def free(j):
        gains = cost.gain(j.f, j.counts, j.x, j.f_x, j.hit, problem.d_run, 0.0, j.exiting)
        return dataclasses.replace(j, d_trans=0.0, d_repeat=0.0, gains=np.asarray(gains, dtype=float))

    return dataclasses.replace(problem, jobs=[free(j) for j in problem.jobs],
                               alternatives={k: [free(a) for a in v] for k, v in problem.alternatives.items()})


class PlannerPolicy(Policy):
    """Re-plans the whole cluster on every capacity change through the v1 planner layers."""

    horizon: str | None = None  # the planner's cost.horizon whatever the scenario says (None: the scenario's)
    #: Plan the time-0 allocation, which the simulator does not charge, with transitions free (every
    #: job's term its rate alone). False: with the transitions the instance would charge from the
    #: scenario's ``current``, which differ by horizon (docs/simulation.md, "Scenario families").
    free_setup: bool = True

    def __init__(self, model: PolicyModel | None = None):
        super().__init__(model)
        self._cache: dict = {}
        self._setting_up = False
        self._base_instance = None  # the scenario as a validated Instance, see _base
        self._down_copies: dict = {}  # node id -> its Node with every GPU listed failed
        self._tables = None  # (tables, layouts) of the jobs, from resolve_tables
        self._healthy = None  # cluster.healthy_nodes of the scenario
        self._flat = None  # problem.flat_tables of the jobs
        self._terms = None  # simulate.terms.RunTerms of the jobs (single-type runs)
        self._failed_at_start: set[str] = set()  # nodes the scenario lists with failed GPUs
        self._job_copies: dict[int, tuple] = {}  # see instance
        self._throughputs: dict = {}  # mixed fleets: (job id, GPU type) -> its throughput there
        self._by_types: dict = {}  # mixed fleets: the jobs' types -> their tables, see _type_tables
        # The allocations as last seen by plan (see _sync): per job the alloc dict and its key id;
        # GPUs held per node, GPUs - held where not 0, and the jobs on each node.
        self._seen: list = []
        self._sig: list[int] = []
        self._sig_ids: dict[tuple, int] = {}
        self._held: dict[str, int] = {}
        self._spare: dict[str, int] = {}
        self._on: dict[str, set[str]] = {}
        self._allocs: dict[str, dict[str, int]] = {}  # job id -> its alloc dict, in job order
        self._ids: list[str] | None = None  # the jobs' ids in job order (_job_ids)
        self._index: dict[str, int] | None = None  # job id -> its position in job order
        self._held_by: list = []  # what _holders returned during the last build_state
        self._visit: tuple | None = None  # (a placement, the jobs it may change: see replan)
        self._hit_list: list[int] = []  # the hit jobs of the last problem (_hit_at)
        self._chunks: list | None = None  # the synced allocs by chunks of CHUNK jobs (_sync)
        self._sig_chunks: list = []  # their ids among those seen, by the same chunks
        self._instance_jobs: list | None = None  # the Job copies of the last instance (see instance)
        self._marks: dict[str, tuple] = {}  # per reader of the engine's replaced allocs: its mark (_replaced)

    def choose(self, problem) -> dict[str, int]:
        """Counts per job id for the built problem."""
        raise NotImplementedError

    def setup(self, eng: Engine) -> None:
        super().setup(eng)
        self._setting_up = self.free_setup
        try:
            self.replan(eng, None, None, charge=False)
        finally:
            self._setting_up = False

    def on_failure(self, eng: Engine, ev: SimEvent, hit: list[JobRun]) -> None:
        if ev.severity == "sev1":
            self.replan(eng, ev.node, None, charge=True)
            return
        for j in hit:
            if restarted_since(j, ev) or j.count == 0:
                continue
            # SEV2: restart the process (a transition to the same layout); SEV3: reattempt in place.
            eng.transition(j, eng.t, j.d_trans if ev.severity == "sev2" else faultdata.REATTEMPT_SECONDS)

    def on_repair(self, eng: Engine, node: str) -> None:
        self.replan(eng, None, node, charge=True)

    def _base(self, eng: Engine):
        """The scenario as a validated v1 Instance (no event), built once per run."""
        if self._base_instance is None:
            from unicron_plan.schema import Instance

            cost = {"node_mtbf_hours": eng.mtbf_hours,
                    "horizon": self.horizon or eng.scenario.cost.horizon or DEFAULT_HORIZON}
            if cost["horizon"] == "lifetime" and eng.scenario.failures is not None:
                cost["expected_repair_seconds"] = mean_repair_seconds(eng.scenario.failures)
            if eng.scenario.cost.default_transition_seconds is not None:
                cost["default_transition_seconds"] = eng.scenario.cost.default_transition_seconds
            self._base_instance = Instance.model_validate({
                "schema_version": "1", "name": eng.scenario.name,
                "cluster": eng.scenario.cluster.model_dump(exclude_none=True),
                "jobs": [j.model_dump(exclude_none=True) for j in eng.scenario.jobs],
                "cost": cost, "isolation": eng.scenario.isolation})
        return self._base_instance

    @staticmethod
    def _listed_down(eng: Engine, failed: str | None, repaired: str | None) -> set[str]:
        """Nodes the instance of this state lists with every GPU failed (before its event)."""
        return (eng.down - {failed}) | ({repaired} if repaired else set())

    def instance(self, eng: Engine, failed: str | None, repaired: str | None):
        """The v1 Instance of the current state with a failure or repair event (or none).

        Built from the validated scenario by copying only what changed (nodes listed down, each
        job's current allocation), without re-validation: the engine's state is checked by its
        invariants, and the tests re-validate these instances and solve them through ``api.solve``.
        """
        from unicron_plan.schema.instance import CurrentAllocation, Event, RepairEvent

        base = self._base(eng)
        listed_down = self._listed_down(eng, failed, repaired)
        nodes = base.cluster.nodes
        if listed_down:
            down = self._down_copies
            for nid in listed_down:
                if nid not in down:
                    n = eng.nodes[nid]
                    down[nid] = base.cluster.nodes[eng.node_rank[nid]].model_copy(
                        update={"failed_gpus": list(range(n.gpus))})
            nodes = list(nodes)
            for nid in listed_down:
                nodes[eng.node_rank[nid]] = down[nid]
        copies = self._job_copies  # per job: (the alloc dict it was made from, the Job copy)
        listed = self._instance_jobs  # the jobs of the last instance made here (this policy's own list)
        changed = self._replaced(eng, "instance")  # the jobs whose alloc was replaced since then
        if changed is None or listed is None:
            listed = self._instance_jobs = [None] * len(eng.jobs)
            changed = range(len(eng.jobs))
        base_jobs, run_jobs = base.jobs, eng.jobs
        for k in changed:
            bj, j = base_jobs[k], run_jobs[k]
            made = copies.get(k)
            if made is None or made[0] is not j.alloc:  # an alloc is replaced, never changed in place
                update = {"current": CurrentAllocation.model_construct(gpus=j.count, nodes=list(j.alloc))}
                if j.gpu_type != bj.throughput.gpu_type:  # mixed fleets: the job now runs on another type
                    update["throughput"] = self._on_type(bj, j.gpu_type)
                made = copies[k] = (j.alloc, bj.model_copy(update=update))
            listed[k] = made[1]
        jobs = list(listed)
        event = None
        if failed is not None:
            event = Event.model_construct(kind="failure", failed_nodes=[failed], failed_gpus=[])
        elif repaired is not None:
            node = eng.nodes[repaired]
            if node.failed_gpus:
                event = RepairEvent.model_validate({"kind": "repair", "repaired_gpus": [
                    {"node": repaired, "gpu": g} for g in range(node.gpus) if g not in node.failed_gpus]})
            else:
                event = RepairEvent.model_construct(kind="repair", repaired_nodes=[repaired], repaired_gpus=[])
        return base.model_copy(update={"name": f"{eng.scenario.name}@{eng.t:.0f}s",
                                       "cluster": base.cluster.model_copy(update={"nodes": nodes}),
                                       "jobs": jobs, "event": event})

    def _on_type(self, job, gpu_type: str):
        """``job``'s throughput on ``gpu_type`` (mixed fleets), made once per job and type."""
        key = (job.id, gpu_type)
        found = self._throughputs.get(key)
        if found is None:
            found = self._throughputs[key] = job.throughput.on_type(gpu_type)
        return found

    def _replaced(self, eng: Engine, reader: str) -> list[int] | None:
        """The jobs whose alloc the engine replaced since ``reader``'s last call (ascending; None: any)."""
        found, self._marks[reader] = eng.replaced_since(self._marks.get(reader))
        return found

    def _sync(self, eng: Engine) -> None:
        """Bring the per-node bookkeeping up to date with the jobs whose alloc was replaced since the
        last plan (an alloc is replaced, never changed in place): only their nodes are visited."""
        full = self._healthy.usable
        if not self._seen:
            self._seen = [None] * len(eng.jobs)
            self._allocs = dict.fromkeys(j.id for j in eng.jobs)
            self._sig = [-1] * len(eng.jobs)
            self._spare = {nid: g for nid, g in full.items() if g}
        held, spare, on, ids = self._held, self._spare, self._on, self._sig_ids
        changed = self._replaced(eng, "sync")
        jobs = eng.jobs
        touched = set()  # chunks of CHUNK jobs with a replaced alloc
        for k in range(len(jobs)) if changed is None else changed:
            j = jobs[k]
            old, new = self._seen[k], j.alloc
            if old is new:
                continue
            for split, sign in ((old or {}, -1), (new, 1)):
                for nid, g in split.items():
                    v = held[nid] = held.get(nid, 0) + sign * g
                    if v == full[nid]:
                        spare.pop(nid, None)
                    else:
                        spare[nid] = full[nid] - v
                    if sign > 0:
                        on.setdefault(nid, set()).add(j.id)
                    elif nid not in new:
                        on[nid].discard(j.id)
            self._seen[k] = new
            self._allocs[j.id] = new
            self._sig[k] = ids.setdefault((j.count, tuple(new)), len(ids))
            touched.add(k // CHUNK)
        # the allocs and their ids by chunks of CHUNK jobs, remade where a job's alloc was replaced: the
        # cache's keys and plans share the chunks that did not change (see plan and _packed)
        if self._chunks is None:
            self._chunks, self._sig_chunks = [None] * -(-len(jobs) // CHUNK), [None] * -(-len(jobs) // CHUNK)
            touched = range(len(self._chunks))
        for c in touched:
            self._chunks[c] = tuple(self._seen[c * CHUNK:(c + 1) * CHUNK])
            self._sig_chunks[c] = np.asarray(self._sig[c * CHUNK:(c + 1) * CHUNK], dtype=np.int64).tobytes()

    def _job_ids(self, eng: Engine) -> list[str]:
        """The jobs' ids in job order (they never change during a run)."""
        if self._ids is None:
            self._ids = [j.id for j in eng.jobs]
        return self._ids

    def _holders(self, nodes) -> set[str]:
        """Ids of the jobs holding GPUs on any of ``nodes`` (kept for _hit_at: build_state marks them hit)."""
        out: set[str] = set()
        for nid in nodes:
            out |= self._on.get(nid, set())
        self._held_by.append(out)
        return out

    def _hit_at(self, eng: Engine) -> list[int]:
        """The jobs the last build_state found hit (those _holders gave it), in job order."""
        if self._index is None:
            self._index = {jid: k for k, jid in enumerate(self._job_ids(eng))}
        return sorted(self._index[jid] for found in self._held_by for jid in found)

    def _idle(self, state) -> dict[str, int]:
        """For ClusterState.idle: usable GPUs minus those every job holds, where that is not 0 (the
        nodes as if healthy, kept by _sync, with those the state re-derived replaced)."""
        nodes, held = state.nodes, self._held
        idle = dict(self._spare)  # every node as if healthy
        for nid in state.touched:
            n = nodes[nid]
            v = n.usable - held.get(nid, 0)
            if v:
                idle[nid] = v
            else:
                idle.pop(nid, None)
        return idle

    def plan(self, eng: Engine, failed: str | None, repaired: str | None):
        """(placement per job id, hit per job id, GPU type per job id) for the current state, cached per
        cluster state."""
        from unicron_plan.core.cluster import build_state, healthy_nodes
        from unicron_plan.core.problem import add_alternatives, flat_tables, resolve_tables, tabulate
        from unicron_plan.plan.placement import place

        if self._tables is None:  # the jobs, their tables and the nodes never change during a run
            base = self._base(eng)
            self._tables = resolve_tables(base)
            self._healthy = healthy_nodes(base)
            self._flat = flat_tables(base, self._tables[0])
            self._failed_at_start = {n.id for n in base.cluster.nodes if n.failed_gpus}
            if eng.gpu_seconds is None:
                from unicron_plan.simulate.terms import RunTerms

                self._terms = RunTerms(base, *self._tables, self._flat)
        self._sync(eng)
        self._job_ids(eng)  # (the cache's plans are read by them, see _unpacked)
        # each job's (count, nodes) as its id among those seen, by chunks shared with the earlier keys
        key = (failed, repaired, frozenset(eng.down), tuple(self._sig_chunks))
        if eng.gpu_seconds is not None:  # mixed fleets: the jobs' types are part of the state
            key += (tuple(j.gpu_type for j in eng.jobs),)
        hit = self._cache.get(key)
        if hit is not None:
            return self._unpacked(hit)
        instance = self.instance(eng, failed, repaired)
        tables, flat, alternatives = self._tables, self._flat, None
        if eng.gpu_seconds is not None:  # mixed fleets: the tables of the jobs' current types
            tables, flat, alternatives = self._type_tables(instance, eng)
        # The engine's own per-node split is the state before the event (it is checked after every
        # event when the engine runs with checks), so the instance checks need not re-derive it.
        # The splits are the jobs' own alloc dicts (never changed in place), in cluster order.
        self._held_by = []  # the jobs build_state finds hit (see _holders)
        state = build_state(instance, previous=dict(self._allocs), healthy=self._healthy,
                            unhealthy=self._listed_down(eng, failed, repaired) | self._failed_at_start,
                            holders=self._holders, job_ids=self._job_ids(eng))
        state.in_order = True
        state.idle = self._idle(state)
        if self._terms is None:
            problem = tabulate(instance, state, *tables, flat)
        else:  # the jobs whose Job copy or previous split may differ from its last problem's: those replaced
            self._hit_list = self._hit_at(eng)
            problem = self._terms.tabulate(instance, state, self._replaced(eng, "terms"), self._hit_list)
        if self._setting_up:  # the time-0 plan is free: every job's term is its rate alone
            problem = free_problem(problem)
        types = {}
        if alternatives is not None:
            problem = add_alternatives(problem, *alternatives)
        if problem.alternatives:
            counts, types = self.choose_types(problem)
            problem = problem.with_types(types)
        else:
            counts = self.choose(problem)
        start = None
        if self._terms is not None:
            # UnicronPolicy.choose hands dp_counts' dict on as it is, and nothing here changes it: its
            # counts are read from the array kept with it (a policy of its own choose: by the job ids)
            y = self._terms.dp_counts_array(counts) if type(self).choose is UnicronPolicy.choose else None
            start = self._terms.placement_start(problem, counts, y=y)
        if start is None:
            placement = place(problem, counts)
            self._visit = None
        else:  # the staying jobs keep their previous split (the same dict); the others are placed
            placement = dict(problem.state.previous)
            placement.update(place(problem, counts, start))
            # every other job keeps its alloc dict (the previous split) and is not hit
            self._visit = (placement, self._terms.placed)
        out = (placement, dict(problem.state.hit), types)
        self._cache[key] = self._packed(out)
        return out

    def _packed(self, out: tuple):
        """A plan as the cache keeps it. A plan whose placement placed only some jobs (every other one
        keeping its alloc dict, not hit: see replan): the allocs' chunks at this plan (shared with the
        other entries where they did not change), the splits of the jobs placed and the hit jobs. Else,
        where its placement and hit dicts list every job in job order (as plan makes them), their values
        alone (a tuple of the same split dicts, the hits as bits); else the plan itself."""
        placement, hit, types = out
        ids = self._ids
        if self._visit is not None and self._visit[0] is placement and ids is not None and list(placement) == ids:
            placed = self._visit[1]
            return _PlacedPlan(tuple(self._chunks), tuple(placed), tuple(placement[ids[k]] for k in placed),
                               tuple(self._hit_list), types)
        if ids is None or len(placement) != len(ids) or len(hit) != len(ids) or list(placement) != ids \
                or list(hit) != ids or not all(type(v) is bool for v in hit.values()):
            return out
        return _PackedPlan(tuple(placement.values()), np.fromiter(hit.values(), dtype=bool, count=len(ids)), types)

    def _unpacked(self, entry) -> tuple:
        """The plan a cache entry holds (see _packed): the same dicts' keys, values and order."""
        ids = self._ids
        if type(entry) is _PlacedPlan:
            splits = list(itertools.chain.from_iterable(entry.chunks))
            for k, split in zip(entry.placed, entry.splits):
                splits[k] = split
            hit = dict.fromkeys(ids, False)
            for k in entry.hit:
                hit[ids[k]] = True
            return dict(zip(ids, splits)), hit, entry.types
        if type(entry) is not _PackedPlan:
            return entry
        return dict(zip(ids, entry.splits)), dict(zip(ids, entry.hit.tolist())), entry.types

    def _type_tables(self, instance, eng: Engine):
        """(tables, flat tables, per-type tables) of the jobs on their current GPU types, made once per
        assignment of types."""
        from unicron_plan.core.problem import flat_tables, resolve_tables, resolve_type_tables

        key = tuple(j.gpu_type for j in eng.jobs)
        found = self._by_types.get(key)
        if found is None:
            tables = resolve_tables(instance)
            found = self._by_types[key] = (tables, flat_tables(instance, tables[0]),
                                           resolve_type_tables(instance, *tables))
        return found

    def choose_types(self, problem) -> tuple[dict[str, int], dict[str, str]]:
        """(counts, GPU type per job id) for a problem with GPU-type choices; by default every job
        keeps its current type (the problem without its alternatives)."""
        import dataclasses

        return self.choose(dataclasses.replace(problem, alternatives={})), {}

    def replan(self, eng: Engine, failed: str | None, repaired: str | None, charge: bool) -> None:
        """Apply the plan: every changed, hit or moved job transitions for its D_trans."""
        placement, hit, types = self.plan(eng, failed, repaired)
        eng.plans += 1
        reasons = eng.changes = eng.changes or {"hit": 0, "chosen": 0, "unchanged": 0}  # (docs/format.md, Reasons)
        jobs, ids = eng.jobs, self._job_ids(eng)
        if types:
            visit = range(len(jobs))
        elif self._visit is not None and self._visit[0] is placement:  # the jobs this plan placed
            visit = self._visit[1]
            reasons["unchanged"] += len(jobs) - len(visit)
        else:  # the jobs kept in place (their own dict planned, not hit) are counted, not visited
            m = len(jobs)
            kept = np.fromiter(map(operator.is_, map(placement.__getitem__, ids), map(_ALLOC, jobs)), dtype=bool, count=m)
            kept &= ~np.fromiter(map(hit.__getitem__, ids), dtype=bool, count=m)
            visit = np.flatnonzero(~kept).tolist()
            reasons["unchanged"] += m - len(visit)
        for k in visit:
            j = jobs[k]
            new = placement[j.id]
            if types and types[j.id] != j.gpu_type:  # mixed fleets: moved to another GPU type
                j.switch_type(types[j.id])
                eng.type_changes += 1
            if not hit[j.id] and (new is j.alloc or new == j.alloc):  # kept in place: the same dict stays
                reasons["unchanged"] += 1
                continue
            if 0 in new.values():
                new = {n: g for n, g in new.items() if g > 0}
            changed = sum(new.values()) != j.count or hit[j.id] or set(new) != set(j.alloc)
            reasons["hit" if hit[j.id] else "chosen" if changed else "unchanged"] += 1
            if not changed:
                # Same count on the same nodes: the planner's per-node split (derived from the
                # node list, docs/format.md) is adopted, so the GPUs the plan gives others are free.
                j.alloc = new
                continue
            j.alloc = new
            if not charge:
                continue
            if j.count == 0:
                eng.stop_blocks(j, eng.t)
                eng.reconfigurations += 1
            else:
                eng.transition(j, eng.t, j.d_trans)


class UnicronPolicy(PlannerPolicy):
    """The planner's optimum: exact DP over the v1 problem (transition cost included)."""

    name = "unicron"

    def choose(self, problem) -> dict[str, int]:
        from unicron_plan.solvers.dp import solve

        counts = self._terms.dp_counts(problem) if self._terms is not None else None
        return counts if counts is not None else solve(problem).counts

    def choose_types(self, problem) -> tuple[dict[str, int], dict[str, str]]:
        from unicron_plan.solvers.mixed import solve

        raw = solve(problem)
        return raw.counts, raw.types or {}


class ClairvoyantPolicy(UnicronPolicy):
    """A reference, not a planner one can run: unicron whose every job's change is valued over the
    lifetime it will actually have, read from the run's own future events (simulator only).

    At a re-plan at time t, job i's allocation lasts L_i = min(T_i, R, end - t): T_i the time to the
    next SEV1 failure of a node it holds, R (after a failure) the time until the failed node's repair,
    which re-decides the plan; the change is charged again at that return when it comes first. These
    replace the expectations of ``"lifetime"`` (docs/model.md): the same objective with the future known
    (on a mixed fleet, one lifetime per job on every GPU type).
    """

    name = "clairvoyant"

    def __init__(self, model: PolicyModel | None = None):
        super().__init__(model)
        self._future = None  # node -> (SEV1 failure times, repair times), ascending
        self._now = (None, None)

    def _times(self, eng: Engine):
        if self._future is None:
            fut: dict[str, tuple[list, list]] = {}
            for ev in eng.events:
                if ev.kind == "failure" and ev.severity != "sev1":
                    continue
                fut.setdefault(ev.node, ([], []))[ev.kind == "repair"].append(ev.time)
            self._future = fut
        return self._future

    def _next(self, eng: Engine, node: str, which: int) -> float:
        times = self._times(eng).get(node, ([], []))[which]
        k = bisect.bisect_right(times, eng.t)
        return times[k] - eng.t if k < len(times) else math.inf

    def replan(self, eng: Engine, failed: str | None, repaired: str | None, charge: bool) -> None:
        self._eng, self._now = eng, (failed, repaired)
        self._cache.clear()  # the future differs at every re-plan
        super().replan(eng, failed, repaired, charge)

    def choose(self, problem) -> dict[str, int]:
        return super().choose(problem if self._setting_up else self.known_future(problem))

    def choose_types(self, problem) -> tuple[dict[str, int], dict[str, str]]:
        return super().choose_types(problem if self._setting_up else self.known_future(problem))

    def known_future(self, problem):
        """``problem`` with each job's transition terms from its known lifetime."""
        from unicron_plan.core import cost

        eng, (failed, _) = self._eng, self._now
        end = eng.horizon - eng.t
        repair = self._next(eng, failed, 1) if failed is not None else math.inf
        def recost(j, d: float, d_repeat: float):
            gains = cost.gain(j.f, j.counts, j.x, j.f_x, j.hit, problem.d_run, d, j.exiting, j.off_type, d_repeat)
            return dataclasses.replace(j, d_trans=d, d_repeat=d_repeat, gains=np.asarray(gains, dtype=float))

        jobs, alternatives = [], {}
        for j in problem.jobs:
            held = problem.state.previous.get(j.id, {})
            own = min((self._next(eng, n, 0) for n, g in held.items() if g > 0), default=math.inf)
            life = max(min(own, repair, end), 1.0)
            again = repair < min(own, end)
            d = cost.d_trans_seconds(problem.instance, problem.instance.jobs[j.index]) * problem.d_run / life
            d_repeat = d if again else 0.0
            jobs.append(recost(j, d, d_repeat))
            if j.id in problem.alternatives:  # mixed fleets: the same lifetime on every type
                alternatives[j.id] = [recost(a, d, d_repeat) for a in problem.alternatives[j.id]]
        return dataclasses.replace(problem, jobs=jobs, alternatives=alternatives)


class LookaheadPolicy(UnicronPolicy):
    """Unicron valuing, after a failure, the plan now and the plan the failed node's return will bring
    together (docs/model.md, "The lookahead over the known repair"), solved exactly by the DP over
    pairs of counts (``solvers/pairdp.py``) where its table is small (:data:`PAIR_CELL_OPS`); elsewhere,
    after other events and on mixed fleets, the ``"lifetime"`` objective (its limit without a return).
    ``exact``/``fallback`` count the failures' GPU types solved each way."""

    name = "lookahead"
    horizon = "lifetime"
    PAIR_CELL_OPS = 2e8  # table cells x fold passes one re-plan may cost
    PAIR_CELL_MEMORY = 1e7  # table cells x jobs kept for the walk back (8 bytes each)

    def __init__(self, model: PolicyModel | None = None):
        super().__init__(model)
        self._failed = None
        self.exact = self.fallback = 0

    def replan(self, eng: Engine, failed: str | None, repaired: str | None, charge: bool) -> None:
        self._eng, self._failed = eng, failed
        super().replan(eng, failed, repaired, charge)

    def choose(self, problem) -> dict[str, int]:
        from unicron_plan.core import cost
        from unicron_plan.solvers import dp, pairdp

        failed = self._failed
        if failed is None or problem.alternatives or dp.dp_limitations(problem):
            return super().choose(problem)
        eng, inst = self._eng, problem.instance
        node = eng.nodes[failed]
        back = node.gpus - len(node.failed_gpus)
        repair = cost.pending_repair_seconds(inst)
        mtbf = inst.cost.node_mtbf_hours * 3600.0
        exact = {}  # GPU type -> capacity after the return, where the table of pairs is small enough
        for t, capacity in problem.capacity.items():
            js = [j for j in problem.jobs if j.gpu_type == t]
            after = capacity + (back if node.gpu_type == t else 0)
            cells = pairdp.pair_cells([j.counts for j in js], capacity, after)
            if (cells * 3 * sum(len(j.counts) for j in js) <= self.PAIR_CELL_OPS
                    and cells * (len(js) + 1) <= self.PAIR_CELL_MEMORY):
                exact[t] = after
        self.exact += len(exact)
        self.fallback += len(problem.capacity) - len(exact)
        # the lifetime answer for the types whose table of pairs is too large
        out = super().choose(problem) if len(exact) < len(problem.capacity) else {}
        for t, after in exact.items():
            js = [j for j in problem.jobs if j.gpu_type == t]
            capacity = problem.capacity[t]
            terms = []
            for j in js:
                held = sum(1 for g in problem.state.previous.get(j.id, {}).values() if g > 0)
                lam = max(held, 1) / mtbf
                d_job = cost.d_trans_seconds(inst, inst.jobs[j.index]) * lam * problem.d_run
                terms.append((j.counts, *cost.lookahead_terms(j.f, j.counts, j.x, j.f_x, j.hit, repair,
                                                              problem.d_run, d_job, d_job, j.exiting)))
            _, ys, _ = pairdp.solve_pairs(terms, capacity, after)
            out.update({j.id: y for j, y in zip(js, ys)})
        return out


class RolloutPolicy(UnicronPolicy):
    """Unicron choosing, at a re-plan after a failure or a repair where the horizons' plans differ, the plan
    with the highest output summed over ``futures`` sampled futures (``simulate/fork.py``: the same futures
    for every plan), each plan applied to a copy of the run and continued by unicron under the ``base``
    horizon for ``window_hours`` (or to the run's end; ``continue_own``: each fork by the horizon whose plan
    it applies). The candidates are the plans of unicron under each
    of :data:`CANDIDATES` (each exact for its own objective: the DP's); the first of them wins ties. The
    time-0 plan, a re-plan without candidates that differ, and every re-plan of a scenario without a failure
    model to sample (a trace, or failure domains) are the ``base`` horizon's. The futures of
    a re-plan come from a generator seeded by (``seed``, the re-plan's number), so a run is repeatable.
    ``decisions`` counts the re-plans where the candidates differed, ``changed`` those where the choice
    was not the ``base`` horizon's plan."""

    name = "rollout"
    CANDIDATES = ("lifetime", "event", "job", "cluster", "lookahead")
    horizon = "lifetime"  # the base: its plan at time 0 and when the candidates agree, and in the forks
    futures = 8
    window_hours = 72.0
    continue_own = False  # True: each candidate's fork continued by its own horizon, not the base
    seed = 0

    def __init__(self, model: PolicyModel | None = None):
        super().__init__(model)
        self._subs: dict | None = None
        self._chosen = None
        self.decisions = self.changed = 0

    def candidates(self) -> dict:
        """The policies whose plans are the candidates, by horizon (made once per run)."""
        if self._subs is None:
            self._subs = {}
            for h in self.CANDIDATES:
                p = LookaheadPolicy(self.model) if h == "lookahead" else UnicronPolicy(self.model)
                if h != "lookahead":
                    p.horizon = h
                p.free_setup = self.free_setup
                self._subs[h] = p
        return self._subs

    def plan(self, eng: Engine, failed: str | None, repaired: str | None):
        return self._chosen if self._chosen is not None else super().plan(eng, failed, repaired)

    def replan(self, eng: Engine, failed: str | None, repaired: str | None, charge: bool) -> None:
        if charge and not self._setting_up:
            self._chosen = self.decide(eng, failed, repaired)
        try:
            super().replan(eng, failed, repaired, charge)
        finally:
            self._chosen = None

    def decide(self, eng: Engine, failed: str | None, repaired: str | None):
        """The plan (as :meth:`PlannerPolicy.plan` gives it) chosen at this re-plan."""
        plans = []
        self._plan_of = {}  # id of a candidate plan -> the first horizon that gave it
        for h, p in self.candidates().items():
            if isinstance(p, LookaheadPolicy):
                p._eng, p._failed = eng, failed
            plan = p.plan(eng, failed, repaired)
            if all(plan[0] != q[0] or plan[2] != q[2] for q in plans):
                plans.append(plan)
                self._plan_of[id(plan)] = h
        failures = eng.scenario.failures
        if len(plans) == 1 or failures is None or failures.domains:  # nothing to sample futures from
            return plans[0]
        self.decisions += 1
        values = self.values(eng, plans, failed, repaired)
        best = max(range(len(plans)), key=lambda k: (values[k], -k))
        self.changed += best != 0
        return plans[best]

    def values(self, eng: Engine, plans: list, failed: str | None, repaired: str | None) -> list[float]:
        """Each plan's weighted TFLOP over the window, summed over the sampled futures."""
        from unicron_plan.simulate import fork

        plan_of = self._plan_of
        past = eng.events[:bisect.bisect_right([e.time for e in eng.events], eng.t)]
        end = min(eng.t + self.window_hours * 3600.0, eng.scenario.duration_hours * 3600.0)
        seeds = np.random.SeedSequence([self.seed, eng.plans]).spawn(self.futures)
        futures = [fork.future_events(eng.scenario, past, eng.t, np.random.default_rng(s), end) for s in seeds]
        values = []
        for plan in plans:
            base = self._subs[self.horizon if not self.continue_own else plan_of[id(plan)]]
            share = [getattr(base, a) for a in ("_cache", "_sig_ids", "_base_instance", "_tables", "_healthy",
                                                "_flat", "_down_copies", "_job_copies", "_throughputs", "_by_types")]
            total = 0.0
            for future in futures:
                copy = fork.fork(eng, base, share)
                apply_plan(copy.policy, copy, plan, failed, repaired)
                total += fork.continue_on(copy, future, end)
            values.append(total)
        return values


class RolloutToEndPolicy(RolloutPolicy):
    """The rollout with more futures, each to the run's end and continued by the horizon whose plan it
    forks (the fork analysis's comparison, made without the future)."""

    name = "rollout-to-end"
    futures = 16
    window_hours = math.inf
    continue_own = True


def apply_plan(policy: PlannerPolicy, eng: Engine, plan, failed: str | None, repaired: str | None) -> None:
    """``policy``'s re-plan with ``plan`` (from :meth:`PlannerPolicy.plan` at this state) in place of its own."""
    policy.plan = lambda *_: plan
    try:
        policy.replan(eng, failed, repaired, charge=True)
    finally:
        del policy.plan


class TypeBoundPolicy(UnicronPolicy):
    """Unicron that may not change a job's GPU type: the same planner on the problem without type
    alternatives, so every job keeps the type it started on (a mixed fleet's ablation)."""

    name = "type-bound"

    def choose_types(self, problem) -> tuple[dict[str, int], dict[str, str]]:
        return PlannerPolicy.choose_types(self, problem)


class GreedyPolicy(PlannerPolicy):
    """Marginal greedy on weight x TFLOP/s per GPU, ignoring transition cost.

    Per GPU type, from all jobs at 0, repeatedly apply the single step (a job to
    a larger allowed count that fits) with the highest added F per added GPU.
    """

    name = "greedy"

    def __init__(self, model: PolicyModel | None = None):
        super().__init__(model)
        self._answers: dict = {}  # (capacities, allowed counts) -> counts
        self._steps: dict = {}  # job id -> its table as lists and its best steps (_greedy's memo)
        self._runs: dict = {}  # counts that fit per job -> simulate.greedy.UnlimitedRun (None: seen once)
        self._fits_keys: dict = {}  # the counts that fit per job (bytes) seen, each kept once

    def choose(self, problem) -> dict[str, int]:
        # Greedy ignores transitions: its answer depends only on the capacities and each job's allowed
        # counts (F at a count is fixed for a job during a run), which recur as nodes fail and return.
        # In a run without constraints every job's allowed counts are the leading entries of its table
        # that fit (simulate/terms.py): their number per job says which they are.
        prefixes = self._terms is not None and self._terms.plain
        flat = self._terms.flat_options(problem, gains=False) if prefixes else None
        fits = None
        if flat is not None:  # (equal counts that fit share one bytes object among the keys)
            fits = flat.fits.tobytes()
            fits = self._fits_keys.setdefault(fits, fits)
        key = (tuple(sorted(problem.capacity.items())),
               fits if flat is not None else tuple((j.id, j.gpu_type, j.counts.tobytes()) for j in problem.jobs))
        found = self._answers.get(key)
        if found is None:
            if flat is not None and len(problem.capacity) == 1 and not problem.alternatives:
                found = self._replayed(flat, next(iter(problem.capacity.values())))
            if found is None:
                found = self._greedy(problem, self._steps, prefixes)
            ids = self._ids if self._ids is not None else [j.id for j in problem.jobs]  # (the run's list, shared)
            # kept as the counts alone (in job order) where the answer lists every job in that order
            self._answers[key] = (ids, np.fromiter(found.values(), dtype=np.int64, count=len(found))) \
                if list(found) == ids and all(type(c) is int for c in found.values()) else found
            return dict(found)
        if type(found) is tuple:
            return dict(zip(found[0], found[1].tolist()))
        return dict(found)

    RUNS_KEPT = 4  # recorded runs kept (per set of counts that fit), the latest ones

    def _replayed(self, flat, capacity: int) -> dict[str, int] | None:
        """The greedy counts from the recorded run with no limit for these counts that fit
        (``simulate/greedy.py``), recorded the second time they are seen; None: not recorded (yet)."""
        fits_key = flat.fits.tobytes()
        if fits_key not in self._runs:
            self._runs[fits_key] = None
            while len(self._runs) > self.RUNS_KEPT:
                del self._runs[next(iter(self._runs))]
            return None
        run = self._runs[fits_key]
        if run is None:
            terms = self._terms
            ends = (terms.starts + flat.fits).tolist()
            cs = [flat.counts[a:b].tolist() for a, b in zip(terms.starts.tolist(), ends)]
            fs = [terms.flat.f[a:b].tolist() for a, b in zip(terms.starts.tolist(), ends)]
            run = self._runs[fits_key] = UnlimitedRun(cs, fs, [{} for _ in cs])
        counts = run.counts(capacity)
        return None if counts is None else dict(zip(self._terms.ids, counts))

    def choose_types(self, problem) -> tuple[dict[str, int], dict[str, str]]:
        from unicron_plan.simulate.mixed import greedy_types

        key = (tuple(sorted(problem.capacity.items())),
               tuple((j.id, tuple((a.gpu_type, a.counts.tobytes()) for a in problem.alternatives.get(j.id, [j])))
                     for j in problem.jobs))
        found = self._answers.get(key)
        if found is None:
            found = self._answers[key] = greedy_types(problem)
        return dict(found[0]), dict(found[1])

    @classmethod
    def _greedy(cls, problem, memo: dict | None = None, prefixes: bool = False) -> dict[str, int]:
        """The greedy counts. ``memo`` (job id -> (counts, F, counts as a list, F as a list, {k: the
        step from counts[k] with no limit on GPUs})), kept between calls: a job's best step with GPUs
        to spare is the one with no limit whenever that one fits (the first of the largest ratios over
        all larger counts, so also over the fitting ones), so it is looked up instead of scanned.
        ``prefixes``: every job's counts and F, in this call and those that filled ``memo``, are
        leading entries of its own table, so equal lengths mean equal arrays."""
        import heapq

        memo = {} if memo is None else memo
        counts = {}
        for gtype, cap in problem.capacity.items():
            jobs = problem.jobs_of_type(gtype)
            at = {j.index: 0 for j in jobs}  # index into the job's counts (counts[0] is its smallest, 0)
            left = cap - sum(int(j.counts[0]) for j in jobs)
            # plain lists: a job's table is short, and every step looks at a few entries of it
            cs, fs, free = {}, {}, {}
            for j in jobs:
                kept = memo.get(j.id)
                if kept is None or not (len(kept[0]) == len(j.counts) if prefixes else
                                        np.array_equal(kept[0], j.counts) and np.array_equal(kept[1], j.f)):
                    kept = memo[j.id] = (j.counts, j.f, j.counts.tolist(), j.f.tolist(), {})
                cs[j.index], fs[j.index], free[j.index] = kept[2], kept[3], kept[4]

            heap = []
            for j in jobs:
                step = fitting_step(cs[j.index], fs[j.index], free[j.index], 0, left)
                if step is not None:
                    heap.append((-step[0], j.index, step[1]))
            heapq.heapify(heap)
            finish(heap, cs, fs, free, at, left)
            counts.update({j.id: int(j.counts[at[j.index]]) for j in jobs})
        return counts


class EqualSharePolicy(PlannerPolicy):
    """Each GPU type's healthy GPUs split evenly among its jobs, rounded down to allowed counts."""

    name = "equal-share"

    def choose(self, problem) -> dict[str, int]:
        counts = {}
        for gtype, cap in problem.capacity.items():
            jobs = [j for j in problem.jobs_of_type(gtype) if not j.exiting]
            share = cap // len(jobs) if jobs else 0
            for j in problem.jobs_of_type(gtype):
                allowed = [c for c in j.counts.tolist() if c <= share]
                counts[j.id] = max(allowed) if allowed and not j.exiting else 0
        return counts


# --------------------------------------------------------------------------- baselines
class SparePool:
    """Hot spare nodes a baseline keeps idle (its model's ``spare_nodes``).

    Chosen at time 0 from the end of the cluster, idle nodes first; the jobs on a chosen busy node
    give it up (they shrink to their best allowed count on the rest, uncharged). A job whose node
    fails (SEV1, detected) takes a spare with as many GPUs in its place; the failed node, once
    repaired, is a spare. A spare that fails leaves the pool until its repair.
    """

    def __init__(self, eng: Engine, own: dict[str, dict[str, int]], count: int):
        used = {n for alloc in own.values() for n in alloc}
        order = [n.id for n in reversed(eng.scenario.cluster.nodes)]
        self.free = ([n for n in order if n not in used] + [n for n in order if n in used])[:count]
        self.out: set[str] = set()  # failed nodes that return as spares

    def reserve(self, eng: Engine, own: dict[str, dict[str, int]]) -> None:
        """Take the spares out of the jobs' allocations at time 0."""
        spares = set(self.free)
        for j in eng.jobs:
            if spares & set(own[j.id]):
                own[j.id] = {n: g for n, g in own[j.id].items() if n not in spares}
                j.alloc = best_own_alloc(eng, j, own[j.id])

    def take(self, eng: Engine, node: str) -> str | None:
        """A spare in service for the failed ``node`` (None when there is none); ``node`` returns as one."""
        need = eng.nodes[node].gpus
        for k, s in enumerate(self.free):
            if s not in eng.down and s not in eng.pending and eng.nodes[s].gpus >= need:
                del self.free[k]
                self.out.add(node)
                return s
        return None

    def failed(self, node: str) -> None:
        """An idle spare failed: out of the pool until its repair."""
        if node in self.free:
            self.free.remove(node)
            self.out.add(node)

    def repaired(self, node: str) -> bool:
        """True when the repaired ``node`` is a spare again (no job waits for it)."""
        if node in self.out:
            self.out.discard(node)
            self.free.append(node)
            return True
        return False


def swap_node(eng: Engine, split: dict[str, int], old: str, new: str) -> dict[str, int]:
    """``split`` with ``old``'s GPUs on ``new``, in cluster order."""
    out = {(new if n == old else n): g for n, g in split.items()}
    return dict(sorted(out.items(), key=lambda kv: eng.node_rank[kv[0]]))


class OwnGpusPolicy(Policy):
    """A baseline whose jobs own their GPUs (``own``: per job, per node) and may keep hot spares."""

    def setup(self, eng: Engine) -> None:
        super().setup(eng)
        self.own = {j.id: dict(j.alloc) for j in eng.jobs}
        self.spares = SparePool(eng, self.own, self.model.spare_nodes) if self.model.spare_nodes else None
        if self.spares is not None:
            self.spares.reserve(eng, self.own)

    def take_spare(self, eng: Engine, ev: SimEvent, jobs: list[JobRun]) -> str | None:
        """For a SEV1 failure of ``ev.node``, a spare that takes its place in ``jobs``' own GPUs (None when
        there is none, or no job to serve: then a failed idle spare leaves the pool)."""
        if ev.severity != "sev1" or self.spares is None:
            return None
        if not jobs:
            self.spares.failed(ev.node)
            return None
        spare = self.spares.take(eng, ev.node)
        for j in jobs if spare is not None else ():
            self.own[j.id] = swap_node(eng, self.own[j.id], ev.node, spare)
        return spare

    def returns_as_spare(self, node: str) -> bool:
        """The repaired ``node`` went back to the spare pool (no job waits for it)."""
        return self.spares is not None and self.spares.repaired(node)


class MegatronPolicy(OwnGpusPolicy):
    """Static allocation; timeout detection; SEV1 waits for the repair, then restarts from a checkpoint."""

    name = "megatron"
    in_band = False

    def lost_work(self, job: JobRun, t_fail: float) -> float:
        """Seconds of training since the job's last checkpoint at ``t_fail``."""
        return lost_since_checkpoint(self.model, job, t_fail)

    def restart(self, eng: Engine, job: JobRun, lost: float) -> None:
        """Resubmit + set up (transition), then recompute the work lost since the checkpoint."""
        checkpoint_restart(self.model, eng, job, lost)

    def setup(self, eng: Engine) -> None:
        super().setup(eng)
        self.own = {j.id: dict(j.alloc) for j in eng.jobs}  # the allocation each job was submitted with
        self.stopped_at: dict[str, float] = {}  # when each job's current stop for a failed node began

    def on_failure(self, eng: Engine, ev: SimEvent, hit: list[JobRun]) -> None:
        after = self.model.manual_downscale_after_hours
        spare = self.take_spare(eng, ev, hit)
        if spare is not None:  # the jobs restart with the spare in the failed node's place
            for j in hit:
                j.alloc = swap_node(eng, j.alloc, ev.node, spare)
                if not j.waiting and not restarted_since(j, ev):
                    self.restart(eng, j, self.lost_work(j, ev.time))
            return
        for j in hit:
            if ev.severity == "sev1":
                if not j.waiting:
                    j.pending_lost = 0.0 if restarted_since(j, ev) else self.lost_work(j, ev.time)
                    eng.stop_blocks(j, eng.t)
                    self.stopped_at[j.id] = eng.t
                    if after is not None:
                        eng.push(eng.t + after * 3600.0, "timer", (j.index, eng.t))
                j.waiting.add(ev.node)
            elif not j.waiting and not restarted_since(j, ev):
                self.restart(eng, j, self.lost_work(j, ev.time))

    def on_timer(self, eng: Engine, payload) -> None:
        """Manual down-scaling: the operator restarts a job still in the stop that began at ``since`` on its
        surviving GPUs."""
        index, since = payload
        j = eng.jobs[index]
        if not j.waiting or self.stopped_at.get(j.id) != since:  # restarted since: this stop is over
            return
        new = best_own_alloc(eng, j, self.own[j.id])
        if not new:
            return
        j.alloc, j.waiting = new, set()
        self.restart(eng, j, j.pending_lost)
        j.pending_lost = 0.0

    def on_repair(self, eng: Engine, node: str) -> None:
        if self.returns_as_spare(node):
            return
        for j in eng.jobs:
            if node in j.waiting:
                j.waiting.discard(node)
                # A node of the job that failed since and is not detected yet keeps it stopped:
                # its restart would hang there until the failure is detected.
                j.waiting |= set(j.alloc) & set(eng.pending)
                if not j.waiting:
                    self.restart(eng, j, j.pending_lost)
                    j.pending_lost = 0.0
            elif (not j.waiting and node in self.own[j.id] and j.alloc != self.own[j.id]
                  and not set(self.own[j.id]) & (eng.down | set(eng.pending))):
                # A down-scaled job whose nodes are all back: the operator restarts it at full size
                # after a checkpoint (no work lost).
                j.alloc = dict(self.own[j.id])
                self.restart(eng, j, 0.0)


class OobleckPolicy(OwnGpusPolicy):
    """Each job shrinks onto its own surviving GPUs and grows back on repair; timeout detection."""

    name = "oobleck"
    in_band = False

    def best_alloc(self, eng: Engine, job: JobRun) -> dict[str, int]:
        """The job's best allowed count on its own GPUs of nodes in service, placed on them in order."""
        return best_own_alloc(eng, job, self.own[job.id])

    def reconfigure(self, eng: Engine, job: JobRun, ev: SimEvent | None) -> None:
        """Charge ``job``'s restart or reconfiguration after ``ev`` (None: growing back on a repair).
        Oobleck: D_trans, no work lost (it recovers from the pipeline replicas)."""
        eng.transition(job, eng.t, job.d_trans)

    def on_failure(self, eng: Engine, ev: SimEvent, hit: list[JobRun]) -> None:
        self.take_spare(eng, ev, [j for j in eng.jobs if ev.node in self.own[j.id]])
        for j in hit:
            if ev.severity == "sev1":
                new = self.best_alloc(eng, j)
                j.alloc = new
                if j.count == 0:
                    eng.stop_blocks(j, eng.t)
                    eng.reconfigurations += 1
                else:
                    self.reconfigure(eng, j, ev)
            elif not restarted_since(j, ev):
                self.reconfigure(eng, j, ev)

    def on_repair(self, eng: Engine, node: str) -> None:
        if self.returns_as_spare(node):
            return
        for j in eng.jobs:
            if node in self.own[j.id]:
                new = self.best_alloc(eng, j)
                if new != j.alloc:
                    j.alloc = new
                    self.reconfigure(eng, j, None)


class VarunaPolicy(OobleckPolicy):
    """Job-local like oobleck, but every reconfiguration is a restart from the last checkpoint (a Varuna
    morph): ``restart_seconds`` plus the work since the checkpoint; timeout detection."""

    name = "varuna"

    def reconfigure(self, eng: Engine, job: JobRun, ev: SimEvent | None) -> None:
        lost = 0.0 if ev is None or restarted_since(job, ev) else lost_since_checkpoint(self.model, job, ev.time)
        checkpoint_restart(self.model, eng, job, lost)


class BambooPolicy(OobleckPolicy):
    """Redundant computation (Bamboo, NSDI'23): every pipeline stage is also computed by its neighbour,
    so a pipeline survives the loss of one stage without a restart.

    A job's pipelines are consecutive groups of its smallest allowed count of GPUs over its own GPUs in
    cluster order (in the scenario library every allowed count is that size times a data-parallel
    degree). A SEV1 node failure is absorbed when every pipeline on the node also has GPUs on another
    node and none of them has absorbed a failure already: the job keeps its count and runs on the
    surviving GPUs at ``degraded_throughput_factor`` of its speed, with no restart and no work lost.
    Otherwise (a second failure in a pipeline, or a pipeline wholly on the node) it restarts from the
    checkpoint on its best allowed count of its surviving GPUs. A failed node that rejoins is a
    reconfiguration (D_trans). Software errors (SEV2/SEV3) restart from the checkpoint at the same
    layout. Timeout detection.
    """

    name = "bamboo"

    def setup(self, eng: Engine) -> None:
        super().setup(eng)
        self.absorbed: dict[str, dict[str, set[int]]] = {j.id: {} for j in eng.jobs}  # job -> node -> pipelines

    @staticmethod
    def pipelines(job: JobRun, own: dict[str, int]) -> dict[str, set[int]]:
        """The pipelines (indices) with GPUs on each node of ``own``."""
        size = min((c for c in job.table if c > 0), default=0)
        out: dict[str, set[int]] = {}
        at = 0
        for n, g in own.items():
            out[n] = set(range(at // size, (at + g - 1) // size + 1)) if size and g else set()
            at += g
        return out

    def absorbable(self, job: JobRun, node: str) -> set[int] | None:
        """The pipelines of ``job`` on ``node`` when the job can absorb its failure, else None."""
        if job.count == 0:
            return None
        pipes = self.pipelines(job, self.own[job.id])
        mine = pipes.get(node, set())
        taken = set().union(*self.absorbed[job.id].values()) if self.absorbed[job.id] else set()
        elsewhere = set().union(*(p for n, p in pipes.items() if n != node and n in job.alloc))
        if not mine or mine & taken or not mine <= elsewhere:
            return None
        return mine

    def degrade(self, job: JobRun, on: bool) -> None:
        """Run ``job`` degraded at its nominal count (``on``), or at its own rate again."""
        if on:
            if job.nominal is None:
                job.nominal = job.count
            job.slow = self.model.degraded_throughput_factor or 1.0
        else:
            job.nominal, job.slow = None, 1.0
            self.absorbed[job.id] = {}

    def reconfigure(self, eng: Engine, job: JobRun, ev: SimEvent | None) -> None:
        if ev is None:  # growing back or rejoining on a repair
            eng.transition(job, eng.t, job.d_trans)
            return
        lost = 0.0 if restarted_since(job, ev) else lost_since_checkpoint(self.model, job, ev.time)
        checkpoint_restart(self.model, eng, job, lost)

    def on_failure(self, eng: Engine, ev: SimEvent, hit: list[JobRun]) -> None:
        self.take_spare(eng, ev, [j for j in eng.jobs if ev.node in self.own[j.id]])
        for j in hit:
            if ev.severity != "sev1":
                if not restarted_since(j, ev):
                    self.reconfigure(eng, j, ev)  # same layout; an absorbed failure stays absorbed
                continue
            if ev.node in self.own[j.id]:
                pipes = self.absorbable(j, ev.node)
                if pipes is not None:  # the neighbours take over the node's stages: no restart
                    self.absorbed[j.id][ev.node] = pipes
                    self.degrade(j, True)
                    j.alloc = {n: g for n, g in j.alloc.items() if n != ev.node}
                    continue
            # A spare took the node's place, or the failure cannot be absorbed: a restart on the job's
            # best allowed count of its own GPUs in service, its pipelines whole again.
            self.degrade(j, False)
            j.alloc = self.best_alloc(eng, j)
            if j.count == 0:
                eng.stop_blocks(j, eng.t)
                eng.reconfigurations += 1
            else:
                self.reconfigure(eng, j, ev)

    def on_repair(self, eng: Engine, node: str) -> None:
        if self.returns_as_spare(node):
            return
        for j in eng.jobs:
            if node not in self.own[j.id]:
                continue
            if node in self.absorbed[j.id]:  # the node rejoins its pipelines
                del self.absorbed[j.id][node]
                if not self.absorbed[j.id]:
                    self.degrade(j, False)
                    j.alloc = self.best_alloc(eng, j)
                else:
                    alloc = dict(j.alloc)
                    alloc[node] = self.own[j.id][node]
                    j.alloc = dict(sorted(alloc.items(), key=lambda kv: eng.node_rank[kv[0]]))
                self.reconfigure(eng, j, None)
            elif j.nominal is None:
                new = self.best_alloc(eng, j)
                if new != j.alloc:
                    j.alloc = new
                    self.reconfigure(eng, j, None)


POLICIES: dict[str, type[Policy]] = {
    p.name: p for p in (UnicronPolicy, MegatronPolicy, OobleckPolicy, GreedyPolicy, EqualSharePolicy,
                        VarunaPolicy, BambooPolicy, TypeBoundPolicy, ClairvoyantPolicy, LookaheadPolicy,
                        RolloutPolicy, RolloutToEndPolicy)
}


def make_policy(name: str, scenario: Scenario | None = None) -> Policy:
    """A fresh policy by name with its constants (:func:`policy_model`); ValueError lists the valid names."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; valid: {', '.join(POLICIES)}") from None
    return cls(policy_model(name, scenario))
