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
from starlette.requests import ClientDisconnect

from unicron_plan.errors import InfeasibleError, InvalidInstanceError, SolverUnavailableError
from unicron_plan.io import field_path, parse_document_async
from unicron_plan.schema import Instance, Job, Plan
from unicron_plan.schema.signal import ActionBody, SignalsBody
from unicron_plan.schema.service import (HealthReply, HistoryEntry, HistoryReply, PlanReply, RevisionReply,  # noqa: F401
                                         StateReply)
from unicron_plan.service.coordinator import Conflict, Coordinator
from unicron_plan.service.detect import SignalDesk
from unicron_plan.service.guard import BrowserGuard, page_policy
from unicron_plan.service.state import NotFound

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
#: Largest body of an in-band report (256 signals of at most 4 KB of evidence each, and their fields).
SIGNALS_MAX_BODY_BYTES = 2 * 1024 * 1024
#: Longest a request body's JSON may take to read (a thread reads it; the event loop goes on).
DEFAULT_PARSE_SECONDS = 10.0
#: Largest revision a query may name (SQLite integers are 64-bit).
MAX_REVISION = 2 ** 62


class BodyTooLarge(Exception):
    """A body over ``limit`` bytes (the route's own limit)."""

    def __init__(self, limit: int):
        super().__init__(limit)
        self.limit = limit


# Request bodies are parsed by hand (strict JSON); these give /openapi.json their schemas.
_BODY_MODELS = {("/v1/cluster", "put"): Instance, ("/v1/jobs", "post"): Job,
                ("/v1/signals", "post"): SignalsBody, ("/v1/actions", "post"): ActionBody}
_EVENT_SCHEMA_NAME = "AnyEvent"  # (one of the four kinds; "Event" is the failure event's own schema)


def _json(obj: Any) -> Response:
    """A JSON reply without FastAPI's per-item encoder (states at 16,384 GPUs are large)."""
    return Response(json.dumps(obj, separators=(",", ":"), allow_nan=False), media_type="application/json")


def _error(status: int, message: str) -> JSONResponse:
    """The JSON error; what it echoes of the request is escaped and cut (a 100 KB id stays a short line)."""
    from unicron_plan.text import one_line

    return JSONResponse({"error": one_line(message, 600)}, status_code=status)


#: The console's own files (``console/`` beside this module): no state in them, served to anyone.
CONSOLE_DIR = Path(__file__).parent / "console"
CONSOLE_FILES = {"console.js": "text/javascript", "console.css": "text/css"}
_PUBLIC_PATHS = frozenset({"/", "/docs", *(f"/console/{name}" for name in CONSOLE_FILES)})


class _PauseWarmWorker:
    """Pure ASGI middleware: the warm worker is stopped from the moment an event's body has been
    received until its plan is sent (:meth:`Coordinator.worker_paused`), not only while it is
    solved. (Not while the body arrives: a slow client must not hold the worker stopped.)"""

    def __init__(self, app, coordinator: Coordinator):
        self.app = app
        self.coordinator = coordinator

    async def __call__(self, scope, receive, send):
        if not (scope["type"] == "http" and scope.get("method") == "POST" and scope.get("path") == "/v1/events"):
            await self.app(scope, receive, send)
            return
        paused = contextlib.ExitStack()
        entered = []

        async def received():
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False) and not entered:
                entered.append(paused.enter_context(self.coordinator.worker_paused()))
            return message

        with paused:
            await self.app(scope, received, send)


class _TokenAuth:
    """Pure ASGI middleware: 401 unless ``Authorization: Bearer <token>`` (constant-time compare).
    The console's page and files are public (they hold no state; the page asks for the token)."""

    def __init__(self, app, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and not (scope.get("method") == "GET" and scope.get("path") in _PUBLIC_PATHS):
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


class _BugsAnswered:
    """Pure ASGI middleware, the innermost of the application's own: an exception that no handler answered
    (a bug) becomes the JSON 500 here, inside the browser guard and the access log, so that the answer
    carries the security headers and is logged with its status; its traceback goes to the service's log.
    Once an answer has started, the exception goes on up (the server closes the connection)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_started(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_started)
        except Exception as exc:
            if started:
                raise
            import logging

            from unicron_plan.service.daemon import LOGGER

            logging.getLogger(LOGGER).error("internal error answering %s %s", scope.get("method", ""),
                                            json.dumps(scope.get("path", ""))[1:-1], exc_info=exc)
            await _bug(exc)(scope, receive, send)


def _bug(exc: Exception) -> JSONResponse:
    """The answer to a request that met a bug: never a traceback on the wire."""
    return _error(500, f"internal error (a bug, please report it): {type(exc).__name__}: {exc}")


async def _read_json(request: Request, limit: int, parse_seconds: float = DEFAULT_PARSE_SECONDS) -> Any:
    """The request body as strict JSON, at most ``limit`` bytes, read within ``parse_seconds``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInstanceError("body", "not UTF-8 text") from None
    if not text.strip():
        raise InvalidInstanceError("body", "empty: a JSON object is expected")
    # off the event loop (other requests, /healthz included, go on meanwhile) and bounded in time
    try:
        return await parse_document_async(text, "body", timeout=parse_seconds)
    except InvalidInstanceError as exc:
        raise InvalidInstanceError("body", exc.message) from None


def create_app(state_dir: str | Path, token: str | None = None, solver: str | None = None,
               contingency: bool = True, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               settle_heap: bool = False, access_log: bool = False,
               parse_seconds: float = DEFAULT_PARSE_SECONDS, hosts: tuple[str, ...] = (),
               origins: tuple[str, ...] = (), warm_workers: int | None = None) -> FastAPI:
    """The FastAPI application serving the state in ``state_dir`` (``access_log``: one log line a request;
    ``hosts``, ``origins``: names and origins admitted besides the loopback ones, :mod:`.guard`;
    ``warm_workers``: warm worker processes, :class:`Coordinator`)."""
    coord = Coordinator(state_dir, solver=solver, contingency=contingency, settle_heap=settle_heap,
                        warm_workers=warm_workers)

    desk = SignalDesk(coord)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        desk.close()
        coord.close()

    # /docs is the package's own page over /openapi.json: no script or style from outside (air-gapped)
    app = FastAPI(title="unicron-plan coordinator", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Cluster state, events and validated plans over HTTP (docs/service.md).")
    app.state.coordinator = coord
    app.state.signals = desk
    app.add_middleware(_BugsAnswered)  # (added first: the innermost)
    if contingency:
        app.add_middleware(_PauseWarmWorker, coordinator=coord)
    if token is not None:
        app.add_middleware(_TokenAuth, token=token)
    app.add_middleware(BrowserGuard, hosts=hosts, origins=origins)
    if access_log:  # outermost: a request refused for its token is logged too
        from unicron_plan.service.daemon import AccessLog

        app.add_middleware(AccessLog)

    # ----------------------------------------------------------------- errors
    @app.exception_handler(InvalidInstanceError)
    async def _invalid(request, exc: InvalidInstanceError):
        return _error(400 if exc.field == "body" else 422, str(exc))

    @app.exception_handler(BodyTooLarge)
    async def _too_large(request, exc: BodyTooLarge):
        return _error(413, f"body: larger than the limit of {exc.limit} bytes")

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

    @app.exception_handler(ClientDisconnect)
    async def _gone(request, exc):  # the client went away, or was dropped for reading too slowly
        return _error(400, "body: the connection closed before the body was read")

    @app.exception_handler(Exception)
    async def _unanswered(request, exc: Exception):  # (a bug in a middleware outside _BugsAnswered)
        return _bug(exc)

    # ----------------------------------------------------------------- routes
    @app.put("/v1/cluster", response_model=RevisionReply, summary="Upload the cluster (a v1 instance without event)")
    async def put_cluster(request: Request):
        data = await _read_json(request, max_body_bytes, parse_seconds)
        return _json(await run_in_threadpool(coord.put_cluster, data))

    @app.post("/v1/events", response_model=None, responses={200: {"model": PlanReply}},
              summary="Record an event and answer the optimal plan (dry_run: answer only)")
    async def post_event(request: Request, dry_run: bool = Query(False),
                         idempotency_key: Optional[str] = Header(None, alias="Idempotency-Key")):
        data = await _read_json(request, max_body_bytes, parse_seconds)
        if dry_run:  # nothing is recorded: the plan's own text (a stored answer's, or one just solved)
            text = coord.dry_run_text(data)
            if text is None:
                text = await run_in_threadpool(coord.dry_run_reply, data)
            return Response(text, media_type="application/json")
        return _json(await run_in_threadpool(coord.post_event, data, dry_run, idempotency_key))

    @app.post("/v1/jobs", response_model=RevisionReply, summary="Add a queued job (current.gpus 0)")
    async def post_job(request: Request):
        data = await _read_json(request, max_body_bytes, parse_seconds)
        return _json(await run_in_threadpool(coord.add_job, data))

    @app.delete("/v1/jobs/{job_id:path}", response_model=RevisionReply, summary="Remove a job (its GPUs are freed)")
    async def delete_job(job_id: str):
        return _json(await run_in_threadpool(coord.remove_job, job_id))

    @app.post("/v1/signals", response_model=None,
              summary="In-band reports of training ranks and node readers: heartbeats, errors (docs/detection.md)")
    async def post_signals(request: Request):
        data = await _read_json(request, SIGNALS_MAX_BODY_BYTES, parse_seconds)
        return _json(await run_in_threadpool(desk.post_signals, data))

    @app.post("/v1/actions", response_model=None,
              summary="Record what was done about an incident (a failed restart with dead nodes: escalated)")
    async def post_action(request: Request):
        data = await _read_json(request, SIGNALS_MAX_BODY_BYTES, parse_seconds)
        return _json(await run_in_threadpool(desk.post_action, data))

    @app.post("/v1/plans/{plan_id}/apply", response_model=RevisionReply,
              summary="Confirm a plan was carried out (409 if the state moved on)")
    async def apply_plan(plan_id: str):
        return _json(await run_in_threadpool(coord.apply, plan_id))

    @app.get("/v1/plans/{plan_id}/explain", response_model=None,
             summary="The plan explained: the event, each changed job's reason and alternatives (current plan only)")
    async def explain_plan(plan_id: str):
        return _json(await run_in_threadpool(coord.explain_plan, plan_id))

    @app.get("/v1/plans/{plan_id}", response_model=None, responses={200: {"model": PlanReply}})
    async def get_plan(plan_id: str):
        return _json(await run_in_threadpool(coord.get_plan, plan_id))

    @app.get("/v1/state", response_model=None, responses={200: {"model": StateReply}})
    async def get_state():
        return _json(await run_in_threadpool(coord.state_document))

    @app.get("/v1/history", response_model=None, responses={200: {"model": HistoryReply}})
    async def history(since: int = Query(0, ge=0, le=MAX_REVISION),
                      limit: Optional[int] = Query(None, ge=1, le=100000)):
        return _json(await run_in_threadpool(coord.history, since, limit))

    @app.get("/healthz", response_model=HealthReply)
    async def healthz():
        return {"status": "ok", "contingency": coord.contingency_status(), "revision": coord.state.revision,
                "history_revision": coord.last, "precomputed": coord.precomputed_status()}

    @app.get("/metrics", response_class=Response)
    async def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(coord.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # ----------------------------------------------------------------- console (plain files, no outside asset)
    @app.get("/", include_in_schema=False)
    async def console_page():
        return _file("index.html", "text/html; charset=utf-8")

    @app.get("/docs", include_in_schema=False)
    async def docs_page():
        return _file("docs.html", "text/html; charset=utf-8")

    @app.get("/console/{name}", include_in_schema=False)
    async def console_file(name: str):
        if name not in CONSOLE_FILES:
            raise StarletteHTTPException(404, "Not Found")
        return _file(name, CONSOLE_FILES[name] + "; charset=utf-8")

    _document_bodies(app)
    return app


def _file(name: str, media_type: str) -> Response:
    body = (CONSOLE_DIR / name).read_bytes()
    headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    if media_type.startswith("text/html"):
        headers["Content-Security-Policy"] = page_policy(body)
    return Response(body, media_type=media_type, headers=headers)


def _document_bodies(app: FastAPI) -> None:
    """Put the request-body schemas (parsed by hand above), the error body and every status code into
    /openapi.json (:mod:`unicron_plan.service.openapi`)."""
    from fastapi.openapi.utils import get_openapi
    from pydantic import TypeAdapter

    from unicron_plan.schema.instance import AnyEvent

    def openapi():
        if app.openapi_schema:
            return app.openapi_schema
        from unicron_plan.service.openapi import complete

        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        bodies = {**{k: (m.__name__, m.model_json_schema(ref_template="#/components/schemas/{model}"))
                     for k, m in _BODY_MODELS.items()},
                  ("/v1/events", "post"): (_EVENT_SCHEMA_NAME, TypeAdapter(AnyEvent).json_schema(
                      ref_template="#/components/schemas/{model}"))}
        app.openapi_schema = complete(doc, bodies)
        return doc

    app.openapi = openapi
