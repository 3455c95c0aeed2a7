"""The scenario of `unicron-plan simulate` (docs/format.md, "Scenario"): an instance
without event and D_run, plus a duration and a source of events (a failure
model or a trace). Cross-field checks are in :func:`unicron_plan.core.checks.check_scenario`.
"""

from __future__ import annotations

import math
from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from unicron_plan.schema.base import StrictModel
from unicron_plan.schema.instance import Cluster, Job
from unicron_plan.schema.policies import PolicyModelOverride

#: Longest simulated time: ten years.
MAX_DURATION_HOURS = 87_600.0
#: Most events one run may hold (failures and repairs, drawn or given): bounds a run's work.
MAX_EVENTS = 200_000


class RepairHours(StrictModel):
    """Lognormal repair time of a SEV1 failure: `median` hours, `sigma` of the natural log."""

    median: float = Field(gt=0, le=MAX_DURATION_HOURS, description="Median repair time, hours (0 to 87,600).")
    sigma: float = Field(ge=0, le=5, description="At most 5 (a factor of e^5 ~ 150 per standard deviation).")

    @field_validator("sigma")
    @classmethod
    def _no_negative_zero(cls, v: float) -> float:
        return abs(v)  # -0.0 passes ">= 0" but numpy's lognormal refuses a negative-signed scale


class SeverityMix(StrictModel):
    """Probability of each severity per failure; the three sum to 1."""

    sev1: float = Field(ge=0, le=1, description="Probability of a SEV1 failure (node out until repaired).")
    sev2: float = Field(ge=0, le=1, description="Probability of a SEV2 failure (jobs interrupted, node stays).")
    sev3: float = Field(ge=0, le=1, description="Probability of a SEV3 failure (jobs interrupted, node stays).")

    @model_validator(mode="after")
    def _sums_to_one(self) -> "SeverityMix":
        total = self.sev1 + self.sev2 + self.sev3
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(f"sev1 + sev2 + sev3 = {total:g}, must be 1")
        return self


class RepairMix(StrictModel):
    """Repairs of two kinds: automatic (e.g. a reboot or a spare swapped in) with probability
    `automatic_fraction`, else manual (a technician), each lognormal."""

    automatic_fraction: float = Field(ge=0, le=1, description="Probability that a repair is automatic (0 to 1).")
    automatic_hours: RepairHours = Field(description="Repair time of automatic repairs (lognormal).")
    manual_hours: RepairHours = Field(description="Repair time of manual repairs (lognormal).")


class FailureDomain(StrictModel):
    """Correlated failures: every rack (or every switch, a group of `racks_per_switch` racks in order of
    first appearance) fails as a unit with its own MTBF, taking all its nodes out at once (SEV1)."""

    kind: Literal["rack", "switch"] = Field(
        description="rack (the nodes sharing a rack) or switch (groups of racks_per_switch racks).")
    mtbf_hours: float = Field(gt=0, le=1e9, description="Mean time between failures of one rack or switch.")
    racks_per_switch: Optional[int] = Field(default=None, ge=1, le=100_000,
                                            description="Required for kind 'switch', absent for 'rack'.")
    repair_hours: Optional[RepairHours] = Field(default=None, description="Default: the nodes' repair model.")
    error: str = Field(default="lost_connection", max_length=64,
                       description="The SEV1 error kind the nodes report (sets detection).")

    @model_validator(mode="after")
    def _switch_size(self) -> "FailureDomain":
        if (self.kind == "switch") != (self.racks_per_switch is not None):
            raise ValueError("racks_per_switch: required for a switch domain, absent for a rack domain")
        return self


class Failures(StrictModel):
    """Independent node failures: exponential (or Weibull) times between failures of each node."""

    node_mtbf_hours: Optional[float] = Field(
        default=None, gt=0, le=1e9, description="Mean time between failures of one node, hours. Required "
                                                "unless failure_every_hours is given.")
    failure_every_hours: Optional[float] = Field(
        default=None, gt=0, le=MAX_DURATION_HOURS,
        description="Mean time between failures of the whole cluster, hours: when given it sets the rate "
                    "(node MTBF = failure_every_hours x number of nodes) in place of node_mtbf_hours, "
                    "e.g. 3 for the dense failure injection of fault-tolerance papers.")
    weibull_shape: Optional[float] = Field(
        default=None, ge=0.1, le=20, description="Weibull shape k in [0.1, 20] of the time between failures "
                                                 "(mean stays node_mtbf_hours); absent: exponential (k = 1).")
    repair_hours: Optional[RepairHours] = Field(default=None, description="One lognormal repair time; "
                                                                          "or give `repair` instead.")
    repair: Optional[RepairMix] = Field(default=None,
        description="Automatic and manual repair times (or give repair_hours).")
    severity_mix: SeverityMix = Field(description="Probability of each severity, summing to 1.")
    domains: list[FailureDomain] = Field(default_factory=list, max_length=16,
        description="Correlated failures of racks or switches (at most 16).")

    @model_validator(mode="after")
    def _some_rate(self) -> "Failures":
        if self.node_mtbf_hours is None and self.failure_every_hours is None:
            raise ValueError("node_mtbf_hours: give node_mtbf_hours or failure_every_hours")
        if (self.repair_hours is None) == (self.repair is None):
            raise ValueError("repair_hours: give exactly one of 'repair_hours' or 'repair'")
        return self

    def node_mtbf(self, nodes: int) -> float:
        """The node MTBF in hours for a cluster of ``nodes`` nodes (failure_every_hours wins when given)."""
        if self.failure_every_hours is not None:
            return self.failure_every_hours * max(nodes, 1)
        return self.node_mtbf_hours


class TraceEvent(StrictModel):
    """One event of a trace: a node fails with a severity, or a failed (SEV1) node returns."""

    time_hours: float = Field(ge=0, le=MAX_DURATION_HOURS,
        description="Time of the event, hours from the start (within the duration).")
    kind: Literal["failure", "repair"] = Field(description="failure or repair.")
    node: str = Field(min_length=1, description="Node id.")
    severity: Optional[Literal["sev1", "sev2", "sev3"]] = Field(
        default=None, description="Required for a failure, absent for a repair.")
    error: Optional[str] = Field(
        default=None, description="Error kind of unicron_plan.faults.severity (sets the in-band detection time); "
                                  "absent: the most frequent kind of that severity in Unicron's Figure 1.")

    @model_validator(mode="after")
    def _severity_iff_failure(self) -> "TraceEvent":
        if self.kind == "failure" and self.severity is None:
            raise ValueError("severity: a failure needs a severity (sev1, sev2 or sev3)")
        if self.kind == "repair" and (self.severity is not None or self.error is not None):
            raise ValueError("severity: a repair has no severity or error")
        return self


class ScenarioCost(StrictModel):
    """Cost constants of a scenario: D_trans default, and optionally the MTBF the planner assumes."""

    default_transition_seconds: Optional[float] = Field(default=None, ge=0,
        description="D_trans of jobs without transition_seconds (>= 0).")
    node_mtbf_hours: Optional[float] = Field(
        default=None, gt=0, description="Node MTBF the unicron policy uses for D_run; default "
                                        "failures.node_mtbf_hours, or for a trace its observed rate.")
    horizon: Optional[Literal["cluster", "job", "event", "lifetime"]] = Field(
        default=None, description="The unicron policy's planning horizon (instance cost.horizon, "
                                  "docs/model.md); absent: the simulator's default, 'event'.")


class Scenario(StrictModel):
    """A cluster, its jobs at time 0, a duration and a failure model or a trace."""

    schema_version: Literal["1"] = Field(description="Version of the format: 1.")
    name: str = Field(min_length=1, description="Name of the scenario.")
    description: Optional[str] = Field(default=None, max_length=10_000, description="Free text.")
    cluster: Cluster = Field(description="GPU types and nodes, as in the instance.")
    jobs: list[Job] = Field(min_length=1, description="Jobs with their allocation at time 0: tables (per GPU type "
                                                      "with by_type), or a model whose tables are derived once.")
    cost: ScenarioCost = Field(description="Optional D_trans default and the node MTBF the planner assumes.")
    isolation: Literal["node", "gpu"] = Field(default="node", description="node or gpu, as in the instance.")
    duration_hours: float = Field(gt=0, le=MAX_DURATION_HOURS, description="Simulated time, at most ten years.")
    failures: Optional[Failures] = Field(default=None, description="A failure model (or give trace).")
    trace: Optional[list[TraceEvent]] = Field(default=None, max_length=MAX_EVENTS,
        description="Failures and repairs at given times (or give failures).")
    policy_models: Optional[dict[str, PolicyModelOverride]] = Field(
        default=None, max_length=64,
        description="Per policy name, constants that replace those of models/policies.json "
                    "(docs/simulation.md, 'Policy models').")

    @model_validator(mode="after")
    def _one_source(self) -> "Scenario":
        if (self.failures is None) == (self.trace is None):
            raise ValueError("give exactly one of 'failures' (a failure model) or 'trace'")
        if self.failures is not None:
            mtbf = self.failures.node_mtbf(len(self.cluster.nodes))
            expected = len(self.cluster.nodes) * self.duration_hours / mtbf
            for k, d in enumerate(self.failures.domains):  # a domain failure is one event per node
                more = len(self.cluster.nodes) * self.duration_hours / d.mtbf_hours
                if expected + more > MAX_EVENTS / 2:
                    raise ValueError(f"failures.domains[{k}].mtbf_hours: {d.mtbf_hours:g} h expects {more:.3g} "
                                     f"node failures per run, more than {MAX_EVENTS // 2} in all")
                expected += more
            if expected > MAX_EVENTS / 2:  # each failure may bring a repair
                field = "failure_every_hours" if self.failures.failure_every_hours is not None else "node_mtbf_hours"
                raise ValueError(
                    f"failures.{field}: {len(self.cluster.nodes)} nodes over {self.duration_hours:g} h "
                    f"with a node MTBF of {mtbf:g} h expect {expected:.3g} failures, "
                    f"more than {MAX_EVENTS // 2} per run")
        return self
