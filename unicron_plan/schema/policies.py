"""Per-policy models of the simulator's baselines (models/policies.json, docs/simulation.md):
each policy's failure-free speed relative to Megatron-LM and its recovery constants, each value
with its source. A scenario may override any of them (``Scenario.policy_models``)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from unicron_plan.schema.base import StrictModel


class PolicyModelOverride(StrictModel):
    """Any subset of a policy's constants (a scenario's override)."""

    healthy_throughput_factor: Optional[float] = Field(
        default=None, gt=0, le=1, description="Failure-free throughput as a fraction of Megatron-LM's on the "
                                              "same GPUs (the scenario's tables are Megatron-LM's).")
    restart_seconds: Optional[float] = Field(
        default=None, ge=0, le=1e6, description="A restart from a checkpoint: resubmission and set-up, seconds.")
    queue_seconds: Optional[float] = Field(
        default=None, ge=0, le=1e7, description="A checkpoint restart's wait in the cluster scheduler's queue "
                                                "before its job holds GPUs again, on top of restart_seconds "
                                                "(reported as queue_hours, inside transition).")
    checkpoint_interval_seconds: Optional[float] = Field(
        default=None, gt=0, le=1e7, description="Time between checkpoints; a restart recomputes the work since "
                                                "the last one.")
    checkpoint_save_seconds: Optional[float] = Field(
        default=None, ge=0, le=1e5, description="Training paused per checkpoint save (blocking save): the "
                                                "healthy speed is scaled by interval / (interval + save).")
    degraded_throughput_factor: Optional[float] = Field(
        default=None, gt=0, le=1, description="Bamboo only: a job running with a failure absorbed by redundant "
                                              "computation trains at this fraction of its speed at the same "
                                              "count until the failed node rejoins.")
    spare_nodes: Optional[int] = Field(
        default=None, ge=0, le=100_000,
        description="Baselines only (megatron, oobleck, varuna, bamboo): nodes kept idle as hot spares from "
                    "time 0 (idle nodes first, then the last nodes of the cluster, whose jobs shrink); a job "
                    "whose node fails takes a spare in its place, and the repaired node becomes a spare.")
    detection_seconds: Optional[dict[str, float]] = Field(
        default=None, max_length=64,
        description="Seconds from an error to its detection, per error kind (unicron_plan.faults.severity), "
                    "in place of the policy's own (in band per detection method, else the NCCL timeout).")
    manual_downscale_after_hours: Optional[float] = Field(
        default=None, gt=0, le=1e5, description="Megatron only: a job stopped for a failed node is restarted "
                                                "by its operator on its surviving GPUs after this long, "
                                                "instead of waiting for the repair. Absent: it waits.")


    @field_validator("detection_seconds")
    @classmethod
    def _bounded_seconds(cls, v: Optional[dict[str, float]]) -> Optional[dict[str, float]]:
        for error, seconds in (v or {}).items():
            if not 0 <= seconds <= 1e6:
                raise ValueError(f"{error}: {seconds} is outside [0, 1e6] seconds")
        return v


class PolicyModel(PolicyModelOverride):
    """A policy's constants with the source of each (``sources``: field -> citation or ASSUMPTION)."""

    healthy_throughput_factor: float = Field(gt=0, le=1)
    sources: dict[str, str] = Field(default_factory=dict)


class PolicyModels(StrictModel):
    """The file models/policies.json."""

    schema_version: Literal["1"]
    policies: dict[str, PolicyModel]
