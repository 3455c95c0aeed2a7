"""The coordinator through FastAPI's test client: plans equal api.solve, state, errors, auth, durability."""

from __future__ import annotations

import copy
import json
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from conftest import ROOT, library_instances, WARM_WAIT
from randgen import random_instance
from unicron_plan import api
from unicron_plan.io import read_json
from unicron_plan.service import state as st
from unicron_plan.service.app import create_app


def _client(tmp_path, **kw) -> TestClient:
    kw.setdefault("contingency", False)
    return TestClient(create_app(tmp_path / "state", **kw), base_url="http://127.0.0.1")


def _split(inst: dict) -> tuple[dict, dict | None]:
    inst = copy.deepcopy(inst)
    return inst, inst.pop("event", None)


def _same_plan(served: dict, expected) -> None:
    exp = expected.model_dump(mode="json", exclude_none=True)
    got = {k: v for k, v in served.items() if k not in ("plan_id", "revision", "includes_pending")}
    got.pop("solver"), exp.pop("solver")
    assert got == exp


def _snapshot(c: TestClient) -> tuple:
    return c.get("/v1/state").json(), c.get("/v1/history").json()


LIBRARY = [p for p in library_instances() if "16384" not in p.name]


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.stem)
def test_library_plans_equal_api_solve(tmp_path, path):
    inst = read_json(path)
    base, ev = _split(inst)
    c = _client(tmp_path)
    assert c.put("/v1/cluster", json=base).status_code == 200
    if ev is None:
        assert c.get("/v1/state").json()["instance"] == api.load_instance(base).model_dump(mode="json", exclude_none=True)
        return
    dry = c.post("/v1/events?dry_run=true", json=ev).json()
    plan = c.post("/v1/events", json=ev).json()
    assert dry["plan_id"] is None and plan["plan_id"].startswith("p")
    expected = api.solve(inst)
    if ev["kind"] == "repair":  # folded into the cluster: the same optimum, with no event
        assert plan["objective"] == pytest.approx(expected.objective, rel=1e-12)
        assert api.validate_plan(c.get("/v1/state").json()["instance"], plan).valid
    else:
        _same_plan(plan, expected)
        _same_plan(dry, expected)
    # the state document is the instance the plan was solved from
    _same_plan(plan, api.solve(c.get("/v1/state").json()["instance"]))


@pytest.mark.parametrize("seed", range(25))
def test_random_plans_equal_api_solve(tmp_path, seed):
    inst = random_instance(np.random.default_rng(1000 + seed), max_nodes=5, max_jobs=4, mtbf=seed % 2 == 1)
    base, ev = _split(inst)
    if ev is None:
        ev = {"kind": "failure", "failed_nodes": [base["cluster"]["nodes"][0]["id"]], "failed_gpus": []}
        inst["event"] = ev
    c = _client(tmp_path)
    assert c.put("/v1/cluster", json=base).status_code == 200
    r = c.post("/v1/events", json=ev)
    try:
        expected = api.solve(inst)
    except Exception as exc:  # the service must refuse exactly what the API refuses
        assert r.status_code == 422, (r.json(), exc)
        return
    assert r.status_code == 200, r.json()
    _same_plan(r.json(), expected)


def _uploaded(tmp_path, instance: str):
    """(the instance without its event, the app, a client) after PUT /v1/cluster of a library instance."""
    base, _ = _split(read_json(ROOT / "instances" / instance))
    app = create_app(tmp_path / "s")
    c = TestClient(app, base_url="http://127.0.0.1")
    c.put("/v1/cluster", json=base)
    return base, app, c


def test_warm_contingency_answers_single_node_failures(tmp_path):
    base, app, c = _uploaded(tmp_path, "jagged-2048-32jobs.json")
    assert app.state.coordinator.wait_contingency(WARM_WAIT)
    health = c.get("/healthz").json()
    assert {k: health[k] for k in ("status", "contingency", "revision")} == \
        {"status": "ok", "contingency": "ready", "revision": 1}
    assert health["precomputed"]["total"] == len(base["cluster"]["nodes"])
    for node in [n["id"] for n in base["cluster"]["nodes"][::64]]:
        ev = {"kind": "failure", "failed_nodes": [node]}
        plan = c.post("/v1/events?dry_run=true", json=ev).json()
        assert plan["solver"]["name"] == "contingency"
        expected = api.solve(dict(base, event=ev))
        assert plan["objective"] == pytest.approx(expected.objective, rel=1e-12)
        assert api.validate_plan(dict(base, event=ev), plan).valid
    assert "unicron_contingency_hits_total 4.0" in c.get("/metrics").text


def _wait_precomputed(c: TestClient, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = c.get("/healthz").json()["precomputed"]
        if done["total"] and done["done"] >= done["total"]:
            return done
        time.sleep(0.05)
    raise AssertionError(f"answers not stored after {timeout} s: {done}")


def test_stored_answers_equal_fresh_solves(tmp_path):
    """Answers stored in the background equal api.solve, for dry runs and recorded events."""
    base, _, c = _uploaded(tmp_path, "paper-128-a800.json")
    assert _wait_precomputed(c)["total"] == len(base["cluster"]["nodes"])
    nodes = [n["id"] for n in base["cluster"]["nodes"]]
    for node in nodes:
        ev = {"kind": "failure", "failed_nodes": [node]}
        r = c.post("/v1/events?dry_run=true", json=ev)
        assert r.status_code == 200
        served = r.json()
        assert served["solver"]["name"] == "contingency" and served["revision"] == 1 and served["plan_id"] is None
        _same_plan(served, api.solve(dict(base, event=ev)))
    hits = f"unicron_contingency_hits_total {float(len(nodes))}"
    assert hits in c.get("/metrics").text
    # a recorded event is answered from the stored answer too, and logged as usual
    ev = {"kind": "failure", "failed_nodes": [nodes[1]]}
    recorded = c.post("/v1/events", json=ev).json()
    _same_plan(recorded, api.solve(dict(base, event=ev)))
    assert recorded["solver"]["name"] == "contingency"
    assert [e["type"] for e in c.get("/v1/history").json()["entries"]] == ["cluster", "event", "plan"]
    # with a failure pending, a second failure is solved against both (no stored answer applies)
    ev2 = {"kind": "failure", "failed_nodes": [nodes[2]]}
    both = dict(base, event={"kind": "failure", "failed_nodes": [nodes[1], nodes[2]]})
    _same_plan(c.post("/v1/events?dry_run=true", json=ev2).json(), api.solve(both))


def test_pending_events_combine_and_apply(tmp_path):
    inst = read_json(ROOT / "instances" / "paper-128-a800.json")
    base, _ = _split(inst)
    c = _client(tmp_path)
    c.put("/v1/cluster", json=base)
    n0, n1, n2 = (n["id"] for n in base["cluster"]["nodes"][:3])
    p1 = c.post("/v1/events", json={"kind": "failure", "failed_nodes": [n0]}).json()
    p2 = c.post("/v1/events", json={"kind": "failure", "failed_gpus": [{"node": n1, "gpu": 2}]}).json()
    both = dict(base, event={"kind": "failure", "failed_nodes": [n0], "failed_gpus": [{"node": n1, "gpu": 2}]})
    _same_plan(p2, api.solve(both))
    assert c.get("/v1/state").json()["instance"]["event"] == both["event"]
    # a stale plan cannot be applied; the latest can
    r = c.post(f"/v1/plans/{p1['plan_id']}/apply")
    assert r.status_code == 409 and r.json()["error"].startswith("plan_id:")
    assert c.get(f"/v1/plans/{p2['plan_id']}").json() == p2
    rev = c.post(f"/v1/plans/{p2['plan_id']}/apply").json()["revision"]
    s = c.get("/v1/state").json()
    assert s["revision"] == rev and "event" not in s["instance"]
    cur = {j["id"]: j["current"] for j in s["instance"]["jobs"]}
    for j in p2["jobs"]:
        assert cur[j["id"]]["gpus"] == j["gpus"] and cur[j["id"]]["nodes"] == j["nodes"]
    nodes = {n["id"]: n for n in s["instance"]["cluster"]["nodes"]}
    assert nodes[n0]["failed_gpus"] == list(range(nodes[n0]["gpus"]))
    # a repair returns the node; an exit and an arrival then combine with a new failure
    c.post("/v1/events", json={"kind": "repair", "repaired_nodes": [n0]})
    assert "failed_gpus" not in {n["id"]: n for n in c.get("/v1/state").json()["instance"]["cluster"]["nodes"]}[n0] \
        or not {n["id"]: n for n in c.get("/v1/state").json()["instance"]["cluster"]["nodes"]}[n0]["failed_gpus"]
    leaving = base["jobs"][0]["id"]
    c.post("/v1/events", json={"kind": "job_exit", "jobs": [leaving]})
    p = c.post("/v1/events", json={"kind": "failure", "failed_nodes": [n2]}).json()
    inst_now = c.get("/v1/state").json()["instance"]
    assert leaving not in [j["id"] for j in inst_now["jobs"]]
    _same_plan(p, api.solve(inst_now))


def test_jobs_endpoints(tmp_path):
    inst = read_json(ROOT / "instances" / "tiny-two-gpu-types.json")
    base, _ = _split(inst)
    c = _client(tmp_path)
    c.put("/v1/cluster", json=base)
    new = copy.deepcopy(base["jobs"][0])
    new["id"], new["current"] = "queued-1", {"gpus": 0, "nodes": []}
    assert c.post("/v1/jobs", json=new).status_code == 200
    plan = c.post("/v1/events", json={"kind": "job_arrival", "jobs": ["queued-1"]}).json()
    _same_plan(plan, api.solve(dict(base, jobs=[*base["jobs"], new], event={"kind": "job_arrival",
                                                                            "jobs": ["queued-1"]})))
    before = _snapshot(c)
    r = c.post("/v1/jobs", json=new)
    assert r.status_code == 422 and r.json()["error"].startswith("job.id:")
    busy = dict(new, id="busy", current={"gpus": 8, "nodes": []})
    r = c.post("/v1/jobs", json=busy)
    assert r.status_code == 422 and r.json()["error"].startswith("job.current")
    r = c.post("/v1/jobs", json=dict(new, id="w", weight=-1))
    assert r.status_code == 422 and r.json()["error"].startswith("job.weight:")
    assert c.delete("/v1/jobs/nope").status_code == 404
    assert _snapshot(c) == before
    assert c.delete("/v1/jobs/queued-1").status_code == 200
    assert "queued-1" not in [j["id"] for j in c.get("/v1/state").json()["instance"]["jobs"]]


BAD_EVENTS = [
    (b"{\"kind\": \"failure\",", 400, "body:"),
    (b"{\"kind\": \"failure\", \"kind\": \"repair\"}", 400, "body:"),
    (b"[1, 2]", 422, "event:"),
    (b"{\"kind\": \"explode\"}", 422, "event.kind:"),
    (b"{\"kind\": \"failure\", \"failed_nodes\": [\"nope\"]}", 422, "event.failed_nodes[0]:"),
    (b"{\"kind\": \"failure\", \"failed_gpus\": [{\"node\": \"n0\", \"gpu\": 99}]}", 422, "event.failed_gpus[0].gpu"),
    (b"{\"kind\": \"failure\", \"failed_nodes\": [], \"extra\": 1}", 422, "event.extra:"),
    (b"{\"kind\": \"repair\", \"repaired_nodes\": [\"n0\"]}", 422, "event.repaired_nodes[0]"),
    (b"{\"kind\": \"job_exit\", \"jobs\": [\"ghost\"]}", 422, "event.jobs[0]:"),
    (b"{\"kind\": \"failure\", \"failed_gpus\": [{\"node\": \"n0\", \"gpu\": NaN}]}", 400, "body:"),
]


@pytest.mark.parametrize("body,status,field", BAD_EVENTS)
def test_bad_event_names_field_and_changes_nothing(tmp_path, body, status, field):
    c = _client(tmp_path)
    c.put("/v1/cluster", json=_split(read_json(ROOT / "instances" / "tiny-one-job-two-nodes.json"))[0])
    before = _snapshot(c)
    r = c.post("/v1/events", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status and r.json()["error"].startswith(field), r.json()
    assert _snapshot(c) == before


def test_bad_cluster_and_other_requests(tmp_path):
    c = _client(tmp_path, max_body_bytes=4096)
    r = c.post("/v1/events", json={"kind": "failure", "failed_nodes": ["n0"]})
    assert r.status_code == 422 and r.json()["error"].startswith("cluster:")
    inst = read_json(ROOT / "instances" / "tiny-one-job-two-nodes.json")
    assert c.put("/v1/cluster", json=inst).json()["error"].startswith("event:")
    base, _ = _split(inst)
    assert c.put("/v1/cluster", json=base).status_code == 200
    before = _snapshot(c)
    bad = copy.deepcopy(base)
    bad["jobs"][0]["weight"] = -1
    r = c.put("/v1/cluster", json=bad)
    assert r.status_code == 422 and r.json()["error"].startswith("jobs[0].weight:")
    bad = copy.deepcopy(base)
    bad["jobs"][0]["current"]["nodes"] = ["ghost"]
    assert c.put("/v1/cluster", json=bad).json()["error"].startswith("jobs[0].current.nodes")
    r = c.put("/v1/cluster", content=b"{" + b" " * 5000 + b"}", headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"].startswith("body:")
    assert c.get("/v1/history?since=-1").status_code == 422
    assert c.get("/v1/plans/p999").status_code == 404
    assert c.get("/v1/plans/zzz").status_code == 404
    assert c.post("/v1/plans/p999/apply").status_code == 404
    assert c.get("/v1/nothing").json() == {"error": "path: Not Found"}
    assert _snapshot(c) == before


def test_token_required(tmp_path):
    c = _client(tmp_path, token="s3cret")
    for method, path in [("get", "/healthz"), ("get", "/v1/state"), ("get", "/metrics"), ("put", "/v1/cluster")]:
        r = getattr(c, method)(path)
        assert r.status_code == 401 and r.json()["error"].startswith("Authorization")
    assert c.get("/v1/state", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/v1/state", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_idempotency_key_and_dry_run(tmp_path):
    c = _client(tmp_path)
    inst = read_json(ROOT / "instances" / "small-shared-node-failure.json")
    base, ev = _split(inst)
    c.put("/v1/cluster", json=base)
    before = _snapshot(c)
    c.post("/v1/events?dry_run=true", json=ev)
    assert _snapshot(c) == before
    a = c.post("/v1/events", json=ev, headers={"Idempotency-Key": "k1"}).json()
    b = c.post("/v1/events", json=ev, headers={"Idempotency-Key": "k1"}).json()
    assert a == b
    assert [e["type"] for e in c.get("/v1/history").json()["entries"]] == ["cluster", "event", "plan"]


def test_restart_gives_back_state_and_history(tmp_path):
    inst = read_json(ROOT / "instances" / "paper-128-a800.json")
    base, ev = _split(inst)
    c = _client(tmp_path)
    c.put("/v1/cluster", json=base)
    p = c.post("/v1/events", json=ev).json()
    c.post(f"/v1/plans/{p['plan_id']}/apply")
    c.post("/v1/events", json={"kind": "repair", "repaired_nodes": ev["failed_nodes"]})
    before = _snapshot(c)
    c2 = _client(tmp_path)
    assert _snapshot(c2) == before
    entries = before[1]["entries"]
    replayed = st.replay((e["revision"], e["type"], e["body"]) for e in entries)
    assert st.state_document(replayed) == before[0]
    assert [e["revision"] for e in entries] == list(range(1, len(entries) + 1))


def test_openapi_health_metrics(tmp_path):
    c = _client(tmp_path)
    doc = c.get("/openapi.json").json()
    for path in ["/v1/cluster", "/v1/events", "/v1/jobs", "/v1/jobs/{job_id}", "/v1/plans/{plan_id}/apply",
                 "/v1/plans/{plan_id}", "/v1/state", "/v1/history", "/healthz", "/metrics"]:
        assert path in doc["paths"]
    assert doc["paths"]["/v1/cluster"]["put"]["requestBody"]["content"]["application/json"]["schema"] == \
        {"$ref": "#/components/schemas/Instance"}
    assert "Instance" in doc["components"]["schemas"] and "Event" in doc["components"]["schemas"]
    assert c.get("/healthz").json() == {"status": "ok", "contingency": "off", "revision": 0, "history_revision": 0,
                                        "precomputed": {"done": 0, "total": 0}}
    c.put("/v1/cluster", json=_split(read_json(ROOT / "instances" / "tiny-one-job-two-nodes.json"))[0])
    c.post("/v1/events", json={"kind": "failure", "failed_nodes": ["n1"]})
    text = c.get("/metrics").text
    for name in ["unicron_events_total", "unicron_plans_total", "unicron_plan_latency_seconds_bucket",
                 "unicron_solver_seconds_count", "unicron_contingency_hits_total", "unicron_state_revision 2.0"]:
        assert name in text
    json.dumps(doc)


def test_repair_cancels_a_pending_failure(tmp_path):
    inst = read_json(ROOT / "instances" / "paper-128-a800.json")
    base, ev = _split(inst)
    c = _client(tmp_path)
    c.put("/v1/cluster", json=base)
    node = ev["failed_nodes"][0]
    c.post("/v1/events", json=ev)
    r = c.post("/v1/events", json={"kind": "repair", "repaired_nodes": [node]})
    assert r.status_code == 200, r.json()
    now = c.get("/v1/state").json()["instance"]
    assert "event" not in now and now["jobs"] == base["jobs"]
    _same_plan(r.json(), api.solve(base))


@pytest.mark.slow
def test_16384_gpu_instance_warm_and_cold_equal_api_solve(tmp_path):
    inst = read_json(ROOT / "instances" / "jagged-16384-128jobs.json")
    base, ev = _split(inst)
    expected = api.solve(inst)
    for contingency in (False, True):
        app = create_app(tmp_path / f"s{contingency}", contingency=contingency)
        c = TestClient(app, base_url="http://127.0.0.1")
        c.put("/v1/cluster", json=base)
        if contingency:
            assert app.state.coordinator.wait_contingency(WARM_WAIT)
        plan = c.post("/v1/events", json=ev).json()
        assert plan["solver"]["name"] == ("contingency" if contingency else "dp")
        if contingency:
            assert plan["objective"] == pytest.approx(expected.objective, rel=1e-12)
            assert api.validate_plan(inst, plan).valid
        else:
            _same_plan(plan, expected)


def test_contingency_follows_the_state(tmp_path):
    inst = read_json(ROOT / "instances" / "paper-128-a800.json")
    base, ev = _split(inst)
    app = create_app(tmp_path / "s")
    c = TestClient(app, base_url="http://127.0.0.1")
    c.put("/v1/cluster", json=base)
    assert app.state.coordinator.wait_contingency(WARM_WAIT)
    p = c.post("/v1/events", json=ev).json()
    assert p["solver"]["name"] == "contingency"
    # with a failure pending, the next failure is solved (two failures are not in the index)
    other = next(n["id"] for n in base["cluster"]["nodes"] if n["id"] not in ev["failed_nodes"])
    assert c.post("/v1/events?dry_run=true", json={"kind": "failure", "failed_nodes": [other]}).json()[
        "solver"]["name"] == "dp"
    c.post(f"/v1/plans/{p['plan_id']}/apply")
    assert app.state.coordinator.wait_contingency(WARM_WAIT)  # rebuilt for the applied cluster
    ev2 = {"kind": "failure", "failed_nodes": [other]}
    plan = c.post("/v1/events?dry_run=true", json=ev2).json()
    assert plan["solver"]["name"] == "contingency"
    now = c.get("/v1/state").json()["instance"]
    assert plan["objective"] == pytest.approx(api.solve(dict(now, event=ev2)).objective, rel=1e-12)
