"""The keyed copy of a contingency index (contingency.sqlite): one failure's entry read without the
whole index, the same answers as the whole index, and never used when it does not belong to the
contingency.json beside it."""

from __future__ import annotations

import copy
import json
import sqlite3

import pytest

from unicron_plan import api
from unicron_plan.plan import contingency as C
from unicron_plan.schema import Instance
from unicron_plan.tools.generate import generate_instance


def _instance(seed: int, **kw) -> dict:
    return generate_instance(seed, gpus=256, jobs=6, failed_nodes=0, **kw)


def _with_failure(doc: dict, node: str) -> Instance:
    return Instance.model_validate({**copy.deepcopy(doc), "event": {"kind": "failure", "failed_nodes": [node]}})


def _answer(inst: Instance, where) -> dict:
    plan = api.solve(inst, contingency=where, contingency_use="always").model_dump(mode="json", exclude_none=True)
    plan["solver"].pop("wall_seconds")
    return plan


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    doc = _instance(4)
    base = Instance.model_validate(doc)
    out = tmp_path_factory.mktemp("keyed")
    C.write_contingency(C.build_contingency(base, racks=True), out / "with", base)
    C.write_contingency(C.build_contingency(base, racks=True), out / "without", base)
    (out / "without" / C.KEYED_FILE).unlink()
    return doc, out


def test_the_keyed_copy_answers_as_the_whole_index(built):
    doc, out = built
    nodes = [n["id"] for n in doc["cluster"]["nodes"]]
    used = 0
    for node in nodes[::3]:
        inst = _with_failure(doc, node)
        part, known = C.read_for_event(out / "with", inst)
        assert set(part["failures"]) | set(part["infeasible"]) <= {f"node:{node}"}  # one entry read
        assert known == part["fingerprint"] == C.fingerprint(inst)
        keyed, whole = _answer(inst, out / "with"), _answer(inst, out / "without")
        assert keyed == whole
        used += keyed["solver"]["name"] == "contingency"
    assert used > 0


def test_a_two_node_failure_is_solved_afresh(built):
    doc, out = built
    a, b = doc["cluster"]["nodes"][0]["id"], doc["cluster"]["nodes"][1]["id"]
    inst = Instance.model_validate({**copy.deepcopy(doc), "event": {"kind": "failure", "failed_nodes": [a, b]}})
    assert _answer(inst, out / "with") == _answer(inst, out / "without")
    assert "contingency_fallback" in _answer(inst, out / "with")["solver"]["options"]


@pytest.mark.parametrize("spoil", ["garbage", "other-source", "bad-entry", "no-table"])
def test_a_keyed_copy_that_does_not_belong_is_not_used(built, tmp_path, spoil):
    doc, out = built
    where = tmp_path / "c"
    where.mkdir()
    (where / C.INDEX_FILE).write_bytes((out / "with" / C.INDEX_FILE).read_bytes())
    keyed = where / C.KEYED_FILE
    keyed.write_bytes((out / "with" / C.KEYED_FILE).read_bytes())
    node = doc["cluster"]["nodes"][5]["id"]
    if spoil == "garbage":
        keyed.write_bytes(b"not a database" * 100)
    else:
        con = sqlite3.connect(keyed)
        if spoil == "other-source":
            con.execute("UPDATE meta SET value = '0' WHERE name = 'source_sha256'")
        elif spoil == "bad-entry":  # the copy itself says something the index schema refuses
            con.execute("UPDATE entries SET entry = ? WHERE key = ?", (json.dumps({"plan": 3}), f"node:{node}"))
        else:
            con.execute("DROP TABLE plans")
        con.commit()
        con.close()
    inst = _with_failure(doc, node)
    part, known = C.read_for_event(where, inst)
    assert len(part["failures"]) > 1 and known is None  # the whole index, read from contingency.json
    assert _answer(inst, where) == _answer(inst, out / "without")


def test_an_edited_index_is_read_whole_with_its_errors(built, tmp_path):
    doc, out = built
    where = tmp_path / "c"
    where.mkdir()
    data = json.loads((out / "with" / C.INDEX_FILE).read_text())
    data["plans"][next(iter(data["plans"]))]["counts"] = "x"
    (where / C.INDEX_FILE).write_text(json.dumps(data))
    (where / C.KEYED_FILE).write_bytes((out / "with" / C.KEYED_FILE).read_bytes())
    from unicron_plan.errors import InvalidInstanceError

    with pytest.raises(InvalidInstanceError, match="counts"):
        api.solve(_with_failure(doc, doc["cluster"]["nodes"][5]["id"]), contingency=where, contingency_use="always")


def _variants(doc: dict) -> list[dict]:
    """``doc`` and instances that differ from it in one table (a value, the keys' order, the form) or
    elsewhere (a node, the name and event, which the fingerprint leaves out)."""
    out = [doc]
    table = doc["jobs"][0]["throughput"]["tflops"]
    first = next(iter(table))
    changed = copy.deepcopy(doc)
    changed["jobs"][0]["throughput"]["tflops"][first] += 1.0
    reordered = copy.deepcopy(doc)
    reordered["jobs"][0]["throughput"]["tflops"] = dict(reversed(list(table.items())))
    compact = copy.deepcopy(doc)
    t = compact["jobs"][0]["throughput"]
    items = sorted(t.pop("tflops").items(), key=lambda kv: int(kv[0]))
    t["compact"] = {"counts": [int(k) for k, _ in items], "tflops": [v for _, v in items]}
    node = copy.deepcopy(doc)
    node["cluster"]["nodes"][3]["rack"] = "elsewhere"
    renamed = {**copy.deepcopy(doc), "name": "other", "event": {"kind": "failure", "failed_nodes": ["n0001"]}}
    keys = list(table)
    swapped = copy.deepcopy(doc)  # two keys' places exchanged: the same entries in another order
    swapped["jobs"][0]["throughput"]["tflops"] = {k: table[k] for k in [keys[1], keys[0], *keys[2:]]}
    ascending = copy.deepcopy(doc)
    ascending["jobs"][0]["throughput"]["tflops"] = dict(sorted(table.items(), key=lambda kv: int(kv[0])))
    wide = copy.deepcopy(doc)  # a count no cluster holds: left out of the arrays, kept in the table
    wide["jobs"][0]["throughput"]["tflops"] = {**table, "12345678901234567": 1.0}
    return out + [changed, reordered, compact, swapped, ascending, wide, node, renamed]


@pytest.mark.parametrize("seed", [0, 1])
def test_content_digests_are_equal_exactly_when_fingerprints_are(seed):
    docs = _variants(_instance(seed)) + _variants(_instance(seed, curves="model"))[-2:]
    insts = [Instance.model_validate(copy.deepcopy(d)) for d in docs]
    fps = [C.fingerprint(i) for i in insts]
    digests = [C.content_digest(i) for i in insts]
    assert len(set(fps)) < len(fps)  # the renamed variant shares its fingerprint
    for a in range(len(insts)):
        for b in range(len(insts)):
            assert (digests[a] == digests[b]) == (fps[a] == fps[b]), (a, b)
