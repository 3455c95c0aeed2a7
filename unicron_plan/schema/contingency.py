"""The contingency index (``DIR/contingency.json``), read back as untrusted input.

Counts are strict integers (no floats, booleans or lists); every failure's plan
id must name a stored plan. Anything else is bad input (exit 2). Whether a
well-formed stored plan still fits the instance is decided later: a plan that
does not check out is not used (api.solve solves afresh and says so).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import ConfigDict, Field, model_validator

from unicron_plan.schema.base import StrictModel


class _Open(StrictModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


class FailureEntry(_Open):
    """One precomputed failure: the failed nodes, the optimum and the id of its plan."""

    failed_nodes: list[str] = Field(min_length=1)
    objective: float
    plan: str


class InfeasibleEntry(_Open):
    """A failure under which the instance's rules admit no plan, and why."""

    failed_nodes: list[str] = Field(min_length=1)
    reason: str


class StoredPlan(_Open):
    """Optimal GPU counts per job id."""

    counts: dict[str, int]
    types: Optional[dict[str, str]] = Field(
        default=None, description="Mixed fleets: the GPU type of each job that runs on another type than its "
                                  "current one under this plan.")

    @model_validator(mode="after")
    def _non_negative(self) -> "StoredPlan":
        for jid, c in self.counts.items():
            if c < 0:
                raise ValueError(f"counts.{jid}: {c} is negative")
        return self


class ContingencyIndex(_Open):
    """``unicron-plan contingency``'s index; fields it does not know are ignored."""

    schema_version: Literal["1"]
    kind: Literal["contingency"]
    instance: str
    fingerprint: str
    failures: dict[str, FailureEntry]
    plans: dict[str, StoredPlan]
    infeasible: dict[str, InfeasibleEntry] = Field(
        default_factory=dict, description="Failures under which no plan satisfies the instance's rules.")
    stats: dict[str, Any] = Field(default_factory=dict)
    multipliers: Optional[dict[str, Annotated[float, Field(ge=0)]]] = Field(
        default=None, description="Per GPU type, the LP multiplier of the capacity in the failure-free problem: "
                                  "the certificate a stored plan is checked with first.")

    @model_validator(mode="after")
    def _plan_ids_resolve(self) -> "ContingencyIndex":
        for key, entry in self.failures.items():
            if entry.plan not in self.plans:
                raise ValueError(f"failures.{key}.plan: unknown plan id {entry.plan!r}")
        both = self.infeasible.keys() & self.failures.keys() if self.infeasible else ()
        if both:  # (a failure has a plan or has none: an index saying both cannot be trusted either way)
            raise ValueError(f"infeasible.{min(both)}: listed in failures too; a key is in one of the two")
        return self
