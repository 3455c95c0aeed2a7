"""What /openapi.json says beyond FastAPI's own inference, so that it matches the service's real answers:
the request bodies the routes parse by hand (every event kind), the ``{"error": ...}`` body of every
refusal, every status code each route answers, and examples. ``tests/test_openapi.py`` makes each
documented answer happen and checks it against this description."""

from __future__ import annotations

from pydantic import BaseModel, Field

_S = "#/components/schemas/"


class ErrorReply(BaseModel):
    """Every refusal and error of the service."""

    error: str = Field(description="One line: the field or part of the request at fault, and why.",
                       examples=["event.failed_nodes[0]: 'n9' is not a node of the cluster"])


#: What each status code means, for every route that answers it.
STATUS = {
    400: "The body is not a JSON object: not UTF-8, empty, not strict JSON (NaN, a repeated key), too deep, "
         "or too slow to read.",
    401: "A token is required (serve --token-file) and the request has none or a wrong one.",
    403: "The request comes from a web page of another origin (Origin, Sec-Fetch-Site; serve --allow-origin "
         "admits a reverse proxy's).",
    404: "No such plan or job (or path).",
    409: "The plan was made for an older revision: the state moved on (ask for a new plan; only a plan of "
         "the current state is applied or explained).",
    413: "The body is larger than the limit (serve --max-body-mib).",
    415: "A write's body is not declared Content-Type: application/json.",
    421: "The Host header is not a name of this service (loopback names, the bound address, serve --allow-host).",
    422: "A field is invalid (named in the error), the constraints admit no plan, or there is no cluster yet.",
    500: "An internal error (a bug): one line, never a traceback.",
}

#: The status codes each route answers besides 200 (401 only when a token is set; 500 on a bug; 403, 415 and
#: 421 from the browser guard, service/guard.py; 415 only for a write that carries a body).
ROUTE_STATUS = {
    ("/v1/cluster", "put"): (400, 401, 403, 413, 415, 421, 422, 500),
    ("/v1/events", "post"): (400, 401, 403, 413, 415, 421, 422, 500),
    ("/v1/jobs", "post"): (400, 401, 403, 413, 415, 421, 422, 500),
    ("/v1/jobs/{job_id}", "delete"): (401, 403, 404, 415, 421, 422, 500),
    ("/v1/signals", "post"): (400, 401, 403, 413, 415, 421, 422, 500),
    ("/v1/actions", "post"): (400, 401, 403, 413, 415, 421, 422, 500),
    ("/v1/plans/{plan_id}/apply", "post"): (401, 403, 404, 409, 415, 421, 500),
    ("/v1/plans/{plan_id}", "get"): (401, 403, 404, 421, 500),
    ("/v1/plans/{plan_id}/explain", "get"): (401, 403, 404, 409, 421, 500),
    ("/v1/state", "get"): (401, 403, 421, 500),
    ("/v1/history", "get"): (401, 403, 421, 422, 500),
    ("/healthz", "get"): (401, 403, 421, 500),
    ("/metrics", "get"): (401, 403, 421, 500),
}

#: Examples of the event body, one per kind.
EVENT_EXAMPLES = {
    "failure": {"summary": "Nodes or single GPUs fail",
                "value": {"kind": "failure", "failed_nodes": ["n1"], "failed_gpus": [{"node": "n0", "gpu": 3}]}},
    "repair": {"summary": "Nodes or GPUs come back",
               "value": {"kind": "repair", "repaired_nodes": ["n1"], "repaired_gpus": []}},
    "job_arrival": {"summary": "Queued jobs (added with POST /v1/jobs) ask for GPUs",
                    "value": {"kind": "job_arrival", "jobs": ["new-job"]}},
    "job_exit": {"summary": "Jobs leave and free their GPUs", "value": {"kind": "job_exit", "jobs": ["old-job"]}},
}

EVENTS_DESCRIPTION = (
    "Records an event of any kind (failure, repair, job_arrival, job_exit; docs/events.md) and answers the "
    "validated plan of the state with every pending event (`includes_pending` names those recorded before "
    "this one). `?dry_run=true` records nothing (`plan_id` null). Each job of the plan says why it changed "
    "(`reason`, `why`, `keep_cost`).")


def complete(doc: dict, bodies: dict) -> dict:
    """``doc`` (FastAPI's /openapi.json) with the request ``bodies`` ({(path, method): (schema name, JSON
    schema)}), the error body and status codes of :data:`ROUTE_STATUS` and the event examples."""
    comps = doc.setdefault("components", {}).setdefault("schemas", {})
    for (path, method), (name, schema) in bodies.items():
        comps.update(schema.pop("$defs", {}))
        comps[name] = schema
        doc["paths"][path][method]["requestBody"] = {
            "required": True, "content": {"application/json": {"schema": {"$ref": _S + name}}}}
    comps["ErrorReply"] = ErrorReply.model_json_schema()
    for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's {"detail": ...}: never sent
        comps.pop(name, None)
    for (path, method), codes in ROUTE_STATUS.items():
        op = doc["paths"][path][method]
        responses = {"200": op.get("responses", {}).get("200", {"description": "Successful Response"})}
        for code in codes:
            responses[str(code)] = {"description": STATUS[code],
                                    "content": {"application/json": {"schema": {"$ref": _S + "ErrorReply"}}}}
        op["responses"] = responses
    events = doc["paths"]["/v1/events"]["post"]
    events["description"] = EVENTS_DESCRIPTION
    events["requestBody"]["content"]["application/json"]["examples"] = EVENT_EXAMPLES
    return doc
