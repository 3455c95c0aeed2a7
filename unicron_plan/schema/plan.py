"""The v1 plan (docs/format.md, "Plan")."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import ConfigDict, Field

from unicron_plan.schema.base import OutputModel

Action = Literal["keep", "shrink", "grow", "restart", "suspend", "resume", "idle"]


class Status(OutputModel):
    """Why the solver stopped (termination) and what the plan is (solution), kept apart as Pyomo does."""

    termination: Literal["optimal", "time_limit", "infeasible", "error"]
    solution: Literal["optimal", "feasible", "none"]


class Placement(OutputModel):
    """GPUs a job takes on one node (a frozen value: plans may share one object)."""

    model_config = ConfigDict(frozen=True)

    node: str
    gpus: int = Field(ge=1)


class PlanJob(OutputModel):
    """One job's decision."""

    id: str
    previous_gpus: int = Field(ge=0)
    gpus: int = Field(ge=0)
    action: Action
    nodes: list[str]
    placement: list[Placement]
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


class SolverInfo(OutputModel):
    """Which solver produced the plan and how long it took."""

    name: str
    wall_seconds: float = Field(ge=0)
    options: Optional[dict[str, float | int | str | bool]] = None


class Plan(OutputModel):
    """A reconfiguration plan: one entry per job of the instance."""

    schema_version: Literal["1"] = "1"
    instance: str
    status: Status
    objective: float
    bound: float
    gap: Optional[float] = Field(
        default=None, ge=0, description="(bound - objective) / max(|bound|, 1): 0 for a proven optimum, "
                                        "how far a time-limited plan may be from the optimum otherwise.")
    d_run_seconds: float
    waf_tflops: float
    jobs: list[PlanJob]
    solver: SolverInfo
    capacity: Optional[dict[str, int]] = Field(
        default=None, description="Healthy, non-drained GPUs per GPU type after the event.")
    drained_nodes: Optional[list[str]] = Field(
        default=None, description="Nodes removed from service by the event (failed or isolated).")
