"""The coordinator's side of in-band detection: POST /v1/signals, hangs, incidents, history (docs/detection.md)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from unicron_plan.faults.signals import CLASSES
from unicron_plan.io import read_json
from unicron_plan.schema.signal import Signal
from unicron_plan.service.app import create_app
from unicron_plan.service.detect import Detector, DetectorSettings

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _detector(**settings):
    acts: list[dict] = []
    clock = Clock()

    def act(rec):
        acts.append(rec)
        return {"revision": len(acts), **rec}

    jobs = {"n1": ["a", "b"], "n2": ["a"]}
    d = Detector(act, lambda node: jobs.get(node, []), DetectorSettings(**settings), clock=clock, monitor=False)
    return d, acts, clock


def _sig(**kw):
    kw.setdefault("job", "a")
    kw.setdefault("rank", 0)
    return Signal.model_validate(kw)


def _beats(d, clock, job, ranks, steps, seconds):
    for k in range(1, steps + 1):
        clock.now += seconds
        d.receive([_sig(job=job, rank=r, kind="heartbeat", step=k, iteration_seconds=seconds) for r in ranks])


def test_ranks_that_stop_together_are_one_hang():
    d, acts, clock = _detector()
    _beats(d, clock, "a", [0, 1, 2, 3], steps=5, seconds=1.0)
    clock.now += 2.9  # under 3x the running average (1 s)
    assert d.check() == [] and acts == []
    clock.now += 0.2
    (hang,) = d.check()
    assert hang["kind"] == "task_hang" and hang["severity"] == "SEV2" and hang["action"] == "restart"
    assert hang["ranks"] == [0, 1, 2, 3] and hang["job"] == "a" and "silent" in hang["evidence"]
    clock.now += 10
    assert d.check() == []  # the job's ranks start afresh after the incident


def test_a_rank_needs_a_few_steps_before_it_can_hang():
    d, acts, clock = _detector()
    _beats(d, clock, "a", [0], steps=2, seconds=1.0)
    clock.now += 100
    assert d.check() == [] and acts == []


def test_hang_threshold_has_a_floor_and_follows_the_heartbeat_gap():
    d, acts, clock = _detector(min_hang_seconds=2.0)
    _beats(d, clock, "a", [0], steps=5, seconds=0.01)  # fast iterations: the 2 s floor rules
    clock.now += 1.9
    assert d.check() == []
    clock.now += 0.2
    assert [r["kind"] for r in d.check()] == ["task_hang"]
    d2, _, clock2 = _detector(min_hang_seconds=0.1)
    for k in range(1, 6):  # steps of 0.01 s reported every 2 s (a watch's heartbeat interval)
        clock2.now += 2.0
        d2.receive([_sig(kind="heartbeat", step=k * 200, iteration_seconds=0.01)])
    clock2.now += 5.0
    assert d2.check() == []
    clock2.now += 1.1
    assert len(d2.check()) == 1


def test_closed_rank_is_not_a_hang():
    d, acts, clock = _detector()
    _beats(d, clock, "a", [0, 1], steps=4, seconds=1.0)
    d.receive([_sig(rank=0, kind="closed"), _sig(rank=1, kind="closed")])
    clock.now += 100
    assert d.check() == []


def test_duplicates_from_many_ranks_are_one_incident():
    d, acts, clock = _detector()
    first = d.receive([_sig(rank=r, kind="cuda_error", evidence="CUDA error: x") for r in range(8)])
    assert len(first) == 1 and len(acts) == 1
    d.receive([_sig(rank=0, kind="exited_abnormally", exit_code=1)])  # the ranks then exit: same incident
    assert len(acts) == 1
    clock.now += 61  # after the window, a new incident
    d.receive([_sig(rank=0, kind="exited_abnormally", exit_code=1)])
    assert len(acts) == 2


def test_an_incident_closes_when_the_job_trains_again():
    d, acts, clock = _detector()
    d.receive([_sig(kind="cuda_error")])
    d.receive([_sig(kind="cuda_error", rank=1)])
    assert len(acts) == 1
    _beats(d, clock, "a", [0], steps=3, seconds=1.0)  # restarted: steps again
    d.receive([_sig(kind="cuda_error", rank=1)])  # a new fault, well within the window
    assert len(acts) == 2


def test_a_more_severe_report_is_its_own_incident():
    d, acts, clock = _detector()
    d.receive([_sig(kind="cuda_error", node="n1")])
    d.receive([_sig(kind="ecc_error", node="n1", rank=3)])
    assert [(a["severity"], a["action"]) for a in acts] == [("SEV2", "restart"), ("SEV1", "reconfigure")]
    d.receive([_sig(job="b", kind="exited_abnormally", node="n1")])  # b ran on n1: part of the SEV1 incident
    d.receive([_sig(job=None, kind="nvlink_error", node="n1")])
    assert len(acts) == 2


def test_sev3_reattempts_then_escalates_within_the_window():
    d, acts, clock = _detector()
    d.receive([_sig(kind="connection_reset")])
    assert (acts[0]["severity"], acts[0]["action"]) == ("SEV3", "reattempt")
    clock.now += 100  # out of the duplicate window, within the repeat window
    d.receive([_sig(kind="link_flapping")])
    assert (acts[1]["severity"], acts[1]["action"], acts[1]["escalated_from"]) == ("SEV2", "restart", "SEV3")
    clock.now += 1000
    d.receive([_sig(kind="connection_reset")])
    assert acts[2]["severity"] == "SEV3"


def test_one_fault_seen_by_several_ranks_is_one_sev3_and_only_its_recurrence_escalates():
    d, acts, clock = _detector()
    warn = "n4:123:456 [0] NCCL WARN NET/IB : Got async event : port error"
    _beats(d, clock, "a", [0, 1, 2, 3], steps=4, seconds=0.5)
    for r in (1, 2, 0):  # the ranks print the same warning within a fraction of a second
        clock.now += 0.1
        d.receive([_sig(rank=r, node="n4", kind="other_network_error", evidence=warn)])
    assert [(a["severity"], a["action"], a["rank"]) for a in acts] == [("SEV3", "reattempt", 1)]
    _beats(d, clock, "a", [0, 1, 2, 3], steps=4, seconds=0.5)  # the reattempt works: the job trains on
    d.receive([_sig(rank=3, node="n4", kind="connection_reset")])  # the last rank's view of the same fault
    assert len(acts) == 1 and "escalated_from" not in acts[0]
    _beats(d, clock, "a", [0, 1, 2, 3], steps=20, seconds=0.5)
    d.receive([_sig(rank=1, node="n4", kind="other_network_error", evidence=warn)])  # the fault again, later
    assert [(a["severity"], a.get("escalated_from")) for a in acts] == [("SEV3", None), ("SEV2", "SEV3")]
    d.receive([_sig(rank=r, node="n4", kind="other_network_error", evidence=warn) for r in (0, 2, 3)])
    assert len(acts) == 2  # the other ranks' copies of the recurrence belong to its incident


def _node_beats(d, clock, node, count, seconds):
    for _ in range(count):
        clock.now += seconds
        d.receive([Signal.model_validate({"node": node, "rank": 0, "kind": "heartbeat", "step": 1})])


def test_a_silent_node_is_lost_and_its_jobs_hang_is_the_same_incident():
    d, acts, clock = _detector()
    for k in range(1, 6):  # ranks of job a on n1 and n2, the two nodes' heartbeats
        clock.now += 0.5
        d.receive([_sig(rank=r, node=f"n{1 + r // 2}", kind="heartbeat", step=k, iteration_seconds=0.5)
                   for r in range(4)]
                  + [Signal.model_validate({"node": n, "rank": 0, "kind": "heartbeat", "step": k}) for n in ("n1", "n2")])
    clock.now += 1.5  # everything silent: n1's node heartbeat keeps going
    d.receive([Signal.model_validate({"node": "n1", "rank": 0, "kind": "heartbeat", "step": 6})])
    assert d.check() == []  # the job's hang waits for the verdict on n2 (silent for half its threshold)
    clock.now += 0.6
    (lost,) = d.check()
    assert (lost["kind"], lost["severity"], lost["action"], lost["node"]) == ("lost_connection", "SEV1",
                                                                             "reconfigure", "n2")
    assert acts[0]["jobs"] == ["a"]
    _node_beats(d, clock, "n1", 10, 0.5)
    assert d.check() == []  # the job's hang is part of the incident; n2 is not lost again until it beats


class _Schedule:
    """Stands in for the monitor's stop event: each wait runs ``step(k)`` (k = 0, 1, ...; it moves the
    fake clock on and delivers what arrives), then the monitor checks; after ``waits`` waits it stops."""

    def __init__(self, step, waits):
        self.step, self.waits, self.k = step, waits, 0

    def wait(self, seconds):
        if self.k >= self.waits:
            return True
        self.step(self.k)
        self.k += 1
        return False


def test_a_stall_of_the_coordinator_is_no_nodes_silence():
    """The coordinator stopped for 5 s (twice): nothing could be heard, so no node and no rank was silent.
    A node that really died during the second stall is lost after the threshold heard since the resume."""
    clock, opened = Clock(), []

    def act(rec):
        opened.append((clock.now, rec))
        return {"revision": len(opened)}

    d = Detector(act, lambda node: {"n1": ["a"], "n2": ["a"]}.get(node, []), DetectorSettings(), clock=clock,
                 monitor=False)
    resumed = {}

    def beats(nodes, k):
        d.receive([_sig(rank=r, node=f"n{1 + r // 2}", kind="heartbeat", step=k + 2, iteration_seconds=0.25)
                   for r in range(4) if f"n{1 + r // 2}" in nodes]
                  + [Signal.model_validate({"node": n, "rank": 0, "kind": "heartbeat", "step": k + 2}) for n in nodes]
                  + [_sig(job="b", rank=r, node="n3", kind="heartbeat", step=k + 2, iteration_seconds=0.25)
                     for r in range(2)])  # job b: ranks alone, no node heartbeats

    def step(k):  # the monitor checks every 0.25 s; every node and rank beats every 0.5 s
        nodes = ("n1", "n2") if k < 80 else ("n1",)  # n2 (and its ranks) die in the second stall
        if k == 41:
            beats(nodes, k)  # the beats held up by the first stall, delivered after the monitor's first check
        if k in (40, 80):
            clock.now += 5.0  # the coordinator stopped: no check, nothing heard
            resumed[k] = clock.now + 0.25
        clock.now += 0.25
        if k % 2 == 0 and k != 40:
            beats(nodes, k)  # after the second stall the beats come before the monitor's check

    d._stop = _Schedule(step, waits=120)
    d._loop()
    assert [r["node"] for _, r in opened if r["kind"] == "lost_connection"] == ["n2"]
    assert [r["kind"] for _, r in opened] == ["lost_connection"]  # no hang of job b; job a's is n2's incident
    lost_at = opened[0][0]
    # n2 was last heard at most 0.5 s before the stall: lost once 2 s of silence were heard
    assert resumed[80] + 1.5 < lost_at <= resumed[80] + 2.0


def test_node_reader_report_names_the_nodes_jobs():
    d, acts, clock = _detector()
    d.receive([_sig(job=None, kind="cuda_error", node="n1", source="kernel")])
    assert acts[0]["jobs"] == ["a", "b"] and acts[0]["severity"] == "SEV2"


# ----------------------------------------------------------------------------- over HTTP
def _client(tmp_path, token=None):
    app = create_app(tmp_path / "state", contingency=False, token=token)
    return TestClient(app, base_url="http://127.0.0.1"), app


def _cluster(c, headers=None):
    inst = copy.deepcopy(read_json(ROOT / "instances" / "tiny-one-job-two-nodes.json"))
    inst.pop("event")
    assert c.put("/v1/cluster", json=inst, headers=headers).status_code == 200
    return inst


def test_sev1_becomes_the_nodes_failure_and_a_plan(tmp_path):
    c, app = _client(tmp_path)
    _cluster(c)
    r = c.post("/v1/signals", json={"signals": [
        {"job": "gpt3-13b", "rank": 5, "node": "n1", "kind": "ecc_error", "source": "exception",
         "evidence": "RuntimeError: CUDA error: uncorrectable ECC error encountered"}]})
    assert r.status_code == 200, r.text
    (inc,) = r.json()["incidents"]
    assert inc["severity"] == "SEV1" and inc["action"] == "reconfigure" and inc["plan_id"]
    entries = c.get("/v1/history").json()["entries"]
    assert [e["type"] for e in entries] == ["cluster", "signal", "event", "plan"]
    sig = entries[1]["body"]
    assert {k: sig[k] for k in ("job", "rank", "node", "kind", "severity", "action")} == {
        "job": "gpt3-13b", "rank": 5, "node": "n1", "kind": "ecc_error", "severity": "SEV1", "action": "reconfigure"}
    assert "ECC" in sig["evidence"] and entries[3]["body"]["plan_id"] == inc["plan_id"]
    assert entries[2]["body"]["failed_nodes"] == ["n1"]
    # the plan can be applied: a signal entry does not move the state's revision
    assert c.post(f"/v1/plans/{inc['plan_id']}/apply").status_code == 200
    # and a restart replays the same state
    state = c.get("/v1/state").json()
    c2, _ = _client(tmp_path)
    assert c2.get("/v1/state").json() == state


def test_sev2_is_recorded_for_the_agent_and_its_action_too(tmp_path):
    c, app = _client(tmp_path)
    _cluster(c)
    rev = c.get("/healthz").json()["revision"]
    r = c.post("/v1/signals", json={"signals": [{"job": "gpt3-13b", "rank": 0, "node": "n0", "kind": "exited_abnormally",
                                                 "exit_code": 1, "source": "exit"}]}).json()
    (inc,) = r["incidents"]
    assert inc["action"] == "restart" and "plan_id" not in inc
    assert c.get("/healthz").json()["revision"] == rev  # no state change
    done = c.post("/v1/actions", json={"signal": inc["revision"], "action": "restart", "outcome": "done",
                                       "job": "gpt3-13b", "commands": [["scontrol", "requeue", "12"]]})
    assert done.status_code == 200
    bad = c.post("/v1/actions", json={"signal": 1, "action": "restart", "outcome": "done"})
    assert bad.status_code == 422 and bad.json()["error"].startswith("signal:")
    assert [e["type"] for e in c.get("/v1/history").json()["entries"]] == ["cluster", "signal", "action"]
    metrics = c.get("/metrics").text
    assert 'unicron_signals_total{kind="exited_abnormally",outcome="incident"} 1.0' in metrics


def test_sev1_of_an_unknown_node_is_recorded_without_a_plan(tmp_path):
    c, _ = _client(tmp_path)
    _cluster(c)
    (inc,) = c.post("/v1/signals", json={"signals": [{"job": "gpt3-13b", "rank": 0, "node": "nX",
                                                      "kind": "nvlink_error"}]}).json()["incidents"]
    sig, act = [e["body"] for e in c.get("/v1/history").json()["entries"][-2:]]
    assert "plan_id" not in inc and sig["kind"] == "nvlink_error"
    assert act["outcome"] == "failed" and act["detail"].startswith("no plan:") and "nX" in act["detail"]


@pytest.mark.parametrize("body,field", [
    ({"signals": [{"job": "a", "rank": 0, "kind": "meteor"}]}, "signals[0].kind"),
    ({"signals": [{"job": "a", "rank": -1, "kind": "heartbeat"}]}, "signals[0].rank"),
    ({"signals": [{"job": "a", "rank": 0, "kind": "heartbeat", "extra": 1}]}, "signals[0].extra"),
    ({"signals": [{"rank": 0, "kind": "heartbeat"}]}, "signals[0]"),
    ({"signals": [{"job": "a", "rank": 0, "kind": "cuda_error", "evidence": "x" * 5000}]}, "signals[0].evidence"),
    ({"signals": []}, "signals"),
    ({"signals": [{"job": "a", "rank": 0, "kind": "heartbeat"}] * 257}, "signals"),
    ({"signals": [{"job": "a", "rank": 0, "kind": "heartbeat", "iteration_seconds": "1"}]},
     "signals[0].iteration_seconds"),
])
def test_bad_signals_name_the_field(tmp_path, body, field):
    c, _ = _client(tmp_path)
    r = c.post("/v1/signals", json=body)
    assert r.status_code == 422 and r.json()["error"].startswith(field), r.text
    assert c.get("/v1/history").json()["entries"] == []


def test_signals_need_the_token_and_a_bounded_body(tmp_path):
    c, _ = _client(tmp_path, token="s3cret")
    body = {"signals": [{"job": "a", "rank": 0, "kind": "heartbeat", "step": 1}]}
    assert c.post("/v1/signals", json=body).status_code == 401
    assert c.post("/v1/actions", json={}).status_code == 401
    ok = c.post("/v1/signals", json=body, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and ok.json() == {"received": 1, "incidents": []}
    big = c.post("/v1/signals", content=b"{" + b" " * (3 * 1024 * 1024) + b"}",
                 headers={"Authorization": "Bearer s3cret", "Content-Type": "application/json"})
    assert big.status_code == 413


def test_openapi_documents_the_bodies(tmp_path):
    c, _ = _client(tmp_path)
    doc = c.get("/openapi.json").json()
    for path, name in (("/v1/signals", "SignalsBody"), ("/v1/actions", "ActionBody")):
        ref = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith(name) and name in doc["components"]["schemas"]
    assert "Signal" in doc["components"]["schemas"]


def test_every_taxonomy_kind_has_a_class():
    from unicron_plan.faults import faultdata

    for kind, (sev, method) in faultdata.ERROR_TAXONOMY.items():
        assert CLASSES[kind].severity == sev.upper() and CLASSES[kind].detection == method
    assert {c.action for c in CLASSES.values()} == {"reattempt", "restart", "reconfigure"}
