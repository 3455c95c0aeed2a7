"""Warm contingency runs in a worker process, stops when the state moves on, and its answers are served."""

from __future__ import annotations

import os
import time

import pytest

from conftest import ROOT, WARM_WAIT
from unicron_plan import api
from unicron_plan.io import read_json
from unicron_plan.service.coordinator import Coordinator


def _base(name: str) -> dict:
    inst = read_json(ROOT / "instances" / name)
    inst.pop("event", None)
    return inst


def _wait_answers(coord: Coordinator, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = coord.precomputed_status()
        if done["total"] and done["done"] >= done["total"]:
            return done
        time.sleep(0.05)
    raise AssertionError(f"answers not stored after {timeout} s: {coord.precomputed_status()}")


def test_warm_stages_run_in_another_process_and_answers_equal_fresh_solves(tmp_path):
    coord = Coordinator(tmp_path / "s")
    try:
        base = _base("paper-128-a800.json")
        coord.put_cluster(base)
        assert coord.wait_contingency(WARM_WAIT)
        _wait_answers(coord)
        assert coord.warm_pids and os.getpid() not in coord.warm_pids
        for node in [n["id"] for n in base["cluster"]["nodes"]][:4]:
            ev = {"kind": "failure", "failed_nodes": [node]}
            served = coord.post_event(ev, dry_run=True)
            assert served["solver"]["name"] == "contingency"
            assert served["objective"] == pytest.approx(api.solve(dict(base, event=ev)).objective, rel=1e-12)
    finally:
        coord.close()


def test_a_new_cluster_stops_the_worker_of_the_old_one(tmp_path):
    coord = Coordinator(tmp_path / "s")
    try:
        coord.put_cluster(_base("jagged-2048-32jobs.json"))
        deadline = time.monotonic() + 60
        while not coord.warm_pids and time.monotonic() < deadline:
            time.sleep(0.01)
        first = coord.warm_pids[0]
        assert _alive(first)  # 256 nodes' answers take seconds: it is still working
        small = _base("paper-128-a800.json")
        coord.put_cluster(small)
        assert coord.wait_contingency(WARM_WAIT)
        _wait_answers(coord)
        assert coord.warm_pids[-1] != first
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(first):
            time.sleep(0.05)
        assert not _alive(first), "the worker of the replaced cluster still runs"
        assert coord.precomputed_status()["total"] == len(small["cluster"]["nodes"])
    finally:
        coord.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _until(condition, bound: float = 10.0) -> None:
    """Poll ``condition`` until it holds or ``bound`` seconds pass (a hang guard, not a measurement)."""
    deadline = time.monotonic() + bound
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0]


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process states from /proc (Linux)")
def test_the_worker_is_stopped_while_a_request_solves(tmp_path):
    coord = Coordinator(tmp_path / "s")
    try:
        coord.put_cluster(_base("jagged-2048-32jobs.json"))
        deadline = time.monotonic() + 60
        while coord._warm_pid is None and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = coord._warm_pid
        assert pid is not None
        with coord._worker_paused():
            _until(lambda: _state(pid) == "T")  # on a loaded machine the stop may land late: a bounded wait
            assert _state(pid) == "T"  # stopped: it takes no CPU from the request
        _until(lambda: not _alive(pid) or _state(pid) != "T")
        if _alive(pid):
            assert _state(pid) != "T"
        _wait_answers(coord)  # and it still finishes
    finally:
        coord.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process states from /proc (Linux)")
def test_back_to_back_requests_stop_the_worker_only_part_of_the_time(tmp_path):
    # a stream of requests with no gap between them must not starve the warm stages
    coord = Coordinator(tmp_path / "s")
    try:
        coord.put_cluster(_base("jagged-16384-128jobs.json"))
        deadline = time.monotonic() + 60
        while coord._warm_pid is None and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = coord._warm_pid
        states = []
        end = time.monotonic() + 5
        while time.monotonic() < end and coord._warm_pid == pid:
            with coord._worker_paused():
                time.sleep(0.25)
                if not states:  # the first pause always stops it; on a loaded machine the stop may land late
                    _until(lambda: not _alive(pid) or _state(pid) == "T")
                states.append(_state(pid) if _alive(pid) else "gone")
        assert states[0] == "T"
        assert sum(s == "T" for s in states) <= 0.75 * len(states) + 2
        assert any(s not in ("T", "gone") for s in states)
    finally:
        coord.close()


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="reads process priorities (POSIX)")
def test_the_worker_runs_at_the_lowest_cpu_priority(tmp_path):
    from unicron_plan.service.coordinator import WARM_NICENESS

    coord = Coordinator(tmp_path / "s")
    try:
        coord.put_cluster(_base("jagged-2048-32jobs.json"))
        deadline = time.monotonic() + 60
        seen = None
        while time.monotonic() < deadline and seen != WARM_NICENESS:
            pid = coord._warm_pid
            if pid is not None:
                try:
                    seen = os.getpriority(os.PRIO_PROCESS, pid)
                except OSError:  # ended between the two reads
                    pass
            time.sleep(0.01)
        assert seen == WARM_NICENESS == 19
        from multiprocessing import forkserver

        server = forkserver._forkserver._forkserver_pid  # workers are forked from it: it is lowered too
        assert server and os.getpriority(os.PRIO_PROCESS, server) == WARM_NICENESS
        assert os.getpriority(os.PRIO_PROCESS, 0) < WARM_NICENESS  # the service itself is not lowered
    finally:
        coord.close()


def _plan_of(served: dict) -> dict:
    out = {k: v for k, v in served.items() if k not in ("plan_id", "revision", "solver", "includes_pending")}
    return out


def test_cold_answers_during_the_warm_up_equal_api_solve(tmp_path):
    # while the worker builds (and after): failures of two nodes, of a rack and of GPUs are solved
    # in the request's process, and their plans are api.solve's, field by field
    base = _base("cluster-1024-rack-failure.json")
    nodes = base["cluster"]["nodes"]
    rack = nodes[0]["rack"]
    events = [{"kind": "failure", "failed_nodes": [nodes[1]["id"], nodes[-1]["id"]]},
              {"kind": "failure", "failed_nodes": [n["id"] for n in nodes if n.get("rack") == rack]},
              {"kind": "failure", "failed_gpus": [{"node": nodes[2]["id"], "gpu": 0}]}]
    coord = Coordinator(tmp_path / "s")
    try:
        coord.put_cluster(base)
        for ev in events * 2:
            served = coord.post_event(ev, dry_run=True)
            fresh = api.solve(dict(base, event=ev)).model_dump(mode="json", exclude_none=True)
            fresh.pop("solver")
            assert _plan_of(served) == fresh
        assert coord.wait_contingency(WARM_WAIT)
        for ev in events:
            served = coord.post_event(ev, dry_run=True)
            expected = api.solve(dict(base, event=ev))
            if served["solver"]["name"] == "contingency":  # the rack's failure, from the index
                assert served["objective"] == pytest.approx(expected.objective, rel=1e-12)
                assert api.validate_plan(dict(base, event=ev), served).valid
            else:
                fresh = expected.model_dump(mode="json", exclude_none=True)
                fresh.pop("solver")
                assert _plan_of(served) == fresh
    finally:
        coord.close()


def test_a_cold_request_reuses_the_prepared_cluster(tmp_path, monkeypatch):
    # the applied cluster was checked and tabulated when it was uploaded: a cold request checks only
    # its event, and looks for a contingency key only when there is an index to read
    import unicron_plan.core.problem as problem
    import unicron_plan.plan.contingency as contingency
    from unicron_plan.service.app import create_app

    base = _base("jagged-2048-32jobs.json")
    app = create_app(tmp_path / "s", contingency=False)
    from fastapi.testclient import TestClient

    c = TestClient(app, base_url="http://127.0.0.1")
    assert c.put("/v1/cluster", json=base).status_code == 200
    calls = []

    def counted(name, fn):
        def wrapper(*a, **k):
            calls.append(name)
            return fn(*a, **k)
        return wrapper

    monkeypatch.setattr(problem, "prepare", counted("prepare", problem.prepare))
    monkeypatch.setattr(problem, "check_instance", counted("check_instance", problem.check_instance))
    monkeypatch.setattr(problem, "resolve_tables", counted("resolve_tables", problem.resolve_tables))
    monkeypatch.setattr(contingency, "failure_key", counted("failure_key", contingency.failure_key))
    ids = [n["id"] for n in base["cluster"]["nodes"]]
    for k in range(3):
        ev = {"kind": "failure", "failed_nodes": [ids[k], ids[-1 - k]]}
        calls.clear()
        r = c.post("/v1/events?dry_run=true", json=ev)
        assert r.status_code == 200
        assert calls == []  # nothing prepared, checked whole or tabulated again; no key looked for
        fresh = api.solve(dict(base, event=ev)).model_dump(mode="json", exclude_none=True)
        assert {"check_instance", "resolve_tables"} <= set(calls)  # (the counting sees a whole check)
        fresh.pop("solver")
        assert _plan_of(r.json()) == fresh


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process states from /proc (Linux)")
def test_the_worker_is_stopped_from_an_events_body_until_its_plan_is_sent(tmp_path):
    import asyncio

    from unicron_plan.service.app import create_app

    app = create_app(tmp_path / "s")
    coord = app.state.coordinator
    try:
        base = _base("jagged-2048-32jobs.json")
        coord.put_cluster(base)
        deadline = time.monotonic() + 60
        while coord._warm_pid is None and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = coord._warm_pid
        body = ('{"kind": "failure", "failed_nodes": ["%s", "%s"]}' % (
            base["cluster"]["nodes"][0]["id"], base["cluster"]["nodes"][-1]["id"])).encode()
        seen = {}

        async def exchange():
            chunks = [{"type": "http.request", "body": body[:10], "more_body": True},
                      {"type": "http.request", "body": body[10:], "more_body": False}]

            async def receive():
                if chunks:
                    seen.setdefault("while reading", []).append(coord._solving)
                    return chunks.pop(0)
                await asyncio.sleep(3600)

            async def send(message):
                if message["type"] == "http.response.body":
                    # a stop is open (the state may read R until the stopped worker is next scheduled)
                    seen.setdefault("while sending", []).append(
                        coord._solving > 0 and bool(coord._stops) and coord._stops[-1][1] is None)

            scope = {"type": "http", "method": "POST", "path": "/v1/events", "raw_path": b"/v1/events",
                     "query_string": b"dry_run=true",
                     "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
                     "http_version": "1.1", "scheme": "http", "server": ("127.0.0.1", 80),
                     "client": ("127.0.0.1", 1), "root_path": "", "app": app}
            await app(scope, receive, send)

        asyncio.run(exchange())
        time.sleep(0.2)
        assert seen["while reading"] == [0, 0]  # not while the body arrives
        assert seen["while sending"] and all(seen["while sending"])  # stopped until the plan is sent
        assert coord._solving == 0
        if _alive(pid) and coord._warm_pid == pid:
            assert _state(pid) != "T"  # and continued after
    finally:
        coord.close()


def test_the_heap_is_settled_after_the_first_incremental_plans(tmp_path, monkeypatch):
    # the first plans on a cluster make the terms later events of their key reuse: the heap is settled
    # after each of the first SETTLE_PLANS (a full collection then no longer walks them), not after more
    from unicron_plan.service import coordinator as co

    settled = []
    real = co._settle_heap
    monkeypatch.setattr(co, "_settle_heap", lambda: (settled.append(1), real()))
    base = _base("jagged-2048-32jobs.json")
    ids = [n["id"] for n in base["cluster"]["nodes"]]
    plain = Coordinator(tmp_path / "plain", contingency=False)
    coord = Coordinator(tmp_path / "s", contingency=False, settle_heap=True)
    try:
        plain.put_cluster(base)
        coord.put_cluster(base)
        settled.clear()
        for k in range(co.SETTLE_PLANS + 3):
            ev = {"kind": "failure", "failed_nodes": [ids[k], ids[-1 - k]]}
            got, want = coord.post_event(ev, dry_run=True), plain.post_event(ev, dry_run=True)
            assert got["solver"]["name"] == "dp" and got.pop("solver")["name"] == want.pop("solver")["name"]
            assert got == want  # the same plans, settled or not
            assert len(settled) == min(k + 1, co.SETTLE_PLANS)
        coord.put_cluster(dict(base, jobs=base["jobs"][:-1]))  # a new cluster: settled again after its first plans
        settled.clear()
        coord.post_event({"kind": "failure", "failed_nodes": [ids[0], ids[1]]}, dry_run=True)
        assert len(settled) == 1
    finally:
        plain.close()
        coord.close()


def test_the_collector_is_off_while_a_request_solves(tmp_path):
    # a cold answer's many objects would set off collections inside it (full ones walk what a warm-up
    # keeps): the collector is off while any request solves, on again after the last (where it was on)
    import gc

    coord = Coordinator(tmp_path / "s", contingency=False)
    seen = []
    real = coord.solve

    def solve(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    coord.solve = solve
    base = _base("jagged-2048-32jobs.json")
    ids = [n["id"] for n in base["cluster"]["nodes"]]
    try:
        coord.put_cluster(base)
        assert gc.isenabled()
        with coord.worker_paused():  # a request's whole exchange (nested in it: counted once)
            assert not gc.isenabled()
            coord.post_event({"kind": "failure", "failed_nodes": [ids[0], ids[1]]}, dry_run=True)
            assert not gc.isenabled()  # still within the outer exchange
        assert gc.isenabled() and seen == [False]
        coord.post_event({"kind": "failure", "failed_nodes": [ids[2]]}, dry_run=True)
        assert gc.isenabled() and seen == [False, False]
        gc.disable()  # a process that runs without the collector keeps it off
        try:
            coord.post_event({"kind": "failure", "failed_nodes": [ids[3], ids[4]]}, dry_run=True)
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        coord.close()
