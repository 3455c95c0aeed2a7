"""Stored answers as deltas on a shared body (service/answers.py): every answer of the warm stage, for its
representative and relabelled for every other node of its class, reads as the plan the whole text
would give (the plan's own text, and plan.contingency.relabel_plan of it)."""

from __future__ import annotations

import json
import zlib

import pytest

from unicron_plan.plan import incremental
from unicron_plan.plan.contingency import relabel_plan
from unicron_plan.schema import Instance
from unicron_plan.service import coordinator, state as st
from unicron_plan.service.answers import joined_text, relabelled_text
from unicron_plan.tools.generate import generate_instance


@pytest.mark.parametrize("kind,seed", [("equal-per-gpu", 1), ("synthetic", 2), ("near-linear", 3), ("linear-step", 4)])
def test_delta_answers_read_as_the_whole_plans(kind, seed, monkeypatch):
    """(On the synthetic cluster a failure changes most jobs: its answers go whole.)"""
    inst = generate_instance(seed, gpus=1024, jobs=12, failed_nodes=0, curves=kind)
    inst.pop("event", None)
    snapshot = st.State(base=Instance.model_validate(inst), revision=1, base_version=1)
    order = {n.id: k for k, n in enumerate(snapshot.base.cluster.nodes)}
    bodies, deltas = {}, 0
    messages = list(coordinator._warm_messages(snapshot, None, 4096, lambda: False))
    assert messages[0][0] == "index" and messages[0][1] is not None
    # the reference: every answer's whole text, as the stage stores it without the delta
    whole = {}
    monkeypatch.setattr(incremental, "shared_entries", lambda kept: None)  # every answer sent whole
    for message in coordinator._warm_messages(snapshot, None, 4096, lambda: False):
        if message[0] == "answer":
            whole[message[1]] = json.loads(zlib.decompress(message[3]))
    monkeypatch.undo()
    for message in messages[1:]:
        if message[0] == "shared":
            bodies[message[1]] = message[2]
            continue
        _, rep, members, packed = message
        if not isinstance(packed, tuple):
            continue
        deltas += 1
        number, head, changed, tail = packed
        assert len(changed) < len(bodies[number])  # a delta, not the whole plan
        text = joined_text(bodies[number], head, changed, tail)
        end = b',"plan_id":null,"revision":3,"includes_pending":{}}'
        assert joined_text(bodies[number], head, changed, tail, end) == text[:-1] + end
        got = json.loads(text)
        want = whole[rep]
        got["solver"].pop("wall_seconds"), want["solver"].pop("wall_seconds")
        assert got == want
        for b in members[1:]:
            other = relabelled_text(bodies[number], head, changed, tail, rep, b, order)
            assert relabelled_text(bodies[number], head, changed, tail, rep, b, order, end) == other[:-1] + end
            relabelled = json.loads(other)
            expect = relabel_plan(json.loads(text), rep, b, order)
            assert relabelled == expect
    assert deltas > 0 or kind == "synthetic"


def test_cold_replies_encode_the_shared_entries_once_and_read_as_the_plans_text(tmp_path):
    """A cold dry run's text (the kept plan's entries spliced in from their JSON encoded once) is the
    plan's own JSON text, byte for byte, on a cluster where failures change few jobs and on one where
    they change most."""
    import numpy as np

    for kind in ("equal-per-gpu", "synthetic"):
        inst = generate_instance(5, gpus=1024, jobs=12, failed_nodes=0, curves=kind)
        inst.pop("event", None)
        c = coordinator.Coordinator(tmp_path / kind, contingency=False)
        c.put_cluster(inst)
        rng = np.random.default_rng(0)
        nodes = [n["id"] for n in inst["cluster"]["nodes"]]
        spliced = 0
        for _ in range(6):
            pair = [nodes[int(i)] for i in rng.choice(len(nodes), 2, replace=False)]
            after, _ = st.record_event(c.state, {"kind": "failure", "failed_nodes": pair}, c._nodes(c.state))
            plan = c._plan(c.state, after, dry_run=True)
            assert c._plan_text(plan) == plan.model_dump_json(exclude_none=True).encode()
            spliced += c._body is not None and c._body[0] is incremental.shared_entries(c._kept[1])
        assert spliced or kind == "synthetic"
        c.close()


def test_a_cluster_too_large_for_an_index_has_its_answers_solved_per_class(monkeypatch):
    """Above INDEX_MAX_CELLS the warm stage stores no failure in its index and answers every class by
    the DP on the kept plan's terms: each answer (for every node of its class) reads as api.solve's
    plan of that failure, proven optimal."""
    from unicron_plan import api

    from unicron_plan.plan import contingency

    monkeypatch.setattr(contingency, "INDEX_MAX_CELLS", 0)
    inst = generate_instance(4, gpus=1024, jobs=12, failed_nodes=0, curves="equal-per-gpu")
    inst.pop("event", None)
    snapshot = st.State(base=Instance.model_validate(inst), revision=1, base_version=1)
    order = {n.id: k for k, n in enumerate(snapshot.base.cluster.nodes)}
    messages = list(coordinator._warm_messages(snapshot, None, 4096, lambda: False))
    assert messages[0][0] == "index" and coordinator._answers_only(messages[0][1])
    bodies, checked = {}, 0
    for message in messages[1:]:
        if message[0] == "shared":
            bodies[message[1]] = message[2]
            continue
        _, rep, members, packed = message
        for b in members[:3]:
            if isinstance(packed, tuple):
                number, head, changed, tail = packed
                text = joined_text(bodies[number], head, changed, tail) if b == rep else \
                    relabelled_text(bodies[number], head, changed, tail, rep, b, order)
                got = json.loads(text)
            else:
                got = json.loads(zlib.decompress(packed))
                if b != rep:
                    got = relabel_plan(got, rep, b, order)
            event = Instance.model_validate({**inst, "event": {"kind": "failure", "failed_nodes": [b]}})
            want = json.loads(api.solve(event).model_dump_json(exclude_none=True))
            assert got["status"]["solution"] == "optimal"
            assert got["objective"] == pytest.approx(want["objective"], rel=1e-9)
            assert [(j["id"], j["gpus"]) for j in got["jobs"]] == [(j["id"], j["gpus"]) for j in want["jobs"]]
            checked += 1
    assert checked > 5


def test_an_index_that_stores_no_failure_is_not_read(tmp_path, monkeypatch):
    """With the index of a cluster too large for one, a single-node failure not stored yet is solved
    as any cold event (incrementally, without api.solve), not through the index."""
    from unicron_plan import api

    inst = generate_instance(6, gpus=1024, jobs=12, failed_nodes=0, curves="equal-per-gpu")
    inst.pop("event", None)
    c = coordinator.Coordinator(tmp_path / "s", contingency=False)
    c.put_cluster(inst)
    c._index = (c.state.base_version, coordinator.ANSWERS_ONLY)
    node = inst["cluster"]["nodes"][3]["id"]
    want = api.solve(Instance.model_validate({**inst, "event": {"kind": "failure", "failed_nodes": [node]}}))

    def whole(*args, **kwargs):
        raise AssertionError("solved through api.solve")

    monkeypatch.setattr(api, "solve", whole)
    got = json.loads(c.dry_run_reply({"kind": "failure", "failed_nodes": [node]}))
    assert got["solver"]["name"] == want.solver.name == "dp"
    assert got["objective"] == pytest.approx(want.objective, rel=1e-9)
    c.close()
