"""/openapi.json matches the service: every status code it documents for a route is answered by that route
here, every answer here is documented, errors have the documented {"error": ...} body, and the event body
admits every kind."""

from __future__ import annotations

import copy

import pytest
from fastapi.testclient import TestClient

from conftest import ROOT
from unicron_plan.io import read_json
from unicron_plan.schema.service import HealthReply, HistoryReply, PlanReply, RevisionReply, StateReply
from unicron_plan.service.app import SIGNALS_MAX_BODY_BYTES, create_app
from unicron_plan.service.openapi import ErrorReply

TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
REPLY = {("/v1/cluster", "put"): RevisionReply, ("/v1/events", "post"): PlanReply,
         ("/v1/jobs", "post"): RevisionReply, ("/v1/jobs/{job_id}", "delete"): RevisionReply,
         ("/v1/plans/{plan_id}/apply", "post"): RevisionReply, ("/v1/plans/{plan_id}", "get"): PlanReply,
         ("/v1/state", "get"): StateReply, ("/v1/history", "get"): HistoryReply, ("/healthz", "get"): HealthReply}


def _cluster() -> dict:
    inst = copy.deepcopy(read_json(ROOT / "instances" / "small-shared-node-failure.json"))
    inst.pop("event", None)
    return inst


QUEUED = {"id": "queued", "weight": 1.0, "throughput": {"gpu_type": "a800", "tflops": {"4": 400.0}},
          "current": {"gpus": 0, "nodes": []}, "transition_seconds": 60.0}


class Answers:
    """Calls the routes and records (route, method, status) with the checked body."""

    def __init__(self, client: TestClient):
        self.c, self.seen = client, set()

    def __call__(self, method: str, route: str, path: str | None = None, auth: bool = True, **kw):
        r = self.c.request(method.upper(), path or route, headers={**(AUTH if auth else {}), **kw.pop("headers", {})},
                           **kw)
        self.seen.add((route, method, r.status_code))
        if r.status_code == 200:
            if (route, method) in REPLY:
                REPLY[(route, method)].model_validate(r.json())
        else:
            body = r.json()
            assert set(body) == {"error"}, body
            ErrorReply.model_validate(body)
            assert "Traceback" not in body["error"] and "\n" not in body["error"]
        return r


def _every_answer(tmp_path, monkeypatch) -> tuple[set, dict]:
    app = create_app(tmp_path / "s", token=TOKEN, contingency=False, max_body_bytes=200_000)
    coord = app.state.coordinator
    a = Answers(TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1"))
    doc = a.c.get("/openapi.json", headers=AUTH).json()
    # before a cluster: the routes that need one name it (422)
    a("delete", "/v1/jobs/{job_id}", "/v1/jobs/x")
    for route, method in doc_routes(doc):
        path = route.replace("{job_id}", "x").replace("{plan_id}", "p1")
        a(method, route, path, auth=False)  # 401 without the token
        # the browser guard (service/guard.py): a foreign Host (421), a foreign page's Origin (403), a
        # write whose body is not declared JSON (415)
        a(method, route, path, headers={"host": "rebound.example"})
        a(method, route, path, headers={"origin": "http://evil.example"})
        if method in ("put", "post", "delete"):
            a(method, route, path, content=b"{}", headers={"content-type": "text/plain"})
    # 400, 413, 422 of each body
    for route, method in (("/v1/cluster", "put"), ("/v1/events", "post"), ("/v1/jobs", "post"),
                          ("/v1/signals", "post"), ("/v1/actions", "post")):
        big = SIGNALS_MAX_BODY_BYTES + 1 if route in ("/v1/signals", "/v1/actions") else 300_000
        a(method, route, content=b'{"a": 1, "a": 2}', headers={"content-type": "application/json"})
        a(method, route, content=b"[" + b" " * big + b"]", headers={"content-type": "application/json"})
        a(method, route, json={"schema_version": "2"})
    # 200s: the cluster, an event of each kind, a job, the plan, apply, reads
    assert a("put", "/v1/cluster", json=_cluster()).status_code == 200
    first = a("post", "/v1/events", json={"kind": "failure", "failed_nodes": ["n1"]}).json()
    assert first["includes_pending"] is None
    assert a("get", "/v1/plans/{plan_id}", f"/v1/plans/{first['plan_id']}").status_code == 200
    second = a("post", "/v1/events", json={"kind": "repair", "repaired_nodes": ["n1"]}).json()
    assert second["includes_pending"] == {"failure": {"kind": "failure", "failed_nodes": ["n1"], "failed_gpus": []}}
    explained = a("get", "/v1/plans/{plan_id}/explain", f"/v1/plans/{second['plan_id']}/explain").json()
    # (the repair cancelled the pending failure: the plan is of the cluster with no event)
    assert explained["changes"] == second["changes"] and explained["event"]["kind"] is None
    a("get", "/v1/plans/{plan_id}/explain", f"/v1/plans/{first['plan_id']}/explain")  # 409: not the current state
    a("get", "/v1/plans/{plan_id}/explain", "/v1/plans/p999999/explain")  # 404
    a("post", "/v1/plans/{plan_id}/apply", f"/v1/plans/{first['plan_id']}/apply")  # 409: the state moved on
    assert a("post", "/v1/plans/{plan_id}/apply", f"/v1/plans/{second['plan_id']}/apply").status_code == 200
    assert a("post", "/v1/jobs", json=QUEUED).status_code == 200
    arrival = a("post", "/v1/events", params={"dry_run": "true"}, json={"kind": "job_arrival", "jobs": ["queued"]})
    assert arrival.status_code == 200 and arrival.json()["plan_id"] is None
    assert a("post", "/v1/events", json={"kind": "job_exit", "jobs": ["queued"]}).status_code == 200
    assert a("delete", "/v1/jobs/{job_id}", "/v1/jobs/nosuchjob").status_code == 404
    assert a("delete", "/v1/jobs/{job_id}", "/v1/jobs/j3").status_code == 200
    for route in ("/v1/state", "/v1/history", "/healthz", "/metrics"):
        a("get", route)
    # in-band reports and what was done about them (docs/detection.md)
    sev2 = a("post", "/v1/signals", json={"signals": [{"job": "j1", "rank": 0, "node": "n0",
                                                         "kind": "exited_abnormally", "exit_code": 1,
                                                         "source": "exit"}]}).json()
    (incident,) = sev2["incidents"]
    assert a("post", "/v1/actions", json={"signal": incident["revision"], "action": "restart", "outcome": "done",
                                          "job": "j1"}).status_code == 200
    a("get", "/v1/history", params={"since": -1})  # 422: a query parameter out of range
    a("get", "/v1/plans/{plan_id}", "/v1/plans/p999999")  # 404
    a("post", "/v1/plans/{plan_id}/apply", "/v1/plans/nope/apply")  # 404
    # 500: a bug in whatever each route calls is one JSON line, never a traceback
    def bug(*_, **__):
        raise RuntimeError("planted")
    for name in ("put_cluster", "post_event", "add_job", "remove_job", "apply", "get_plan", "state_document",
                 "history", "contingency_status", "explain_plan"):
        monkeypatch.setattr(coord, name, bug)
    for name in ("post_signals", "post_action"):
        monkeypatch.setattr(app.state.signals, name, bug)
    monkeypatch.setattr(coord, "metrics", None)
    for route, method in doc_routes(doc):
        path = route.replace("{job_id}", "j1").replace("{plan_id}", "p1")
        kw = {"json": {"signals": [{"job": "j1", "rank": 0, "kind": "heartbeat", "step": 1}]}} \
            if route == "/v1/signals" else {"json": {"signal": 1, "action": "restart", "outcome": "done"}} \
            if route == "/v1/actions" else {"json": {"kind": "failure", "failed_nodes": ["n0"]}} \
            if route == "/v1/events" else \
            {"json": _cluster()} if route == "/v1/cluster" else {"json": QUEUED} if route == "/v1/jobs" else {}
        a(method, route, path, **kw)
    return a.seen, doc


def doc_routes(doc: dict) -> list[tuple[str, str]]:
    return [(p, m) for p, ops in doc["paths"].items() for m in ops]


def test_openapi_documents_exactly_the_answers_of_every_route(tmp_path, monkeypatch):
    seen, doc = _every_answer(tmp_path, monkeypatch)
    documented = {(p, m, int(code)) for p, ops in doc["paths"].items() for m, op in ops.items()
                  for code in op["responses"]}
    assert seen - documented == set(), "answered but not documented"
    assert documented - seen == set(), "documented but never answered here"
    for p, m in doc_routes(doc):
        for code, resp in doc["paths"][p][m]["responses"].items():
            if code != "200":
                assert resp["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorReply"}
    assert "HTTPValidationError" not in doc["components"]["schemas"]  # the service never sends {"detail": ...}


def test_event_schema_is_the_union_of_the_four_kinds(tmp_path):
    doc = TestClient(create_app(tmp_path / "s", contingency=False), base_url="http://127.0.0.1").get("/openapi.json").json()
    body = doc["paths"]["/v1/events"]["post"]["requestBody"]["content"]["application/json"]
    schema = doc["components"]["schemas"][body["schema"]["$ref"].rsplit("/", 1)[1]]
    kinds = {doc["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]["properties"]["kind"]["const"]
             for ref in schema["oneOf"]}
    assert kinds == {"failure", "repair", "job_arrival", "job_exit"}
    assert set(body["examples"]) == kinds
    from unicron_plan.service.state import parse_event

    for kind, example in body["examples"].items():
        assert parse_event(example["value"]).kind == kind  # each example is a valid event of its kind
