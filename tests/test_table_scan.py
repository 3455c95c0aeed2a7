"""The compiled table scan (unicron_plan._tablescan): a file read in slices of any size gives what its
bytes give at once; a table's numbers are Python's own (ints of 64 bits, correctly rounded floats) or the
text goes to the other readers; whitespace dropped never joins two tokens; tables are taken only from
their place in the format."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from unicron_plan import io

from test_tables_as_arrays import _as_lists, _mutated, _plain_value, _random_json, _same_json

try:
    from unicron_plan import _tablescan
except ImportError:  # (built by `pip install`; CI's install must have built it)
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("the compiled table scan is not built", allow_module_level=True)


def _doc_bytes(rng: random.Random) -> bytes:
    doc = {"jobs": [], **{k: _random_json(rng) for k in ["a", "b:", "c["][:rng.randrange(4)]}}
    for _ in range(rng.randrange(4)):
        n = rng.randrange(1, 9)
        doc["jobs"].append({"id": "j\\\"", "throughput": {"compact": {
            "counts": sorted(rng.sample(range(-50, 10**6), n)),
            "tflops": [rng.choice([rng.random() * 1e3, 0, 3, -0.0, 1e19, 2.0**62, 1e-310, 0.1 + 0.2]) for _ in range(n)]}},
            "other": _random_json(rng)})
    data = json.dumps(doc, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1, 4])).encode("utf-8", "surrogatepass")
    return _mutated(rng, data) if rng.random() < 0.5 else data


def _same_scans(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return [bytes(x) if isinstance(x, bytearray) else x for x in a] == [bytes(x) if isinstance(x, bytearray) else x
                                                                          for x in b]


@pytest.mark.parametrize("seed", range(3))
def test_a_file_in_slices_of_any_size_scans_as_its_bytes(seed, tmp_path):
    """Slice ends fall inside numbers, strings, escapes, keys and whitespace runs: the same answer."""
    rng = random.Random(seed)
    path = tmp_path / "doc.json"
    for _ in range(60):
        data = _doc_bytes(rng)
        path.write_bytes(data)
        whole = _tablescan.strip(data)
        for size in [1, 2, 3, 7, 16, 65, 4096]:
            with open(path, "rb", buffering=0) as f:
                assert _same_scans(_tablescan.strip(f.fileno(), -1, size), whole), (size, data)


def test_the_limit_and_the_slice_are_checked(tmp_path):
    data = json.dumps({"jobs": [{"throughput": {"compact": {"counts": [1], "tflops": [2.5]}}}]}).encode()
    assert _tablescan.strip(data, len(data)) is not None
    assert _tablescan.strip(data, len(data) - 1) is None
    path = tmp_path / "d.json"
    path.write_bytes(data)
    with open(path, "rb", buffering=0) as f:
        assert _tablescan.strip(f.fileno(), len(data) - 1, 4) is None
    for bad in [0, -1, 2**31]:
        with pytest.raises(ValueError, match="slice"):
            _tablescan.strip(data, -1, bad)


def _table_text(counts: str, tflops: str) -> bytes:
    return ('{"jobs": [{"throughput": {"compact": {"counts": [%s], "tflops": [%s]}}}]}' % (counts, tflops)).encode()


@pytest.mark.parametrize("literal", ["0", "-0", "1", "-1", "9223372036854775807", "-9223372036854775808",
                                     "9223372036854775808", "-9223372036854775809", "18446744073709551616",
                                     "99999999999999999999", "0001", "1.0", "1e2", "01", "-", "+1", "1 2"])
def test_counts_are_ints_of_64_bits_or_the_text_goes_to_the_plain_reader(literal):
    """An integer literal of 64 bits is read as the plain reader reads it; any other number (or text)
    leaves the decision to the plain reader, whose answer the file then gets."""
    data = _table_text(literal, "1.5")
    fast = io._with_table_arrays(data)
    plain, err = _plain_value(data)
    fits = err is None and type(plain["jobs"][0]["throughput"]["compact"]["counts"][0]) is int \
        and -2**63 <= plain["jobs"][0]["throughput"]["compact"]["counts"][0] < 2**63 and " " not in literal
    assert (fast is not io._UNDECIDED) == fits
    if fits:
        got = fast["jobs"][0]["throughput"]["compact"]["counts"]
        assert got.dtype == np.int64 and got.tolist() == [int(literal)]


@pytest.mark.parametrize("literal", ["-0", "0", "-0.0", "-0e0", "9007199254740993", "9007199254740993.0",
                                     "123456789012345678901234567890", "1e22", "1e23", "4.35e-22", "1e-400",
                                     "2.4703282292062328e-324", "1.7976931348623158e308", "1.7976931348623159e308",
                                     "1e400", "0.30000000000000004", "1." + "9" * 70])
def test_tflops_read_to_the_bits_of_the_plain_reader(literal):
    data = _table_text("1", literal)
    fast = io._with_table_arrays(data)
    plain, err = _plain_value(data)
    if fast is io._UNDECIDED:
        # (a literal that overflows, or longer than the scan reads: the plain reader decides)
        assert err is not None or len(literal) > 64 or float(literal) == float("inf")
        return
    assert err is None
    expected = float(plain["jobs"][0]["throughput"]["compact"]["tflops"][0])
    assert fast["jobs"][0]["throughput"]["compact"]["tflops"].tobytes() == np.array([expected]).tobytes()


@pytest.mark.parametrize("text", [b'{"a": 1 2}', b'{"a": true false}', b'{"a": "x" "y"}', b'{"a": 1\n2}',
                                  b'{"a": [1 2]}', b'{"a": nul l}', b'{"a": 1}\n{"b": 2}', b'{"a": 1}x',
                                  b'{"a" : [ 1 , 2 ] }', b'\n {"a":"b c"}\t'])
def test_whitespace_dropped_never_joins_two_tokens(text):
    """The scan drops whitespace outside strings: two tokens that whitespace kept apart stay apart, so
    what the plain reader refuses is refused, and what it reads is read alike."""
    fast = io._with_table_arrays(text)
    plain, err = _plain_value(text)
    if err is not None:
        assert fast is io._UNDECIDED
    else:
        assert fast is not io._UNDECIDED and _same_json(_as_lists(fast), plain)


def test_the_scan_leaves_no_table_at_another_place():
    """Arrays named counts or tflops elsewhere than in jobs[k].throughput.compact are the rest's; a table
    the scan takes out that the rest's parse finds elsewhere (a repeated key) goes to the other readers."""
    doc = {"counts": [1, 2], "jobs": [{"compact": {"counts": [3]}, "throughput": {"compact": {"counts": [1, 2], "tflops": [1.0, 2.0]},
                                                                                     "tflops": [5]}}]}
    fast = io._with_table_arrays(json.dumps(doc).encode())
    assert _as_lists(fast) == doc and type(fast["counts"]) is list and type(fast["jobs"][0]["compact"]["counts"]) is list
    repeated = (b'{"jobs": [{"throughput": {"compact": {"counts": [1], "tflops": [1.0], "counts": [2]}}}]}')
    assert io._with_table_arrays(repeated) is io._UNDECIDED


def test_a_kept_table_is_what_model_construct_makes():
    """The deferred table's lean constructor gives what pydantic's model_construct gives."""
    from unicron_plan.schema.instance import CompactTable

    counts, tflops = np.array([1, 2], dtype=np.int64), np.array([1.5, 2.5])
    lean, full = CompactTable._kept(counts, tflops), CompactTable.model_construct(counts=counts, tflops=tflops)
    for name in ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"):
        assert getattr(lean, name) == getattr(full, name) if name != "__dict__" else \
            all(getattr(lean, name)[k] is getattr(full, name)[k] for k in ("counts", "tflops"))
    assert set(lean.__dict__) == set(full.__dict__) and type(lean) is type(full)
    assert lean.arrays()[0].tolist() == full.arrays()[0].tolist() == [1, 2]
