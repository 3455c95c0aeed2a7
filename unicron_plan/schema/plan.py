"""The v1 plan (docs/format.md, "Plan")."""

from __future__ import annotations

import operator
from itertools import chain, compress, repeat
from operator import attrgetter
from typing import Literal, Optional, Union

from pydantic import ConfigDict, Field, model_serializer

from unicron_plan.schema.base import OutputModel

Action = Literal["keep", "shrink", "grow", "restart", "suspend", "resume", "idle"]
Reason = Literal["hit", "chosen", "unchanged"]


class Status(OutputModel):
    """Why the solver stopped (termination) and what the plan is (solution), kept apart as Pyomo does."""

    termination: Literal["optimal", "time_limit", "infeasible", "error"] = Field(
        description="Why the solver stopped: optimal, time_limit, infeasible or error.")
    solution: Literal["optimal", "feasible", "none"] = Field(
        description="What the plan is: optimal (proven), feasible or none.")


class Placement(OutputModel):
    """GPUs a job takes on one node (a frozen value: plans may share one object)."""

    model_config = ConfigDict(frozen=True)

    node: str = Field(description="Node id.")
    gpus: int = Field(ge=1, description="GPUs of the job on that node (>= 1).")


class PlanJob(OutputModel):
    """One job's decision."""

    id: str = Field(description="Job id.")
    previous_gpus: int = Field(ge=0, description="x_i: the job's GPUs before the event.")
    gpus: int = Field(ge=0, description="y_i: the job's planned GPUs.")
    action: Action = Field(description="keep, shrink, grow, restart, suspend, resume or idle.")
    nodes: list[str] = Field(description="Nodes the job runs on in the plan.")
    placement: list[Placement] = Field(description="GPUs per node, summing to gpus.")
    waf_tflops: float = Field(description="weight x TFLOP/s at the planned count.")
    transition_penalty: float = Field(
        description="[changed] x F(previous) x D_trans, weighted TFLOP lost while transitioning.")
    hit: Optional[bool] = Field(default=None, description="The event touched one of the job's nodes.")
    gpu_type: Optional[str] = Field(
        default=None, description="The GPU type the job runs on under the plan (its nodes are of it); "
                                  "absent: the instance's throughput.gpu_type.")
    gain: Optional[float] = Field(default=None, description="This job's term G_i of the objective.")
    parallelism: Optional[dict[str, Union[int, str]]] = Field(
        default=None, description="Layout (tp, pp, dp, micro_batch, virtual_stages, recompute) for "
                                  "model-derived throughput.")
    transition_seconds: Optional[float] = Field(
        default=None, ge=0, description="D_trans charged to the job, seconds: its transition when it is changed "
                                        "and held GPUs before, else 0 (GPU-minutes lost: previous_gpus x this / 60).")
    placement_left_to: Optional[str] = Field(
        default=None, description="The instance job's placement_left_to: the scheduler that places its pods "
                                  "(only its count is carried out).")
    reason: Optional[Reason] = Field(
        default=None, description="hit (the event took GPUs from one of its nodes or drained one), chosen "
                                  "(changed though not hit) or unchanged.")
    why: Optional[str] = Field(default=None, description="One sentence with the numbers behind the decision.")
    keep_cost: Optional[float] = Field(
        default=None, description="Objective (TFLOP) lost if this job alone were kept at its previous count "
                                  "and split, every other job as planned: 0 when unchanged; null when keeping "
                                  "it is not feasible (hit, leaving, or its GPUs given to other jobs).")

    @model_serializer(mode="wrap")
    def _keep_cost_null(self, handler):
        """``keep_cost`` is written as null (not left out) when the reasons are given and keeping is infeasible."""
        out = handler(self)
        if self.reason is not None and "keep_cost" not in out:
            out["keep_cost"] = None
        return out


class SolverInfo(OutputModel):
    """Which solver produced the plan and how long it took."""

    name: str = Field(
        description="Solver that made the plan (`unicron-plan solvers`; contingency for a precomputed one).")
    wall_seconds: float = Field(ge=0, description="Seconds of building and solving.")
    options: Optional[dict[str, float | int | str | bool]] = Field(default=None,
        description="Options and notes of the solver (e.g. its time limit, why a contingency plan was not used).")


class Plan(OutputModel):
    """A reconfiguration plan: one entry per job of the instance."""

    schema_version: Literal["1"] = Field(default="1", description="Version of the format: 1.")
    instance: str = Field(description="Name of the instance planned.")
    status: Status = Field(description="Why the solver stopped and what the plan is.")
    objective: float = Field(description="sum of the jobs' G_i: weighted useful work, TFLOP (TFLOP/s x seconds).")
    bound: float = Field(description="Upper bound on the optimum, TFLOP (equal to objective when optimal).")
    gap: Optional[float] = Field(
        default=None, ge=0, description="(bound - objective) / max(|bound|, 1): 0 for a proven optimum, "
                                        "how far a time-limited plan may be from the optimum otherwise.")
    d_run_seconds: float = Field(description="D_run used, seconds.")
    waf_tflops: float = Field(description="Sum of the jobs' weighted TFLOP/s F_i(y_i).")
    jobs: list[PlanJob] = Field(description="Every job of the instance, suspended ones included.")
    solver: SolverInfo = Field(description="Solver, its time and options.")
    capacity: Optional[dict[str, int]] = Field(
        default=None, description="Healthy, non-drained GPUs per GPU type after the event.")
    drained_nodes: Optional[list[str]] = Field(
        default=None, description="Nodes removed from service by the event (failed or isolated).")
    changes: Optional[dict[Reason, int]] = Field(
        default=None, description="How many jobs have each reason: {hit, chosen, unchanged}.")

    def json_floats(self) -> "list[float] | None":
        """Every float of this plan's JSON form (``model_dump(mode="json", exclude_none=True)``), read off the
        models, so that the writer need not walk the dumped tree (:func:`unicron_plan.io.dumps`): the
        scalars of the plan, its status, solver (options included), capacity, changes and drained nodes,
        and of each job (its fields, its layout's values, its nodes; its placements are frozen models of a
        node id and a GPU count); an integer in a float field is written as a float. None when one of
        them is not a plain JSON scalar (a value set without validation): the writer then walks the
        dumped tree."""
        status, solver, jobs = self.status, self.solver, self.jobs
        numbers = [self.objective, self.bound, self.gap, self.d_run_seconds, self.waf_tflops, solver.wall_seconds]
        for name in _JOB_FLOATS:
            numbers += map(attrgetter(name), jobs)
        out = [self.instance, status.termination, status.solution, solver.name, *(solver.options or {}).values(),
               *(self.capacity or {}).values(), *(self.changes or {}).values(), *(self.drained_nodes or ())]
        for name in _JOB_OTHERS:
            out += map(attrgetter(name), jobs)
        out += chain.from_iterable(map(dict.values, filter(None, map(attrgetter("parallelism"), jobs))))
        out += chain.from_iterable(map(attrgetter("nodes"), jobs))
        kinds, types = set(map(type, numbers)), list(map(type, out))
        if not (kinds <= _NUMBERS and set(types) <= _SCALARS):
            return None
        if int in kinds:
            numbers = [float(v) if type(v) is int else v for v in numbers]
        return list(compress(numbers, map(operator.is_, map(type, numbers), repeat(float)))) + \
            list(compress(out, map(operator.is_, types, repeat(float))))


_JOB_FLOATS = tuple(name for name, f in PlanJob.model_fields.items() if f.annotation in (float, Optional[float]))
_JOB_OTHERS = tuple(name for name in PlanJob.model_fields
                    if name not in _JOB_FLOATS and name not in ("nodes", "placement", "parallelism"))
_NUMBERS = frozenset({float, int, type(None)})  # of a float field
_SCALARS = frozenset({str, int, float, bool, type(None)})
