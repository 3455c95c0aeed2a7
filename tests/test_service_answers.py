"""Stored answers as deltas on a shared body (service/answers.py): every answer of the warm stage, for its
representative and relabelled for every other node of its class, reads as the plan the whole text
would give (the plan's own text, and plan.contingency.relabel_plan of it)."""

from __future__ import annotations

import json

import numpy as np
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
            whole[message[1]] = json.loads(message[3].text())
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


@pytest.mark.parametrize("kind,seed", [("synthetic", 2), ("model", 6), ("equal-per-gpu", 1)])
def test_whole_answers_relabel_as_the_whole_plans(kind, seed, monkeypatch):
    """An answer kept whole (a failure that changes most jobs, or every answer with no shared entries)
    gives its plan's own text for its representative and, for every other node of its class,
    relabel_plan of that text, reading again only the entries that list either node or are a hit
    job's (those that name the representative found where the answer was made); lengths that do not
    split the text, or none, give the same reply from the whole text."""
    from array import array

    from unicron_plan.service import answers
    from unicron_plan.service.answers import WholeAnswer

    inst = generate_instance(seed, gpus=1024, jobs=12, failed_nodes=0, curves=kind)
    inst.pop("event", None)
    snapshot = st.State(base=Instance.model_validate(inst), revision=1, base_version=1)
    order = {n.id: k for k, n in enumerate(snapshot.base.cluster.nodes)}
    monkeypatch.setattr(incremental, "shared_entries", lambda kept: None)  # every answer sent whole
    messages = list(coordinator._warm_messages(snapshot, None, 4096, lambda: False))
    monkeypatch.undo()
    real_loads = answers.json.loads
    end = b',"plan_id":null,"revision":3,"includes_pending":{}}'
    relabelled = read_again = 0
    for message in messages[1:]:
        _, rep, members, packed = message
        assert isinstance(packed, WholeAnswer)
        text = packed.text()
        assert packed.reply(rep, rep, order) == text and packed.reply(rep, rep, order, end) == text[:-1] + end
        whole = json.loads(text)
        for b in members[1:4]:
            loads = []
            monkeypatch.setattr(answers.json, "loads", lambda t, **kw: loads.append(t) or real_loads(t, **kw))
            reply = packed.reply(rep, b, order)
            monkeypatch.undo()
            listing = sum(rep in j.get("nodes", ()) or b in j.get("nodes", ()) or j.get("reason") == "hit"
                          for j in whole["jobs"])
            assert len(loads) == 1 + listing < 1 + len(whole["jobs"]) or listing == len(whole["jobs"])
            expect = relabel_plan(json.loads(text), rep, b, order)
            assert json.loads(reply) == expect
            assert packed.reply(rep, b, order, end) == reply[:-1] + end
            assert packed.named[0] == rep
            assert WholeAnswer(packed.packed, packed.lengths).reply(rep, b, order) == reply  # searched whole
            longer, shifted = array("i", packed.lengths), array("i", packed.lengths)
            longer[1] += 1
            shifted[1] += 1
            shifted[2] -= 1
            for lengths in (None, longer, shifted):
                assert json.loads(WholeAnswer(packed.packed, lengths).reply(rep, b, order)) == expect
            relabelled += 1
            read_again += listing
    assert relabelled > 0 and read_again > 0


def test_cold_replies_encode_the_shared_entries_once_and_read_as_the_plans_text(tmp_path):
    """A cold dry run's text (the kept plan's entries spliced in from their JSON encoded once) is the
    plan's own JSON text, byte for byte, on a cluster where failures change few jobs and on one where
    they change most."""

    from unicron_plan.service import answers

    encoded = []
    real = answers.encode_body
    for kind in ("equal-per-gpu", "synthetic"):
        inst = generate_instance(5, gpus=1024, jobs=12, failed_nodes=0, curves=kind)
        inst.pop("event", None)
        c = coordinator.Coordinator(tmp_path / kind, contingency=False)
        c.put_cluster(inst)
        rng = np.random.default_rng(0)
        nodes = [n["id"] for n in inst["cluster"]["nodes"]]
        spliced, keys = 0, set()
        encoded.clear()
        # (a kept key's shared entries; a plan's own entries, written whole when it shares none, not counted)
        answers.encode_body = lambda entries: (type(entries) is not list and encoded.append(1)) or real(entries)
        try:
            for k in range(12):  # one node, then two: the keys alternate
                failed = [nodes[int(i)] for i in rng.choice(len(nodes), 1 + k % 2, replace=False)]
                after, _ = st.record_event(c.state, {"kind": "failure", "failed_nodes": failed}, c._nodes(c.state))
                plan = c._plan(c.state, after, dry_run=True)
                assert c._plan_text(plan) == plan.model_dump_json(exclude_none=True).encode()
                shared = incremental.shared_entries(c._kept[1])
                if getattr(shared, "encoded", None) is not None:
                    spliced += 1
                    keys.add(id(shared))
        finally:
            answers.encode_body = real
        assert spliced or kind == "synthetic"
        assert len(encoded) <= len(keys)  # each key's entries encoded once, however the keys alternate
        assert len(keys) == 2 or kind == "synthetic"
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
                got = json.loads(packed.reply(rep, b, order))
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


def _warm_deltas(kind: str, seed: int, gpus: int = 4096, jobs: int = 32, queued: bool = False):
    inst = generate_instance(seed, gpus=gpus, jobs=jobs, failed_nodes=0, curves=kind)
    inst.pop("event", None)
    for job in inst["jobs"] if queued else ():
        job["current"] = {"gpus": 0, "nodes": []}
    snapshot = st.State(base=Instance.model_validate(inst), revision=1, base_version=1)
    order = {n.id: k for k, n in enumerate(snapshot.base.cluster.nodes)}
    bodies, deltas = {}, []
    for message in coordinator._warm_messages(snapshot, None, 4096, lambda: False):
        if message[0] == "shared":
            bodies[message[1]] = message[2]
        elif message[0] == "answer" and isinstance(message[3], tuple):
            deltas.append(message)
    return bodies, deltas, order


@pytest.mark.parametrize("kind,seed", [("equal-per-gpu", 6), ("linear-step", 6), ("identical", 6)])
def test_stored_changes_read_as_the_deltas_and_hold_each_text_once(kind, seed):
    """An answer kept compactly (positions and interned texts) gives the same bytes as its delta, for
    its representative and relabelled for every other node of its class; the same text in two answers
    is one object. The entries found for the representative where the answer was made are those the
    search finds, and a reply from them is the reply that searches every entry for both nodes."""
    from unicron_plan.service.answers import StoredChanges, _flagged, stored_changes

    bodies, deltas, order = _warm_deltas(kind, seed)
    assert deltas
    texts: dict = {}
    kept = []
    for _, rep, members, (number, head, changed, tail) in deltas:
        stored = stored_changes(changed, texts)
        assert isinstance(stored, StoredChanges) and len(stored) == len(changed)
        assert list(stored.positions) == list(changed)
        assert joined_text(bodies[number], head, stored, tail) == joined_text(bodies[number], head, changed, tail)
        assert stored.named[0] == rep and list(stored.named[1]) == _flagged(dict(changed), (rep,))
        for b in members[1:4]:
            assert relabelled_text(bodies[number], head, stored, tail, rep, b, order) == \
                relabelled_text(bodies[number], head, changed, tail, rep, b, order) == \
                relabelled_text(bodies[number], head, dict(changed), tail, rep, b, order)  # searched whole
        kept.append(stored)
    held = {}
    for stored in kept:
        for text in stored.texts:
            assert held.setdefault(text, text) is text  # one object per distinct text
    assert len(held) == len(texts)


@pytest.mark.parametrize("kind,seed", [("equal-per-gpu", 6), ("linear-step", 6), ("identical", 6), ("near-linear", 6)])
def test_relabelling_reads_only_the_entries_that_may_name_a_node(kind, seed, monkeypatch):
    """The relabelled text keeps the changed entries that name neither node and are no hit job's as
    they are (their bytes), relabels the others, and reads as relabel_plan of the whole plan; with a
    node id JSON would escape every entry is relabelled, to the same plan."""
    from unicron_plan.service import answers

    bodies, deltas, order = _warm_deltas(kind, seed)
    kept_as_is = relabelled = hits = 0
    real_loads = answers.json.loads
    for _, rep, members, (number, head, changed, tail) in deltas:
        whole = json.loads(joined_text(bodies[number], head, changed, tail))
        for b in members[1:4]:
            loads = []
            monkeypatch.setattr(answers.json, "loads", lambda t, **kw: loads.append(t) or real_loads(t, **kw))
            monkeypatch.setattr(answers, "_flagged", None)  # (the representative's entries found before)
            text = relabelled_text(bodies[number], head, changed, tail, rep, b, order)
            monkeypatch.undo()
            reread = sum(rep in whole["jobs"][k]["nodes"] or b in whole["jobs"][k]["nodes"]
                         or whole["jobs"][k].get("reason") == "hit" for k in changed)
            assert len(loads) == 1 + reread  # the plan's own fields, and only the entries that may name a node
            assert json.loads(text) == relabel_plan(json.loads(json.dumps(whole)), rep, b, order)
            entries = json.loads(text)["jobs"]
            for k, entry_text in changed.items():
                names = rep in whole["jobs"][k]["nodes"] or b in whole["jobs"][k]["nodes"]
                hit = whole["jobs"][k].get("reason") == "hit"
                hits += hit
                if not names and not hit:
                    assert entry_text in text  # the entry's own bytes
                    kept_as_is += 1
                else:
                    relabelled += 1
                assert entries[k] == relabel_plan({"jobs": [json.loads(entry_text)]}, rep, b, order)["jobs"][0]
            monkeypatch.setattr(answers, "_untouched", lambda a, b: None)  # every entry read and relabelled
            assert json.loads(relabelled_text(bodies[number], head, changed, tail, rep, b, order)) == json.loads(text)
            monkeypatch.undo()
    assert kept_as_is > 0 and relabelled > 0 and hits > 0, (kept_as_is, relabelled, hits)


def test_a_node_id_json_escapes_relabels_every_entry():
    from unicron_plan.service.answers import _untouched

    assert _untouched("n1", "n2")(b'{"nodes":["n3"]}') is True
    assert _untouched("n1", "n2")(b'{"nodes":["n1"]}') is False
    assert _untouched("n1", "n2")(b'{"reason":"hit","why":"n1 failed"}') is False
    assert _untouched("n1", "n2")(b'{"reason": "hit", "hit": true}') is False
    assert _untouched("n1", "n2")(b'{"hit":false,"reason":"grown","nodes":["n3"]}') is True
    assert _untouched('n"1', "n2") is None and _untouched("n1", "n\u00e9") is None and _untouched("n 1", "n2") is None


@pytest.mark.parametrize("kind,seed", [("synthetic", 3), ("equal-per-gpu", 4), ("identical", 5)])
def test_an_indexed_answer_reads_again_only_the_entries_that_list_a_node(kind, seed, monkeypatch):
    """Relabelled from the index of the nodes its entries list, a plan whose every entry is given as
    changed (as a renamed answer has them) reads again only the entries that list either node, gives the
    same bytes as when every entry is tested on its own, and reads as relabel_plan of the whole plan;
    a hit job's entry (its sentence may name any node) is read again whatever the nodes."""
    from array import array

    from unicron_plan import api
    from unicron_plan.service import answers

    inst = generate_instance(seed, gpus=1024, jobs=12, failed_nodes=0, curves=kind)
    for job in inst["jobs"][: len(inst["jobs"]) // 2]:  # half of them queued: their nodes free
        job["current"] = {"gpus": 0, "nodes": []}
    held = {n for j in inst["jobs"] for n in j["current"]["nodes"]}
    ids = [n["id"] for n in inst["cluster"]["nodes"]]
    free = [n for n in ids if n not in held]
    order = {n: k for k, n in enumerate(ids)}
    real_loads = answers.json.loads
    rng = np.random.default_rng(seed)
    indexed = with_hits = 0
    for failed in [free[0], free[-1], sorted(held)[0]]:
        plan = api.solve(dict(inst, event={"kind": "failure", "failed_nodes": [failed]}))
        top = plan.model_copy(update={"jobs": []}).model_dump_json(exclude_none=True).encode()
        at = top.index(answers.JOBS) + len(answers.JOBS) - 1
        head, tail, pieces = top[:at], top[at:], answers.encode_body(plan.jobs)
        every = answers.StoredChanges(array("i", range(len(pieces))), tuple(pieces))
        whole = json.loads(plan.model_dump_json(exclude_none=True))
        hit = any(j.get("reason") == "hit" for j in whole["jobs"])
        found = answers._node_index(every)
        assert found is not None and bool(found[1]) == hit
        for b in [str(v) for v in rng.choice(free, 4, replace=False) if v != failed]:
            loads = []
            monkeypatch.setattr(answers.json, "loads", lambda t, **kw: loads.append(t) or real_loads(t, **kw))
            text = relabelled_text(pieces, head, every, tail, failed, b, order, indexed=True)
            monkeypatch.undo()
            listing = sum(failed in j["nodes"] or b in j["nodes"] or j.get("reason") == "hit" for j in whole["jobs"])
            assert len(loads) == 1 + listing
            indexed += not hit
            with_hits += hit
            assert json.loads(text) == relabel_plan(json.loads(json.dumps(whole)), failed, b, order)
            assert relabelled_text(pieces, head, every, tail, failed, b, order) == text  # each entry tested
    assert indexed > 0 and with_hits > 0


def test_the_joined_search_flags_the_entries_the_test_of_each_entry_flags():
    """_flagged against _untouched entry by entry on random entries: node ids inside other ids, at the
    ends of an entry, as a job id, hit flags as keys and "hit" as a reason, in a dict and in the
    compact form."""
    from array import array

    from unicron_plan.service.answers import StoredChanges, _flagged, _untouched

    rng = np.random.default_rng(5)
    pieces = [b'"n1"', b'"n12"', b'"xn1"', b'"n2"', b'"hit":false', b'"hit":true', b'"reason":"hit"',
              b'"why":"hit: n1 drained"', b'"id":"n1"', b'{', b'}', b',', b'"nodes":["n3","n4"]']
    flagged = 0
    for _ in range(300):
        texts = [b"".join(rng.choice(pieces, int(rng.integers(1, 6))).tolist()) for _ in range(int(rng.integers(1, 9)))]
        positions = sorted(rng.choice(100, len(texts), replace=False).tolist())
        names = ("n1", "n2")[: int(rng.integers(1, 3))]
        test = _untouched(*names)
        want = [k for k, t in zip(positions, texts) if not test(t)]
        assert _flagged(dict(zip(positions, texts)), names) == want
        assert list(_flagged(StoredChanges(array("i", positions), tuple(texts)), names)) == want
        flagged += len(want)
    assert flagged > 100
