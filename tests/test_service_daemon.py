"""`unicron-plan serve` as a daemon: start-up line, access log (text, JSON, off), the lock on
--state, a busy port, the no-token warning and a graceful SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from conftest import ROOT
from unicron_plan.io import read_json
from unicron_plan.service import daemon


def _start(state, *args: str) -> tuple[subprocess.Popen, str, str]:
    """A serve process on a free port, its URL and its start-up line."""
    cmd = [sys.executable, "-m", "unicron_plan.cli", "serve", "--state", str(state), "--port", "0",
           "--no-contingency", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    m = re.search(r"listening on (http://\S+),", line)
    if not m:
        proc.kill()
        raise AssertionError(f"no start-up line: {line!r} {proc.stderr.read()}")
    return proc, m.group(1), line


def _stop(proc: subprocess.Popen) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return proc.returncode, proc.stderr.read()


def test_start_up_line_and_access_log(tmp_path):
    proc, url, _ = _start(tmp_path / "s")
    try:
        assert httpx.get(url + "/healthz").status_code == 200
        assert httpx.get(url + "/v1/plans/p99").status_code == 404
    finally:
        code, rest = _stop(proc)
    assert code == 0
    lines = rest.splitlines()
    assert any(re.search(r"GET /healthz 200 [\d.]+ ms$", ln) for ln in lines), rest
    assert any(re.search(r"GET /v1/plans/p99 404 [\d.]+ ms$", ln) for ln in lines), rest


def test_start_up_line_names_address_state_revision_token(tmp_path):
    proc, url, line = _start(tmp_path / "s")
    assert _stop(proc)[0] == 0
    assert re.search(r"listening on http://127\.0\.0\.1:\d+, state \S+/s/state\.sqlite3 \(revision 0\), "
                     r"token off$", line.strip()), line
    tf = tmp_path / "tok"
    tf.write_text("secret\n")
    proc, url, line = _start(tmp_path / "s", "--token-file", str(tf))
    try:
        assert httpx.get(url + "/healthz").status_code == 401
        inst = read_json(ROOT / "instances" / "tiny-repair-grow.json")
        inst.pop("event")
        r = httpx.put(url + "/v1/cluster", json=inst, headers={"Authorization": "Bearer secret"})
        assert r.json() == {"revision": 1}
    finally:
        assert _stop(proc)[0] == 0
    assert line.strip().endswith("token on")
    proc, url, line = _start(tmp_path / "s")
    assert _stop(proc)[0] == 0
    assert "(revision 1), token off" in line


def test_access_log_off_and_json_format(tmp_path):
    proc, url, _ = _start(tmp_path / "s", "--no-access-log")
    httpx.get(url + "/healthz")
    code, rest = _stop(proc)
    assert code == 0 and "/healthz" not in rest, rest
    cmd = [sys.executable, "-m", "unicron_plan.cli", "serve", "--state", str(tmp_path / "s"), "--port", "0",
           "--no-contingency", "--log-format", "json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    start = json.loads(proc.stderr.readline())
    assert start["kind"] == "start" and start["token"] is False and start["revision"] == 0
    assert start["state"].endswith("state.sqlite3") and start["url"].startswith("http://127.0.0.1:")
    httpx.get(start["url"] + "/healthz")
    code, rest = _stop(proc)
    docs = [json.loads(ln) for ln in rest.splitlines()]  # every line is one JSON object
    access = [d for d in docs if d.get("kind") == "access"]
    assert access and access[0]["method"] == "GET" and access[0]["path"] == "/healthz"
    assert access[0]["status"] == 200 and access[0]["ms"] >= 0 and code == 0


def test_second_serve_on_the_same_state_exits_2_naming_the_holder(tmp_path):
    proc, url, _ = _start(tmp_path / "s")
    try:
        port = url.rsplit(":", 1)[1]
        for p in ("0", port):  # the same port too: the lock is named first
            r = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "serve", "--state", str(tmp_path / "s"),
                                "--port", p], capture_output=True, text=True, timeout=60)
            assert r.returncode == 2, r.stderr
            assert r.stderr.startswith("error: --state") and f"pid {proc.pid}" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        assert httpx.get(url + "/healthz").status_code == 200  # the first one is untouched
    finally:
        assert _stop(proc)[0] == 0
    proc, url, _ = _start(tmp_path / "s")  # released at exit
    assert _stop(proc)[0] == 0


def test_port_in_use_exits_2_with_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "serve", "--state", str(tmp_path / "s"),
                            "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"error: --port: 127.0.0.1:{port} is already in use"


@pytest.mark.parametrize("address,token,warns", [
    (("0.0.0.0", 8470), None, True), (("10.1.2.3", 8470), None, True), (("::", 8470, 0, 0), None, True),
    (("0.0.0.0", 8470), "t", False), (("127.0.0.1", 8470), None, False), (("127.8.9.1", 8470), None, False),
    (("::1", 8470, 0, 0), None, False)])
def test_warning_when_bound_beyond_loopback_without_token(address, token, warns):
    # a stand-in socket: the tests bind loopback only
    class Sock:
        def getsockname(self):
            return address

    warning = daemon.exposure_warning(Sock(), token)
    assert (warning is not None) == warns
    if warns:
        assert warning.startswith(f"{address[0]} is reachable beyond this machine and no --token-file is set")


def test_no_warning_on_loopback(tmp_path):
    proc, url, _ = _start(tmp_path / "s")
    code, rest = _stop(proc)
    assert code == 0 and "warning" not in rest, rest


def test_sigterm_finishes_the_request_in_flight_and_exits_0(tmp_path):
    proc, url, _ = _start(tmp_path / "s")
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"kind": "job_arrival", "jobs": []}).encode()
    try:
        with socket.create_connection((host, int(port)), timeout=20) as s:
            s.sendall(b"POST /v1/events?dry_run=true HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body[:5])
            time.sleep(0.5)  # the request is in flight: headers and part of the body received
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert proc.poll() is None  # still finishing the request
            s.sendall(body[5:])
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        # it answered (no cluster yet: the JSON error), then exited 0
        assert reply.startswith(b"HTTP/1.1 422"), reply[:200]
        assert b'"error":' in reply
        assert proc.wait(20) == 0
    finally:
        code, rest = _stop(proc)
    assert code == 0
    assert "POST /v1/events 422" in rest, rest


def test_an_error_is_one_line_in_text_and_one_object_in_json(monkeypatch):
    import io
    import logging

    monkeypatch.delenv("UNICRON_DEBUG", raising=False)
    for fmt in ("text", "json"):
        buf = io.StringIO()
        daemon.setup_logging(fmt, buf)
        try:
            {}["missing"]
        except KeyError:
            logging.getLogger("uvicorn.error").error("Exception in ASGI application", exc_info=True)
        out = buf.getvalue()
        if fmt == "text":
            assert out.count("\n") == 1 and out.rstrip().endswith("error: Exception in ASGI application: "
                                                                  "KeyError: 'missing'"), out
        else:
            doc = json.loads(out)
            assert doc["level"] == "error" and "KeyError: 'missing'" in doc["exception"]
    for name in (daemon.LOGGER, "uvicorn", "uvicorn.error"):  # leave the process's logging as it was
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
