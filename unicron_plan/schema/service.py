"""Replies of the planning service (docs/service.md): the documentation of /openapi.json and the
types :class:`unicron_plan.client.PlannerClient` returns."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, Field

from unicron_plan.schema import Instance, Plan


class RevisionReply(BaseModel):
    revision: int = Field(description="Log position of the change.")


class PlanReply(Plan):
    plan_id: Optional[str] = Field(description="Id for GET/apply; null for a dry run (nothing recorded).")
    revision: int = Field(description="State revision the plan was made for (apply answers 409 if it moved on).")
    includes_pending: Optional[dict[str, Any]] = Field(
        default=None, description="The events recorded before this one and not yet applied, which the plan "
                                  "includes too: failure (combined), job_exit and job_arrival (job ids); "
                                  "null when nothing was pending.")


class StateReply(BaseModel):
    revision: int = Field(description="Revision of the state.")
    instance: Optional[Instance] = Field(description="The applied cluster with the combined pending event.")


class HistoryEntry(BaseModel):
    revision: int = Field(description="Log position of the entry.")
    type: str = Field(description="cluster, event, plan, apply or job.")
    at: str = Field(description="UTC time of the commit (ISO 8601).")
    body: dict[str, Any] = Field(description="What was committed (the upload, event, plan, apply or job).")


class HistoryReply(BaseModel):
    entries: list[HistoryEntry] = Field(description="Entries after `since`, oldest first.")


class HealthReply(BaseModel):
    status: str = Field(description="ok when the service answers.")
    contingency: str = Field(description="ready, building or off.")
    revision: int = Field(description="Revision of the state (cheap to poll).")
    history_revision: int = Field(0, description="Revision of the newest history entry; signal and "
                                                 "action entries leave the state's revision behind it.")
    precomputed: dict = Field(default_factory=dict,
                              description="Whole answers to single-node failures stored for the state: "
                                          "done and total.")
