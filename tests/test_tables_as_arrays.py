"""Compact tables read as arrays: the reader (io._with_table_arrays: the compiled scan, or simdjson) gives each
``jobs[k].throughput.compact`` table as two numpy arrays and the rest of the document as the plain
reader does; an instance so loaded is the per-entry path's (the same dump, lists, arrays, fingerprint),
and whatever the fast reader is not certain of goes to the plain reader, with the same errors."""

from __future__ import annotations

import json
import pickle
import random
import struct

import numpy as np
import pytest

from unicron_plan import api, io
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.plan.contingency import content_digest, fingerprint
from unicron_plan.schema import Instance

from conftest import without_array_reader
from test_tables_read_once import _doc, _outcome, _same_instances, _spoil


@pytest.fixture(autouse=True)
def _reader(array_reader):
    """Every test with each reader of tables as arrays."""


def _plain(monkeypatch):
    """Load as the code without an array reader does (neither the scan nor simdjson)."""
    def load(text):
        with monkeypatch.context() as m:
            without_array_reader(m)
            return api.load_instance(text)
    return load


def _plain_value(data: bytes):
    try:
        return io.parse_json(data), None
    except InvalidInstanceError as exc:
        return None, str(exc)


def _as_lists(value, tagged: bool = False):
    """The array reader's value with each table's arrays as lists (counts ints, tflops floats);
    ``tagged``: each array as (its dtype, the list) and each other leaf as (its type's name, the value),
    so that values equal across types (1 and 1.0, True and 1) compare unequal."""
    if type(value) is dict:
        return {k: _as_lists(v, tagged) for k, v in value.items()}
    if type(value) is list:
        return [_as_lists(v, tagged) for v in value]
    if type(value) is np.ndarray:
        return (str(value.dtype), value.tolist()) if tagged else value.tolist()
    return (type(value).__name__, value) if tagged else value


def _same_json(fast, plain) -> bool:
    """Equal values with equal types, except that a table's TFLOP/s may be an int in the plain value
    (the array holds the float the per-entry validation makes of it)."""
    if type(fast) is dict:
        return type(plain) is dict and list(fast) == list(plain) and all(
            _same_json(fast[k], plain[k]) for k in fast)
    if type(fast) is list:
        return type(plain) is list and len(fast) == len(plain) and all(map(_same_json, fast, plain))
    if type(fast) is float and type(plain) is int:
        return fast == float(plain)
    if type(fast) is float:
        return type(plain) is float and struct.pack("<d", fast) == struct.pack("<d", plain)
    return type(fast) is type(plain) and fast == plain


@pytest.mark.parametrize("seed", range(6))
def test_random_spoiled_documents_load_as_without_the_array_reader(seed, monkeypatch):
    rng = random.Random(1000 + seed)
    plain = _plain(monkeypatch)
    fast_taken = refused = 0
    for _ in range(40):
        doc = _doc(rng, rng.randrange(1, 4))
        for job in doc["jobs"]:
            if rng.random() < 0.6:
                _spoil(rng, job["throughput"]["compact"])
        text = json.dumps(doc, indent=rng.choice([None, 1, 2]))
        fast_taken += io.parse_json_tables(text)[1]
        fast, fast_err = _outcome(lambda: api.load_instance(text))
        slow, slow_err = _outcome(lambda: plain(text))
        assert fast_err == slow_err
        if fast_err is None:
            _same_instances(fast, slow)
            assert fingerprint(fast) == fingerprint(slow) and content_digest(fast) == content_digest(slow)
        else:
            refused += 1
    assert 5 < refused < 40 and fast_taken > 5  # both outcomes compared, the array reader taken


@pytest.mark.parametrize("kind", range(22))
def test_each_way_of_spoiling_one_table_of_several(kind, monkeypatch):
    rng = random.Random(200 + kind)
    plain = _plain(monkeypatch)
    for n in range(8):
        doc = _doc(rng, 3)
        _spoil(rng, doc["jobs"][n % 3]["throughput"]["compact"], kind)
        text = json.dumps(doc)
        fast, fast_err = _outcome(lambda: api.load_instance(text))
        slow, slow_err = _outcome(lambda: plain(text))
        assert fast_err == slow_err
        if fast_err is None:
            _same_instances(fast, slow)


# Texts the array reader must leave to the plain reader, or read as it does: each put in place of the
# first table's counts, its TFLOP/s, or a job's weight (outside the tables).
_ODD = ["[[1], [2]]", "[1, [2]]", "[[1, 2]]", "[1, 2.0]", "[true, 2]", "[1, null]", "[1, \"2\"]", "[1, {}]",
        "[1, 18446744073709551615]", "[1, 9223372036854775808]", "[1, 123456789012345678901234567890]",
        "[-1, 2]", "[0]", "[1, -0]", "[1, 1e400]", "[1, NaN]", "[1, Infinity]", "[1, -0.0]", "[1, 1E2]",
        "[1,2,]", "[]", "[1, 2, 2]", "[2, 1]", "[1, 1e-400]", "[1, 0.1e1]",
        "1", "\"x\"", "null", "{}", "[1, 1e19]", "[1, 9.3e18]", "[1, 2.5]"]


@pytest.mark.parametrize("odd", _ODD)
@pytest.mark.parametrize("where", ["counts", "tflops", "weight"])
def test_odd_values_in_a_table_or_outside(odd, where, monkeypatch):
    doc = _doc(random.Random(5), 2)
    doc["jobs"][0]["throughput"]["compact"]["counts"] = doc["jobs"][0]["throughput"]["compact"]["counts"][:2]
    doc["jobs"][0]["throughput"]["compact"]["tflops"] = doc["jobs"][0]["throughput"]["compact"]["tflops"][:2]
    marker = "\"__odd__\""
    if where == "weight":
        doc["jobs"][1]["weight"] = "__odd__"
    else:
        doc["jobs"][0]["throughput"]["compact"][where] = "__odd__"
    text = json.dumps(doc).replace(marker, odd)
    fast = io._with_table_arrays(text.encode())
    plain, plain_err = _plain_value(text.encode())
    if fast is not io._UNDECIDED:
        assert plain_err is None and _same_json(_as_lists(fast), plain)
    a, a_err = _outcome(lambda: api.load_instance(text))
    b, b_err = _outcome(lambda: _plain(monkeypatch)(text))
    assert a_err == b_err
    if a_err is None:
        _same_instances(a, b)


@pytest.mark.parametrize("text", [
    '\ufeff{"a": 1}',  # a byte-order mark: the plain reader refuses it
    '{"a": 1, "a": 2}', '{"jobs": [{"throughput": {"compact": {"counts": [1], "counts": [1], "tflops": [1.0]}}}]}',
    '{"jobs": [{"throughput": {"compact": {"counts": [1], "tflops": [1.0], "tflops": [2.0]}}}]}',
    '{"jobs": [{"throughput": {"compact": {"counts": [1], "tflops": [1.0]}, "compact": 1}}]}',
    '{"jobs": [{"throughput": {"compact": {"counts": [[1]], "tflops": [[1.0]]}}}]}',
    '{"a": "x:y[", "jobs": [{"throughput": {"compact": {"counts": [1], "tflops": [1.0]}}}]}',
    '{"a": "\\ud800"}', '{"a": "\\udc00\\ud800"}', '{"a": "\xff"}', '{"a": 1} x', '{"a": 1}\x00', '{"a": 1}\x0c',
    '\x0c{"a": 1}', ' \t\r\n{"a": 1} \t\r\n', '{"a": "tab\there"}', '{"a": "\\x"}', '{"a": 01}', '{"a": .5}',
    '{"a": +1}', '{"a": 1.}', '{"a": -}', '{"a": 1e}', '{"a": [1, 2', '{"a": tru}', '{"a": nul}',
    '{"a": "\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\"\\\\"}', '{"\\u0000": "\\u0000"}', '[{"a": 1}]',
    '{"a": ' + "[" * 70 + "]" * 70 + "}", '{"a": ' + "[" * 63 + "]" * 63 + "}",
    '{"jobs": [{"throughput": {"compact": ' + "{\"x\": " * 61 + "1" + "}" * 61 + "}}]}",
    '{"jobs": [' + "[" * 60 + "]" * 60 + ', {"throughput": {"compact": {"counts": [1], "tflops": [1.0]}}}]}',
    '{"jobs": [{"throughput": {"compact": {"counts": [1], "tflops": [1.0]}}}], "deep": '
    + "[" * 62 + "]" * 62 + "}",
    '{"a": 9223372036854775807, "b": -9223372036854775808, "c": 18446744073709551615, "d": 1e19, "e": -0}',
])
def test_odd_texts_read_as_the_plain_reader_reads_them(text):
    data = text.encode("utf-8", "surrogatepass")
    fast = io._with_table_arrays(data)
    plain, plain_err = _plain_value(data)
    if fast is not io._UNDECIDED:
        assert plain_err is None and _same_json(_as_lists(fast), plain), text
        assert not text.lstrip(" \t\r\n").startswith("\ufeff")


def _random_json(rng: random.Random, depth: int = 0):
    pick = rng.randrange(10 if depth < 4 else 6)
    if pick == 0:
        return rng.choice([None, True, False])
    if pick == 1:
        return rng.choice([0, -1, 7, 2**63 - 1, -2**63, 2**64 - 1, 10**19, rng.randrange(-10**6, 10**6)])
    if pick == 2:
        return rng.choice([0.0, -0.0, 0.1, 1e300, 5e-324, 1e19, 2.0**63, -2.0**63, 1.5, rng.random() * 10 ** rng.randrange(-20, 20)])
    if pick in (3, 4, 5):
        return "".join(rng.choice(["a", ":", "[", "]", "{", "}", ",", "\"", "\\", "\u00e9", "\U0001F600", "\x00",
                                   "\n", " "]) for _ in range(rng.randrange(4)))
    if pick in (6, 7):
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["a", "b", "c", "counts", "tflops", "compact", "throughput", "jobs", "x:y"]):
            _random_json(rng, depth + 1) for _ in range(rng.randrange(4))}


_BYTES = [b"{", b"}", b"[", b"]", b",", b":", b"\"", b"\\", b"1", b"-", b".", b"e", b"0", b" ", b"\n", b"\xff",
          b"\xc3\xa9", b"\\u", b"d800", b"true", b"null", b"NaN", b"1e400", b"\"a\":1,"]


def _mutated(rng: random.Random, data: bytes) -> bytes:
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(len(data) + 1)
        op = rng.randrange(3)
        if op == 0:
            data = data[:at] + rng.choice(_BYTES) + data[at:]
        elif op == 1:
            data = data[:at] + data[at + rng.randrange(1, 4):]
        else:
            data = data[:at] + rng.choice(_BYTES) + data[at + 1:]
    return data


@pytest.mark.parametrize("seed", range(4))
def test_random_and_mutated_texts_read_as_the_plain_reader_reads_them(seed):
    """Whatever the array reader accepts, the plain reader accepts with the same value (types and
    float bits alike); documents with tables of every kind of value among random members, and
    random byte changes of them."""
    rng = random.Random(seed)
    accepted = 0
    for _ in range(600):
        doc = {"jobs": [], **{k: _random_json(rng) for k in ["a", "b:", "c["][:rng.randrange(4)]}}
        for _ in range(rng.randrange(3)):
            n = rng.randrange(1, 5)
            job = {"id": "j", "throughput": {"compact": {
                "counts": sorted(rng.sample(range(1, 100), n)),
                "tflops": [rng.choice([rng.random() * 1e3, 0, 3, 1e19, 2.0**62, 1e-310]) for _ in range(n)]}},
                "other": _random_json(rng)}
            doc["jobs"].append(job)
        data = json.dumps(doc, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2])).encode(
            "utf-8", "surrogatepass")
        if rng.random() < 0.6:
            data = _mutated(rng, data)
        fast = io._with_table_arrays(data)
        if fast is io._UNDECIDED:
            continue
        accepted += 1
        plain, plain_err = _plain_value(data)
        assert plain_err is None and _same_json(_as_lists(fast), plain), data
    assert accepted > 50


def test_floats_are_read_to_the_same_bits():
    """Every float literal (random bits written shortest, and long random digit strings) reads to the
    bits Python's own conversion gives, in a table and outside."""
    rng = random.Random(9)
    literals = []
    for _ in range(4000):
        bits = rng.getrandbits(63)  # non-negative doubles, NaN and infinities left out below
        value = struct.unpack("<d", struct.pack("<Q", bits))[0]
        if value == value and value != float("inf"):
            literals.append(repr(value))
    for _ in range(4000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 40)))
        literals.append(f"{digits[0]}.{digits[1:] or '0'}e{rng.randrange(-330, 300)}")
    literals += ["0.1", "2.2250738585072011e-308", "2.2250738585072012e-308", "4.9406564584124654e-324",
                 "2.4703282292062327e-324", "2.4703282292062328e-324", "1.7976931348623157e308",
                 "9007199254740993", "9007199254740993.0", "1" + "0" * 19 + ".5", "0." + "0" * 50 + "1"]
    counts = list(range(1, len(literals) + 1))
    narrow = [x for x in literals if float(x) < 2.0**63]  # (outside the tables a wider one goes to the plain reader)
    text = ('{"jobs": [{"throughput": {"compact": {"counts": %s, "tflops": [%s]}}}], "outside": [%s]}'
            % (json.dumps(counts), ", ".join(literals), ", ".join(narrow)))
    fast = io._with_table_arrays(text.encode())
    assert fast is not io._UNDECIDED
    got = fast["jobs"][0]["throughput"]["compact"]["tflops"]
    assert got.tobytes() == np.array([float(x) for x in literals]).tobytes()
    assert fast["outside"] == [int(x) if x.isdigit() else float(x) for x in narrow]
    assert np.array(fast["outside"], dtype=float).tobytes() == np.array([float(x) for x in narrow]).tobytes()


def test_a_loaded_table_makes_its_lists_only_when_asked(monkeypatch):
    doc = _doc(random.Random(11), 3)
    doc["jobs"][1]["throughput"]["compact"]["tflops"][0] = 7  # an integer: a float in the lists
    text = json.dumps(doc)
    keep: list = []
    fast = api._load(Instance, text, keep)
    slow = _plain(monkeypatch)(text)
    table = fast.jobs[1].throughput.compact
    assert type(keep[0]["jobs"][1]["throughput"]["compact"]["counts"]) is np.ndarray  # the array reader was taken
    assert "counts" not in table.__dict__ and "tflops" not in table.__dict__
    assert table.arrays()[0].tolist() == doc["jobs"][1]["throughput"]["compact"]["counts"]
    assert not table.arrays()[0].flags.writeable and not table.arrays()[1].flags.writeable
    assert fast.model_dump_json() == slow.model_dump_json()  # the lists made for the dump
    assert type(table.tflops[0]) is float and table.tflops == slow.jobs[1].throughput.compact.tflops
    other = api._load(Instance, text)
    assert other == fast and other.jobs[2].throughput.compact == slow.jobs[2].throughput.compact
    copied = other.model_copy(deep=True)
    assert copied == slow and pickle.loads(pickle.dumps(other)) == slow
    assert repr(api._load(Instance, text).jobs[0].throughput.compact) == repr(slow.jobs[0].throughput.compact)
    assert list(api._load(Instance, text).jobs[0].throughput.compact) == list(slow.jobs[0].throughput.compact)


def test_a_refused_document_is_read_again_as_lists():
    """A document the array reader read but the validation refuses is read again by the plain reader:
    the error names the entry, as the per-entry validation does."""
    doc = _doc(random.Random(12), 2)
    doc["jobs"][1]["throughput"]["compact"]["counts"][3] = doc["jobs"][1]["throughput"]["compact"]["counts"][2]
    text = json.dumps(doc)
    assert io.parse_json_tables(text)[1]
    with pytest.raises(InvalidInstanceError, match=r"jobs\[1\]\.throughput\.compact"):
        api.load_instance(text)


def test_files_take_the_array_reader(tmp_path, monkeypatch):
    doc = _doc(random.Random(13), 3)
    path = tmp_path / "i.json"
    path.write_text(json.dumps(doc, indent=2))
    value, as_arrays = io.read_json_tables(path)
    assert as_arrays and type(value["jobs"][0]["throughput"]["compact"]["tflops"]) is np.ndarray
    assert _same_json(_as_lists(value), io.read_json(path))
    _same_instances(api.load_instance(path), _plain(monkeypatch)(str(path)))
    path.write_text(json.dumps(doc).replace('"weight"', '"weight": 1, "weight"', 1))  # a repeated key
    assert io._with_table_arrays(path.read_bytes()) is io._UNDECIDED
    with pytest.raises(InvalidInstanceError, match="duplicate key 'weight'"):
        io.read_json_tables(path)
    assert _outcome(lambda: api.load_instance(path))[1] == _outcome(lambda: _plain(monkeypatch)(str(path)))[1]


@pytest.mark.parametrize("size", [None, 1, 7, 4096])
def test_byte_counts_are_bytes_count(size, monkeypatch):
    """The counts of colons and brackets the array reader compares are ``bytes.count``'s, at every slice
    size (slices of one byte, of a few, and texts shorter than a slice)."""
    if size is not None:
        monkeypatch.setattr(io, "_COUNT_SLICE", size)
    rng = random.Random(size or 0)
    for n in [0, 1, 2, 5, 64, 1000, 20000]:
        data = bytes(rng.choice(b':[]{}",x\\x00\xff') for _ in range(n))
        assert io._byte_counts(data, b":[") == [data.count(b":"), data.count(b"[")]
        assert io._byte_counts(data, b"") == []


@pytest.mark.parametrize("value", [1e19, 2.0**63, 1e300, 18446744073709551615])
def test_a_tflops_of_2_63_or_more_is_read_again_as_lists(value, monkeypatch):
    """Such a table (valid: any finite TFLOP/s >= 0) is left to the plain reader: the instance holds the
    lists it read, the same instance as without the array reader."""
    doc = _doc(random.Random(14), 2)
    doc["jobs"][1]["throughput"]["compact"]["tflops"][-1] = value
    text = json.dumps(doc)
    assert io.parse_json_tables(text)[1]  # (the text itself is read as arrays first)
    fast = api.load_instance(text)
    assert "tflops" in fast.jobs[1].throughput.compact.__dict__  # read again: the lists kept as read
    _same_instances(fast, _plain(monkeypatch)(text))
