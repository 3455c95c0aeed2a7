"""The cluster's nodes read once: the array reader (``io._with_table_arrays`` given a node reader) reads
``cluster.nodes`` into columns, leaves the entries so read out of its walk of the document
(``io._nodes_stand_in``) and hands the columns to the validation (``context["node_columns"]``). Compared
with the reader that walks every entry and the cluster that reads its nodes itself, on random documents
with nodes spoiled one of many ways: the same decision of the reader, the same counts of the walk, the
same instance or the same error text."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from unicron_plan import api, io
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.schema.instance import read_node_columns
from unicron_plan.tools.generate import generate_instance

from test_tables_as_arrays import _as_lists



@pytest.fixture(autouse=True)
def _reader(array_reader):
    """Every test with each reader of tables as arrays."""

WIDE = [2**63 - 1, 2**63, 2**64 - 1, -(2**63), 1e19, -1e19, 9.3e18, 1e300]


def _doc(rng: random.Random) -> dict:
    nodes = rng.choice([17, 20, 40, 64])  # 136-512 nodes of 8 GPUs: more than the stand-in keeps
    doc = generate_instance(rng.randrange(1000), gpus=8 * 8 * nodes, jobs=rng.randrange(1, 4), nodes_per_rack=8,
                            failed_nodes=rng.choice([0, 1, 2]))
    for job in doc["jobs"]:
        if rng.random() < 0.5:
            job["current"] = {"gpus": 0, "nodes": []}
        table = job["throughput"].pop("tflops")
        items = sorted((int(k), v) for k, v in table.items())
        job["throughput"]["compact"] = {"counts": [c for c, _ in items], "tflops": [v for _, v in items]}
    for node in doc["cluster"]["nodes"]:  # the optional fields given by some entries only, or by all
        if rng.random() < 0.1 and not node["failed_gpus"]:
            del node["failed_gpus"]
        if rng.random() < 0.05:
            node["rack"] = None
        elif rng.random() < 0.05:
            del node["rack"]
    return doc


N_WAYS = 40


def _spoil(rng: random.Random, nodes: list, way: int) -> None:
    """One change of one entry (many refused, some allowed: a node with failed GPUs, a null rack)."""
    if any(type(node) is not dict for node in nodes):  # (an entry already made another value)
        return
    k = rng.randrange(len(nodes))
    node = nodes[k]
    if way == 0:
        node["extra"] = 1
    elif way == 1:
        del node[rng.choice(["id", "gpu_type", "gpus"])]
    elif way == 2:
        node["id"] = rng.choice(["", 5, None, ["x"], {"a": 1}])
    elif way == 3:
        node["gpu_type"] = rng.choice(["", 7, None, "nonexistent"])
    elif way == 4:
        node["gpus"] = rng.choice([0, -1, 1025, 2**40, True, 1.5, 8.0, "8", None, [8]])
    elif way == 5:
        node["gpus"] = rng.choice(WIDE)
    elif way == 6:
        node["rack"] = rng.choice([5, 1.5, True, ["r"], {"r": 1}, ""])
    elif way == 7:
        node["failed_gpus"] = None
    elif way == 8:
        node["failed_gpus"] = rng.sample(range(node["gpus"] if type(node.get("gpus")) is int else 8), 2)
    elif way == 9:
        node["failed_gpus"] = [rng.choice([8, -1, 1024, 2**63, 2**64 - 1])]
    elif way == 10:
        node["failed_gpus"] = [rng.choice([[1], [], {}, 1.5, 1.0, True, "1", None])]
    elif way == 11:
        node["failed_gpus"] = [1, 1]
    elif way == 12:
        node["failed_gpus"] = [0]
        node["expected_repair_seconds"] = rng.choice([100.0, 5, 1e-9, 3e8])
    elif way == 13:
        node["failed_gpus"] = [0]
        node["expected_repair_seconds"] = rng.choice([0, -1.0, 1e300, 1e19, 2**63, True, "1", [1.0], {"s": 1}])
    elif way == 14:
        node["expected_repair_seconds"] = rng.choice([100.0, 7])  # no failed GPU: refused
    elif way == 15:
        node["expected_repair_seconds"] = None
    elif way == 16:
        nodes[k] = rng.choice([None, 1, "n", [node], [], 2**63])
    elif way == 17:
        node["failed_gpus"] = [[[[0]]]]
    elif way == 18:
        node["id"] = nodes[(k + 1) % len(nodes)]["id"]  # a repeated id
    elif way == 19:
        node["failed_gpus"] = []
    elif way == 20:
        node["rack"] = None
    elif way == 21:
        nodes.pop(k)
    elif way == 22:
        node["id"] = "n\ud800x"  # a lone surrogate
    elif way == 23:
        node["gpu_type"] = "a\udfff"
    elif way == 24:
        node["rack"] = "r\ud800"
    elif way == 25:
        node["id"] = "n:[x]" + str(k)  # a colon and brackets in a string
    elif way == 26:
        node["failed_gpus"] = [0, 1.0]
    elif way == 27:
        node["expected_repair_seconds"] = rng.choice(WIDE)
    elif way == 28:
        node["rack"] = rng.choice(WIDE)
    elif way == 29:
        node["failed_gpus"] = [rng.choice(WIDE)]
    elif way == 30:  # the first entry (the stand-in's string) of another shape
        nodes[0]["id"] = rng.choice([1, None, 2**63])
    elif way == 31:
        for node in nodes:  # every entry without failed_gpus but one
            node.pop("failed_gpus", None)
        nodes[k]["failed_gpus"] = rng.choice([[], [0]])
    elif way == 32:
        for node in nodes:  # no entry with failed_gpus, no rack
            node.pop("failed_gpus", None)
            node.pop("rack", None)
    elif way == 33:
        for node in nodes:  # every entry with failed_gpus and a null repair time
            node.setdefault("failed_gpus", [])
            node["expected_repair_seconds"] = None
    elif way == 34:
        node["failed_gpus"] = [1]
        node["expected_repair_seconds"] = 1e6
        nodes[-1]["failed_gpus"] = [rng.choice([1e19, -1e19, 2**63])]  # wide in a validated entry
    elif way == 35:
        node["gpus"] = 1024
    elif way == 36:
        node["gpus"] = 1
        node["failed_gpus"] = [0]
    elif way == 37:
        node["failed_gpus"] = [0]
        node["expected_repair_seconds"] = 315360000.0001
    elif way == 38:
        node["id"] = "x" * rng.randrange(1, 300)
    # way 39: the entries unchanged


def _text(rng: random.Random, doc: dict) -> bytes:
    text = json.dumps(doc, indent=rng.choice([None, 1, 2]))
    if rng.random() < 0.1:  # a key repeated in an entry (simdjson keeps both, a dict one)
        text = text.replace('"gpus": 8,', '"gpus": 8, "gpus": 8,', 1)
    if rng.random() < 0.1:  # a wide number outside the nodes, at the entries' level
        text = text.replace('"weight": ', f'"weight": {rng.choice(WIDE)!r}, "x": ', 1)
    return text.encode("utf-8", "surrogatepass")


def _same_columns(a, b) -> None:
    assert a.ids == b.ids and a.types == b.types and a.racks == b.racks and a.gpus_list == b.gpus_list
    assert a.gpus.tobytes() == b.gpus.tobytes() and a.failed == b.failed and a.repair == b.repair
    assert list(a.given) == list(b.given)
    for f in a.given:
        x, y = a.given[f], b.given[f]
        assert type(x) is type(y) and (x is y if type(x) is bool else x.tobytes() == y.tobytes())


def _old_reader(monkeypatch):
    """The reader that walks every entry (the columns not read by it, not handed to the validation)."""
    def load(text):
        with monkeypatch.context() as m:
            m.setattr(io, "_nodes_stand_in", lambda doc, nodes: (doc, 0, 0, None))
            return _outcome(lambda: api.load_instance(text))
    return load


def _outcome(load):
    try:
        return load(), None
    except InvalidInstanceError as exc:
        return None, str(exc)


def _same_walk(doc: dict) -> None:
    """The walk over the stand-in and the counts left out are the walk over the whole document."""
    shaped, members, arrays, columns = io._nodes_stand_in(doc, {"read": read_node_columns})
    m, d, w, a = io._shape(shaped, arrays=True)
    assert (m + members, d, w, a + arrays) == io._shape(doc, arrays=True)


def _check(text: bytes, old) -> "tuple[bool, bool]":
    """Compare the reader and the load with the old ones on ``text``; (columns read by the reader, the
    instance loaded)."""
    nodes = {"read": read_node_columns}
    fast = io._with_table_arrays(text, nodes)
    plain = io._with_table_arrays(text)
    assert (fast is io._UNDECIDED) == (plain is io._UNDECIDED)
    if fast is io._UNDECIDED:
        assert "columns" not in nodes and "raw" not in nodes
    if fast is not io._UNDECIDED:
        assert _as_lists(fast, tagged=True) == _as_lists(plain, tagged=True)
        raw = fast["cluster"]["nodes"]
        assert ("columns" in nodes) == (read_node_columns(raw) is not None and len(raw) > 2 * io._LONG_ARRAY)
        if "columns" in nodes:
            assert nodes["raw"] is raw
            _same_columns(nodes["columns"], read_node_columns(raw))
    doc = fast if fast is not io._UNDECIDED else None
    if doc is None:
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
    if type(doc) is dict:
        _same_walk(doc)
        cluster = doc.get("cluster")
        if type(cluster) is dict:  # the nodes alone, and beside numbers of 64 bits and more at their levels
            _same_walk({"cluster": cluster})
            for wide in (2**63, -(2**63), 1e19):
                for at in ([wide, 1.0], [[wide, 1.0]], [[[wide, 1.0]]]):
                    _same_walk({"cluster": {**cluster, "x": at}})
                    _same_walk({"cluster": {"nodes": cluster.get("nodes"), "x": at}})
    source = text.decode("utf-8", "surrogatepass")  # (the text as a caller gives it)
    new_instance, new_err = _outcome(lambda: api.load_instance(source))
    old_instance, old_err = old(source)
    assert new_err == old_err
    if new_instance is not None:
        assert (new_instance.cluster.read_columns() is None) == (old_instance.cluster.read_columns() is None)
        _same_columns(new_instance.cluster.node_columns(), old_instance.cluster.node_columns())
        assert new_instance.model_dump() == old_instance.model_dump()
    return "columns" in nodes, new_instance is not None


@pytest.mark.parametrize("seed", range(4))
def test_random_spoiled_nodes_read_as_by_the_old_reader(seed, monkeypatch):
    rng = random.Random(7000 + seed)
    old = _old_reader(monkeypatch)
    taken = loaded = 0
    for _ in range(30):
        doc = _doc(rng)
        if rng.random() < 0.7:
            for _ in range(rng.choice([1, 1, 2, 3])):
                _spoil(rng, doc["cluster"]["nodes"], rng.randrange(N_WAYS))
        t, ok = _check(_text(rng, doc), old)
        taken += t
        loaded += ok
    assert taken >= 8 and loaded >= 8  # both paths are exercised


@pytest.mark.parametrize("way", range(N_WAYS))
def test_each_way_of_spoiling_a_node(way, monkeypatch):
    rng = random.Random(way)
    old = _old_reader(monkeypatch)
    for _ in range(3):
        doc = _doc(rng)
        _spoil(rng, doc["cluster"]["nodes"], way)
        _check(json.dumps(doc).encode("utf-8", "surrogatepass"), old)


def test_the_columns_reach_the_cluster_only_from_the_very_list(monkeypatch):
    rng = random.Random(5)
    text = json.dumps(_doc(rng))
    nodes = {"read": read_node_columns}
    doc, as_arrays = io.parse_json_tables(text, nodes=nodes)
    assert as_arrays and nodes["raw"] is doc["cluster"]["nodes"]
    # The validation takes the columns handed with the list it validates, and reads any other list itself.
    from unicron_plan.schema import Instance
    from unicron_plan.schema.instance import read_tables_once

    context = read_tables_once()
    context["node_columns"] = (nodes["raw"], nodes["columns"])
    instance = Instance.model_validate(doc, context=context)
    assert instance.cluster.read_columns() is nodes["columns"]
    other = json.loads(text)
    other["cluster"]["nodes"][3]["gpus"] = 4
    context = read_tables_once()
    context["node_columns"] = (nodes["raw"], nodes["columns"])
    instance = Instance.model_validate(other, context=context)
    assert instance.cluster.read_columns() is not nodes["columns"]
    assert instance.cluster.read_columns().gpus_list[3] == 4


def test_a_short_node_list_is_walked_whole():
    doc = generate_instance(1, gpus=8 * 2 * io._LONG_ARRAY, jobs=1, nodes_per_rack=8)  # 128 nodes
    nodes = {"read": read_node_columns}
    assert io._with_table_arrays(json.dumps(doc).encode(), nodes) is not io._UNDECIDED
    assert "columns" not in nodes
    shaped, members, arrays, columns = io._nodes_stand_in(doc, {"read": read_node_columns})
    assert shaped is doc and (members, arrays, columns) == (0, 0, None)
