"""An instance file read through a read-only map (io.read_json_tables with ``mapped``, as a solve process
reads a large file) against the same file read into bytes: the same value (types and float bits), the
same decision of the array reader, the same errors; a file that is not a regular one of MAPPED_BYTES
or more is read as before; and a solve that reads its file so gives the same plan."""

from __future__ import annotations

import json
import os
import random
import sys

import pytest

from unicron_plan import api, io
from unicron_plan.errors import InvalidInstanceError

sys.path.insert(0, os.path.dirname(__file__))
from test_tables_as_arrays import _as_lists, _mutated, _random_json, _same_json  # noqa: E402
from test_tables_read_once import _doc, _spoil  # noqa: E402

pytestmark = pytest.mark.skipif(io._simdjson is None, reason="simdjson is not installed")


def _read(path, mapped):
    try:
        value, as_arrays = io.read_json_tables(path, mapped=mapped)
        return _as_lists(value), as_arrays, None
    except InvalidInstanceError as exc:
        return None, None, str(exc)


def _texts(rng: random.Random):
    """Instance documents, some tables spoiled, and random documents with tables, some bytes changed."""
    for k in range(120):
        if k % 2:
            doc = _doc(rng, rng.randrange(1, 4))
            for job in doc["jobs"]:
                if rng.random() < 0.4:
                    _spoil(rng, job["throughput"]["compact"])
            data = json.dumps(doc, indent=rng.choice([None, 2])).encode()
        else:
            doc = {"jobs": [{"id": "j", "throughput": {"compact": {
                "counts": [1, 2, 4], "tflops": [rng.random(), 3, 1e19]}}, "other": _random_json(rng)}],
                "a": _random_json(rng)}
            data = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
        if rng.random() < 0.3:
            data = _mutated(rng, data)
        if rng.random() < 0.05:
            data = b"\xef\xbb\xbf" + data  # a byte-order mark
        yield data


@pytest.mark.parametrize("seed", range(3))
def test_a_mapped_file_reads_as_its_bytes(seed, tmp_path, monkeypatch):
    monkeypatch.setattr(io, "MAPPED_BYTES", 1)  # (every file here is small)
    rng = random.Random(seed)
    taken = refused = 0
    for k, data in enumerate(_texts(rng)):
        path = tmp_path / f"{k}.json"
        path.write_bytes(data)
        assert io._mapped(path) is not None
        fast, fast_arrays, fast_err = _read(path, True)
        slow, slow_arrays, slow_err = _read(path, False)
        assert fast_err == slow_err, data
        if fast_err is None:
            assert fast_arrays == slow_arrays and _same_json(fast, slow), data
            taken += fast_arrays
        else:
            refused += 1
    assert taken > 20 and refused > 5  # (both outcomes and both readers compared)


def test_only_regular_files_of_the_size_are_mapped(tmp_path, monkeypatch):
    path = tmp_path / "i.json"
    path.write_text(json.dumps(_doc(random.Random(1), 2)))
    assert io._mapped(path) is None  # smaller than MAPPED_BYTES
    monkeypatch.setattr(io, "MAPPED_BYTES", 1)
    assert io._mapped(path) is not None and bytes(io._mapped(path)) == path.read_bytes()
    assert io._mapped(tmp_path) is None and io._mapped(tmp_path / "missing.json") is None
    (tmp_path / "empty.json").write_bytes(b"")
    assert io._mapped(tmp_path / "empty.json") is None
    with pytest.raises(InvalidInstanceError, match="no such file"):
        io.read_json_tables(tmp_path / "missing.json", mapped=True)
    with pytest.raises(InvalidInstanceError, match="is a directory"):
        io.read_json_tables(tmp_path, mapped=True)
    monkeypatch.setattr(io, "MAX_BYTES", 10)
    assert io._mapped(path) is None
    with pytest.raises(InvalidInstanceError, match="larger than 10 bytes"):
        io.read_json_tables(path, mapped=True)
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
        assert io._mapped(tmp_path / "fifo") is None  # (not opened: a FIFO is read once, by the plain path)


def test_a_solve_that_keeps_its_instance_reads_the_file_mapped_to_the_same_plan(tmp_path, monkeypatch):
    from unicron_plan.tools.generate import generate_instance

    monkeypatch.setattr(io, "MAPPED_BYTES", 1)
    maps = []
    real = io._mapped
    monkeypatch.setattr(io, "_mapped", lambda p: maps.append(p) or real(p))
    for k, curves in enumerate(["synthetic", "identical", "four-types", "queued-linear-step"]):
        path = tmp_path / f"{curves}.json"
        path.write_text(json.dumps(generate_instance(k, gpus=512, jobs=6, max_counts=20, curves=curves)))
        kept = api.solve(path, time_limit_seconds=None, keep=[])
        assert maps and maps[-1] == path
        count = len(maps)
        plain = api.solve(path, time_limit_seconds=None)
        assert len(maps) == count  # (read into bytes)
        kept.solver.wall_seconds = plain.solver.wall_seconds = 0.0
        assert io.dumps(kept) == io.dumps(plain)
