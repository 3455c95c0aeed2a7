"""A Python client of `unicron-plan serve`: one method per endpoint (docs/service.md).

Example::

    from unicron_plan.client import PlannerClient
    with PlannerClient("http://127.0.0.1:8470") as c:
        c.put_cluster(instance_without_event)
        plan = c.post_event({"kind": "failure", "failed_nodes": ["n7"]})
        c.apply(plan["plan_id"])

Errors come back as :class:`PlannerError` with the HTTP status and the
service's one-line message (``"<field>: <reason>"``).
"""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import quote

from unicron_plan.extras import require

httpx = require("httpx", "unicron_plan.client")


class PlannerError(Exception):
    """The service answered an error (``status`` 4xx/5xx, ``message`` naming the field)."""

    def __init__(self, status: int, message: str):
        self.status = status
        self.message = message
        super().__init__(f"HTTP {status}: {message}")


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
        return r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text

    def put_cluster(self, instance: dict) -> dict:
        """Upload the cluster (a v1 instance without event); ``{"revision": N}``."""
        return self._call("PUT", "/v1/cluster", json=instance)

    def post_event(self, event: dict, dry_run: bool = False, idempotency_key: Optional[str] = None) -> dict:
        """Record ``event`` (unless ``dry_run``) and return the plan with ``plan_id`` and ``revision``."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._call("POST", "/v1/events", json=event, params={"dry_run": str(dry_run).lower()},
                          headers=headers)

    def add_job(self, job: dict) -> dict:
        """Add a queued job (``current.gpus`` 0)."""
        return self._call("POST", "/v1/jobs", json=job)

    def remove_job(self, job_id: str) -> dict:
        return self._call("DELETE", f"/v1/jobs/{quote(job_id, safe='')}")

    def apply(self, plan_id: str) -> dict:
        """Confirm the plan was carried out; PlannerError 409 when the state moved on."""
        return self._call("POST", f"/v1/plans/{plan_id}/apply")

    def get_plan(self, plan_id: str) -> dict:
        return self._call("GET", f"/v1/plans/{plan_id}")

    def state(self) -> dict:
        """``{"revision": N, "instance": ...}``."""
        return self._call("GET", "/v1/state")

    def history(self, since: int = 0, limit: Optional[int] = None) -> list[dict]:
        params = {"since": since, **({"limit": limit} if limit else {})}
        return self._call("GET", "/v1/history", params=params)["entries"]

    def health(self) -> dict:
        return self._call("GET", "/healthz")

    def metrics(self) -> str:
        return self._call("GET", "/metrics")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "PlannerClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
