"""The service in a browser's world (docs/security.md): Host and Origin on every request, JSON-only
writes, security headers, read deadlines for slow clients, idempotency digests that never raise,
and the state directory's checks."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from servers import Server
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import read_json
from unicron_plan.service.app import create_app
from unicron_plan.service.store import Store, prepare_state_dir

from conftest import ROOT

LOOPBACK = "http://127.0.0.1"
FAILURE = {"kind": "failure", "failed_nodes": ["n1"], "failed_gpus": []}


def _cluster() -> dict:
    inst = read_json(ROOT / "instances" / "tiny-one-job-two-nodes.json")
    inst.pop("event", None)
    return inst


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(tmp_path / "state", contingency=False, hosts=("planner.example",),
                               origins=("https://proxy.example",)), base_url=LOOPBACK) as c:
        assert c.put("/v1/cluster", json=_cluster()).status_code == 200
        yield c


def _revision(c) -> int:
    return c.get("/healthz").json()["revision"]


def test_a_cross_origin_text_plain_post_records_nothing(client):
    """The campaign's page: a text/plain POST from another origin records a failure, then applies plans."""
    page = {"Origin": "http://127.0.0.1:9999", "Content-Type": "text/plain"}
    r = client.post("/v1/events", content=b'{"kind": "failure", "failed_nodes": ["n1"]}', headers=page)
    assert r.status_code == 403 and r.json()["error"].startswith("Origin:")
    for p in ("p1", "p2", "p3"):
        assert client.post(f"/v1/plans/{p}/apply", headers={"Origin": "http://evil.example"}).status_code == 403
    assert _revision(client) == 1


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8470", "127.0.0.1.evil.example", "", "a b",
                                  "127.0.0.1:99999"])
def test_a_host_that_is_not_ours_is_refused(client, host):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name."""
    r = client.post("/v1/events", json=FAILURE, headers={"Host": host})
    assert r.status_code == 421 and r.json()["error"].startswith("Host:")
    assert client.get("/v1/state", headers={"Host": host}).status_code == 421
    assert _revision(client) == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8470", "localhost:1", "LOCALHOST", "[::1]:8470",
                                  "planner.example", "planner.example:443"])
def test_loopback_names_and_configured_hosts_are_served(client, host):
    assert client.get("/healthz", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("origin, status", [
    ("http://127.0.0.1", 200), ("https://proxy.example", 200), ("https://proxy.example/", 200),
    ("http://127.0.0.1:8470", 403), ("null", 403), ("http://localhost", 403), ("https://127.0.0.1", 403)])
def test_origin_is_the_services_own_or_an_allowed_one(client, origin, status):
    r = client.post("/v1/events?dry_run=true", json=FAILURE, headers={"Origin": origin})
    assert r.status_code == status, r.text


def test_a_cross_site_request_without_origin_is_refused(client):
    assert client.get("/v1/state", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert client.get("/v1/state", headers={"Sec-Fetch-Site": "same-origin"}).status_code == 200


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/jsonx"])
def test_writes_with_a_body_must_be_json(client, content_type):
    headers = {} if content_type is None else {"Content-Type": content_type}
    for method, path in (("POST", "/v1/events"), ("PUT", "/v1/cluster"), ("POST", "/v1/jobs"),
                         ("POST", "/v1/plans/p1/apply"), ("DELETE", "/v1/jobs/j")):
        r = client.request(method, path, content=b'{"kind": "failure", "failed_nodes": ["n1"]}', headers=headers)
        assert r.status_code == 415 and r.json()["error"].startswith("Content-Type:"), (method, path, r.text)
    assert _revision(client) == 1
    r = client.post("/v1/events", content=b'{"kind": "failure", "failed_nodes": ["n1"]}',
                    headers={"Content-Type": "Application/JSON; charset=utf-8"})
    assert r.status_code == 200 and _revision(client) > 1


def test_every_answer_carries_the_security_headers(client):
    for path in ("/", "/docs", "/console/console.js", "/healthz", "/v1/state", "/v1/nowhere"):
        r = client.get(path)
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY", path
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"], path
    page = client.get("/").headers["content-security-policy"]
    assert "script-src 'self'" in page and "unsafe-eval" not in page and "default-src 'none'" in page
    assert "'sha256-" in client.get("/docs").headers["content-security-policy"]  # its inline script, by hash
    refused = client.get("/healthz", headers={"Host": "evil.example"})
    assert refused.headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize("body", [b'{"kind": "failure", "failed_nodes": ["n1"], "x": 1e999}',
                                  b'{"kind": "failure", "failed_nodes": ["n1"], "x": "\\ud800"}',
                                  b'{"kind": "failure", "failed_nodes": ["\\ud800"]}',
                                  b'[1e999, -1e999]'])
def test_idempotency_digests_never_raise(client, body):
    headers = {"Content-Type": "application/json", "Idempotency-Key": "k1"}
    r = client.post("/v1/events", content=body, headers=headers)
    assert 400 <= r.status_code < 500, r.text
    assert "internal error" not in r.text


def test_compact_counts_past_two_to_the_63_are_bad_input(client, tmp_path):
    inst = _cluster()
    inst["jobs"][0]["throughput"] = {"gpu_type": inst["jobs"][0]["throughput"]["gpu_type"],
                                     "compact": {"counts": [8, 2 ** 64, 9], "tflops": [1.0, 2.0, 3.0]}}
    r = client.put("/v1/cluster", json=inst)
    assert r.status_code == 422 and "compact" in r.json()["error"], r.text
    path = tmp_path / "i.json"
    path.write_text(__import__("json").dumps(inst))
    out = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "solve", str(path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "jobs[0].throughput.compact" in out.stderr, out.stderr


# --------------------------------------------------------------------------- state directory
def test_a_non_empty_directory_others_may_write_is_refused_and_left_alone(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    (d / "someone-elses-file").write_text("x")
    os.chmod(d, 0o777)
    with pytest.raises(InvalidInstanceError, match="others may write"):
        prepare_state_dir(d)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o777 and not (d / "state.sqlite3").exists()
    os.chmod(d, 0o755)  # a non-empty directory of one's own: used as it is
    assert prepare_state_dir(d) == d and stat.S_IMODE(os.stat(d).st_mode) == 0o755


def test_a_hard_linked_state_file_is_refused_before_any_chmod(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    other = tmp_path / "elsewhere.db"
    other.write_text("")
    os.chmod(other, 0o644)
    os.link(other, d / "state.sqlite3")
    with pytest.raises(InvalidInstanceError, match="hard links"):
        Store(d)
    assert stat.S_IMODE(os.stat(other).st_mode) == 0o644


def test_serve_refuses_bad_guard_options(tmp_path):
    for args, field in ((["--allow-host", "a b"], "--allow-host[0]"), (["--allow-host", "x:80"], "--allow-host[0]"),
                        (["--allow-origin", "proxy.example"], "--allow-origin[0]"),
                        (["--allow-origin", "https://p.example/path"], "--allow-origin[0]"),
                        (["--read-timeout", "0"], "--read-timeout"), (["--parse-seconds", "nan"], "--parse-seconds"),
                        (["--warm-workers", "0"], "--warm-workers"), (["--warm-workers", "65"], "--warm-workers")):
        out = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "serve", "--state", str(tmp_path / "s"),
                              "--port", "0", *args], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and field in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)


# --------------------------------------------------------------------------- slow clients
SLOW = 12  # sockets of each kind: partial headers, partial bodies, nothing at all


def _closed(sock: socket.socket) -> bytes | None:
    """What the server sent before closing, or None while the connection is still open."""
    sock.setblocking(False)
    got = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return got
            got += chunk
    except BlockingIOError:
        return None if not got else (got if got.endswith(b"}") else None)
    except ConnectionResetError:
        return got


def test_slow_clients_are_dropped(tmp_path):
    with Server(tmp_path / "state", "--no-access-log", "--no-contingency", "--read-timeout", "1") as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        socks = []
        try:
            for k in range(SLOW):
                for first in (b"GET /v1/state HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
                              b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 1000\r\n\r\n{\"kind\": ", b""):
                    s = socket.create_connection(("127.0.0.1", port), timeout=30)
                    if first:
                        s.sendall(first)
                    socks.append((first[:4], s))
            # the service answers others meanwhile
            assert httpx.get(srv.url + "/healthz", timeout=60).status_code == 200
            answers: dict[int, bytes] = {}
            deadline = time.monotonic() + 90  # a bound on waiting for the drops, not a measurement
            while len(answers) < len(socks) and time.monotonic() < deadline:
                for i, (_, s) in enumerate(socks):
                    if i not in answers:
                        got = _closed(s)
                        if got is not None:
                            answers[i] = got
                time.sleep(0.2)
            assert len(answers) == len(socks), f"{len(socks) - len(answers)} slow connections still held"
            for i, (kind, _) in enumerate(socks):
                if kind == b"GET ":
                    assert answers[i].startswith(b"HTTP/1.1 408") and b"headers not received" in answers[i]
                elif kind == b"POST":
                    assert answers[i].startswith(b"HTTP/1.1 400") and b"body: not received" in answers[i]
            assert httpx.get(srv.url + "/healthz", timeout=60).status_code == 200
            assert "Traceback" not in srv.log_text()
        finally:
            for _, s in socks:
                s.close()

