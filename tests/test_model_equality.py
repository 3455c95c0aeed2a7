"""Models compare by their fields: the private caches some hold (a compact table's numpy arrays, a
throughput's views) are not compared, so two instances read from the same document are equal
(before, comparing two compact tables raised ValueError from numpy)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from unicron_plan import api
from unicron_plan.schema import Instance
from unicron_plan.schema.instance import CompactTable
from unicron_plan.tools.generate import generate_instance

ROOT = Path(__file__).resolve().parents[1]


def _compact_doc() -> dict:
    doc = json.loads(json.dumps(generate_instance(3, gpus=64, jobs=4)))
    for job in doc["jobs"]:
        table = job["throughput"].pop("tflops")
        pairs = sorted((int(k), v) for k, v in table.items())
        job["throughput"]["compact"] = {"counts": [k for k, _ in pairs], "tflops": [v for _, v in pairs]}
    return doc


def test_compact_tables_compare_by_their_entries():
    a = CompactTable.model_validate({"counts": [1, 2, 4], "tflops": [1.0, 2.0, 3.5]})
    b = CompactTable.model_validate({"counts": [1, 2, 4], "tflops": [1.0, 2.0, 3.5]})
    a.arrays(), b.arrays()  # the cached arrays exist on both
    assert a == b and not (a != b)
    assert a != CompactTable.model_validate({"counts": [1, 2, 4], "tflops": [1.0, 2.0, 3.0]})
    assert a != CompactTable.model_validate({"counts": [1, 2, 5], "tflops": [1.0, 2.0, 3.5]})


def test_instances_read_twice_are_equal_and_an_edit_is_seen():
    doc = _compact_doc()
    text = json.dumps(doc)
    a, b = api.load_instance(text), api.load_instance(text)
    api.solve(a)  # fills the caches of one of them
    assert a == b
    edited = copy.deepcopy(doc)
    edited["jobs"][0]["throughput"]["compact"]["tflops"][0] += 1.0
    assert api.load_instance(json.dumps(edited)) != b
    assert Instance.model_validate(doc) == b


def test_plans_compare_by_their_fields():
    inst = api.load_instance(ROOT / "instances" / "tiny-one-job-two-nodes.json")
    plan = api.solve(inst)
    again = api.load_plan(plan.model_dump(mode="json"))
    assert again.jobs == plan.jobs
    changed = plan.model_copy(update={"objective": plan.objective + 1.0})
    assert changed != plan
