"""Failures of whole nodes one up to renaming (service/coordinator.py, ``_keep_solved``): an optimal plan
solved for one failure answers every later failure of nodes of the same classes, renamed; each such
answer is a valid plan of its own event, as good as a fresh solve, and is counted as a stored answer."""

from __future__ import annotations

import numpy as np
import pytest

from unicron_plan import api
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.plan.validate import validate_plan
from unicron_plan.schema import Instance, Plan
from unicron_plan.service import coordinator
from unicron_plan.service.coordinator import Coordinator
from unicron_plan.tools.generate import generate_instance

from test_service_warm import WARM_WAIT, _wait_answers

REPLY_ONLY = ("plan_id", "revision", "includes_pending")


def _hits(coord: Coordinator) -> float:
    return coord.metrics.contingency_hits._value.get()


def _as_plan(reply: dict) -> Plan:
    return Plan.model_validate({k: v for k, v in reply.items() if k not in REPLY_ONLY})


def _check(base: dict, event: dict, reply: dict) -> None:
    """``reply`` is a valid plan of ``base`` with ``event`` (its sentences included) and as good as a
    fresh solve of it."""
    inst = Instance.model_validate(dict(base, event=event))
    plan = _as_plan(reply)
    report = validate_plan(inst, plan, reasons=True)
    assert report.valid, report.errors[:3]
    fresh = api.solve(dict(base, event=event))
    assert plan.status.solution == "optimal"
    assert plan.objective == pytest.approx(fresh.objective, rel=1e-9, abs=1e-6)
    assert sorted(plan.drained_nodes or []) == sorted(fresh.drained_nodes or [])


def _cluster(kind: str, seed: int, queued: bool) -> dict:
    inst = generate_instance(seed, gpus=512, jobs=6, failed_nodes=0, curves=kind)
    inst.pop("event", None)
    if queued:
        for j in inst["jobs"]:
            j["current"] = {"gpus": 0, "nodes": []}
    return inst


def _classes(coord: Coordinator) -> dict[str, list[str]]:
    members: dict[str, list[str]] = {}
    for node, rep in coord._node_classes(coord.state).items():
        members.setdefault(rep, []).append(node)
    return members


@pytest.mark.parametrize("kind,seed,queued", [("queued-linear-step", 1, False), ("synthetic", 2, True),
                                              ("equal-per-gpu", 3, True)])
def test_failures_of_nodes_of_one_class_are_answered_renamed(tmp_path, kind, seed, queued, monkeypatch):
    """On a cluster whose jobs are all queued every node is of one class: after one two-node failure is
    solved, every other two-node failure is answered from it (dry run and applied), valid and optimal;
    so is every single-node failure from the class's stored answer, relabelled from its node index."""
    monkeypatch.setattr(coordinator, "INDEXED_CLASS_NODES", 1)
    base = _cluster(kind, seed, queued)
    coord = Coordinator(tmp_path / "s")
    try:
        coord.put_cluster(base)
        assert coord.wait_contingency(WARM_WAIT)
        _wait_answers(coord)
        classes = _classes(coord)
        assert len(classes) == 1
        nodes = next(iter(classes.values()))
        rng = np.random.default_rng(seed)
        for node in rng.choice(nodes, 4, replace=False).tolist():
            event = {"kind": "failure", "failed_nodes": [node]}
            _check(base, event, coord.post_event(event, dry_run=True))
        pairs = [[nodes[int(i)] for i in rng.choice(len(nodes), 2, replace=False)] for _ in range(6)]
        first = {"kind": "failure", "failed_nodes": pairs[0]}
        hits = _hits(coord)
        _check(base, first, coord.post_event(first, dry_run=True))
        assert _hits(coord) == hits  # solved
        for k, pair in enumerate(pairs[1:], start=1):
            event = {"kind": "failure", "failed_nodes": pair}
            reply = coord.post_event(event, dry_run=True)
            assert _hits(coord) == hits + k  # renamed, not solved
            _check(base, event, reply)
        # overlapping pairs (a node of the kept failure in the new one) are renamed too
        event = {"kind": "failure", "failed_nodes": [pairs[-1][1], pairs[0][0]]}
        _check(base, event, coord.post_event(event, dry_run=True))
        # an applied failure reads it too, and then nothing is answered from it (an event is pending)
        event = {"kind": "failure", "failed_nodes": pairs[2]}
        hits = _hits(coord)
        _check(base, event, coord.post_event(event))
        assert _hits(coord) == hits + 1
        again = {"kind": "failure", "failed_nodes": pairs[3]}
        coord.post_event(again, dry_run=True)
        assert _hits(coord) == hits + 1
    finally:
        coord.close()


def test_a_failure_that_hits_jobs_is_answered_again_only_as_itself(tmp_path):
    """Running jobs: the very same failure again gets the same bytes from the kept plan; a failure of
    other nodes of the same classes whose plan would have its hit sentences renamed is solved."""
    base = generate_instance(4, gpus=512, jobs=6, failed_nodes=0, curves="equal-per-gpu")
    base.pop("event", None)
    coord = Coordinator(tmp_path / "s")
    try:
        coord.put_cluster(base)
        assert coord.wait_contingency(WARM_WAIT)
        _wait_answers(coord)
        classes = [m for m in _classes(coord).values() if len(m) >= 4]
        held = {n for j in base["jobs"] for n in j["current"]["nodes"]}
        busy = next(m for m in classes if m[0] in held)
        event = {"kind": "failure", "failed_nodes": busy[:2]}
        hits = _hits(coord)
        text = coord.dry_run_reply(event)
        assert coord.dry_run_reply(event) == text and _hits(coord) == hits + 1
        other = {"kind": "failure", "failed_nodes": busy[2:4]}
        reply = coord.post_event(other, dry_run=True)
        assert _hits(coord) == hits + 1  # solved: its hit sentences name the nodes
        _check(base, other, reply)
        # a new upload forgets the plans kept for the old one
        coord.put_cluster(base)
        assert coord.wait_contingency(WARM_WAIT)
        hits = _hits(coord)
        coord.dry_run_reply(event)
        assert _hits(coord) == hits
    finally:
        coord.close()


@pytest.mark.parametrize("seed", range(40))
def test_the_renaming_maps_the_kept_failure_onto_the_new_one_within_classes(seed):
    rng = np.random.default_rng(seed)
    nodes = [f"n{k}" for k in range(int(rng.integers(2, 30)))]
    reps = {n: f"n{int(rng.integers(0, 4))}" for n in nodes}
    size = int(rng.integers(1, min(len(nodes), 8) + 1))
    kept = list(rng.choice(nodes, size, replace=False))
    # a failure of other nodes of the same classes, overlapping the kept one at random
    pool = {r: [n for n in nodes if reps[n] == r] for r in set(reps.values())}
    new = []
    for k in kept:
        choices = [n for n in pool[reps[k]] if n not in new]
        new.append(str(rng.choice(choices)))
    assert coordinator._failure_classes(kept, reps) == coordinator._failure_classes(new, reps)
    sigma = coordinator._renaming(tuple(kept), new, reps)
    assert set(sigma) == set(sigma.values())  # a permutation of the nodes it names
    assert all(reps[a] == reps[b] for a, b in sigma.items())  # within classes
    assert {sigma.get(k, k) for k in kept} == set(new)


def test_events_that_are_not_whole_node_failures_are_never_renamed():
    ok = {"kind": "failure", "failed_nodes": ["a", "b"]}
    assert coordinator._whole_node_failure(ok) == ["a", "b"]
    for bad in [{"kind": "failure", "failed_nodes": ["a", "a"]}, {"kind": "failure", "failed_nodes": []},
                {"kind": "failure", "failed_nodes": ["a"], "failed_gpus": {"a": [0]}},
                {"kind": "failure", "failed_nodes": ["a", "b"], "repair_seconds": 5},
                {"kind": "exit", "failed_nodes": ["a"]}, {"kind": "failure", "failed_nodes": "ab"},
                {"kind": "failure", "failed_nodes": [1, 2]}, [ok],
                {"kind": "failure", "failed_nodes": [f"n{k}" for k in range(coordinator.SOLVED_MOST_NODES + 1)]}]:
        assert coordinator._whole_node_failure(bad) is None


def test_renamed_texts_refuse_a_hit_jobs_entry():
    from unicron_plan.service.answers import renamed_text

    head, tail = b'{"instance":"x","jobs":[', b'],"drained_nodes":["a"]}'
    free = b'{"id":"j0","hit":false,"reason":"chosen","nodes":["c"],"placement":[{"node":"c","gpus":8}]}'
    hit = b'{"id":"j1","hit":true,"reason":"hit","why":"hit: a drained","nodes":["a"],"placement":[{"node":"a","gpus":8}]}'
    order = {n: k for k, n in enumerate("abc")}
    text = renamed_text([free], head, {0: free}, tail, {"a": "b", "b": "a"}, order)
    assert text is not None and b'"drained_nodes":["b"]' in text
    assert renamed_text([free, hit], head, {0: free, 1: hit}, tail, {"a": "b", "b": "a"}, order) is None


def test_a_node_failed_in_both_failures_keeps_its_name():
    reps = {n: "a" for n in "abcd"}
    assert coordinator._renaming(("a", "b"), ["b", "a"], reps) == {}
    sigma = coordinator._renaming(("a", "b"), ["c", "a"], reps)
    assert sigma.get("a", "a") == "a" and sigma["b"] == "c"


def test_renaming_needs_no_warm_stage_and_never_names_a_node_down(tmp_path):
    """The classes are the applied cluster's own (made with the upload): without warm contingency a
    second failure of one class is renamed; a node down as a whole is in no class, so a failure naming
    it is never answered from another's plan (it is refused as a cold request would be)."""
    base = _cluster("synthetic", 5, True)
    base["cluster"]["nodes"][0]["failed_gpus"] = list(range(base["cluster"]["nodes"][0]["gpus"]))
    down = base["cluster"]["nodes"][0]["id"]
    coord = Coordinator(tmp_path / "s", contingency=False)
    try:
        coord.put_cluster(base)
        ids = [n["id"] for n in base["cluster"]["nodes"]][1:]
        assert down not in coord._node_classes(coord.state)
        first = {"kind": "failure", "failed_nodes": ids[:2]}
        _check(base, first, coord.post_event(first, dry_run=True))
        hits = _hits(coord)
        second = {"kind": "failure", "failed_nodes": ids[5:7]}
        _check(base, second, coord.post_event(second, dry_run=True))
        assert _hits(coord) == hits + 1
        with pytest.raises(InvalidInstanceError):
            coord.post_event({"kind": "failure", "failed_nodes": [ids[9], down]}, dry_run=True)
        assert _hits(coord) == hits + 1
    finally:
        coord.close()
