"""The service refuses what it must: unsafe writes, reused idempotency keys with other bodies,
unbounded parameters, odd requests (always the JSON error), unsafe state files and bad options."""

from __future__ import annotations

import copy
import os
import socket
import stat
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from conftest import ROOT
from servers import Server
from unicron_plan.io import read_json
from unicron_plan.service.app import create_app


def _base() -> tuple[dict, dict]:
    inst = copy.deepcopy(read_json(ROOT / "instances" / "paper-128-a800.json"))
    return inst, inst.pop("event")


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(tmp_path / "state", contingency=False), base_url="http://127.0.0.1") as c:
        base, _ = _base()
        assert c.put(f"/v1/cluster", json=base).status_code == 200
        yield c


def test_a_job_whose_terms_overflow_is_refused_before_commit(client):
    base, ev = _base()
    job = copy.deepcopy(base["jobs"][0])
    job.update(id="huge", weight=1e308, current={"gpus": 0, "nodes": []})
    before = client.get("/v1/history").json()
    r = client.post("/v1/jobs", json=job)
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith("job"), r.json()
    assert client.get("/v1/history").json() == before  # nothing committed
    assert client.post("/v1/events", json=ev).status_code == 200  # later events still plan


def test_a_cluster_whose_terms_overflow_is_refused(client):
    base, _ = _base()
    base["jobs"][0]["weight"] = 1e308
    r = client.put("/v1/cluster", json=base)
    assert r.status_code == 422 and r.json()["error"].startswith("jobs[0]"), r.text


def test_idempotency_key_reused_with_another_body_is_422(client):
    _, ev = _base()
    first = client.post("/v1/events", json=ev, headers={"Idempotency-Key": "k1"})
    assert first.status_code == 200
    assert client.post("/v1/events", json=ev, headers={"Idempotency-Key": "k1"}).json() == first.json()
    other = {"kind": "failure", "failed_nodes": [], "failed_gpus": [{"node": "n0", "gpu": 0}]}
    r = client.post("/v1/events", json=other, headers={"Idempotency-Key": "k1"})
    assert r.status_code == 422 and r.json()["error"].startswith("Idempotency-Key"), r.text
    assert [e["type"] for e in client.get("/v1/history").json()["entries"]] == ["cluster", "event", "plan"]


@pytest.mark.parametrize("query", ["since=" + str(10 ** 30), "since=-1", "limit=" + str(10 ** 30), "limit=0",
                                   "since=" + "9" * 5000, "dry_run=maybe"])
def test_query_parameters_are_bounded(client, query):
    path = "/v1/events?" + query if query.startswith("dry_run") else "/v1/history?" + query
    r = client.post(path, json={"kind": "job_arrival", "jobs": []}) if "dry_run" in query else client.get(path)
    assert 400 <= r.status_code < 500 and "error" in r.json(), (query, r.status_code, r.text)


def test_largest_allowed_since_answers(client):
    r = client.get(f"/v1/history?since={2 ** 62}")
    assert r.status_code == 200 and r.json() == {"entries": []}


def test_a_100kb_id_in_the_url_gets_the_json_error(tmp_path):
    with Server(tmp_path / "s") as srv:
        host, port = srv.url.removeprefix("http://").split(":")
        for path in ("/v1/plans/" + "p" * 100_000, "/v1/jobs/" + "x" * 100_000):
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                reply = b""
                while chunk := s.recv(65536):
                    reply += chunk
            head, _, body = reply.partition(b"\r\n\r\n")
            assert head.split(b" ")[1][:1] == b"4", head[:100]
            assert b"content-type: application/json" in head.lower(), head
            assert body.startswith(b'{"error": ') or body.startswith(b'{"error":'), body[:200]


@pytest.mark.parametrize("method,path", [("GET", "/v1/plans/p"), ("DELETE", "/v1/jobs/"),
                                         ("POST", "/v1/plans/p")])
def test_a_long_id_is_echoed_cut(client, method, path):
    long_id = "7" * 30_000 + "%0A"  # an encoded newline
    r = client.request(method, path + long_id + ("/apply" if method == "POST" else ""))
    assert r.status_code == 404 and len(r.json()["error"]) < 1000, (r.status_code, len(r.text))
    assert "\n" not in r.json()["error"]


def test_state_directory_and_files_are_private(tmp_path):
    with TestClient(create_app(tmp_path / "state", contingency=False), base_url="http://127.0.0.1") as c:
        base, ev = _base()
        c.put("/v1/cluster", json=base)
        c.post("/v1/events", json=ev)
        d = tmp_path / "state"
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
        files = list(d.iterdir())
        assert any(f.name == "state.sqlite3-wal" for f in files)
        for f in files:
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "unicron_plan.cli", "serve", *args],
                          capture_output=True, text=True, timeout=60)


def test_symlink_at_the_state_file_is_refused(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    outside = tmp_path / "elsewhere.sqlite3"
    os.symlink(outside, d / "state.sqlite3")
    r = _serve("--state", str(d), "--port", "0")
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: --state") and "symbolic link" in r.stderr
    assert not outside.exists()


@pytest.mark.parametrize("setup,args,option", [
    ("file", [], "--state"),
    ("garbage", [], "--state"),
    (None, ["--max-body-mib", "nan"], "--max-body-mib"),
    (None, ["--max-body-mib", "inf"], "--max-body-mib"),
    (None, ["--max-body-mib", "-1"], "--max-body-mib"),
    # a 64-character label cannot be encoded: refused before any lookup leaves the machine
    (None, ["--host", "h" * 64 + ".invalid"], "--host"),
])
def test_bad_options_exit_2_naming_the_option(tmp_path, setup, args, option):
    d = tmp_path / "state"
    if setup == "file":
        d.write_text("not a directory")
    elif setup == "garbage":
        d.mkdir()
        (d / "state.sqlite3").write_bytes(b"this is not a database, only text" * 100)
    r = _serve("--state", str(d), "--port", "0", *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith(f"error: {option}"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_body_reading_is_bounded_in_time(tmp_path, monkeypatch):
    import time

    from unicron_plan import io as io_module

    def slow_parse(text, source, fmt):
        time.sleep(1.5)
        return {}

    monkeypatch.setattr(io_module, "parse_document", slow_parse)
    with TestClient(create_app(tmp_path / "state", contingency=False, parse_seconds=0.2), base_url="http://127.0.0.1") as c:
        r = c.post("/v1/events", json={"kind": "failure", "failed_nodes": ["n0"]})
    assert r.status_code == 400 and r.json()["error"].startswith("body: not read within 0.2 s")


@pytest.mark.slow
def test_a_large_body_and_the_old_depth_checks_shape_are_refused_while_healthz_answers(tmp_path):
    """A 5.4 MB body of many objects (422) and the pathological shape of the old depth check (400),
    /healthz answering all the while. How soon it answers (the reader runs off the event loop) is
    a latency: benchmarks/suite_timings.py (``service-body-off-loop``)."""
    import threading

    import httpx

    big = '{"kind": "failure", "failed_nodes": [' + ",".join(['{"a": 1}'] * 600_000) + "]}"  # 5.4 MB, many objects
    slow = "[" * 70 + '"' + '\\"' * 200_000  # deep and unterminated: was quadratic
    with Server(tmp_path / "s", "--no-contingency") as srv:
        for body, status in ((big, 422), (slow, 400)):
            got = {}

            def post():
                got["r"] = httpx.post(srv.url + "/v1/events", content=body, timeout=60,
                                      headers={"content-type": "application/json"})

            t = threading.Thread(target=post)
            t.start()
            while t.is_alive():
                assert httpx.get(srv.url + "/healthz", timeout=30).status_code == 200
            t.join()
            assert got["r"].status_code == status, got["r"].text[:200]


@pytest.mark.parametrize("alias", ["p0{}", "p00{}", "p\u0663", "p\u00b2", "p+{}", "p {}", "P{}", "p{}\u0660"])
def test_a_plan_id_spelt_otherwise_is_no_plan(client, alias):
    # Only the id the service wrote names the plan: another spelling (leading zeros, other digits, a sign)
    # is 404, never a 500, and is never logged (a replay looks the plan up by the logged id).
    _, ev = _base()
    plan_id = client.post("/v1/events", json=ev).json()["plan_id"]
    alias = alias.format(plan_id[1:])
    for method, path in (("GET", f"/v1/plans/{alias}"), ("POST", f"/v1/plans/{alias}/apply"),
                         ("GET", f"/v1/plans/{alias}/explain")):
        r = client.request(method, path)
        assert r.status_code == 404 and r.json()["error"].endswith("not found"), (path, r.status_code, r.text)
    assert client.post(f"/v1/plans/{plan_id}/apply").status_code == 200
    applied = client.get("/v1/history").json()["entries"][-1]
    assert applied["type"] == "apply" and applied["body"] == {"plan_id": plan_id}


def test_a_log_naming_a_plan_by_another_spelling_still_replays(client):
    from unicron_plan.service import state as st

    _, ev = _base()
    plan_id = client.post("/v1/events", json=ev).json()["plan_id"]
    assert client.post(f"/v1/plans/{plan_id}/apply").status_code == 200
    entries = [(e["revision"], e["type"], e["body"]) for e in client.get("/v1/history").json()["entries"]]
    expected = st.replay(entries)
    # a log written before ids were checked: "p03" for p3
    old = [(rev, kind, {"plan_id": "p0" + plan_id[1:]} if kind == "apply" else body) for rev, kind, body in entries]
    assert st.replay(old) == expected
    unknown = [(rev, kind, {"plan_id": "p999"} if kind == "apply" else body) for rev, kind, body in entries]
    with pytest.raises(ValueError, match="p999"):
        st.replay(unknown)


def test_a_bug_in_a_route_is_the_json_500_with_the_security_headers(tmp_path, monkeypatch, caplog):
    app = create_app(tmp_path / "state", contingency=False)
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as c:
        def broken(*args, **kwargs):
            raise ZeroDivisionError("a planted bug")

        monkeypatch.setattr(app.state.coordinator, "history", broken)
        r = c.get("/v1/history")
    assert r.status_code == 500 and r.json()["error"].startswith("internal error (a bug"), r.text
    assert "ZeroDivisionError: a planted bug" in r.json()["error"]
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
    assert any("internal error answering GET /v1/history" in rec.getMessage() for rec in caplog.records)


def test_a_cluster_whose_plans_could_overflow_once_nodes_fail_is_refused(client):
    # D_run grows as nodes fail (node_mtbf_hours x 3600 / nodes in service): terms that fit the healthy
    # cluster's D_run could overflow a later plan's objective, which would then be unplannable
    base, _ = _base()
    nodes = len(base["cluster"]["nodes"])
    d_run = base["cost"]["node_mtbf_hours"] * 3600.0 / nodes
    top = max(max(j["throughput"]["tflops"].values()) for j in base["jobs"])
    for job in base["jobs"]:
        job["weight"] = 1e308 / nodes / len(base["jobs"]) / d_run / top * 4
    r = client.put("/v1/cluster", json=base)
    assert r.status_code == 422 and r.json()["error"].startswith("jobs:"), r.text
    for job in base["jobs"]:  # a hundred times smaller: every later plan stays finite
        job["weight"] /= 100.0
    assert client.put("/v1/cluster", json=base).status_code == 200


@pytest.mark.parametrize("failed_gpus", [None, 0, False, "", {}])
def test_a_dry_run_answered_from_stored_plans_checks_the_event_as_a_recorded_one(tmp_path, failed_gpus):
    from test_service import _wait_precomputed

    with TestClient(create_app(tmp_path / "state", contingency=True), base_url="http://127.0.0.1") as c:
        base, ev = _base()
        assert c.put("/v1/cluster", json=base).status_code == 200
        _wait_precomputed(c)
        node = ev["failed_nodes"][0]
        good = c.post("/v1/events?dry_run=true", json={"kind": "failure", "failed_nodes": [node]})
        assert good.status_code == 200 and good.json()["solver"]["name"] == "contingency", good.text
        body = {"kind": "failure", "failed_nodes": [node], "failed_gpus": failed_gpus}
        dry = c.post("/v1/events?dry_run=true", json=body)
        recorded = c.post("/v1/events", json=body)
        assert dry.status_code == recorded.status_code == 422, (dry.text, recorded.text)
        assert dry.json()["error"] == recorded.json()["error"]
        assert dry.json()["error"].startswith("event.failed_gpus")


def test_a_body_over_a_routes_own_limit_names_that_limit(client):
    from unicron_plan.service.app import SIGNALS_MAX_BODY_BYTES

    body = b'{"signals": [' + b" " * SIGNALS_MAX_BODY_BYTES + b"]}"
    r = client.post("/v1/signals", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"] == f"body: larger than the limit of {SIGNALS_MAX_BODY_BYTES} bytes"


@pytest.mark.parametrize("key", ["", "   "])
def test_an_empty_idempotency_key_is_refused(client, key):
    _, ev = _base()
    before = client.get("/v1/history").json()
    r = client.post("/v1/events", json=ev, headers={"Idempotency-Key": key})
    assert r.status_code == 422 and r.json()["error"].startswith("Idempotency-Key"), r.text
    assert client.get("/v1/history").json() == before
