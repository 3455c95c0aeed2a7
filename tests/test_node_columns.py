"""The cluster's nodes read as columns (``unicron_plan.schema.nodes``) give what the ``Node`` models give:
the same models when asked for, the same error (field and message) for bad input, the same event checks
and the same cluster state. The model path (the columnar reader switched off) and per-node loops are the
references, compared on random clusters."""

from __future__ import annotations

import copy
import json
import pickle
import random

import numpy as np
import pytest

from unicron_plan import api
from unicron_plan.core import cost
from unicron_plan.core.checks import check_event, check_instance
from unicron_plan.core.cluster import NodeHealth, build_state, healthy_nodes
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import parse_model
from unicron_plan.schema import Instance
from unicron_plan.schema import instance as instance_schema
from unicron_plan.schema.nodes import NodeColumns
from unicron_plan.tools.generate import generate_instance


def _parse(doc, columns: bool):
    """(the instance, None) or (None, the error's text), read with or without the columnar reader."""
    saved = instance_schema.read_nodes
    if not columns:
        instance_schema.read_nodes = lambda raw, validate: None
    try:
        return parse_model(Instance, doc), None
    except InvalidInstanceError as exc:
        return None, f"{exc.field}: {exc.message}"
    finally:
        instance_schema.read_nodes = saved


_ODD = {
    "id": ["", "n\ud800", "n\u00f1", "n 1", "n0\n", 7, None, True, 1.5],
    "gpu_type": ["", "zz", 3, None, "t\ud800", "\u00fc"],
    "gpus": [0, 1, 1024, 1025, True, 8.0, "8", 2**70, -3, None],
    "failed_gpus": [[0], [0, 0], [8], [-1], [True], [0.0], None, (0,), "0", [1, 2, 3], list(range(8)), [2**70]],
    "rack": [None, "", 5, "r\ud800", "r\u00fc", ["r"]],
    "expected_repair_seconds": [None, 0, -1, 5, 60.5, 1e12, True, "5", float("inf"), float("nan")],
}


def _vary(rng: random.Random, nodes: list) -> None:
    """One random change to one entry of ``nodes`` (most make it invalid, some keep it valid)."""
    k = rng.randrange(len(nodes))
    e = nodes[k]
    what = rng.randrange(16)
    if not isinstance(e, dict):
        return
    if what < 6:
        field = list(_ODD)[what]
        e[field] = rng.choice(_ODD[field])
    elif what == 6:
        e["id"] = nodes[rng.randrange(len(nodes))].get("id", "x") if isinstance(nodes[0], dict) else "x"
    elif what == 7:
        e[rng.choice(["extra", "Rack", "gpu"])] = 1
    elif what == 8:
        e.pop(rng.choice(["id", "gpu_type", "gpus"]), None)
    elif what == 9:
        nodes[k] = rng.choice([[], "x", None, 3])
    elif what == 10:
        e.pop(rng.choice(["failed_gpus", "rack"]), None)
    elif what == 11:  # valid: a failed GPU, sometimes with its repair time
        e["failed_gpus"] = sorted(rng.sample(range(e.get("gpus", 8) if type(e.get("gpus")) is int and
                                                    0 < e.get("gpus") <= 64 else 8), rng.randint(1, 3)))
        if rng.random() < 0.5:
            e["expected_repair_seconds"] = rng.choice([60, 3600.5])
    elif what == 12:
        e[1] = "x"
    elif what == 13:
        e["rack"] = None  # valid: an explicit null
    elif what == 14:
        e["expected_repair_seconds"] = None  # valid
    else:
        e["failed_gpus"] = []  # valid


def _doc(seed: int) -> dict:
    rng = random.Random(seed)
    doc = generate_instance(seed, gpus=rng.choice([64, 128, 256]), jobs=rng.randint(1, 5),
                            failed_nodes=rng.randint(0, 2), curves=rng.choice(["synthetic", "identical"]),
                            placement=rng.choice(["shuffled", "ordered"]))
    nodes = doc["cluster"]["nodes"]
    if rng.random() < 0.3:  # a second GPU type on some nodes (no job runs there)
        doc["cluster"]["gpu_types"]["h100"] = dict(next(iter(doc["cluster"]["gpu_types"].values())))
        held = {n for j in doc["jobs"] for n in j["current"]["nodes"]}
        for e in nodes:
            if e["id"] not in held and rng.random() < 0.5:
                e["gpu_type"] = "h100"
    if rng.random() < 0.5:  # some nodes without the optional fields
        for e in nodes:
            if rng.random() < 0.3:
                e.pop(rng.choice(["failed_gpus", "rack"]), None)
    for _ in range(rng.choice([0, 0, 1, 1, 2, 4])):
        _vary(rng, nodes)
    if rng.random() < 0.02:
        doc["cluster"]["nodes"] = []
    return doc


def _json(model) -> str:
    try:
        return model.model_dump_json()
    except ValueError as exc:  # a rack with a lone surrogate: valid, but not written as UTF-8
        return type(exc).__name__


def _same_columns(a: NodeColumns, b: NodeColumns) -> None:
    assert a.ids == b.ids and a.types == b.types and a.racks == b.racks
    assert a.gpus_list == b.gpus_list and a.gpus.tolist() == b.gpus.tolist() and a.gpus.dtype == np.int64
    assert a.failed == b.failed and list(a.failed) == list(b.failed)
    assert a.repair == b.repair and all(type(a.repair[k]) is type(b.repair[k]) for k in a.repair)
    assert a.healthy_before.tolist() == b.healthy_before.tolist()
    assert a.type_totals() == b.type_totals() and list(a.type_totals()) == list(b.type_totals())
    assert a.at == b.at


def _compare(doc: dict) -> bool:
    """Read ``doc`` both ways and compare everything; whether it is a valid instance."""
    got, got_error = _parse(copy.deepcopy(doc), columns=True)
    want, want_error = _parse(copy.deepcopy(doc), columns=False)
    assert got_error == want_error
    if got is None:
        return False
    cluster = got.cluster
    assert "nodes" not in cluster.__dict__  # every valid entry from a document takes the columns
    _same_columns(cluster.node_columns(), NodeColumns.from_models(want.cluster.nodes))
    try:
        want_split = check_instance(want)
    except InvalidInstanceError as exc:
        want_split = str(exc)
    try:
        got_split = check_instance(got)
    except InvalidInstanceError as exc:
        got_split = str(exc)
    assert got_split == want_split
    assert "nodes" not in cluster.__dict__  # the checks read the columns
    assert cost.pending_repair_seconds(got, "repair") == cost.pending_repair_seconds(want, "repair")
    # the models, made on first access, are those validation makes
    assert cluster.nodes == want.cluster.nodes
    assert [n.model_fields_set for n in cluster.nodes] == [n.model_fields_set for n in want.cluster.nodes]
    assert got.model_dump() == want.model_dump()
    assert got.model_dump(exclude_unset=True) == want.model_dump(exclude_unset=True)
    assert _json(got) == _json(want) and got == want
    return True


@pytest.mark.parametrize("block", range(6))
def test_columns_read_the_models_and_refuse_what_they_refuse(block):
    valid = sum(_compare(_doc(seed)) for seed in range(block * 60, block * 60 + 60))
    assert valid >= 15  # the seeds give valid instances too


_EVERY = [(f, v) for f, values in _ODD.items() for v in values] + [
    ("failed_gpus", []), ("failed_gpus", ()), ("rack", "r9"), ("id", "n\u00f1\u4e00"), ("gpu_type", "a800"), ("extra", 1), (1, "x")]


@pytest.mark.parametrize("field, value", _EVERY, ids=[f"{f}={v!r}" for f, v in _EVERY])
@pytest.mark.parametrize("where", [0, 5, -1])
def test_every_odd_value_is_read_or_refused_as_the_models_do(field, value, where):
    for seed, missing in ((0, None), (1, "failed_gpus"), (2, "rack")):
        doc = generate_instance(seed, gpus=64, jobs=2)
        for e in doc["cluster"]["nodes"][::3]:
            e.pop(missing, None)  # some entries without an optional field
        doc["cluster"]["nodes"][where][field] = value
        _compare(doc)
    for gone in ("id", "gpu_type", "gpus", "failed_gpus", "rack"):
        doc = generate_instance(3, gpus=64, jobs=2)
        doc["cluster"]["nodes"][where].pop(gone)
        _compare(doc)
    for odd in ([], "x", None, 3, ()):
        doc = generate_instance(4, gpus=64, jobs=2)
        doc["cluster"]["nodes"][where] = odd
        _compare(doc)


def _nodes_loop(instance):
    """The cluster state's records, capacity and nodes in service, one node model at a time."""
    ev = instance.event
    failure = ev if ev is not None and ev.kind == "failure" else None
    failed_nodes = set(failure.failed_nodes) if failure else set()
    event_gpus: dict = {}
    for fg in failure.failed_gpus if failure else []:
        event_gpus.setdefault(fg.node, set()).add(fg.gpu)
    repaired: dict = {}
    if ev is not None and ev.kind == "repair":
        for n in instance.cluster.nodes:
            if n.id in ev.repaired_nodes:
                repaired.setdefault(n.id, set()).update(n.failed_gpus)
        for rg in ev.repaired_gpus:
            repaired.setdefault(rg.node, set()).add(rg.gpu)
    nodes, cap, in_service = {}, {t: 0 for t in instance.cluster.gpu_types}, 0
    for n in instance.cluster.nodes:
        before = set(n.failed_gpus)
        lost = n.id in failed_nodes or bool(event_gpus.get(n.id))
        drained = n.id in failed_nodes or (instance.isolation == "node" and lost)
        after = 0 if drained else n.gpus - len((before - repaired.get(n.id, set())) | event_gpus.get(n.id, set()))
        nodes[n.id] = NodeHealth(n.id, n.gpu_type, n.rack, n.gpus, n.gpus - len(before), after, lost, drained)
        if not drained:
            cap[n.gpu_type] += after
            in_service += after > 0
    return nodes, cap, in_service


def _event(rng: random.Random, doc: dict) -> dict:
    """A random event on ``doc``'s nodes, valid or not."""
    nodes = doc["cluster"]["nodes"]
    ids = [e["id"] for e in nodes] + ["ghost"]
    failed = {e["id"]: e.get("failed_gpus", []) for e in nodes}
    kind = rng.choice(["failure", "failure", "repair"])
    if kind == "failure":
        ev = {"kind": "failure", "failed_nodes": rng.sample(ids, rng.randint(0, 2)),
              "failed_gpus": [{"node": rng.choice(ids), "gpu": rng.randint(0, 9)} for _ in range(rng.randint(0, 3))]}
        if rng.random() < 0.2:
            ev["failed_nodes"].append(ev["failed_nodes"][0] if ev["failed_nodes"] else "ghost")
        if rng.random() < 0.3:
            lost = ev["failed_nodes"] + [g["node"] for g in ev["failed_gpus"]]
            ev["expected_repair_seconds"] = {rng.choice(lost or ids): 60.0}
        return ev
    broken = [i for i, f in failed.items() if f]
    ev = {"kind": "repair", "repaired_nodes": rng.sample(broken + ids[:3], min(len(broken) + 3, rng.randint(0, 2))),
          "repaired_gpus": []}
    for _ in range(rng.randint(0, 2)):
        nid = rng.choice(broken + ids[:2])
        ev["repaired_gpus"].append({"node": nid, "gpu": rng.choice(failed.get(nid) or [0])})
    return ev


@pytest.mark.parametrize("block", range(4))
def test_event_checks_and_state_from_columns_are_the_per_node_ones(block, monkeypatch):
    from unicron_plan.core.cluster import NodeTable

    if block % 2:  # the table made whole after a few lookups
        monkeypatch.setattr(NodeTable, "FULL_AFTER", 3)
    states = 0
    for seed in range(block * 50, block * 50 + 50):
        rng = random.Random(seed)
        doc = generate_instance(seed, gpus=rng.choice([64, 128]), jobs=rng.randint(1, 4), failed_nodes=0, demand=0.4,
                                placement=rng.choice(["shuffled", "ordered"]))
        held = {n for j in doc["jobs"] for n in j["current"]["nodes"]}
        for e in doc["cluster"]["nodes"]:
            if rng.random() < (0.3 if e["id"] not in held else 0.02):
                e["failed_gpus"] = sorted(rng.sample(range(8), rng.randint(1, 8)))
                if rng.random() < 0.5:
                    e["expected_repair_seconds"] = rng.choice([30.0, 7200])
            if rng.random() < 0.2:
                e.pop("rack", None)
        doc["event"] = _event(rng, doc)
        doc["isolation"] = rng.choice(["node", "gpu"])
        got, error = _parse(copy.deepcopy(doc), columns=True)
        if got is None:
            continue
        want = parse_model(Instance, copy.deepcopy(doc))
        by_id = {n.id: n for n in want.cluster.nodes}
        results = []
        for nodes in (got.cluster.node_columns(), by_id):  # the columns, and the models by id
            try:
                check_event(got, nodes)
                results.append(None)
            except InvalidInstanceError as exc:
                results.append(str(exc))
        assert results[0] == results[1], seed
        try:
            previous = check_instance(got)
        except InvalidInstanceError:
            continue
        state = build_state(got, previous)
        assert "nodes" not in got.cluster.__dict__
        nodes, cap, in_service = _nodes_loop(want)
        assert state.capacity() == cap and state.nodes_in_service() == in_service
        assert state.drained_nodes == [i for i, h in nodes.items() if h.drained]
        assert state.usable_gpus() == {i: (0 if h.drained else h.healthy_after) for i, h in nodes.items()}
        assert state.healthy_after_array().tolist() == [h.healthy_after for h in nodes.values()]
        assert state.usable_ids() == {t: {i for i, h in nodes.items() if h.gpu_type == t and not h.drained}
                                      for t in {h.gpu_type for h in nodes.values()}}
        assert "_nodes" in state.__dict__ and state.__dict__["_nodes"] is None  # not made by the above
        table = state.nodes  # looked up node by node, then made whole
        usable = {i: (None if h.drained else h.healthy_after) for i, h in nodes.items()}
        _check_usable(table, usable, nodes, rng)  # before any record is made
        assert [table[i] for i in nodes] == list(nodes.values()) and [table.get(i) for i in nodes] == list(nodes.values())
        assert table.get("ghost") is None and "ghost" not in table and all(i in table for i in nodes)
        assert list(table) == list(nodes) and len(table) == len(nodes)
        assert list(state.nodes.items()) == list(nodes.items())  # in cluster order
        assert list(table.values()) == list(nodes.values()) and table == nodes and list(table) == list(nodes)
        _check_usable(table, usable, nodes, rng)  # from the whole table
        affected = {i for i, h in nodes.items() if h.lost_in_event or h.drained}
        assert state.hit == {j.id: bool(affected & set(j.current.nodes)) for j in want.jobs}
        # the previous split derived by build_state itself, and a state derived from a kept healthy cluster
        assert build_state(got).previous == previous
        unhealthy = [n.id for n in want.cluster.nodes if n.failed_gpus]
        again = build_state(got, previous, healthy_nodes(got), unhealthy)
        assert list(again.nodes.items()) == list(nodes.items()) and again.capacity() == cap
        states += 1
    assert states >= 5


def test_cluster_built_from_columns_behaves_as_a_model():
    doc = generate_instance(1, gpus=64, jobs=2)
    doc["cluster"]["nodes"][3]["failed_gpus"] = [2]
    doc["cluster"]["nodes"][3]["expected_repair_seconds"] = 5
    doc["cluster"]["nodes"][4].pop("rack")
    want = parse_model(Instance, copy.deepcopy(doc)).cluster
    assert want.nodes[3].expected_repair_seconds == 5.0
    fresh = lambda: parse_model(Instance, copy.deepcopy(doc)).cluster  # noqa: E731
    assert pickle.loads(pickle.dumps(fresh())).nodes == want.nodes
    assert copy.deepcopy(fresh()).nodes == want.nodes
    assert repr(fresh()) == repr(want) and dict(fresh()).keys() == dict(want).keys()
    assert Instance.model_validate_json(json.dumps(doc)).cluster.nodes == want.nodes
    one = fresh().model_copy(update={"nodes": want.nodes[:1]})  # the models replaced: the columns follow them
    assert one.node_columns().ids == [want.nodes[0].id]
    changed = fresh()
    changed.nodes[0].gpus = 4  # a model changed after it was made: the columns are read from the models
    assert changed.node_columns().gpus_list[0] == 4


def test_solve_makes_no_node_model():
    keep: list = []
    plan = api.solve(json.dumps(generate_instance(2, gpus=512, jobs=6)), keep=keep)
    instance = next(x for x in keep if isinstance(x, Instance))
    assert plan.status.solution in ("optimal", "feasible") and "nodes" not in instance.cluster.__dict__


@pytest.mark.parametrize("seed", range(12))
def test_state_from_a_kept_healthy_cluster_reads_the_event_instance_nodes(seed):
    """A caller that keeps one healthy cluster and derives states of instances whose nodes changed since
    (the simulator: failed GPUs added and repaired) gets each instance's own nodes, read as columns or
    from its models, as the per-node loop does."""
    rng = random.Random(seed)
    doc = generate_instance(seed, gpus=128, jobs=3, failed_nodes=0, demand=0.4)
    base = parse_model(Instance, copy.deepcopy(doc))
    kept = healthy_nodes(base)
    held = {n for j in doc["jobs"] for n in j["current"]["nodes"]}
    free = [e for e in doc["cluster"]["nodes"] if e["id"] not in held]
    for e in rng.sample(free, min(3, len(free))):
        e["failed_gpus"] = sorted(rng.sample(range(8), rng.randint(1, 8)))
    unhealthy = [e["id"] for e in doc["cluster"]["nodes"] if e.get("failed_gpus")]
    doc["event"] = {"kind": "failure", "failed_nodes": [rng.choice(doc["cluster"]["nodes"])["id"]], "failed_gpus": []}
    if seed % 2:
        doc["event"] = {"kind": "repair", "repaired_nodes": unhealthy[:1], "repaired_gpus": []}
    for as_models in (False, True):
        instance = parse_model(Instance, copy.deepcopy(doc))
        if as_models:
            instance.cluster.nodes  # the models made: they are read
        else:
            assert instance.cluster.read_columns() is not None
        previous = check_instance(instance)
        want, cap, in_service = _nodes_loop(instance)
        for state in (build_state(instance, previous, kept, unhealthy), build_state(instance, None, kept, unhealthy)):
            assert list(state.nodes.items()) == list(want.items())
            assert state.capacity() == cap and state.nodes_in_service() == in_service
            assert state.previous == previous


def _check_usable(table, usable: dict, nodes: dict, rng: random.Random) -> None:
    """A NodeTable's record-free lookup is its records' usable GPUs (None where drained or absent), and a
    previous split fits through it exactly as through a plain dict of the records."""
    from unicron_plan.plan.reasons import previous_fits

    assert {i: table.usable_gpus(i) for i in nodes} == usable and table.usable_gpus("ghost") is None
    ids = list(nodes) + ["ghost"]
    for _ in range(20):
        previous = {i: rng.randint(1, 8) for i in rng.sample(ids, min(len(ids), rng.randint(1, 4)))}
        used = {i: rng.randint(0, 8) for i in rng.sample(ids, min(len(ids), rng.randint(0, 4)))}
        split = {i: rng.randint(0, used.get(i, 0)) for i in rng.sample(ids, min(len(ids), rng.randint(0, 3)))}
        assert previous_fits(previous, split, table, used) == previous_fits(previous, split, dict(nodes), used)
