"""The HTTP layer: FastAPI routes over a :class:`Coordinator`. No planning logic here.

Bodies are read with a size limit and parsed by the package's strict JSON
reader (no NaN, no duplicate keys) and its pydantic models, so an error names
the field exactly as the CLI does: ``{"error": "<field>: <reason>"}``.
"""

from __future__ import annotations

import contextlib
import hmac
import json
from pathlib import Path
from typing import Any, Optional

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from unicron_plan.errors import InfeasibleError, InvalidInstanceError, SolverUnavailableError
from unicron_plan.io import field_path, parse_json
from unicron_plan.schema import Instance, Job, Plan
from unicron_plan.schema.service import (HealthReply, HistoryEntry, HistoryReply, PlanReply, RevisionReply,  # noqa: F401
                                         StateReply)
from unicron_plan.service.coordinator import Conflict, Coordinator
from unicron_plan.service.state import NotFound

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024


class BodyTooLarge(Exception):
    pass


# Request bodies are parsed by hand (strict JSON); these give /openapi.json their schemas.
_BODY_MODELS = {("/v1/cluster", "put"): Instance, ("/v1/jobs", "post"): Job}
_EVENT_SCHEMA_NAME = "Event"


def _json(obj: Any) -> Response:
    """A JSON reply without FastAPI's per-item encoder (states at 16,384 GPUs are large)."""
    return Response(json.dumps(obj, separators=(",", ":"), allow_nan=False), media_type="application/json")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class _TokenAuth:
    """Pure ASGI middleware: 401 unless ``Authorization: Bearer <token>`` (constant-time compare)."""

    def __init__(self, app, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            got = b""
            for k, v in scope.get("headers", ()):
                if k == b"authorization":
                    got = v
                    break
            if not hmac.compare_digest(got, self.expected):
                resp = JSONResponse({"error": "Authorization: missing or wrong bearer token"}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
                await resp(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _read_json(request: Request, limit: int) -> Any:
    """The request body as strict JSON, at most ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge()
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge()
        chunks.append(chunk)
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInstanceError("body", "not UTF-8 text") from None
    if not text.strip():
        raise InvalidInstanceError("body", "empty: a JSON object is expected")
    try:
        return parse_json(text, "body")
    except InvalidInstanceError as exc:
        raise InvalidInstanceError("body", exc.message) from None


def create_app(state_dir: str | Path, token: str | None = None, solver: str | None = None,
               contingency: bool = True, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               settle_heap: bool = False) -> FastAPI:
    """The FastAPI application serving the state in ``state_dir``."""
    coord = Coordinator(state_dir, solver=solver, contingency=contingency, settle_heap=settle_heap)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        coord.close()

    app = FastAPI(title="unicron-plan coordinator", version="1", lifespan=lifespan,
                  description="Cluster state, events and validated plans over HTTP (docs/service.md).")
    app.state.coordinator = coord
    if token is not None:
        app.add_middleware(_TokenAuth, token=token)

    # ----------------------------------------------------------------- errors
    @app.exception_handler(InvalidInstanceError)
    async def _invalid(request, exc: InvalidInstanceError):
        return _error(400 if exc.field == "body" else 422, str(exc))

    @app.exception_handler(BodyTooLarge)
    async def _too_large(request, exc):
        return _error(413, f"body: larger than the limit of {max_body_bytes} bytes")

    @app.exception_handler(NotFound)
    async def _not_found(request, exc):
        return _error(404, f"{exc}: not found")

    @app.exception_handler(Conflict)
    async def _conflict(request, exc):
        return _error(409, str(exc))

    @app.exception_handler(InfeasibleError)
    async def _infeasible(request, exc):
        return _error(422, f"event: {exc}")

    @app.exception_handler(SolverUnavailableError)
    async def _solver(request, exc):
        return _error(422, f"solver: {exc}")

    @app.exception_handler(RequestValidationError)
    async def _request_invalid(request, exc: RequestValidationError):
        err = exc.errors()[0]
        loc = tuple(err.get("loc", ()))
        return _error(422, f"{field_path(loc[1:] if len(loc) > 1 else loc)}: {err.get('msg', 'invalid')}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, exc: StarletteHTTPException):
        return _error(exc.status_code, f"path: {exc.detail}")

    @app.exception_handler(Exception)
    async def _bug(request, exc: Exception):  # never a traceback on the wire
        return _error(500, f"internal error (a bug, please report it): {type(exc).__name__}: {exc}")

    # ----------------------------------------------------------------- routes
    @app.put("/v1/cluster", response_model=RevisionReply, summary="Upload the cluster (a v1 instance without event)")
    async def put_cluster(request: Request):
        data = await _read_json(request, max_body_bytes)
        return _json(await run_in_threadpool(coord.put_cluster, data))

    @app.post("/v1/events", response_model=None, responses={200: {"model": PlanReply}},
              summary="Record an event and answer the optimal plan (dry_run: answer only)")
    async def post_event(request: Request, dry_run: bool = Query(False),
                         idempotency_key: Optional[str] = Header(None, alias="Idempotency-Key")):
        data = await _read_json(request, max_body_bytes)
        if dry_run:  # nothing is recorded: the plan's own text (a stored answer's, or one just solved)
            text = coord.dry_run_text(data)
            if text is None:
                text = await run_in_threadpool(coord.dry_run_reply, data)
            return Response(text, media_type="application/json")
        return _json(await run_in_threadpool(coord.post_event, data, dry_run, idempotency_key))

    @app.post("/v1/jobs", response_model=RevisionReply, summary="Add a queued job (current.gpus 0)")
    async def post_job(request: Request):
        data = await _read_json(request, max_body_bytes)
        return _json(await run_in_threadpool(coord.add_job, data))

    @app.delete("/v1/jobs/{job_id:path}", response_model=RevisionReply, summary="Remove a job (its GPUs are freed)")
    async def delete_job(job_id: str):
        return _json(await run_in_threadpool(coord.remove_job, job_id))

    @app.post("/v1/plans/{plan_id}/apply", response_model=RevisionReply,
              summary="Confirm a plan was carried out (409 if the state moved on)")
    async def apply_plan(plan_id: str):
        return _json(await run_in_threadpool(coord.apply, plan_id))

    @app.get("/v1/plans/{plan_id}", response_model=None, responses={200: {"model": PlanReply}})
    async def get_plan(plan_id: str):
        return _json(await run_in_threadpool(coord.get_plan, plan_id))

    @app.get("/v1/state", response_model=None, responses={200: {"model": StateReply}})
    async def get_state():
        return _json(await run_in_threadpool(coord.state_document))

    @app.get("/v1/history", response_model=None, responses={200: {"model": HistoryReply}})
    async def history(since: int = Query(0, ge=0), limit: Optional[int] = Query(None, ge=1, le=100000)):
        return _json(await run_in_threadpool(coord.history, since, limit))

    @app.get("/healthz", response_model=HealthReply)
    async def healthz():
        return {"status": "ok", "contingency": coord.contingency_status(), "revision": coord.state.revision,
                "precomputed": coord.precomputed_status()}

    @app.get("/metrics", response_class=Response)
    async def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(coord.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    _document_bodies(app)
    return app


def _document_bodies(app: FastAPI) -> None:
    """Put the request-body schemas (parsed by hand above) into /openapi.json."""
    from fastapi.openapi.utils import get_openapi
    from pydantic import TypeAdapter

    from unicron_plan.schema.instance import AnyEvent

    def openapi():
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        comps = doc.setdefault("components", {}).setdefault("schemas", {})
        bodies = {**{k: (m.__name__, m.model_json_schema(ref_template="#/components/schemas/{model}"))
                     for k, m in _BODY_MODELS.items()},
                  ("/v1/events", "post"): (_EVENT_SCHEMA_NAME, TypeAdapter(AnyEvent).json_schema(
                      ref_template="#/components/schemas/{model}"))}
        for (path, method), (name, schema) in bodies.items():
            comps.update(schema.pop("$defs", {}))
            comps.setdefault(name, schema)
            doc["paths"][path][method]["requestBody"] = {
                "required": True, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}
        app.openapi_schema = doc
        return doc

    app.openapi = openapi
