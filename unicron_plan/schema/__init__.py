"""Pydantic models of the v1 contract (docs/format.md): data only, no solver imports."""

from unicron_plan.schema.instance import (
    Cluster,
    Cost,
    CurrentAllocation,
    Event,
    FailedGpu,
    GpuType,
    Instance,
    Job,
    Node,
    Reference,
    Throughput,
)
from unicron_plan.schema.instance import AnyEvent, JobArrivalEvent, JobExitEvent, RepairEvent
from unicron_plan.schema.plan import Placement, Plan, PlanJob, SolverInfo, Status

__all__ = [
    "Cluster", "Cost", "CurrentAllocation", "Event", "FailedGpu", "GpuType", "Instance",
    "Job", "Node", "Reference", "Throughput", "Placement", "Plan", "PlanJob", "SolverInfo",
    "Status",
    "AnyEvent", "JobArrivalEvent", "JobExitEvent", "RepairEvent",
]
