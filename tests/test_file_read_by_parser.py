"""An instance file read from its path by the array reader (io._file_with_table_arrays: the compiled scan
in one pass, or simdjson): the same value, node columns and errors as the same bytes read into memory
and parsed (io._with_table_arrays, then the plain reader); simdjson tries only a settled regular file
within the size limit, and a file that changes while it reads it is left to the plain reader."""

from __future__ import annotations

import json
import os
import random
import time

import numpy as np
import pytest

from unicron_plan import api, io
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.schema.instance import read_node_columns
from unicron_plan.tools.generate import generate_instance

from test_tables_as_arrays import _as_lists, _mutated, _random_json
from test_tables_read_once import _doc, _outcome, _same_instances, _spoil


@pytest.fixture
def settled(monkeypatch, array_reader):
    """Each array reader; files count as settled as soon as written (the tests' files are fresh)."""
    monkeypatch.setattr(io, "_SETTLED_NS", 0)


@pytest.fixture
def simdjson_files(monkeypatch):
    """simdjson reads the files (the compiled scan set aside)."""
    if io._simdjson is None:
        pytest.skip("simdjson is not installed")
    monkeypatch.setattr(io, "_tablescan", None)


def _from_bytes(path, nodes=None):
    """read_json_tables as the code before reads a file: its bytes in memory, then the array reader or
    the plain reader."""
    data = io._read_bytes(path, "JSON")
    value = io._with_table_arrays(data, nodes)
    if value is not io._UNDECIDED:
        return value, True
    return io._json_of_file(data, path), False


def _read_outcome(read, path, nodes=None):
    try:
        value, as_arrays = read(path, nodes)
    except InvalidInstanceError as exc:
        return ("error", str(exc))
    return (as_arrays, _as_lists(value, tagged=True))


def _same_read(path, with_nodes: bool = False) -> bool:
    """The file path and the bytes path agree on ``path`` (value and types, node columns, or the error);
    whether the file path was taken and kept."""
    a_nodes = {"read": read_node_columns} if with_nodes else None
    b_nodes = {"read": read_node_columns} if with_nodes else None
    data = path.read_bytes()
    direct, tried = io._file_with_table_arrays(path, a_nodes and dict(a_nodes))
    via_bytes = io._with_table_arrays(data)
    assert tried
    assert (direct is io._UNDECIDED) == (via_bytes is io._UNDECIDED)
    if direct is not io._UNDECIDED:
        assert _as_lists(direct, tagged=True) == _as_lists(via_bytes, tagged=True)
    a = _read_outcome(io.read_json_tables, path, a_nodes)
    b = _read_outcome(_from_bytes, path, b_nodes)
    assert a == b
    if with_nodes:
        assert a_nodes.keys() == b_nodes.keys()
        if "columns" in a_nodes:
            assert _as_lists(a_nodes["raw"], tagged=True) == _as_lists(b_nodes["raw"], tagged=True)
            ca, cb = a_nodes["columns"], b_nodes["columns"]
            for name in ("gpus_list", "failed", "repair"):
                assert getattr(ca, name) == getattr(cb, name)
    return direct is not io._UNDECIDED


@pytest.mark.parametrize("seed", range(4))
def test_random_and_mutated_files_read_as_their_bytes(seed, tmp_path, settled):
    """Random documents with tables among random members, 60% with random byte changes (malformed text,
    bytes not UTF-8, repeated keys, brackets and colons in strings, a byte-order mark...), written with
    and without indentation and leading whitespace."""
    rng = random.Random(seed)
    path = tmp_path / "doc.json"
    kept = 0
    for _ in range(250):
        doc = {"jobs": [], **{k: _random_json(rng) for k in ["a", "b:", "c["][:rng.randrange(4)]}}
        for _ in range(rng.randrange(3)):
            n = rng.randrange(1, 5)
            doc["jobs"].append({"id": "j", "throughput": {"compact": {
                "counts": sorted(rng.sample(range(1, 100), n)),
                "tflops": [rng.choice([rng.random() * 1e3, 0, 3, 1e19, 2.0**62, 1e-310]) for _ in range(n)]}},
                "other": _random_json(rng)})
        data = rng.choice([b"", b" ", b"\n\t ", b"\xef\xbb\xbf"]) + json.dumps(
            doc, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2])).encode("utf-8", "surrogatepass")
        if rng.random() < 0.6:
            data = _mutated(rng, data)
        path.write_bytes(data)
        kept += _same_read(path)
    assert 10 < kept < 200  # both outcomes compared


@pytest.mark.parametrize("seed", range(3))
def test_instances_load_as_from_their_bytes(seed, tmp_path, settled, monkeypatch):
    """Instances with spoiled tables (most refused, with the error naming the entry), and clusters long
    enough for the node columns: the same instance or error as the bytes path's."""
    rng = random.Random(300 + seed)
    path = tmp_path / "i.json"
    for k in range(30):
        if k % 3 == 0:
            doc = generate_instance(rng.randrange(1000), gpus=8 * 3 * io._LONG_ARRAY, jobs=rng.randrange(1, 6),
                                    nodes_per_rack=8)
        else:
            doc = _doc(rng, rng.randrange(1, 4))
            for job in doc["jobs"]:
                if rng.random() < 0.4:
                    _spoil(rng, job["throughput"]["compact"])
        path.write_text(json.dumps(doc, indent=rng.choice([None, 1])))
        _same_read(path, with_nodes=True)
        fast = _outcome(lambda: api.load_instance(path))
        with monkeypatch.context() as m:
            m.setattr(io, "_file_with_table_arrays", lambda p, nodes=None: (io._UNDECIDED, False))
            slow = _outcome(lambda: api.load_instance(path))
        assert fast[1] == slow[1]
        if fast[1] is None:
            _same_instances(fast[0], slow[0])


@pytest.mark.parametrize("size", [1, 7, 4096, None])
def test_counts_in_slices_are_bytes_count(size, tmp_path, monkeypatch):
    if size is not None:
        monkeypatch.setattr(io, "_COUNT_SLICE", size)
    rng = random.Random(size or 0)
    path = tmp_path / "t.json"
    for n in [1, 2, 5, 64, 1000, 20000]:
        data = b"{" + bytes(rng.choice(b':[]{}",x\\x00\xff') for _ in range(n))
        path.write_bytes(data)
        assert io._file_counts(path, os.stat(path)) == [data.count(b":"), data.count(b"[")]
        path.write_bytes(b"x" + data)  # not an object first: no counts
        assert io._file_counts(path, os.stat(path)) is None
        before = os.stat(path)
        path.write_bytes(data[:-1])  # shorter, or longer, than the size it had: no counts
        assert io._file_counts(path, before) is None
        path.write_bytes(data + b" " * (before.st_size + 1 - len(data)))
        assert io._file_counts(path, before) is None


def test_only_settled_regular_files_within_the_limit_are_tried(tmp_path, monkeypatch, simdjson_files):
    doc = json.dumps(_doc(random.Random(1), 2))
    path = tmp_path / "i.json"
    path.write_text(doc)
    assert io._file_with_table_arrays(path) == (io._UNDECIDED, False)  # just written: not settled
    monkeypatch.setattr(io, "_SETTLED_NS", 0)
    value, tried = io._file_with_table_arrays(path)
    assert tried and value is not io._UNDECIDED
    fifo = tmp_path / "i.fifo"
    os.mkfifo(fifo)
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    for other in [tmp_path, fifo, tmp_path / "missing.json", empty, "/dev/null"]:
        assert io._file_with_table_arrays(other) == (io._UNDECIDED, False)
    for other in [tmp_path, tmp_path / "missing.json", empty]:
        a = _read_outcome(io.read_json_tables, other)
        with monkeypatch.context() as m:
            m.setattr(io, "_file_with_table_arrays", lambda p, nodes=None: (io._UNDECIDED, False))
            assert a == _read_outcome(io.read_json_tables, other)
        assert a[0] == "error"
    monkeypatch.setattr(io, "MAX_BYTES", len(doc) - 1)
    assert io._file_with_table_arrays(path) == (io._UNDECIDED, False)
    with pytest.raises(InvalidInstanceError, match="larger than"):
        io.read_json_tables(path)


def _changed_while_read(monkeypatch, change):
    """The file path with ``change()`` run between simdjson's read of the file and the count."""
    real = io._tables_read

    def tables_read(parse, counts, nodes):
        def parse_then_change(parser):
            value = parse(parser)
            change()
            return value
        return real(parse_then_change, counts, nodes)
    monkeypatch.setattr(io, "_tables_read", tables_read)


@pytest.mark.parametrize("how", ["same size", "longer", "shorter", "replaced"])
def test_a_file_changed_while_read_goes_to_the_plain_reader(how, tmp_path, monkeypatch, simdjson_files):
    """A write between the parse and the count (the counts then of another text) is seen: the value is
    the plain reader's of the file as it is then (here a repeated key, which the plain reader refuses)."""
    doc = json.dumps(_doc(random.Random(2), 2))
    path = tmp_path / "i.json"
    path.write_text(doc)
    monkeypatch.setattr(io, "_SETTLED_NS", 50_000_000)
    time.sleep(0.1)  # settled
    # the same length, one key repeated (one member fewer in the dict: the counts say so, if they are its)
    spoiled = doc.replace('"schema_version"', '"name"', 1)
    assert spoiled != doc and len(spoiled) < len(doc)

    def change():
        if how == "replaced":
            other = tmp_path / "other.json"
            other.write_text(spoiled + " " * (len(doc) - len(spoiled)))
            os.replace(other, path)
        else:
            with open(path, "r+b") as f:
                f.write({"same size": spoiled + " " * (len(doc) - len(spoiled)), "longer": spoiled + " " * (len(doc) - len(spoiled) + 2),
                         "shorter": doc[:-1]}[how].encode())
                f.truncate()
    _changed_while_read(monkeypatch, change)
    assert io._file_with_table_arrays(path) == (io._UNDECIDED, True)
    path.write_text(doc)
    time.sleep(0.1)
    with pytest.raises(InvalidInstanceError):
        io.read_json_tables(path)  # (the change again: the plain reader refuses what it reads)


def test_unchanged_files_keep_the_parse(tmp_path, monkeypatch, simdjson_files):
    doc = _doc(random.Random(3), 3)
    path = tmp_path / "i.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(io, "_SETTLED_NS", 0)
    _changed_while_read(monkeypatch, lambda: os.stat(path))  # read, not changed
    value, tried = io._file_with_table_arrays(path)
    assert tried and type(value["jobs"][0]["throughput"]["compact"]["counts"]) is np.ndarray


def test_a_path_with_spaces_and_bytes_not_utf8_is_read(tmp_path, settled):
    folder = tmp_path / os.fsdecode(b"odd \xff name")
    folder.mkdir()
    path = folder / "i n.json"
    path.write_text(json.dumps(_doc(random.Random(4), 2)))
    value, tried = io._file_with_table_arrays(path)
    assert tried and value is not io._UNDECIDED
    assert _same_read(path)
