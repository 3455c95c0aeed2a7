"""Strict JSON and YAML in, canonical JSON out, atomic writes.

Python's json module accepts NaN, Infinity, duplicate keys and numbers of any
length, and YAML adds aliases and unbounded nesting; a planner fed a typo or a
hostile file must not, so every reader here refuses them all, in time linear in
the input, with a message that names the file and the place.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.text import is_unicode

try:  # without it every text takes the json module's parse (the same values and errors, slower)
    import orjson as _orjson
except ImportError:  # pragma: no cover - a declared dependency
    _orjson = None
try:  # without it an instance's compact tables are read as lists (the same instance and errors, slower)
    import simdjson as _simdjson
except ImportError:  # pragma: no cover - a declared dependency
    _simdjson = None
try:  # the compiled table scan (optional: without it simdjson reads the tables; the same values)
    from unicron_plan import _tablescan
except ImportError:  # pragma: no cover - built by `pip install`
    _tablescan = None

MAX_DEPTH = 64  # nesting of arrays and objects; every document of the format needs fewer than 10
MAX_BYTES = 512 * 1024 * 1024  # a larger input file is refused before it is read
MAX_NUMBER_CHARS = 100  # a longer integer literal is refused (no field needs more than 20 digits)


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a finite number")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # rare: find the first repeated key to name it
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return out


def _int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    return int(text)


_NOT_STRUCTURAL = bytes(c for c in range(256) if chr(c) not in '"[]{}')


def _nesting(data: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON ``data`` (brackets inside strings
    ignored). Linear time in numpy's C loops, no regex and no recursion: the unescaped quotes
    (a quote after an even run of backslashes) split the text into strings and the rest, and a
    running sum over the brackets outside strings gives the depth. On text that is not JSON the
    figure is meaningless but bounded; the parser then names the error."""
    import numpy as np

    if data.find(b"\\") < 0:  # no escapes (the usual file): only quotes and brackets matter
        data = data.translate(None, _NOT_STRUCTURAL)
    b = np.frombuffer(data, dtype=np.uint8)
    quotes = np.flatnonzero(b == 34)
    if len(quotes) and data.find(b"\\") >= 0:
        slashes = np.flatnonzero(b == 92)
        # the start of the run of backslashes each backslash belongs to
        new_run = np.ones(len(slashes), dtype=bool)
        new_run[1:] = slashes[1:] != slashes[:-1] + 1
        run_start = slashes[np.maximum.accumulate(np.where(new_run, np.arange(len(slashes)), 0))]
        before = quotes[quotes > 0] - 1
        k = np.searchsorted(slashes, before)
        k_ok = np.minimum(k, len(slashes) - 1)
        after_slash = (k < len(slashes)) & (slashes[k_ok] == before)
        run_len = np.where(after_slash, before - run_start[k_ok] + 1, 0)
        escaped = np.zeros(len(quotes), dtype=bool)
        escaped[quotes > 0] = (run_len % 2) == 1
        quotes = quotes[~escaped]
    opens = (b == 91) | (b == 123)
    brackets = np.flatnonzero(opens | (b == 93) | (b == 125))
    if len(quotes):
        brackets = brackets[np.searchsorted(quotes, brackets) % 2 == 0]  # outside every string
    if not len(brackets):
        return 0
    steps = np.where(opens[brackets], 1, -1).astype(np.int32)
    return int(np.cumsum(steps).max())


#: Magnitude from which orjson reads an integer literal as a float (it overflows 64 bits).
_WIDE = float(2**63)
_NUMBERS = frozenset({int, float, bool})


def _shape(value: Any, arrays: bool = False) -> "tuple[int, ...]":
    """(members of every object, deepest nesting, whether some number has a magnitude of 2**63 or
    more) of a parsed JSON value, and with ``arrays`` the number of its arrays (lists) as a fourth
    item, one level of nesting at a time (no recursion); stops counting
    past MAX_DEPTH. The values of a level's objects and short arrays are looked at together, each
    long array alone, in C calls (their types, the extremes of their numbers, the values of a type
    picked out with ``itertools.compress``: no Python frame per value). A long array of numbers only (a
    throughput table) is summed first, which refuses any other value: an integer sum says it holds no
    float, and only an array with a float is looked at for its extremes (one pass over an array of
    integers, two over one of floats none of them negative, instead of a look at every value's type
    first)."""
    if type(value) is float:  # a text that is one number
        return (0, 0, value >= _WIDE or value <= -_WIDE) + ((0,) if arrays else ())
    n = depth = lists_seen = 0
    wide = False
    level = [value] if type(value) is dict or type(value) is list else []
    while level and depth <= MAX_DEPTH:
        depth += 1
        types = list(map(type, level))
        level_kinds = set(types)
        if len(level_kinds) == 1:  # (a level of one kind: no pick)
            dicts, lists = (level, []) if dict in level_kinds else ([], level)
        else:
            dicts, lists = _picked(level, types, dict), _picked(level, types, list)
        n += sum(map(len, dicts))
        lists_seen += len(lists)
        long = [v for v in lists if len(v) > _LONG_ARRAY]
        short = itertools.chain.from_iterable(v for v in lists if len(v) <= _LONG_ARRAY)
        items = list(itertools.chain(itertools.chain.from_iterable(map(dict.values, dicts)), short))
        types = list(map(type, items))
        kinds = set(types)
        if float in kinds and not wide:
            numbers = items if kinds <= _NUMBERS else _picked(items, types, float)
            wide = max(numbers) >= _WIDE or min(numbers) <= -_WIDE
        below = list(itertools.compress(items, map(_CONTAINERS.__contains__, types))) \
            if dict in kinds or list in kinds else []
        for items in long:
            try:  # numbers only (ints, floats, bools: anything else is refused), in one C pass
                total = sum(items)
            except (TypeError, OverflowError):
                total = None
            if total is not None:  # no object or array below; a float among them makes the sum a float
                if type(total) is float and not wide:
                    # none below 0 (a table's TFLOP/s): the sum is at least the largest, which is
                    # looked for only when the sum reaches _WIDE (one pass instead of two)
                    low = min(items)
                    wide = low <= -_WIDE or ((low < 0 or total >= _WIDE) and max(items) >= _WIDE)
                continue
            kinds = set(map(type, items))
            if float in kinds and not wide:
                numbers = items if kinds <= _NUMBERS else _picked(items, [*map(type, items)], float)
                wide = max(numbers) >= _WIDE or min(numbers) <= -_WIDE
            if dict in kinds or list in kinds:
                below += itertools.compress(items, map(_CONTAINERS.__contains__, map(type, items)))
        level = below
    return (n, depth, wide, lists_seen) if arrays else (n, depth, wide)


_CONTAINERS = frozenset({dict, list})
_LONG_ARRAY = 64  # an array longer than this is looked at alone by _shape


def _picked(values: list, types: list, kind: type) -> list:
    """The items of ``values`` whose type (``types``, in order) is exactly ``kind``, in C calls."""
    return list(itertools.compress(values, map(operator.is_, types, itertools.repeat(kind))))


_UNDECIDED = object()


def _orjson_parse(data: bytes, source: str) -> Any:
    """The value of JSON ``data`` by orjson, or _UNDECIDED when the strict parse must decide:
    orjson is absent or refuses the text (it refuses NaN, Infinity, overflowing floats, lone
    surrogates and every malformed text), a number reached 2**63 in magnitude (orjson reads a
    wider integer literal as a float), or the objects hold other than as many members as the text
    has colons (a key was repeated, or a string holds a colon). Nesting deeper than MAX_DEPTH is
    refused as the strict parse refuses it. Otherwise orjson's value is the strict parse's (both
    round floats correctly)."""
    if _orjson is None:
        return _UNDECIDED
    try:
        value = _orjson.loads(data)
    except _orjson.JSONDecodeError:
        return _UNDECIDED
    members, depth, wide = _shape(value)
    if depth > MAX_DEPTH:
        raise InvalidInstanceError(source, f"JSON nested more than {MAX_DEPTH} levels deep")
    if wide or members != _byte_counts(data, b":")[0]:
        return _UNDECIDED
    return value


_OBJECT_FIRST = re.compile(rb"[ \t\n\r]*\{")  # JSON's whitespace, then an object


def _python_value(value: Any) -> Any:
    """A value simdjson read (an object or array proxy, or a scalar) as the Python value."""
    kind = type(value)
    if kind is _simdjson.Object:
        return value.as_dict()
    if kind is _simdjson.Array:
        return value.as_list()
    return value


def _arrays_of_table(table: Any) -> dict:
    """A compact table {"counts": [...], "tflops": [...]} that simdjson read, as its two arrays: the
    counts as int64 (every one an integer literal of 64 bits: no float, no boolean), the TFLOP/s as
    float64 (numbers, not booleans: an integer literal made a float, correctly rounded, as the
    per-entry validation makes it). ValueError for anything else (the caller then reads the text as
    lists). simdjson flattens nested arrays into the buffer: a buffer of other than the array's own
    length says so here, and :func:`_with_table_arrays` counts the text's arrays for the rest."""
    if type(table) is _simdjson.Object and len(table) == 2:
        counts, tflops = table.get("counts"), table.get("tflops")
        if type(counts) is _simdjson.Array and type(tflops) is _simdjson.Array and len(counts) == len(tflops) > 0:
            import numpy as np

            c = np.frombuffer(counts.as_buffer(of_type="i"), dtype=np.int64)
            t = np.frombuffer(tflops.as_buffer(of_type="d"), dtype=np.float64)
            if len(c) == len(counts) and len(t) == len(tflops):
                return {"counts": c, "tflops": t}
    raise ValueError("not a table of two arrays of numbers")


def _with_table_arrays(data: bytes, nodes: "dict | None" = None) -> Any:
    """The value of JSON ``data`` (a document whose top is an object) with each
    ``jobs[k].throughput.compact`` table read as two numpy arrays, no Python object per entry, and the
    rest as Python values: by the compiled scan where it is built (:func:`_scanned`, orjson reading the
    rest), else by simdjson (:func:`_arrays_of_table`); or _UNDECIDED, and the plain reader decides: the
    scan declines the text (see unicron_plan/_tablescan.c), or neither reader is there, or the reader
    (simdjson, or orjson on the scan's rest) refuses the text (malformed text, NaN,
    Infinity, a float that overflows, an integer wider than 64 bits, a lone surrogate, bytes that are
    not UTF-8), or a table is not two equally long non-empty arrays of numbers (counts integers), or
    the text starts with other than JSON's whitespace and a brace (a byte-order mark), or a number
    outside the tables reached 2**63 in magnitude, or nesting is deeper than MAX_DEPTH allows, or the objects hold other
    than as many members as the text has colons (a repeated key, which simdjson keeps twice and a
    dict once, or a colon in a string), or the value holds other than as many arrays as the text has
    opening brackets (an array nested in a table, or a bracket in a string). Otherwise the value is
    the plain reader's, the tables' numbers as arrays instead of lists (simdjson and orjson both round
    floats correctly and read the same strings, integers and literals). With ``nodes``, a dict holding
    a reader of the cluster's nodes as columns (``nodes["read"]``, see :func:`_nodes_stand_in`), the
    entries it accepts are not walked again, and a value kept gets ``nodes["raw"]`` (its
    ``cluster.nodes`` list) and ``nodes["columns"]`` (their columns) set."""
    if _tablescan is not None:
        return _scanned(_tablescan.strip(data), nodes)
    if _simdjson is None or _OBJECT_FIRST.match(data) is None:
        return _UNDECIDED
    return _tables_read(lambda parser: parser.parse(data), lambda: _byte_counts(data, b":["), nodes)


def _scanned(scan: "tuple | None", nodes: "dict | None") -> Any:
    """:func:`_with_table_arrays` of a text the compiled scan read (``_tablescan.strip``'s answer:
    the text without its tables' entries, those entries, and the text's colons and opening brackets;
    None when the text is not for it): orjson reads the rest, and every ``[]`` the scan left in
    ``jobs[k].throughput.compact`` gets its table's entries, in the text's order. _UNDECIDED when orjson
    refuses the rest, or a ``counts`` or ``tflops`` there is not a table the scan took out (then it
    is not two arrays of numbers), or the rest fails :func:`_checked_tables`'s count."""
    if scan is None or _orjson is None:
        return _UNDECIDED
    rest, counts, tflops, tables, colons, brackets, _ = scan
    try:
        doc = _orjson.loads(rest)
    except _orjson.JSONDecodeError:
        return _UNDECIDED
    del rest
    if type(doc) is not dict:
        return _UNDECIDED
    import numpy as np

    columns = (np.frombuffer(counts, dtype=np.int64), np.frombuffer(tflops, dtype=np.float64))
    found = np.frombuffer(tables, dtype=np.int64).reshape(-1, 3).tolist()  # (kind, first, entries)
    taken = 0
    jobs = doc.get("jobs")
    for job in jobs if type(jobs) is list else ():
        throughput = job.get("throughput") if type(job) is dict else None
        table = throughput.get("compact") if type(throughput) is dict else None
        if type(table) is not dict:
            continue
        for key, value in table.items():
            if key != "counts" and key != "tflops":
                continue
            if value != [] or taken == len(found) or found[taken][0] != (key == "tflops"):
                return _UNDECIDED
            kind, first, entries = found[taken]
            table[key] = columns[kind][first:first + entries]
            taken += 1
        if len(table) != 2 or "counts" not in table or "tflops" not in table \
                or len(table["counts"]) != len(table["tflops"]):
            return _UNDECIDED
    if taken != len(found):
        return _UNDECIDED
    return _checked_tables(doc, taken // 2, colons, brackets, nodes)


def _tables_read(parse, counts, nodes: "dict | None") -> Any:
    """:func:`_with_table_arrays` of the document ``parse(parser)`` gives (a simdjson parser's value of a
    text whose first byte but JSON's whitespace is a brace), ``counts()`` being that text's colons and
    opening brackets (``[colons, brackets]``, or None when they cannot be told: then _UNDECIDED)."""
    parser = _simdjson.Parser()
    tables = 0
    try:
        top = parse(parser)
        if type(top) is not _simdjson.Object:
            return _UNDECIDED
        doc = {}
        obj, arr = _simdjson.Object, _simdjson.Array
        for key in top:  # (a repeated key comes twice, with the first value: one member fewer)
            value = top[key]
            if key == "jobs" and type(value) is arr:
                jobs = []
                for job in value:
                    if type(job) is not obj:
                        jobs.append(_python_value(job))
                        continue
                    out = {}
                    for field in job:
                        item = job[field]
                        kind = type(item)
                        if kind is obj:
                            if field == "throughput":
                                out[field] = throughput = {}
                                for part in item:
                                    if part == "compact":
                                        throughput[part] = _arrays_of_table(item[part])
                                        tables += 1
                                    else:
                                        throughput[part] = _python_value(item[part])
                            else:
                                out[field] = item.as_dict()
                        else:
                            out[field] = item.as_list() if kind is arr else item
                    jobs.append(out)
                value = jobs
            else:
                value = _python_value(value)
            doc[key] = value
        del top, value
    except Exception:  # any refusal or surprise: the plain reader decides (and names the error)
        return _UNDECIDED
    counted = counts()
    if counted is None:
        return _UNDECIDED
    return _checked_tables(doc, tables, *counted, nodes)


def _checked_tables(doc: dict, tables: int, colons: int, brackets: int, nodes: "dict | None") -> Any:
    """``doc`` (its ``tables`` compact tables read as arrays, from a text of ``colons`` colons and
    ``brackets`` opening brackets outside strings) when it holds as many members and arrays as those
    say (no key repeated, no array nested in a table), no number outside the tables of 2**63 or more
    in magnitude and no nesting deeper than MAX_DEPTH; else _UNDECIDED. With ``nodes``, see
    :func:`_with_table_arrays`."""
    shaped, more_members, more_arrays, columns = _nodes_stand_in(doc, nodes)
    members, depth, wide, arrays = _shape(shaped, arrays=True)
    if wide or depth + (1 if tables else 0) > MAX_DEPTH:
        return _UNDECIDED
    if members + more_members != colons or arrays + more_arrays + 2 * tables != brackets:
        return _UNDECIDED
    if columns is not None:
        nodes["raw"], nodes["columns"] = doc["cluster"]["nodes"], columns
    return doc


def _nodes_stand_in(doc: dict, nodes: "dict | None") -> tuple:
    """(the document ``_shape`` is to walk, the members and the arrays it leaves out, the node columns),
    which leave the ``cluster.nodes`` entries that ``nodes["read"]`` accepts (it answers their columns,
    :func:`unicron_plan.schema.nodes.read_nodes`, or None) out of the walk: every such entry is an object
    of the node fields, ``id`` and ``gpu_type`` strings, ``gpus`` an int in 1..1024, ``rack`` a string or
    null, ``failed_gpus`` (when given) a list, empty but for the validated entries (``columns.failed``),
    and ``expected_repair_seconds`` null but for the validated entries (``columns.repair``). The stand-in
    array holds the first ``_LONG_ARRAY + 1`` entries (an array ``_shape`` looks at alone, as the whole
    one), every validated entry and the first entry that gives ``failed_gpus``: the entries left out add
    no number that is not an int of 1..1024, no type that the stand-in's levels lack (a string is in its
    first entry's id) and no level; their members and their (empty) ``failed_gpus`` arrays are counted
    here. With no ``nodes``, or another shape: (``doc``, 0, 0, None)."""
    cluster = doc.get("cluster") if nodes is not None else None
    raw = cluster.get("nodes") if type(cluster) is dict else None
    if type(raw) is not list or len(raw) <= 2 * _LONG_ARRAY:
        return doc, 0, 0, None
    columns = nodes["read"](raw)
    if columns is None:
        return doc, 0, 0, None
    import numpy as np

    n = len(raw)
    given = columns.given["failed_gpus"]
    failed = n if given is True else 0 if given is False else int(np.count_nonzero(given))
    keep = set(range(_LONG_ARRAY + 1)).union(columns.failed, columns.repair)
    if failed and given is not True:
        keep.add(int(np.argmax(given)))
    stand_in = [raw[k] for k in sorted(keep)]
    members = sum(map(len, raw)) - sum(map(len, stand_in))
    arrays = failed - sum(map(dict.__contains__, stand_in, itertools.repeat("failed_gpus")))
    return {**doc, "cluster": {**cluster, "nodes": stand_in}}, members, arrays, columns


_COUNT_SLICE = 1 << 22  # bytes of a text compared at once by _byte_counts


def _byte_counts(data: bytes, codes: bytes) -> "list[int]":
    """How many times each byte of ``codes`` occurs in ``data`` (``data.count`` of each): numpy's compare
    and count over slices of _COUNT_SLICE bytes, a third of the time of ``bytes.count`` (a loop over the
    text per byte) and no temporary the size of the text."""
    import numpy as np

    text = np.frombuffer(data, dtype=np.uint8)
    out = [0] * len(codes)
    hit = np.empty(min(len(text), _COUNT_SLICE), dtype=bool)
    for start in range(0, len(text), _COUNT_SLICE):
        part = text[start:start + _COUNT_SLICE]
        mask = hit[:len(part)]
        for k, code in enumerate(codes):
            np.equal(part, code, out=mask)
            out[k] += int(np.count_nonzero(mask))
    return out


#: A file is parsed by simdjson from its path (:func:`_file_with_table_arrays`) only when its status last
#: changed at least this long before it is read: any write while it is read then changes that time.
_SETTLED_NS = 2_000_000_000


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns, a.st_ctime_ns) == \
        (b.st_dev, b.st_ino, b.st_size, b.st_mtime_ns, b.st_ctime_ns)


def _file_with_table_arrays(p: Path, nodes: "dict | None" = None) -> "tuple[Any, bool]":
    """(:func:`_with_table_arrays` of the file at ``p``, whether it was tried). With the compiled scan,
    it reads a regular file of 1 to MAX_BYTES bytes in slices, in one pass (:func:`_scanned`; a file
    that grew past MAX_BYTES meanwhile gives _UNDECIDED). Without it, simdjson reads the file
    itself (its own padded buffer: no copy of the text in Python, a quarter less memory touched by the
    read at 1,048,576 GPUs) and the start check and the colons and brackets counted in a pass over the
    file in slices. Tried only on a regular file of 1 to MAX_BYTES bytes whose status last changed
    _SETTLED_NS or more ago (else (_UNDECIDED, False): the caller reads the bytes, which decide as
    before); a file whose device, inode, size, modification or status change time differ after the
    pass from before the parse, or that is not as long as its size said, gives _UNDECIDED (the two
    reads may have seen different texts)."""
    if _simdjson is None and _tablescan is None:
        return _UNDECIDED, False
    import stat
    import time

    try:
        before = os.stat(p)
    except (OSError, ValueError):
        return _UNDECIDED, False
    if not stat.S_ISREG(before.st_mode) or not 0 < before.st_size <= MAX_BYTES:
        return _UNDECIDED, False
    if _tablescan is not None:  # one pass over the file: the text it counts is the text it reads
        try:
            with open(p, "rb", buffering=0) as f:
                scan = _tablescan.strip(f.fileno(), MAX_BYTES)
        except (OSError, ValueError):
            return _UNDECIDED, False
        return _scanned(scan, nodes), True
    if before.st_ctime_ns > time.time_ns() - _SETTLED_NS:
        return _UNDECIDED, False
    return _tables_read(lambda parser: parser.load(os.fsencode(p)), lambda: _file_counts(p, before), nodes), True


def _file_counts(p: Path, before: os.stat_result) -> "list[int] | None":
    """[colons, opening brackets] of the file at ``p`` read in slices of _COUNT_SLICE bytes (see
    :func:`_byte_counts`), or None: it does not start with JSON's whitespace and a brace within its
    first slice, it is not the file ``before`` describes (see :func:`_same_file`) when opened or after
    the pass, or it holds other than ``before.st_size`` bytes."""
    import numpy as np

    try:
        with open(p, "rb", buffering=0) as f:
            if not _same_file(os.fstat(f.fileno()), before):
                return None
            buf = bytearray(min(before.st_size + 1, _COUNT_SLICE))
            text = np.frombuffer(buf, dtype=np.uint8)
            hit = np.empty(len(text), dtype=bool)
            out, read = [0, 0], 0
            while True:
                k = f.readinto(buf)
                if not k:
                    break
                if not read and _OBJECT_FIRST.match(memoryview(buf)[:k]) is None:
                    return None
                read += k
                if read > before.st_size:  # (a file growing as it is read: not read to its end)
                    return None
                part, mask = text[:k], hit[:k]
                for i, code in enumerate(b":["):
                    np.equal(part, code, out=mask)
                    out[i] += int(np.count_nonzero(mask))
            if read != before.st_size or not _same_file(os.fstat(f.fileno()), before):
                return None
    except OSError:
        return None
    return out


def _loads(text: str, hook: bool) -> Any:
    # Floats keep the parser's own C conversion: linear in their length whatever it is, and a
    # literal that overflows (1e999) reads as infinity, which every schema refuses by field name.
    return json.loads(text, parse_constant=_reject_constant, parse_int=_int,
                      object_pairs_hook=_no_duplicate_keys if hook else None)


#: Texts at least this long are first parsed without a hook per object (0.04-0.06 s less per
#: million table entries); see :func:`parse_json`.
LARGE_TEXT_BYTES = 1 << 20


def parse_json(text: "str | bytes", source: str = "<input>") -> Any:
    """Parse JSON text in time linear in its length, refusing NaN, Infinity, duplicate keys,
    integer literals longer than MAX_NUMBER_CHARS and nesting deeper than MAX_DEPTH (a float
    literal that overflows, 1e999, reads as infinity, which every schema refuses naming the
    field). Pure and thread-safe; bad input raises InvalidInstanceError naming ``source``.

    A text of LARGE_TEXT_BYTES or more is first parsed by orjson when it is installed (see
    :func:`_orjson_parse`), else by the json module without the per-object duplicate-key hook.
    Every member of an object is written with one colon outside strings, so the colons of the
    text number the members written plus the colons inside strings; the value is kept when its
    objects hold exactly that many members (then no key was repeated and no string holds a
    colon). Otherwise, or when that parse fails, the text is parsed again with the hook, so the
    value and every error are always those of the hooked parse."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    if len(data) >= LARGE_TEXT_BYTES:
        value = _orjson_parse(data, source)
        if value is not _UNDECIDED:
            return value
    if ((len(data) > 1 << 20 or data.count(b"[") + data.count(b"{") > MAX_DEPTH)  # cheap count on small texts
            and _nesting(data) > MAX_DEPTH):
        raise InvalidInstanceError(source, f"JSON nested more than {MAX_DEPTH} levels deep")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInstanceError(source, f"not UTF-8 text (byte {exc.start})") from None
    if len(data) >= LARGE_TEXT_BYTES:
        try:
            value = _loads(text, hook=False)
            if _shape(value)[0] == _byte_counts(data, b":")[0]:
                return _unicode_only(value, source)
        except (ValueError, RecursionError):
            pass  # the hooked parse below names the error
    try:
        value = _loads(text, hook=True)
    except json.JSONDecodeError as exc:
        raise InvalidInstanceError(source, f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:  # pragma: no cover - the depth test above comes first
        raise InvalidInstanceError(source, "JSON nested too deeply") from None
    except ValueError as exc:
        raise InvalidInstanceError(source, f"invalid JSON: {exc}") from None
    return _unicode_only(value, source)


def _lone_surrogate_at(value: Any) -> "str | None":
    """The field path of the first string (key or value) of a parsed document holding a lone surrogate
    (a \\ud800-\\udfff escape not part of a pair: not Unicode text, which no output can write), or
    None. Linear: every string of the document joined and encoded at once; the walk that names the
    string runs only when the encoding fails."""
    strings: list = []
    level = [value]
    while level:
        below = []
        for v in level:
            if type(v) is dict:
                strings += v
                items = v.values()
            elif type(v) is list:
                items = v
            else:
                if type(v) is str:
                    strings.append(v)
                continue
            strings += [x for x in items if type(x) is str]
            below += [x for x in items if type(x) is dict or type(x) is list]
        level = below
    if is_unicode("".join(strings)):
        return None
    stack: list = [((), value)]
    while stack:
        loc, v = stack.pop()
        if type(v) is str:
            if not is_unicode(v):
                return field_path(loc)
        elif type(v) is dict:
            for key in v:
                if not is_unicode(key):
                    return field_path(loc) + f" (key {key.encode('utf-8', 'backslashreplace').decode()!r})"
            stack += [((*loc, k), x) for k, x in reversed(v.items())]
        elif type(v) is list:
            stack += [((*loc, k), x) for k, x in reversed(list(enumerate(v)))]
    return field_path(())


def _unicode_only(value: Any, source: str) -> Any:
    """``value``, refused (InvalidInstanceError naming the field) when one of its strings holds a lone surrogate."""
    at = _lone_surrogate_at(value)
    if at is not None:
        raise InvalidInstanceError(source, f"{at}: a string holds a lone surrogate (an unpaired "
                                           "\\ud800-\\udfff escape), which is not Unicode text")
    return value


@functools.lru_cache(maxsize=1)
def _yaml_loader():
    """A safe YAML loader (libyaml's when present) that refuses duplicate keys, infinities and
    NaN, and over-long integers; the event pass in :func:`parse_yaml` bounds depth and aliases."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):  # type: ignore[misc, valid-type]
        pass

    def mapping(loader, node, deep=False):
        loader.flatten_mapping(node)
        out = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=deep)
            try:
                if key in out:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                            key_node.start_mark)
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "a key that is a list or a mapping",
                                                        key_node.start_mark) from None
            out[key] = loader.construct_object(value_node, deep=deep)
        return out

    def number(kind):
        plain = getattr(yaml.constructor.SafeConstructor, f"construct_yaml_{kind}")

        def construct(loader, node):
            if kind == "int" and len(node.value) > MAX_NUMBER_CHARS:
                raise yaml.constructor.ConstructorError(
                    None, None, f"a number of {len(node.value)} characters (at most {MAX_NUMBER_CHARS})",
                    node.start_mark)
            value = plain(loader, node)
            if isinstance(value, float) and value - value != 0.0:
                raise yaml.constructor.ConstructorError(None, None, f"{node.value} is not a finite number",
                                                        node.start_mark)
            return value
        return construct

    StrictLoader.add_constructor("tag:yaml.org,2002:map", mapping)
    StrictLoader.add_constructor("tag:yaml.org,2002:int", number("int"))
    StrictLoader.add_constructor("tag:yaml.org,2002:float", number("float"))
    return StrictLoader


def parse_yaml(text: "str | bytes", source: str = "<input>") -> Any:
    """Parse one YAML document with the same rules as :func:`parse_json` (depth, duplicate keys,
    integer size, no NaN or infinity) and no aliases (``*name``, whose expansion is unbounded).
    Two linear passes: libyaml's event stream bounds depth and refuses aliases, then the strict
    loader builds the value."""
    import yaml

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInstanceError(source, f"not UTF-8 text (byte {exc.start})") from None
    loader = _yaml_loader()
    try:
        depth = 0
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise InvalidInstanceError(source, f"YAML nested more than {MAX_DEPTH} levels deep")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                raise InvalidInstanceError(source, f"YAML alias *{event.anchor} (aliases are not accepted; "
                                                   "write the value out)")
        value = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).strip().splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise InvalidInstanceError(source, f"not valid YAML{where}: {problem}") from None
    except RecursionError:  # pragma: no cover - the event pass bounds the depth first
        raise InvalidInstanceError(source, "YAML nested too deeply") from None
    return _unicode_only(value, source)


def parse_document(text: "str | bytes", source: str = "<input>", fmt: str = "json") -> Any:
    """Parse ``text`` as ``fmt`` ("json" or "yaml") under the reading rules; pure, thread-safe."""
    if fmt == "yaml":
        return parse_yaml(text, source)
    return parse_json(text, source)


async def parse_document_async(text: "str | bytes", source: str = "<input>", fmt: str = "json",
                               timeout: float = 10.0) -> Any:
    """:func:`parse_document` in a worker thread, so an event loop keeps answering while a large
    body is read; a body not read within ``timeout`` seconds is refused (the thread finishes on its
    own: reading is linear, so it is bounded by the body size)."""
    import asyncio

    try:
        return await asyncio.wait_for(asyncio.to_thread(parse_document, text, source, fmt), timeout)
    except asyncio.TimeoutError:
        raise InvalidInstanceError(source, f"not read within {timeout:g} s; send a smaller document") from None


def _read_bytes(p: Path, kind: str) -> bytes:
    """The bytes of a file of at most MAX_BYTES; a missing or unreadable file is bad input. What is not a
    regular file (a pipe, a device: its size says nothing) is read up to one byte past the limit."""
    try:
        if p.is_dir():
            raise InvalidInstanceError(str(p), f"is a directory, not a {kind} file")
        if p.is_file() and p.stat().st_size > MAX_BYTES:
            raise InvalidInstanceError(str(p), f"larger than {MAX_BYTES} bytes")
        with open(p, "rb") as f:
            data = f.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:  # (a regular file that grew since, or a stream)
            raise InvalidInstanceError(str(p), f"larger than {MAX_BYTES} bytes")
        return data
    except FileNotFoundError:
        raise InvalidInstanceError(str(p), "no such file") from None
    except OSError as exc:
        raise InvalidInstanceError(str(p), f"cannot read: {exc}") from None


def _decode(data: bytes, p: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInstanceError(str(p), f"cannot read: {exc}") from None


def read_text(path: "str | os.PathLike", kind: str = "JSON") -> str:
    """The UTF-8 text of a file of at most MAX_BYTES; a missing or unreadable file is bad input."""
    p = Path(path)
    return _decode(_read_bytes(p, kind), p)


def read_json(path: str | os.PathLike) -> Any:
    """Read and strictly parse a JSON file (see :func:`parse_json`)."""
    p = Path(path)
    return _json_of_file(_read_bytes(p, "JSON"), p)


def _json_of_file(data: bytes, p: Path) -> Any:
    if len(data) >= LARGE_TEXT_BYTES:  # orjson reads the bytes (and checks they are UTF-8)
        value = _orjson_parse(data, str(p))
        if value is not _UNDECIDED:
            return value
    return parse_json(_decode(data, p), str(p))


def read_json_tables(path: str | os.PathLike, nodes: "dict | None" = None) -> "tuple[Any, bool]":
    """:func:`read_json` of an instance file, its compact tables (``jobs[k].throughput.compact``) read as
    numpy arrays when they can be (see :func:`_with_table_arrays`, and there ``nodes``): (the value,
    True); else (:func:`read_json`'s value, False). A caller that finds the document refused reads it
    again with :func:`read_json`, whose lists name the first bad entry."""
    p = Path(path)
    value, tried = _file_with_table_arrays(p, nodes)
    if value is not _UNDECIDED:
        return value, True
    data = _read_bytes(p, "JSON")
    if not tried:  # (tried: simdjson refused the text, or it changed while read; the plain reader decides)
        value = _with_table_arrays(data, nodes)
        if value is not _UNDECIDED:
            return value, True
    return _json_of_file(data, p), False


def parse_json_tables(text: "str | bytes", source: str = "<input>", nodes: "dict | None" = None) -> "tuple[Any, bool]":
    """:func:`read_json_tables` of a text (see :func:`parse_json`)."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    value = _with_table_arrays(data, nodes)
    if value is not _UNDECIDED:
        return value, True
    return parse_json(text, source), False


def read_document(path: str | os.PathLike) -> Any:
    """Read a JSON file, or a YAML one when its name ends in .yaml or .yml, under the reading rules."""
    p = Path(path)
    if p.suffix.lower() in (".yaml", ".yml"):
        return parse_yaml(read_text(p, "YAML"), str(p))
    return read_json(p)


def field_path(loc: tuple) -> str:
    """('jobs', 3, 'weight') -> 'jobs[3].weight'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


# Fields holding a pydantic discriminated union on `kind` (their tag is not part of the path).
_TAGGED_UNION_FIELDS = frozenset({"event"})


def validation_error_to_invalid(exc: ValidationError, prefix: str = "") -> InvalidInstanceError:
    """Turn pydantic's first error into one clear message naming the field and the value."""
    err = exc.errors(include_url=False)[0]
    # Drop the union/function tags pydantic inserts into paths (e.g. 'function-after[...]').
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p and p.endswith("]")))
    # Discriminated unions (the event kinds) insert the tag after the field: drop it.
    loc = tuple(p for k, p in enumerate(loc) if not (k and loc[k - 1] in _TAGGED_UNION_FIELDS))
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        loc = loc + ("kind",)
    path = field_path(loc)
    if not loc and err["type"] == "model_type":
        return InvalidInstanceError(prefix or "(top level)", "must be a JSON object")
    if prefix:
        path = f"{prefix}.{path}" if path != "(top level)" else prefix
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
        # Model-level validators name sub-fields themselves, e.g. "failed_gpus[2]: ...".
        if ": " in msg and msg.split(": ", 1)[0].replace("[", "").replace("]", "").replace("_", "").replace(".", "").isalnum():
            sub, msg = msg.split(": ", 1)
            path = sub if path == "(top level)" else f"{path}{sub}" if sub.startswith("[") else f"{path}.{sub}"
    if err["type"] not in ("missing", "extra_forbidden") and "input" in err:
        value = err["input"]
        if not isinstance(value, (dict, list)):
            shown = repr(value)
            msg = f"{shown if len(shown) <= 60 else shown[:57] + '...'}: {msg}"
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check its spelling against `unicron-plan schema`)"
    return InvalidInstanceError(path, msg)


def parse_model(model: type[BaseModel], data: Any, prefix: str = "", context: "dict | None" = None) -> Any:
    """Validate ``data`` against a pydantic model (with a validation ``context``), raising
    InvalidInstanceError on failure."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise validation_error_to_invalid(exc, prefix) from None


def dumps(obj: Any) -> str:
    """Canonical JSON text: sorted keys, two-space indent, trailing newline.

    The text is exactly ``json.dumps(obj, indent=2, sort_keys=True, allow_nan=False)`` plus the
    newline. Python's encoder runs in pure Python whenever it indents, so the outer levels are laid
    out here and every array of flat objects (a plan's placements: one per job and node, the bulk
    of a large plan) goes through the C encoder in one call (:func:`_flat_objects`); a value of any
    type other than the JSON ones, or a key that is not a string, is left to ``json.dumps``."""
    floats = None
    if isinstance(obj, BaseModel):
        if hasattr(type(obj), "placement_arrays"):  # a plan whose placements are held as arrays
            text = _plan_text(obj)
            if text is not None:
                return text
        # a model that lists the floats of its JSON form (a plan) spares the walk over the dumped tree
        floats = obj.json_floats() if hasattr(type(obj), "json_floats") else None
        obj = obj.model_dump(mode="json", exclude_none=True)
    fast = _orjson_dumps(obj, floats)
    if fast is not None:
        return fast
    try:
        return _indented(obj, "") + "\n"
    except _NotPlain:
        return json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"


_PLAIN = frozenset({dict, list, str, int, float, bool, type(None)})
#: Python writes a float of this magnitude or more, or of less than _TINY (but not 0), with an
#: exponent ("1e+16", "5e-05"); orjson writes some of them differently ("1e16", "0.00005"). Between
#: the two both write the shortest repr that reads back as the same float, the same digits.
_HUGE, _TINY = 1e16, 1e-4


_ORJSON_DEPTH = 250  # levels of nesting orjson is given (it refuses more than 255)


def _of_kind(values: list, kinds: set, kind: type, types: list) -> list:
    """The items of ``values`` that are exactly of ``kind`` (``types``: the type of each, ``kinds``: the set
    of them)."""
    if kinds == {kind}:
        return values
    if kind not in kinds:
        return []
    return _picked(values, types, kind)


def _plain_floats(value: Any) -> "list[float] | None":
    """Every float in ``value`` when it holds only JSON types (exactly: no subclass) with string
    keys, nested at most _ORJSON_DEPTH levels, else None. A level of the tree at a time, each
    level's values gathered in C calls (the type of each value read once)."""
    level, floats = [value], []
    for _ in range(_ORJSON_DEPTH):
        if not level:
            return floats
        types = list(map(type, level))
        kinds = set(types)
        if not kinds <= _PLAIN:
            return None
        floats += _of_kind(level, kinds, float, types)
        dicts = _of_kind(level, kinds, dict, types)
        if dicts and set(map(type, itertools.chain.from_iterable(dicts))) - {str}:
            return None
        level = list(itertools.chain(itertools.chain.from_iterable(map(dict.values, dicts)),
                                     itertools.chain.from_iterable(_of_kind(level, kinds, list, types))))
    return None  # deeper than orjson writes, or a container that holds itself


def _orjson_dumps(obj: Any, floats: "list[float] | None" = None) -> "str | None":
    """:func:`dumps`'s text written by orjson (one C call), or None when it might differ from the json
    module's: a type other than the JSON ones (orjson writes dataclasses, the json module refuses
    them), a non-finite float (orjson writes null where the json module raises), a text that is not
    ASCII or holds DEL (the json module escapes those). A float Python writes with an exponent is
    put back in Python's form: orjson's and Python's texts of it are each a whole token between a
    space and ",\n" or "\n", which no JSON string holds (a string never holds a raw newline).
    ``floats``: every float of ``obj``, when ``obj`` is a model's JSON-mode dump (JSON types only) and
    the model listed them (:meth:`unicron_plan.schema.Plan.json_floats`); else ``obj`` is walked for them."""
    if _orjson is None:
        return None
    if floats is None:
        floats = _plain_floats(obj)
    if floats is None:
        return None
    import numpy as np

    values = np.asarray(floats, dtype=float).reshape(len(floats))
    if not np.isfinite(values).all():
        return None
    size = np.abs(values)
    odd = values[(size >= _HUGE) | ((size < _TINY) & (size != 0))].tolist()
    try:
        text = _orjson.dumps(obj, option=_orjson.OPT_INDENT_2 | _orjson.OPT_SORT_KEYS) + b"\n"
    except (TypeError, _orjson.JSONEncodeError):  # an integer wider than 64 bits
        return None
    if not text.isascii() or b"\x7f" in text:
        return None
    text = b" " + text  # (a text that is one number is a token after a space too)
    for v in set(odd):
        ours, theirs = float.__repr__(v).encode(), _orjson.dumps(v)
        if ours != theirs:
            text = text.replace(b" " + theirs + b",\n", b" " + ours + b",\n").replace(
                b" " + theirs + b"\n", b" " + ours + b"\n")
    return text[1:].decode("ascii")


_PLACED = '\n      "placement": 0,\n'  # a job's placement marked in the plan's text (a job's member)
_NODE_PREFIX = '        {{\n          "gpus": {},\n          "node": '.format  # a placement in a plan, to its node id
_BETWEEN = "\n        },\n"  # the end of a placement and the start of the next one
#: a character json.dumps writes escaped (its ensure_ascii escapes every one beyond ASCII): all but the
#: printable ASCII and DEL other than the quote and the backslash, written as the complement of those (the
#: same set as ranges up to U+10FFFF takes milliseconds to compile, at every start)
_ESCAPED = re.compile(r'[^\x20\x21\x23-\x5b\x5d-\x7f]')


def _plan_text(plan: Any) -> "str | None":
    """:func:`dumps`'s text of a plan whose placements are held as arrays
    (:meth:`unicron_plan.schema.Plan.placement_arrays`), written from the arrays without a model per
    placement, or None (the plan is then dumped as any model). The plan but its placements is dumped
    and written by orjson with a marker for each job's placement (a member of each job, the only
    member of that name at that indent: other members of the plan are at other indents, and no
    string holds a raw newline); each job's placement, written here as json.dumps writes it (keys
    sorted, node ids escaped to ASCII), takes its marker's place."""
    from unicron_plan.schema.plan import WITHOUT_PLACEMENT

    arrays = plan.placement_arrays()
    if arrays is None:
        return None
    floats = plan.json_floats()
    if floats is None:
        return None
    jobs = plan.jobs_without_placement()
    if jobs is None or len(jobs) != len(arrays):
        return None
    doc = plan.model_dump(mode="json", exclude_none=True, exclude={"jobs"}, context={WITHOUT_PLACEMENT: True})
    doc["jobs"] = jobs
    for job in jobs:
        job["placement"] = 0
    text = _orjson_dumps(doc, floats)
    if text is None:  # (a text orjson would write otherwise than json.dumps: e.g. not ASCII)
        try:
            text = _indented(doc, "") + "\n"
        except _NotPlain:
            return None
    parts = text.split(_PLACED)
    if len(parts) != len(jobs) + 1:
        return None
    ids = arrays.node_ids()
    gpus = arrays.gpus.tolist()
    if _ESCAPED.search("".join(ids)) is None:  # every id written as it is: its quotes put around it below
        quoted, close = ids, '"'
    else:
        quoted, close = list(map(json.encoder.encode_basestring_ascii, ids)), ""
    prefix = {g: _NODE_PREFIX(g) + close for g in set(gpus)}
    return _placed_text(parts, arrays.starts.tolist(), list(map(prefix.__getitem__, gpus)), quoted, close)


def _placed_text(parts: list[str], ends: list[int], prefixes: list[str], quoted: list[str], close: str) -> str:
    """The plan's text from ``parts`` (its text cut at each job's placement marker) and the placements'
    entries (entry ``i``: ``prefixes[i]``, then ``quoted[i]``, then ``close``; job ``k`` has the entries
    ``ends[k]:ends[k + 1]``): one join over every entry's pieces, each entry followed by the text up to
    the next entry (the next entry of its job, or the end of its job's list, the text of the jobs up to
    the next job with an entry and that job's opening)."""
    between, last = close + _BETWEEN, close + "\n        }"
    size = len(quoted)
    pieces = [between] * (3 * size + 1)  # the text before the first entry, then each entry's three pieces
    pieces[1::3] = prefixes
    pieces[2::3] = quoted
    pending = [parts[0]]  # the text since the last entry written
    end = -1  # the last entry of the last job with an entry
    for a, b, part in zip(ends, ends[1:], parts[1:]):
        if b > a:
            pending.append('\n      "placement": [\n')
            pieces[3 * end + 3] = "".join(pending)  # (end -1: the text before the first entry)
            pending = [last, '\n      ],\n', part]
            end = b - 1
        else:
            pending += ('\n      "placement": [],\n', part)
    if end < 0:
        return "".join(pending)
    pieces[3 * end + 3] = "".join(pending)
    return "".join(pieces)


class _NotPlain(Exception):
    """A value :func:`_indented` leaves to json.dumps."""


_SCALARS = frozenset({str, int, float, bool, type(None)})
_INFINITIES = (float("inf"), float("-inf"))


@functools.lru_cache(maxsize=64)
def _c_encoder(indent: str):
    """The C encoder's ``encode`` with members separated by a newline and ``indent``."""
    return json.JSONEncoder(separators=(",\n" + indent, ": "), sort_keys=True, allow_nan=False).encode


def _flat_objects(items: list, indent: str) -> "str | None":
    """A list of at least two non-empty objects with string keys and scalar values, as
    json.dumps(indent=2, sort_keys=True) writes it at ``indent`` (None for any other list).

    One C call writes the objects with every member on a line of its own at the members' indent;
    as no encoded string holds a raw newline and no scalar ends in a brace, "},\n" occurs only
    between two objects, where the objects' own lines are then put in."""
    if len(items) < 2 or set(map(type, items)) != {dict} or not all(items):
        return None
    keys = itertools.chain.from_iterable(items)
    values = itertools.chain.from_iterable(map(dict.values, items))
    if set(map(type, keys)) != {str} or not set(map(type, values)) <= _SCALARS:
        return None
    inner, members = indent + "  ", indent + "    "
    body = _c_encoder(members)(items)[2:-2]  # without the outer "[{" and "}]"
    body = body.replace("},\n" + members + "{", "\n" + inner + "},\n" + inner + "{\n" + members)
    return "[\n" + inner + "{\n" + members + body + "\n" + inner + "}\n" + indent + "]"


def _indented(value: Any, indent: str) -> str:
    """``value`` as json.dumps(indent=2, sort_keys=True, allow_nan=False) writes it at ``indent``."""
    kind = type(value)
    if kind is dict:
        if not value:
            return "{}"
        if any(type(k) is not str for k in value):
            raise _NotPlain
        inner = indent + "  "
        parts = [inner + json.encoder.encode_basestring_ascii(k) + ": " + _indented(value[k], inner)
                 for k in sorted(value)]
        return "{\n" + ",\n".join(parts) + "\n" + indent + "}"
    if kind is list:
        if not value:
            return "[]"
        flat = _flat_objects(value, indent)
        if flat is not None:
            return flat
        inner = indent + "  "
        if set(map(type, value)) <= _SCALARS:  # scalars only (a job's nodes): one C call, same bytes
            try:
                return "[\n" + inner + _c_encoder(inner)(value)[1:-1] + "\n" + indent + "]"
            except ValueError:  # a non-finite float: the loop below raises naming it
                pass
        return "[\n" + ",\n".join([inner + _indented(x, inner) for x in value]) + "\n" + indent + "]"
    if kind is str:
        return json.encoder.encode_basestring_ascii(value)
    if kind is float:
        if value != value or value in _INFINITIES:
            raise ValueError("Out of range float values are not JSON compliant: " + repr(value))
        return float.__repr__(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    raise _NotPlain


def check_output_path(path: str | os.PathLike) -> Path:
    """``path`` if it may be written; InvalidInstanceError (exit 2) when it is a directory, lies
    under a file, or is a block device or socket. A FIFO or character device (``/dev/stdout``)
    is written into, never replaced (see :func:`write_atomic`)."""
    import stat

    p = Path(path)
    where = str(p)
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise InvalidInstanceError(where, "a parent of this path is a file, not a directory") from None
    except OSError as exc:
        raise InvalidInstanceError(where, f"cannot write: {exc.strerror or exc}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise InvalidInstanceError(where, "is a directory; name a file to write")
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
            raise InvalidInstanceError(where, "is a block device or socket; name a regular file")
    for parent in p.parents:
        if parent.exists() and not parent.is_dir():
            raise InvalidInstanceError(where, f"{parent} is a file, not a directory")
    return p


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, text: str, mode: int | None = None, durable: bool = False) -> None:
    """Write text to path through a temporary file and a rename, so readers never see half a file.

    The file gets ``mode``, or when None the mode a plain ``open(path, "w")`` would give (0666 minus
    the umask), not the 0600 of temporary files. ``durable``: the text is on disk (fsync) before the
    rename. A FIFO or character device is written into directly. Bad paths (see
    :func:`check_output_path`) are bad input (exit 2).
    """
    p = check_output_path(path)
    if _special(p):
        _write_into(p, text.encode("utf-8"))
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    except OSError as exc:
        raise InvalidInstanceError(str(p), f"cannot write: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, (0o666 & ~_umask()) if mode is None else mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _special(p: Path) -> bool:
    """Whether ``p`` is there and is no regular file (a FIFO or a character device, /dev/stdout): an output
    written into, never replaced by a rename."""
    return p.exists() and not p.is_file()


def _write_into(p: Path, data: bytes) -> None:
    """Write ``data`` into the FIFO or device ``p`` (see :func:`_special`); bad input when it cannot be."""
    try:
        with open(p, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        raise InvalidInstanceError(str(p), f"cannot write: {exc.strerror or exc}") from None


def save_figure_atomic(fig, path: str | os.PathLike, dpi: int = 100) -> None:
    """Save a matplotlib figure as PNG through a temporary file and a rename (a FIFO or character device
    is written into, as :func:`write_atomic` does)."""
    p = check_output_path(path)
    if _special(p):
        from io import BytesIO  # (the standard library's)

        buf = BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        _write_into(p, buf.getvalue())
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".png")
    except OSError as exc:
        raise InvalidInstanceError(str(p), f"cannot write: {exc.strerror or exc}") from None
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=dpi)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def emit(text: str, out: "str | os.PathLike | None") -> None:
    """Print ``text`` to stdout, or write it atomically to ``out``."""
    if out is None:
        sys.stdout.write(text)
    else:
        write_atomic(out, text)
