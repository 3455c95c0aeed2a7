"""Compact tables read once: a parsed document's tables are kept as read and checked on arrays
(schema.instance.settle_tables), with the same instance and the same error text as the per-entry
validation of the model; the flat tables are written job by job, byte for byte those of joining every
job's arrays at once."""

import json
import random

import numpy as np
import pytest

from unicron_plan import api
from unicron_plan.core import cost
from unicron_plan.core.problem import FlatTables, _table_arrays, flat_tables, resolve_tables
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import parse_json
from unicron_plan.schema import Instance
from unicron_plan.tools.generate import generate_instance


@pytest.fixture(autouse=True, params=["tables as arrays", "tables as lists"])
def _reader(request, monkeypatch):
    """Every test with the reader of compact tables as arrays (the compiled scan where it is built, else
    simdjson) and without it (the lists kept as read, which the other also falls back to)."""
    if request.param == "tables as lists":
        from conftest import without_array_reader

        without_array_reader(monkeypatch)


def _doc(rng: random.Random, jobs: int) -> dict:
    doc = generate_instance(rng.randrange(1000), gpus=64, jobs=jobs, nodes_per_rack=8)
    for job in doc["jobs"]:
        job["current"] = {"gpus": 0, "nodes": []}
        table = job["throughput"].pop("tflops")
        items = sorted((int(k), v) for k, v in table.items())
        job["throughput"]["compact"] = {"counts": [c for c, _ in items], "tflops": [v for _, v in items]}
    return doc


def _spoil(rng: random.Random, table: dict, kind: "int | None" = None) -> None:
    """One change of a table's entries, most of them refused (some, e.g. an integer TFLOP/s, allowed)."""
    counts, tflops = table["counts"], table["tflops"]
    k = rng.randrange(1, len(counts)) if len(counts) > 1 else 0
    kind = rng.randrange(22) if kind is None else kind
    if kind == 0:
        counts[rng.choice([0, k])] = True  # the first: a boolean as count 1, ascending
    elif kind == 1:
        tflops[k] = rng.choice([True, False])
    elif kind == 2:
        tflops[k] = int(tflops[k])  # an integer (allowed: made a float)
    elif kind == 3:
        counts[k] = float(counts[k])
    elif kind == 4:
        counts[k] = str(counts[k])
    elif kind == 5:
        tflops[k] = str(tflops[k])
    elif kind == 6:
        tflops[k] = -tflops[k] - 1.0
    elif kind == 7 and len(counts) > 1:
        counts[k], counts[k - 1] = counts[k - 1], counts[k]  # unsorted
    elif kind == 8 and len(counts) > 1:
        counts[k] = counts[k - 1]  # duplicate
    elif kind == 9:
        if rng.random() < 0.5:  # below 1 first, or too large last (elsewhere the ascent fails too)
            counts[0] = rng.choice([-counts[0], 0])
        else:
            counts[-1] = rng.choice([10**15, 2**63 - 1, 2**63, 2**64 + 3, 10**40])
    elif kind == 10:
        counts[k] = None
    elif kind == 11:
        tflops[k] = [tflops[k]]
    elif kind == 12:
        table["counts"] = []
    elif kind == 13:
        tflops.pop()
    elif kind == 14:
        table["extra"] = 1
    elif kind == 15:
        tflops[k] = {}
    elif kind == 16:
        table["counts"] = [[c] for c in counts]
    elif kind == 17:
        tflops[k] = 2**64 + 1  # an integer wider than 64 bits (allowed: made a float)
    elif kind == 18:
        tflops[k] = 0.0 if rng.random() < 0.5 else 1.0  # the values a boolean has
    elif kind == 19:
        tflops[k] = -0.0
    elif kind == 20:
        del table["tflops"]
    # 21: unchanged


def _outcome(load):
    try:
        return load(), None
    except InvalidInstanceError as exc:
        return None, str(exc)


def _same_instances(a: Instance, b: Instance) -> None:
    assert a.model_dump() == b.model_dump()
    for ja, jb in zip(a.jobs, b.jobs):
        ta, tb = ja.throughput.compact, jb.throughput.compact
        assert (ta is None) == (tb is None)
        if ta is None:
            continue
        assert list(map(type, ta.counts)) == list(map(type, tb.counts))
        assert list(map(type, ta.tflops)) == list(map(type, tb.tflops))
        assert ta.model_fields_set == tb.model_fields_set
        for xa, xb in zip(ta.arrays(), tb.arrays()):
            assert xa.dtype == xb.dtype and xa.tobytes() == xb.tobytes()
            assert not xa.flags.writeable and not xb.flags.writeable


@pytest.mark.parametrize("seed", range(6))
def test_read_once_gives_the_model_path_instance_and_errors(seed):
    rng = random.Random(seed)
    refused = 0
    for _ in range(40):
        doc = _doc(rng, rng.randrange(1, 4))
        for job in doc["jobs"]:
            if rng.random() < 0.6:
                _spoil(rng, job["throughput"]["compact"])
        text = json.dumps(doc)
        fast, fast_err = _outcome(lambda: api.load_instance(text))  # the reader's path: tables read once
        slow, slow_err = _outcome(lambda: api.load_instance(parse_json(text)))  # a dict: the per-entry path
        assert fast_err == slow_err
        if fast_err is None:
            _same_instances(fast, slow)
        else:
            refused += 1
    assert 5 < refused < 40  # both outcomes were compared


@pytest.mark.parametrize("group", [None, 1, 37])
@pytest.mark.parametrize("kind", range(21))
def test_each_way_of_spoiling_one_table_of_several(kind, group, monkeypatch):
    """One table spoiled, the others good: the same outcome as the per-entry path, both ways (with the
    tables checked in groups of every size: one table per group, groups across tables)."""
    if group is not None:
        from unicron_plan.schema import instance as instance_module

        monkeypatch.setattr(instance_module, "_GROUP", group)
    rng = random.Random(100 + kind)
    for n in range(12):
        doc = _doc(rng, 3)
        _spoil(rng, doc["jobs"][n % 3]["throughput"]["compact"], kind)
        text = json.dumps(doc)
        fast, fast_err = _outcome(lambda: api.load_instance(text))
        slow, slow_err = _outcome(lambda: api.load_instance(parse_json(text)))
        assert fast_err == slow_err
        if fast_err is None:
            _same_instances(fast, slow)


def test_a_good_document_keeps_its_lists(monkeypatch):
    """The path is taken: the instance holds the parsed document's lists themselves (read as lists:
    without the reader of tables as arrays, tests/test_tables_as_arrays.py)."""
    from conftest import without_array_reader

    without_array_reader(monkeypatch)
    keep: list = []
    doc = _doc(random.Random(7), 3)
    instance = api._load(Instance, json.dumps(doc), keep)
    for job, parsed in zip(instance.jobs, keep[0]["jobs"]):
        assert job.throughput.compact.counts is parsed["throughput"]["compact"]["counts"]
        assert job.throughput.compact.arrays()[0].tolist() == parsed["throughput"]["compact"]["counts"]


def test_an_integer_tflops_is_a_float_as_in_the_model_path():
    doc = _doc(random.Random(3), 2)
    doc["jobs"][1]["throughput"]["compact"]["tflops"][0] = 7
    instance = api.load_instance(json.dumps(doc))
    assert type(instance.jobs[1].throughput.compact.tflops[0]) is float
    assert instance.jobs[1].throughput.compact.tflops == api.load_instance(doc).jobs[1].throughput.compact.tflops


def _flat_joined(instance, tables) -> FlatTables:
    """The flat tables as every job's arrays joined at once (the reference)."""
    zero_i, zero_f = np.zeros(1, dtype=np.int64), np.zeros(1)
    parts_c, parts_f, sizes = [], [], []
    for job in instance.jobs:
        keys, vals = _table_arrays(job, tables[job.id])
        parts_c += [zero_i, keys]
        parts_f += [zero_f, vals]
        sizes.append(len(keys) + 1)
    off = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=off[1:])
    counts = np.concatenate(parts_c) if parts_c else zero_i[:0]
    weights = np.fromiter((job.weight for job in instance.jobs), dtype=float, count=len(sizes))
    f = cost.waf(np.repeat(weights, sizes), np.concatenate(parts_f).astype(float, copy=False)) if parts_f \
        else zero_f[:0]
    f[off[:-1]] = 0.0
    return FlatTables(counts, f, off)


@pytest.mark.parametrize("curves", ["synthetic", "identical", "four-types", "queued-near-linear", "model"])
def test_flat_tables_job_by_job_equal_the_joined_arrays(curves):
    rng = np.random.default_rng(11)
    for seed in range(8):
        doc = generate_instance(seed, gpus=256, jobs=int(rng.integers(1, 12)), curves=curves, nodes_per_rack=8)
        for job in doc["jobs"]:  # weights of every size, 0 among them
            job["weight"] = float(rng.choice([0.0, 1.0, 1e-300, 3.7, 1e200]))
        instance = api.load_instance(json.dumps(doc))
        tables, _ = resolve_tables(instance)
        new, ref = flat_tables(instance, tables), _flat_joined(instance, tables)
        for a, b in ((new.counts, ref.counts), (new.f, ref.f), (new.off, ref.off)):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
        assert not new.counts.flags.writeable and not new.f.flags.writeable


def test_shape_finds_wide_numbers_in_long_arrays_as_the_extremes_do():
    """The reader's look for a number of magnitude >= 2**63 in a long array of numbers (the sum
    standing for the largest when none is negative) says what the array's extremes say."""
    from unicron_plan import io

    wide = float(2**63)
    rng = random.Random(5)
    picks = [0.0, 1.0, 150.5, -3.0, wide, -wide, wide / 2, -wide * 0.75, wide * 1.5, wide * 0.9999999,
             float("inf"), -float("inf"), 1e300, -1e300, 2**63 - 1, 7, True]
    for _ in range(3000):
        items = [rng.random() * 1e3 for _ in range(rng.randrange(65, 90))]
        for _ in range(rng.randrange(0, 4)):
            items[rng.randrange(len(items))] = rng.choice(picks)
        if type(sum(items)) is not float:
            continue
        expected = max(items) >= wide or min(items) <= -wide
        assert io._shape({"t": items})[2] == expected
