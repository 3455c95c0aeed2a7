"""The compact table form (`throughput.compact`: counts and tflops as arrays) plans exactly as the
`tflops` dict form, and both forms reject bad counts with the field named."""

import json
import subprocess
import sys

import pytest

from unicron_plan import api
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.tools.generate import generate_instance


def _compact(doc: dict) -> dict:
    out = json.loads(json.dumps(doc))
    for job in out["jobs"]:
        table = sorted((int(k), v) for k, v in job["throughput"].pop("tflops").items())
        job["throughput"]["compact"] = {"counts": [c for c, _ in table], "tflops": [v for _, v in table]}
    return out


@pytest.mark.parametrize("kind", ["synthetic", "queued-linear-step"])
def test_compact_form_plans_like_the_dict_form(kind):
    doc = generate_instance(2, gpus=512, jobs=8, curves=kind)
    a, b = api.solve(doc), api.solve(_compact(doc))
    assert a.objective == b.objective and a.jobs == b.jobs


@pytest.mark.parametrize("table, word", [
    ({"counts": [8, 8], "tflops": [1.0, 2.0]}, "ascending"),
    ({"counts": [16, 8], "tflops": [1.0, 2.0]}, "ascending"),
    ({"counts": [0, 8], "tflops": [1.0, 2.0]}, "counts"),
    ({"counts": [8], "tflops": [1.0, 2.0]}, "entries"),
    ({"counts": [8], "tflops": [-1.0]}, "negative"),
    ({"counts": [10**15], "tflops": [1.0]}, "counts"),
    ({"counts": ["8"], "tflops": [1.0]}, "integer"),
])
def test_compact_form_rejects_bad_tables(table, word):
    doc = generate_instance(2, gpus=64, jobs=1, nodes_per_rack=8)
    doc["jobs"][0]["current"] = {"gpus": 0, "nodes": []}
    doc["jobs"][0]["throughput"].pop("tflops")
    doc["jobs"][0]["throughput"]["compact"] = table
    with pytest.raises(InvalidInstanceError, match=word):
        api.load_instance(doc)


@pytest.mark.parametrize("key", ["08", "8.0", "", "8,16", "٨", " 8", "-8", "0"])
def test_dict_form_rejects_keys_that_are_not_counts(key):
    doc = generate_instance(2, gpus=64, jobs=1, nodes_per_rack=8)
    doc["jobs"][0]["current"] = {"gpus": 0, "nodes": []}
    doc["jobs"][0]["throughput"]["tflops"] = {"4": 1.0, key: 2.0, "64": 3.0}
    with pytest.raises(InvalidInstanceError, match="decimal GPU count"):
        api.load_instance(doc)


def test_both_forms_at_once_are_refused():
    doc = generate_instance(2, gpus=64, jobs=1, nodes_per_rack=8)
    doc["jobs"][0]["throughput"]["compact"] = {"counts": [8], "tflops": [1.0]}
    with pytest.raises(InvalidInstanceError, match="exactly one"):
        api.load_instance(doc)


def test_schema_lists_the_compact_form():
    out = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "schema", "instance"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert "CompactTable" in out and '"counts"' in out


@pytest.mark.parametrize("key", ["1\n", "01", "1,2", "", "\u0663", "+4", " 4"])
def test_a_key_that_is_not_a_decimal_count_is_named(key):
    """Every key the one-pass check refuses is named (a trailing newline once slipped past the regex)."""
    from unicron_plan.schema.instance import _check_count_table

    with pytest.raises(ValueError, match="is not a decimal GPU count"):
        _check_count_table({"8": 1.0, key: 2.0})
