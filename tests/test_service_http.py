"""The coordinator as a real uvicorn process on a free loopback port: every endpoint, token, SIGKILL."""

from __future__ import annotations

import copy
import threading

import httpx
import pytest

from conftest import ROOT
from servers import Server
from unicron_plan import api
from unicron_plan.client import PlannerClient, PlannerError
from unicron_plan.schema.service import StateReply
from unicron_plan.io import read_json
from unicron_plan.service import state as st


def _split(path: str) -> tuple[dict, dict]:
    inst = read_json(ROOT / "instances" / path)
    base = copy.deepcopy(inst)
    return inst, base, base.pop("event")


def test_every_endpoint_over_http(tmp_path):
    inst, base, ev = _split("paper-128-a800.json")
    with Server(tmp_path / "s", token="tok") as srv:
        assert httpx.get(srv.url + "/v1/state").status_code == 401
        with PlannerClient(srv.url, token="tok") as c:
            assert c.put_cluster(base).revision == 1
            assert c.health().status == "ok"
            dry = c.post_event(ev, dry_run=True)
            plan = c.post_event(ev, idempotency_key="e-1")
            assert c.post_event(ev, idempotency_key="e-1") == plan
            expected = api.solve(inst)
            assert dry.objective == plan.objective == pytest.approx(expected.objective, rel=1e-12)
            assert api.validate_plan(inst, plan).valid
            assert c.get_plan(plan.plan_id) == plan
            applied = c.apply(plan.plan_id).revision
            with pytest.raises(PlannerError) as err:
                c.apply(plan.plan_id)
            assert err.value.status == 409
            job = copy.deepcopy(base["jobs"][0])
            job["id"], job["current"] = "queued/1", {"gpus": 0, "nodes": []}
            assert c.add_job(job).revision == applied + 1
            assert c.remove_job("queued/1").revision == applied + 2
            with pytest.raises(PlannerError) as err:
                c.post_event({"kind": "failure", "failed_nodes": ["ghost"]})
            assert err.value.status == 422 and err.value.message.startswith("event.failed_nodes[0]")
            state = c.state()
            assert state.revision == applied + 2
            kinds = [e.type for e in c.history()]
            assert kinds == ["cluster", "event", "plan", "apply", "job", "job"]
            assert [e.type for e in c.history(since=applied)] == ["job", "job"]
            assert "unicron_state_revision" in c.metrics()
            assert httpx.get(srv.url + "/openapi.json", headers={"Authorization": "Bearer tok"}).status_code == 200


def test_sigkill_mid_stream_loses_nothing_acknowledged(tmp_path):
    inst, base, _ = _split("paper-128-a800.json")
    nodes = [n["id"] for n in base["cluster"]["nodes"]]
    acked: list[tuple[int, str]] = []  # (revision, type) of every acknowledged change
    srv = Server(tmp_path / "s", "--no-contingency").start()
    try:
        c = PlannerClient(srv.url, timeout=10)
        acked.append((c.put_cluster(base).revision, "cluster"))
        killer = threading.Timer(1.5, srv.kill)
        killer.start()
        k = 0
        try:
            while k < 10_000:
                node = nodes[k % len(nodes)]
                plan = c.post_event({"kind": "failure", "failed_nodes": [node]})
                acked.append((plan.revision, "event"))
                acked.append((c.apply(plan.plan_id).revision, "apply"))
                acked.append((c.post_event({"kind": "repair", "repaired_nodes": [node]}).revision, "event"))
                k += 1
        except (httpx.HTTPError, PlannerError):
            pass
        killer.join()
        assert srv.proc.returncode == -9 and k < 10_000
    finally:
        srv.stop()
    assert len(acked) > 4
    with Server(tmp_path / "s", "--no-contingency") as srv2, PlannerClient(srv2.url) as c2:
        entries = c2.history()
        by_rev = {e.revision: e.type for e in entries}
        for rev, kind in acked:
            assert by_rev.get(rev) == kind
        assert [e.revision for e in entries] == list(range(1, len(entries) + 1))
        state = c2.state()
        replayed = st.replay((e.revision, e.type, e.body) for e in entries)
        assert StateReply.model_validate(st.state_document(replayed)) == state
        assert state.revision >= max(r for r, _ in acked)
        # the restarted service keeps planning from there
        inst_now = state.model_dump(mode="json", exclude_none=True)["instance"]
        pending = set((inst_now.get("event") or {}).get("failed_nodes", []))
        healthy = [n["id"] for n in inst_now["cluster"]["nodes"] if not n.get("failed_gpus") and n["id"] not in pending]
        plan = c2.post_event({"kind": "failure", "failed_nodes": [healthy[0]]})
        assert plan.objective == pytest.approx(api.solve(c2.state().instance).objective, rel=1e-12)


def test_serve_bad_options_exit_2(tmp_path):
    import subprocess
    import sys

    for extra, field in [(["--token-file", str(tmp_path / "missing")], "--token-file"),
                         (["--solver", "nope"], "nope"), (["--port", "70000"], "--port")]:
        r = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "serve", "--state", str(tmp_path / "s"), *extra],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr, r.stderr
