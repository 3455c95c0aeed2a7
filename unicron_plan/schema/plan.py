"""The v1 plan (docs/format.md, "Plan")."""

from __future__ import annotations

import operator
import re
import threading
from itertools import chain, compress, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from pydantic import ConfigDict, Field, PrivateAttr, model_serializer

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

    # While ``placement`` is held as arrays (:meth:`Plan.hold_placements`), ``__pydantic_private__`` is
    # {"_pending": (the plan's _Pending, this job's index)}, else None as for any model without private
    # attributes (none is declared: pydantic would call a function per model made to set it).

    @model_serializer(mode="wrap")
    def _keep_cost_null(self, handler, info):
        """``keep_cost`` is written as null (not left out) when the reasons are given and keeping is infeasible.
        A placement still held as arrays is made first, unless the caller writes the placements
        itself from the arrays (context ``{WITHOUT_PLACEMENT: True}``, :meth:`Plan.placement_arrays`)."""
        if "placement" not in self.__dict__ and not (type(info.context) is dict and info.context.get(WITHOUT_PLACEMENT)):
            self._make_placement()
        out = handler(self)
        if self.reason is not None and "keep_cost" not in out:
            out["keep_cost"] = None
        return out

    def json_bytes(self) -> bytes:
        """``model_dump_json(exclude_none=True)`` as bytes. A placement still held as arrays is written
        from them (no model per (node, GPUs) made) where every node id of the plan is written as it is
        (:func:`_plain_ids`); otherwise the models are made and dumped."""
        private = self.__pydantic_private__
        if private and "placement" not in self.__dict__:
            pending, k = private["_pending"]
            arrays = pending.arrays
            if pending.made is None and _plain_ids(arrays.names):
                text = self.model_dump_json(exclude_none=True, context={WITHOUT_PLACEMENT: True}).encode()
                if text.count(_NODES_END) == 1:
                    a, b = int(arrays.starts[k]), int(arrays.starts[k + 1])
                    names = arrays.names
                    shares = b",".join(b'{"node":"%s","gpus":%d}' % (names[n].encode(), g) for n, g in
                                       zip(arrays.node[a:b].tolist(), arrays.gpus[a:b].tolist()))
                    at = text.index(_NODES_END) + 1
                    return b"".join((text[:at], b',"placement":[', shares, b"]", text[at:]))
        return self.model_dump_json(exclude_none=True).encode()

    def _make_placement(self) -> None:
        """Make ``placement`` from the plan's arrays if it is still held there."""
        private = self.__pydantic_private__
        if private and "placement" not in self.__dict__:
            pending, k = private["_pending"]
            self._take_placement(pending.lists()[k])

    def _take_placement(self, shares: list) -> None:
        if "placement" not in self.__dict__:
            have = self.__dict__
            # a new dict in field order (the order the models' JSON lists the fields in), swapped in at once
            object.__setattr__(self, "__dict__", {name: shares if name == "placement" else have[name]
                                                  for name in _JOB_FIELDS if name == "placement" or name in have})
        object.__setattr__(self, "__pydantic_private__", None)

    if not TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            if name == "placement":
                self._make_placement()
                if "placement" in self.__dict__:
                    return self.__dict__["placement"]
            return super().__getattr__(name)

    def __eq__(self, other: object) -> bool:
        self._make_placement()
        if isinstance(other, PlanJob):
            other._make_placement()
        return super().__eq__(other)

    def __iter__(self):
        self._make_placement()
        return super().__iter__()

    def __repr_args__(self):
        self._make_placement()
        return super().__repr_args__()

    def __copy__(self):
        self._make_placement()
        return super().__copy__()

    def __deepcopy__(self, memo=None):
        self._make_placement()
        return super().__deepcopy__(memo)

    def __getstate__(self):
        self._make_placement()
        return super().__getstate__()


WITHOUT_PLACEMENT = "unicron_plan.without_placement"
_NODES_END = b'],"waf_tflops":'  # a job's nodes list ends here (no JSON string holds '],"'); placement goes between
_PLAIN_ID = re.compile(r'[\x20\x21\x23-\x5b\x5d-\x7e]*')  # printable ASCII but the quote and the backslash
_PLAIN_SEEN: dict[int, tuple] = {}  # id(names) -> (names, plain), the last few lists of node ids checked


def _plain_ids(names) -> bool:
    """Every node id of ``names`` is printable ASCII without a quote or backslash, so that its JSON
    string is the id in quotes (checked once per list of names, which a plan's arrays share)."""
    seen = _PLAIN_SEEN.get(id(names))
    if seen is not None and seen[0] is names:
        return seen[1]
    joined = "".join(names)
    plain = _PLAIN_ID.fullmatch(joined) is not None
    if len(_PLAIN_SEEN) >= 8:
        _PLAIN_SEEN.clear()
    _PLAIN_SEEN[id(names)] = (names, plain)
    return plain


_JOB_FIELDS = tuple(PlanJob.model_fields)


class _Pending:
    """The placements of a plan's jobs held as arrays (:class:`unicron_plan.schema.placements.PlacementArrays`)
    until a caller reads one: then every job's models are made at once (one validation call)."""

    __slots__ = ("arrays", "jobs", "made", "lock")

    def __init__(self, arrays, jobs: list[PlanJob]):
        self.arrays, self.jobs, self.made, self.lock = arrays, jobs, None, threading.Lock()

    def lists(self) -> list:
        """Each job's list of Placement models, made on the first call (and given to every job)."""
        with self.lock:
            if self.made is None:
                made = self.arrays.models()
                for job, shares in zip(self.jobs, made):
                    private = job.__pydantic_private__
                    if private and private["_pending"][0] is self:
                        job._take_placement(shares)
                self.made, self.jobs = made, None
            return self.made


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

    _placements: Any = PrivateAttr(default=None)  # the _Pending of its jobs' placements, while held as arrays

    def hold_placements(self, arrays) -> None:
        """Keep the jobs' placements as ``arrays`` (:class:`unicron_plan.schema.placements.PlacementArrays`,
        one job per entry of ``jobs``, in order; each job's ``placement`` equal to its entries):
        each job's ``placement`` is made from them when a caller first reads one."""
        jobs = list(self.jobs)
        pending = _Pending(arrays, jobs)
        for k, job in enumerate(jobs):
            job.__dict__.pop("placement", None)
            object.__setattr__(job, "__pydantic_private__", {"_pending": (pending, k)})
        self.__pydantic_private__["_placements"] = pending

    def placement_arrays(self):
        """The jobs' placements as arrays when they are still held so (no job's ``placement`` made or set,
        the jobs those of :meth:`hold_placements`), else None."""
        private = self.__pydantic_private__
        pending = private.get("_placements") if private else None
        if pending is None or pending.made is not None:
            return None
        jobs, held = self.jobs, pending.jobs
        if held is None or len(jobs) != len(held) or not all(map(operator.is_, jobs, held)):
            return None
        if any(map(operator.contains, map(attrgetter("__dict__"), jobs), repeat("placement"))):
            return None
        return pending.arrays

    def make_placements(self) -> None:
        """Make every job's ``placement`` models now (they are otherwise made when first read)."""
        private = self.__pydantic_private__
        pending = private.get("_placements") if private else None
        if pending is not None:
            pending.lists()
            private["_placements"] = None
        for job in self.jobs:
            job._make_placement()

    def __eq__(self, other: object) -> bool:
        self.make_placements()
        if isinstance(other, Plan):
            other.make_placements()
        return super().__eq__(other)

    def __copy__(self):
        self.make_placements()
        return super().__copy__()

    def __deepcopy__(self, memo=None):
        self.make_placements()
        return super().__deepcopy__(memo)

    def __getstate__(self):
        self.make_placements()
        return super().__getstate__()

    def jobs_without_placement(self) -> "list[dict] | None":
        """Each job's JSON form (``model_dump(mode="json", exclude_none=True)``) but its ``placement``,
        read off the models' fields without the serializer (a call per job), for a writer that
        writes the placements itself (:meth:`placement_arrays`); None when a float field holds
        another number than a float (a value set without validation: the serializer then writes it
        as a float) or a job holds its ``placement`` models."""
        jobs = self.jobs
        for name in _JOB_FLOATS:
            if not set(map(type, map(attrgetter(name), jobs))) <= _FLOATS:
                return None
        fields = list(map(attrgetter("__dict__"), jobs))
        if any(map(operator.contains, fields, repeat("placement"))):
            return None
        out = [{k: v for k, v in d.items() if v is not None} for d in fields]
        for d, e in zip(fields, out):  # (the serializer's rule: keep_cost null when the reasons are given)
            if d["keep_cost"] is None and d["reason"] is not None:
                e["keep_cost"] = None
        return out

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
        other_kinds = set(types)
        if not (kinds <= _NUMBERS and other_kinds <= _SCALARS):
            return None
        if int in kinds:
            numbers = [float(v) if type(v) is int else v for v in numbers]
        floats = list(compress(numbers, map(operator.is_not, numbers, repeat(None)))) if type(None) in kinds else numbers
        return floats + list(compress(out, map(operator.is_, types, repeat(float)))) if float in other_kinds else floats


_JOB_FLOATS = tuple(name for name, f in PlanJob.model_fields.items() if f.annotation in (float, Optional[float]))
_JOB_OTHERS = tuple(name for name in PlanJob.model_fields
                    if name not in _JOB_FLOATS and name not in ("nodes", "placement", "parallelism"))
_NUMBERS = frozenset({float, int, type(None)})  # of a float field
_FLOATS = frozenset({float, type(None)})
_SCALARS = frozenset({str, int, float, bool, type(None)})
