"""A Python client of `unicron-plan serve`: one method per endpoint (docs/service.md).

Example::

    from unicron_plan.client import PlannerClient
    with PlannerClient("http://127.0.0.1:8470") as c:
        c.put_cluster(instance_without_event)
        plan = c.post_event({"kind": "failure", "failed_nodes": ["n7"]})
        c.apply(plan.plan_id)

Replies are pydantic models (unicron_plan.schema.service: RevisionReply, PlanReply, StateReply,
HistoryEntry, HealthReply), so a type checker and an editor know their fields. Errors come back as :class:`PlannerError` with the HTTP status and the
service's one-line message (``"<field>: <reason>"``); a 2xx reply that is not the one expected
as :class:`ReplyError`.
"""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import quote

from pydantic import BaseModel, ValidationError

from unicron_plan.extras import require
from unicron_plan.schema import Instance, Job
from unicron_plan.schema.service import (HealthReply, HistoryEntry, HistoryReply, PlanReply, RevisionReply,
                                         StateReply)

httpx = require("httpx", "unicron_plan.client")


def _body(value: "dict | BaseModel") -> Any:
    return value.model_dump(mode="json", exclude_none=True) if isinstance(value, BaseModel) else value


class PlannerError(Exception):
    """The service answered an error (``status`` 4xx/5xx, ``message`` naming the field)."""

    def __init__(self, status: int, message: str):
        self.status = status
        self.message = message
        super().__init__(f"HTTP {status}: {message}")


class ReplyError(ValueError):
    """The service answered 2xx with a body that is not the reply expected (a truncated body, a
    proxy's page, another service's JSON)."""

    def __init__(self, method: str, path: str, why: str):
        from unicron_plan.text import one_line

        super().__init__(one_line(f"reply to {method} {path} is not valid: {why}", 300))


def _why(exc: ValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ())) or "body"
    return f"{where}: {first.get('msg', str(exc))}"


class PlannerClient:
    """Synchronous client; ``token`` is sent as ``Authorization: Bearer``."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 60.0,
                 transport: Optional[httpx.BaseTransport] = None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout, transport=transport)

    def _call(self, method: str, path: str, **kw) -> Any:
        r = self._http.request(method, path, **kw)
        if r.status_code >= 400:
            try:
                message = r.json().get("error", r.text)
            except ValueError:
                message = r.text
            raise PlannerError(r.status_code, message)
        if not r.headers.get("content-type", "").startswith("application/json"):
            return r.text
        try:
            return r.json()
        except ValueError as exc:
            raise ReplyError(method, path, f"not JSON ({exc})") from None

    def _reply(self, model: type[BaseModel], method: str, path: str, **kw) -> Any:
        """The reply as ``model``; :class:`ReplyError` when it is not one."""
        try:
            return model.model_validate(self._call(method, path, **kw))
        except ValidationError as exc:
            raise ReplyError(method, path, _why(exc)) from None

    def put_cluster(self, instance: dict | Instance) -> RevisionReply:
        """Upload the cluster (a v1 instance without event)."""
        return self._reply(RevisionReply, "PUT", "/v1/cluster", json=_body(instance))

    def post_event(self, event: dict, dry_run: bool = False, idempotency_key: Optional[str] = None) -> PlanReply:
        """Record ``event`` (unless ``dry_run``) and return the plan with ``plan_id`` and ``revision``."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._reply(PlanReply, "POST", "/v1/events", json=_body(event),
                           params={"dry_run": str(dry_run).lower()}, headers=headers)

    def add_job(self, job: dict | Job) -> RevisionReply:
        """Add a queued job (``current.gpus`` 0)."""
        return self._reply(RevisionReply, "POST", "/v1/jobs", json=_body(job))

    def remove_job(self, job_id: str) -> RevisionReply:
        """Remove a job (its GPUs are freed)."""
        return self._reply(RevisionReply, "DELETE", f"/v1/jobs/{quote(job_id, safe='')}")

    def apply(self, plan_id: str) -> RevisionReply:
        """Confirm the plan was carried out; PlannerError 409 when the state moved on."""
        return self._reply(RevisionReply, "POST", f"/v1/plans/{quote(plan_id, safe='')}/apply")

    def get_plan(self, plan_id: str) -> PlanReply:
        """A recorded plan by id."""
        return self._reply(PlanReply, "GET", f"/v1/plans/{quote(plan_id, safe='')}")

    def state(self) -> StateReply:
        """The revision and the applied cluster with the pending event."""
        return self._reply(StateReply, "GET", "/v1/state")

    def history(self, since: int = 0, limit: Optional[int] = None) -> list[HistoryEntry]:
        """Log entries after revision ``since``, oldest first."""
        params = {"since": since, **({"limit": limit} if limit else {})}
        return self._reply(HistoryReply, "GET", "/v1/history", params=params).entries

    def post_signals(self, signals: list[dict]) -> dict:
        """In-band reports (docs/detection.md); the incidents they opened."""
        return self._call("POST", "/v1/signals", json={"signals": signals})

    def post_action(self, action: dict) -> RevisionReply:
        """Record what was done about an incident (history type ``action``)."""
        return self._reply(RevisionReply, "POST", "/v1/actions", json=action)

    def health(self) -> HealthReply:
        """Status, revision and the warm-contingency progress."""
        return self._reply(HealthReply, "GET", "/healthz")

    def metrics(self) -> str:
        """The Prometheus text exposition."""
        return self._call("GET", "/metrics")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "PlannerClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
