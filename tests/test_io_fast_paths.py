"""The reader's and writer's fast paths give exactly what the plain ones give.

Reading: the path for large texts (orjson, or io.parse_json without the per-object hook when orjson
is absent; duplicate keys found by counting members against the colons of the text) gives the
hooked parse's value, and on bad input its error. Writing: io.dumps gives json.dumps(indent=2, sort_keys=True) byte for byte."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from unicron_plan import io
from unicron_plan.errors import InvalidInstanceError

KEYS = st.text(alphabet=st.sampled_from('ab:{}[]"\\,\u00e9 '), max_size=4)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                    st.floats(allow_nan=False, allow_infinity=False), KEYS)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=12),
                                                       st.dictionaries(KEYS, inner, max_size=12)),
                      max_leaves=40)


def _hooked(text: str):
    """The reader's result on the small-text path: (value, None) or (None, error message)."""
    try:
        return io.parse_json(text), None
    except InvalidInstanceError as exc:
        return None, str(exc)


def _large(text: str):
    """The large-text path's result, the same with orjson and with the json module alone."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(io, "LARGE_TEXT_BYTES", 0)  # every text takes the large-text path
        fast = _hooked(text)
        m.setattr(io, "_orjson", None)
        assert _hooked(text) == fast
        return fast


def _with_duplicate(text: str) -> str:
    """``text`` with the first member of its first non-empty object written twice (values 1, 2)."""
    value = json.loads(text)
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict) and v:
            key = next(iter(v))
            del v[key]
            v["\u2603"] = None  # a stand-in, replaced in the text by the two members
            return json.dumps(value).replace('"\\u2603": null', f"{json.dumps(key)}: 1, {json.dumps(key)}: 2")
        stack.extend(v.values() if isinstance(v, dict) else v if isinstance(v, list) else [])
    return text


@settings(max_examples=300, deadline=None)
@given(value=VALUES, indent=st.sampled_from([None, 1]), ensure_ascii=st.booleans())
def test_large_path_gives_the_hooked_value(value, indent, ensure_ascii):
    text = json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)
    small = _hooked(text)
    assert small == (value, None)
    assert _large(text) == small


@settings(max_examples=200, deadline=None)
@given(value=st.dictionaries(KEYS, VALUES, min_size=1, max_size=6))
def test_large_path_refuses_a_duplicate_key_as_the_hooked_parse(value):
    text = _with_duplicate(json.dumps(value))
    small = _hooked(text)
    assert small[0] is None and "duplicate key" in small[1]
    assert _large(text) == small


@pytest.mark.parametrize("text", [
    '{"a": NaN}', '{"a": [1, 2], "b": -Infinity}', '{"a": ' + "9" * 200 + "}", '{"a": 1,}', '{"a": "\\"}',
    '{"a": {"b": 1, "b": 2}, "c": NaN}', '[' * 70 + ']' * 70, '{"a": "x:y", "a": 1}', '{"x\\":": 1, "x\\":": 2}',
])
def test_large_path_errors_are_the_hooked_ones(text):
    small = _hooked(text)
    assert small[0] is None
    assert _large(text) == small


def test_a_large_table_with_a_repeated_count_is_refused():
    """A real large text (over LARGE_TEXT_BYTES): a throughput table whose key appears twice."""
    table = ", ".join(f'"{c}": {150.0 * c}' for c in range(1, 60_000))
    text = '{"jobs": [{"tflops": {' + table + ', "17": 1.0}}]}'
    assert len(text) >= io.LARGE_TEXT_BYTES
    with pytest.raises(InvalidInstanceError, match="duplicate key '17'"):
        io.parse_json(text, "big.json")
    fine = '{"jobs": [{"tflops": {' + table + '}}]}'
    assert len(io.parse_json(fine)["jobs"][0]["tflops"]) == 59_999


def test_shape_counts_members_depth_and_wide_numbers():
    assert io._shape({"a": [{"b": 1, "c": {}}] * 20, "d": list(range(100))}) == (2 + 20 * 2, 4, False)
    assert io._shape([[0.5] * 100, {"x": [1.0, "s", -2.0**63]}]) == (1, 3, True)
    assert io._shape(7) == (0, 0, False) and io._shape([]) == (0, 1, False)
    assert io._shape(-float(2**63)) == (0, 0, True) and io._shape(0.5) == (0, 0, False)


def _shape_loop(value):
    """The exactness pass as first written (a Python test per value), the reference of io._shape."""
    import itertools

    if type(value) is float:
        return 0, 0, value >= io._WIDE or value <= -io._WIDE
    n = depth = 0
    wide = False
    level = [value] if type(value) is dict or type(value) is list else []
    while level and depth <= io.MAX_DEPTH:
        depth += 1
        dicts = [v for v in level if type(v) is dict]
        n += sum(map(len, dicts))
        lists = [v for v in level if type(v) is list]
        long = [v for v in lists if len(v) > 64]
        short = itertools.chain.from_iterable(v for v in lists if len(v) <= 64)
        below = []
        for items in [list(itertools.chain(itertools.chain.from_iterable(map(dict.values, dicts)), short)), *long]:
            kinds = set(map(type, items))
            if float in kinds and not wide:
                numbers = items if kinds <= io._NUMBERS else [x for x in items if type(x) is float]
                wide = max(numbers) >= io._WIDE or min(numbers) <= -io._WIDE
            if dict in kinds or list in kinds:
                below += [x for x in items if type(x) is dict or type(x) is list]
        level = below
    return n, depth, wide


WIDE = st.sampled_from([2.0**63, -2.0**63, 2**63, -2**63 - 1, 2**64, 1e300, -1e300])
WIDE_SCALARS = st.one_of(SCALARS, WIDE, st.just(True))
# long arrays of numbers only (a throughput table), of integers only, with a wide one or not
NUMBERS = st.one_of(st.integers(-10**6, 10**6), st.floats(-1e6, 1e6), st.booleans())
NUMBER_ARRAYS = st.one_of(st.lists(NUMBERS, min_size=65, max_size=80),
                          st.lists(st.one_of(NUMBERS, WIDE), min_size=65, max_size=80),
                          st.lists(st.one_of(st.integers(-10**6, 10**6), WIDE), min_size=65, max_size=80))
# long arrays holding objects and arrays too (each looked at alone), and nested values holding them all
LONG_MIXED = st.lists(st.one_of(WIDE_SCALARS, st.lists(WIDE_SCALARS, max_size=2),
                                st.dictionaries(KEYS, WIDE_SCALARS, max_size=2)), min_size=65, max_size=75)
LONG_VALUES = st.recursive(
    st.one_of(WIDE_SCALARS, NUMBER_ARRAYS, LONG_MIXED),
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(KEYS, inner, max_size=6)),
    max_leaves=12)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.data_too_large])
@given(value=LONG_VALUES)
def test_shape_is_the_per_value_loop(value):
    """The exactness pass in C calls gives what a Python test per value gave, long arrays (each looked
    at alone) and wide numbers included."""
    assert io._shape(value) == _shape_loop(value)


def test_shape_of_deep_values_is_the_per_value_loop():
    deep = current = []
    for _ in range(io.MAX_DEPTH + 5):
        current.append({"a": [1.5] * 70, "b": []})
        current = current[0]["b"]
    assert io._shape(deep) == _shape_loop(deep)
    assert io._shape([[0.5] * 100, [1, 2**63] * 40, [2.0**63] + ["x"] * 70]) == _shape_loop(
        [[0.5] * 100, [1, 2**63] * 40, [2.0**63] + ["x"] * 70])


@pytest.mark.parametrize("text", ["-9223372036854775809", "9223372036854775808", "[-9223372036854775809]",
                                  "18446744073709551616"])
def test_a_text_that_is_one_wide_integer_keeps_it_exact(text):
    """orjson reads an integer literal wider than 64 bits as a float: the strict parse decides."""
    assert _large(text) == _hooked(text) == (json.loads(text), None)
    deep = []
    for _ in range(200):
        deep = [deep]
    assert io._shape(deep)[1] == io.MAX_DEPTH + 1  # stops counting past the limit


@pytest.mark.parametrize("text", ["[123456789012345678901234567890]", '{"a": [-9223372036854775809, 1.5]}',
                                  "[18446744073709551615]", '{"a": ' + "9" * 100 + "}"])
def test_integers_wider_than_64_bits_stay_integers(text):
    """orjson reads an integer literal wider than 64 bits as a float: the strict parse decides."""
    assert _large(text) == (json.loads(text), None)


def test_a_colon_inside_a_string_takes_the_hooked_parse(monkeypatch):
    """Colons inside strings make the counts differ: the hooked parse decides (same value)."""
    calls = []
    real = io._loads
    monkeypatch.setattr(io, "_loads", lambda text, hook: calls.append(hook) or real(text, hook))
    monkeypatch.setattr(io, "LARGE_TEXT_BYTES", 0)
    assert io.parse_json('{"a": [1, "c"]}') == {"a": [1, "c"]}
    assert calls == []  # orjson's value, kept
    assert io.parse_json('{"a:b": [1, "c:d"]}') == {"a:b": [1, "c:d"]}
    assert calls == [False, True]
    calls.clear()
    monkeypatch.setattr(io, "_orjson", None)
    assert io.parse_json('{"a:b": [1, "c:d"]}') == {"a:b": [1, "c:d"]}
    assert calls == [False, True]
    calls.clear()
    assert io.parse_json('{"a": [1, "c"]}') == {"a": [1, "c"]}
    assert calls == [False]


def _reference(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n"


FLAT = st.dictionaries(KEYS, SCALARS, min_size=1, max_size=4)
PLAN_LIKE = st.recursive(
    SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(KEYS, inner, max_size=6),
                                     st.lists(FLAT, max_size=6), st.tuples(inner, inner),
                                     st.dictionaries(st.integers(0, 3), inner, max_size=2)),
    max_leaves=30)


def _without_orjson(value) -> str:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(io, "_orjson", None)
        return io.dumps(value)


@settings(max_examples=400, deadline=None)
@given(value=PLAN_LIKE)
def test_dumps_is_json_dumps_indented(value):
    assert io.dumps(value) == _reference(value)
    assert _without_orjson(value) == _reference(value)


ANY_FLOAT = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(ANY_FLOAT, ANY_FLOAT.map(lambda v: v * 1e-300), ANY_FLOAT.map(lambda v: v * 1e-6),
                                 st.integers(1, 10**6).map(lambda k: k * 1e14)), min_size=1, max_size=8),
       text=st.text(max_size=6))
def test_dumps_writes_every_float_and_string_as_python_does(values, text):
    """Floats of every magnitude (orjson writes some of the exponent forms otherwise: put back in
    Python's form) and any string (not ASCII, DEL, controls: the json module's escapes)."""
    value = {"x": values, "y": [{"v": v, text: text} for v in values], text: values[0]}
    assert io.dumps(value) == _reference(value)


def test_dumps_leaves_to_json_what_orjson_writes_otherwise():
    """Types orjson writes but the json module refuses, or writes in another form, take the json path."""
    import dataclasses
    import enum

    @dataclasses.dataclass
    class D:
        a: int

    class Colour(enum.Enum):
        RED = "red"

    for value in ({"a": D(1)}, [Colour.RED], {"a": (1, 2.5e-7)}, {1: "int key"}, {"big": 2**70},
                  {"u": "\u00e9\x7f"}, [1e16, -1e-5, 5e-324]):
        assert io._orjson_dumps(value) is None or io._orjson_dumps(value) == _reference(value)
        try:
            expected = _reference(value)
        except TypeError:
            with pytest.raises(TypeError):
                io.dumps(value)
            continue
        assert io.dumps(value) == expected
    assert io._orjson_dumps({"a": D(1)}) is None and io._orjson_dumps({"u": "\u00e9"}) is None


@pytest.mark.parametrize("value", [1e16, -2.5e-7, [1e300], {"a": [[5e-324]]}, 0.5])
def test_dumps_of_a_float_alone_or_nested_is_python_s(value):
    assert io.dumps(value) == _reference(value)


def test_dumps_of_deep_or_circular_values_takes_the_json_path():
    deep: list = []
    for _ in range(300):
        deep = [deep]
    assert io._orjson_dumps(deep) is None and io.dumps(deep) == _reference(deep)
    loop: dict = {}
    loop["self"] = loop
    assert io._orjson_dumps(loop) is None
    with pytest.raises((ValueError, RecursionError)):
        io.dumps(loop)


def test_dumps_of_a_plan_is_json_dumps_indented(monkeypatch):
    from unicron_plan import api

    plan = api.solve(ROOT / "instances" / "jagged-16384-128jobs.json", time_limit_seconds=None)
    data = plan.model_dump(mode="json", exclude_none=True)
    assert io._orjson_dumps(data) is not None  # the one-call path is taken, not only correct
    assert io.dumps(plan) == _reference(data)
    monkeypatch.setattr(io, "_orjson", None)
    written = []  # without orjson: placements written by the C encoder
    real = io._flat_objects
    monkeypatch.setattr(io, "_flat_objects", lambda items, indent: written.append(real(items, indent)) or written[-1])
    assert io.dumps(plan) == _reference(data)
    placed = sum(len(j["placement"]) for j in data["jobs"] if len(j["placement"]) >= 2)
    assert placed > 1000 and sum(text.count("{") for text in written if text) == placed


@pytest.mark.parametrize("value", [float("nan"), [{"a": 1, "b": float("inf")}, {"c": 2}], {"a": -float("inf")},
                                   [1.0, float("nan")]])
def test_dumps_refuses_what_json_dumps_refuses(value):
    with pytest.raises(ValueError, match="Out of range float"):
        _reference(value)
    with pytest.raises(ValueError, match="Out of range float"):
        io.dumps(value)
    with pytest.raises(ValueError, match="Out of range float"):
        _without_orjson(value)


@settings(max_examples=200, deadline=None)
@given(table=st.dictionaries(
    st.integers(1, 25).flatmap(lambda n: st.integers(10 ** (n - 1), 10 ** n - 1)).map(str),
    st.floats(0, 1e12), min_size=1, max_size=12))
def test_table_arrays_leave_out_the_counts_the_table_leaves_out(table):
    """Keys of more than MAX_COUNT_DIGITS digits (even beyond int64) are left out of the arrays (they
    can never be chosen); the rest ascending."""
    from unicron_plan.schema.instance import MAX_COUNT_DIGITS, Throughput

    tp = Throughput.model_validate({"gpu_type": "H100", "tflops": table})
    counts, tflops = tp.table_arrays()
    expected = sorted((int(k), v) for k, v in table.items() if len(k) <= MAX_COUNT_DIGITS)
    assert counts.tolist() == [c for c, _ in expected]
    assert tflops.tolist() == [v for _, v in expected]


def _plans():
    """Plans of library instances and generated ones (gap, keep costs, layouts, options)."""
    from unicron_plan import api
    from unicron_plan.tools.generate import generate_instance

    names = ["tiny-one-job-two-nodes.json", "model-derived-128-a800.json", "cluster-512-gpu-failures.json",
             "ip-max-nodes.json", "tiny-job-exit.json", "mixed-queued-on-idle-type.json"]
    plans = [api.solve(ROOT / "instances" / n) for n in names]
    plans += [api.solve(generate_instance(seed, gpus=512, jobs=8, curves=curves))
              for seed, curves in ((1, "synthetic"), (2, "linear-step"), (3, "queued-equal-per-gpu"))]
    return plans


ODD = [1e16, -2.5e-7, 5e-05, 1.2345678901234567e300, 0.0, 123456789012345678.0, 3]


def test_a_plan_lists_every_float_of_its_json_form_and_is_written_as_json_dumps():
    """Plan.json_floats() is every float of the dumped plan (the writer's walk finds the same ones), and the
    text written with it is json.dumps's, floats Python writes with an exponent included."""
    from collections import Counter

    for plan in _plans():
        for k, odd in enumerate(ODD):
            jobs = [j.model_copy(update={"waf_tflops": odd, "keep_cost": ODD[k - 1], "gain": ODD[k - 2]})
                    if i % 2 == k % 2 else j for i, j in enumerate(plan.jobs)]
            solver = plan.solver.model_copy(update={"options": {**(plan.solver.options or {}), "x": ODD[k - 3]}})
            p = plan.model_copy(update={"jobs": jobs, "objective": ODD[k - 4], "solver": solver})
            dumped = p.model_dump(mode="json", exclude_none=True)
            assert Counter(map(repr, p.json_floats())) == Counter(map(repr, io._plain_floats(dumped)))
            assert io.dumps(p) == json.dumps(dumped, indent=2, sort_keys=True, allow_nan=False) + "\n"


def test_a_plan_with_a_value_set_without_validation_takes_the_walk():
    plan = _plans()[0]
    job = plan.jobs[0].model_copy(update={"gpus": 1e16})  # (no validation): a float where an int belongs
    p = plan.model_copy(update={"jobs": [job, *plan.jobs[1:]]})
    assert p.json_floats() is None or 1e16 in p.json_floats()
    dumped = p.model_dump(mode="json", exclude_none=True, warnings=False)
    assert io.dumps(p) == json.dumps(dumped, indent=2, sort_keys=True, allow_nan=False) + "\n"
    bad = plan.model_copy(update={"jobs": [plan.jobs[0].model_copy(update={"hit": object()}), *plan.jobs[1:]]})
    assert bad.json_floats() is None
