"""The compiled table scan (unicron_plan._tablescan) and the console script's read-ahead of a solve
command's instance file (unicron_plan.readahead): a file read in slices of any size gives what its bytes
give at once; a table's numbers are Python's own (ints of 64 bits, correctly rounded floats) or the
text goes to the other readers; the read-ahead answers only for the very file, unchanged."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from unicron_plan import io, readahead
from unicron_plan.tools.generate import generate_instance

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
    leaves the decision to simdjson or the plain reader, whose answers the file then gets."""
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
        # (a literal that overflows, or longer than the scan reads: simdjson or the plain reader decides)
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


@pytest.mark.parametrize("args, expected", [
    (["solve", "i.json"], "i.json"),
    (["solve", "i.json", "--time-limit", "2", "-o", "out.json"], "i.json"),
    (["solve", "-o", "out.json", "--solver", "dp", "i.json", "--timings"], "i.json"),
    (["solve", "--", "-i.json"], "-i.json"),
    (["solve"], None),
    (["solve", "a.json", "b.json"], None),
    (["validate", "i.json"], None),
    ([], None),
])
def test_the_instance_of_a_solve_command_line(args, expected):
    assert readahead.solve_instance(args) == expected


def test_the_options_that_take_a_value_are_the_solve_commands():
    from unicron_plan.cli import app, command

    solve = command(app).get_command(None, "solve")
    taking = {name for p in solve.params if not getattr(p, "is_flag", False) and p.param_type_name == "option"
              for name in p.opts}
    assert taking == readahead.SOLVE_VALUE_OPTIONS


def _big_instance(path, seed=5):
    doc = generate_instance(seed, gpus=64, jobs=3, nodes_per_rack=8)
    path.write_text(json.dumps(doc, indent=2))
    return doc


def test_the_read_ahead_answers_only_for_the_same_file_unchanged(tmp_path, monkeypatch):
    monkeypatch.setattr(readahead, "READ_AHEAD_BYTES", 1)
    monkeypatch.setattr(readahead, "_pending", None)
    path = tmp_path / "i.json"
    _big_instance(path)
    with open(path, "rb", buffering=0) as f:
        direct = _tablescan.strip(f.fileno())
    readahead.start(["solve", str(path), "--time-limit", "2"])
    taken, scan = readahead.take(path)
    assert taken and _same_scans(scan, direct)
    assert readahead.take(path) == (False, None)  # once only
    readahead.start(["solve", str(path)])
    other = tmp_path / "other.json"
    _big_instance(other, seed=6)
    assert readahead.take(other) == (False, None)  # another file: read by the caller
    readahead.start(["solve", str(path)])
    _big_instance(path, seed=7)  # rewritten since
    os.utime(path, ns=(1, 1))
    assert readahead.take(path) == (False, None)
    fifo = tmp_path / "i.fifo"
    os.mkfifo(fifo)  # (a pipe is never opened: that would wait for a writer)
    for args in (["solve", str(tmp_path)], ["solve", str(tmp_path / "missing.json")], ["validate", str(path)],
                 ["solve", str(fifo)], ["solve", "/dev/zero"]):
        readahead.start(args)
        assert readahead._pending is None
    monkeypatch.setattr(readahead, "READ_AHEAD_BYTES", 1 << 40)
    readahead.start(["solve", str(path)])
    assert readahead._pending is None  # a small file: read in the call


def test_the_console_script_solves_as_the_command_line_does(tmp_path):
    """launch.main (the installed ``unicron-plan``) with a file read ahead gives the plan of cli.main."""
    path = tmp_path / "i.json"
    doc = generate_instance(11, gpus=8 * 2048, jobs=128, nodes_per_rack=8)
    path.write_text(json.dumps(doc, indent=2))
    assert path.stat().st_size >= readahead.READ_AHEAD_BYTES
    plans = []
    for entry in ("unicron_plan.launch", "unicron_plan.cli"):
        out = tmp_path / f"{entry}.json"
        run = subprocess.run([sys.executable, "-c", f"import sys; from {entry} import main; main()", "solve",
                              str(path), "-o", str(out), "--quiet"], capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr
        plan = json.loads(out.read_text())
        plan["solver"].pop("wall_seconds", None)
        plans.append(plan)
    assert plans[0] == plans[1]
