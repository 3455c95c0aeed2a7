"""The body of ``POST /v1/signals``: reports of training ranks and node readers (docs/service.md)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from unicron_plan.faults.signals import CLASSES, PROGRESS_KINDS
from unicron_plan.schema.base import StrictModel

#: Most signals in one request (a watch sends at most 65).
MAX_SIGNALS = 256
SignalKind = Literal[tuple(sorted(CLASSES)) + PROGRESS_KINDS]  # type: ignore[valid-type]
_ID = dict(min_length=1, max_length=200)


class Signal(StrictModel):
    """One report: a heartbeat, a rank's clean end, or an error of a kind of the classification table."""

    job: Optional[str] = Field(None, description="The job's id, as in the cluster (none: a report of the node "
                                                 "itself, its heartbeat or an error of its jobs).", **_ID)
    rank: int = Field(ge=0, le=2**31, description="The reporting process's rank (a node reader: 0).")
    node: Optional[str] = Field(None, description="The node it runs on, as in the cluster.", **_ID)
    kind: SignalKind = Field(description="heartbeat, closed, or an error kind (docs/detection.md).")
    step: Optional[int] = Field(None, ge=0, le=2**62, description="Iterations done by the rank.")
    iteration_seconds: Optional[float] = Field(None, ge=0, le=1e7,
                                               description="Mean iteration time since the last heartbeat.")
    evidence: str = Field("", max_length=4096, description="The message or log line that shows the error.")
    exit_code: Optional[int] = Field(None, ge=-(2**31), le=2**31, description="Exit status of a process that ended.")
    signal: Optional[int] = Field(None, ge=1, le=128, description="The signal that ended a process.")
    source: Optional[Literal["exception", "stderr", "exit", "kernel", "dcgm"]] = Field(
        None, description="Where the report comes from.")

    @model_validator(mode="after")
    def _names_what(self):
        if self.job is None and self.node is None:
            raise ValueError("job: required (a node's own report names its node instead)")
        return self


class SignalsBody(StrictModel):
    """The body of ``POST /v1/signals``."""

    signals: list[Signal] = Field(min_length=1, max_length=MAX_SIGNALS,
                                  description=f"The reports, 1 to {MAX_SIGNALS}.")


class ActionBody(StrictModel):
    """What was done about an incident (history type ``action``)."""

    signal: int = Field(ge=1, le=2**62, description="Revision of the incident's `signal` entry.")
    action: Literal["reattempt", "restart", "reconfigure"] = Field(description="The action carried out.")
    outcome: Literal["done", "failed"] = Field(description="Whether it reached its goal (verified).")
    job: Optional[str] = Field(None, description="The job acted on.", **_ID)
    commands: list[list[str]] = Field(default_factory=list, max_length=100,
                                      description="The scheduler commands run, as argument lists.")
    detail: str = Field("", max_length=4096, description="What was verified, or why it failed.")
    failed_nodes: list[str] = Field(default_factory=list, max_length=1000,
                                    description="Nodes found down or not responding: a failed restart is then "
                                                "escalated to SEV1, their failure.")
