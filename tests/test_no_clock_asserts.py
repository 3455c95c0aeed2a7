"""No test asserts on a clock reading: speed is measured in benchmarks/, never asserted in tests/.

A test that asserts wall-clock time (or a ratio of times) fails on a loaded machine while the
code is right. The check reads every .py file under tests/ and flags an ``assert`` that reads a
clock (``time.perf_counter()``, ``monotonic``, ``time``, ``process_time``, ``thread_time`` and
their ``_ns`` forms) or a name computed from one in the same function (``elapsed = perf_counter()
- start``; ``times.append(elapsed)``; a tuple element a function of the same file returns from
one). A bounded wait is a hang guard, not a timing check: its clock stays in the loop's
condition, and the failure after it names what never came (``raise AssertionError``/
``pytest.fail``). Durations a test prints are measurements, not assertions.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {f"{name}{ns}" for name in ("perf_counter", "monotonic", "time", "process_time", "thread_time")
          for ns in ("", "_ns")}
GROWS = {"append", "extend", "insert", "add", "update"}  # a container that takes a clock reading holds one


def _is_clock(call: ast.AST, local_clocks: set[str]) -> bool:
    """``time.perf_counter()``, ``__import__("time").monotonic()``, or a clock imported by name."""
    if not isinstance(call, ast.Call):
        return False
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in CLOCKS:
        v = f.value
        return (isinstance(v, ast.Name) and v.id == "time") or (
            isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "__import__")
    return isinstance(f, ast.Name) and f.id in local_clocks


#: Calls whose value is computed from their arguments' (a clock reading in, a duration out); any
#: other call (the product's code) is opaque: passing a deadline to it asserts nothing on the clock.
AGGREGATES = {"min", "max", "sum", "sorted", "abs", "round", "float", "int", "median", "mean", "fsum", "list", "tuple"}


def _reads_clock(node: ast.AST, tainted: set[str], local_clocks: set[str], returns: dict[str, list[bool]]) -> bool:
    """Whether the value of ``node`` is a clock reading or computed from one."""
    def hot(n: ast.AST) -> bool:
        if _is_clock(n, local_clocks):
            return True
        if isinstance(n, ast.Name):
            return n.id in tainted
        if isinstance(n, (ast.Lambda, ast.Dict, ast.DictComp)):
            return False   # a record that holds a reading among other things is not one
        if isinstance(n, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return hot(n.elt)   # what is kept, not the filter that chose it
        if isinstance(n, ast.IfExp):
            return hot(n.body) or hot(n.orelse)
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name) \
                and n.value.func.id in returns and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, int):
            elements = returns.get(n.value.func.id, [])   # f()[k]: the k-th element a function of this file returns
            return 0 <= n.slice.value < len(elements) and elements[n.slice.value]
        if isinstance(n, ast.Call):
            name = n.func.id if isinstance(n.func, ast.Name) else n.func.attr if isinstance(n.func, ast.Attribute) else ""
            if isinstance(n.func, ast.Name) and name in returns:
                return any(returns[name])
            if name not in AGGREGATES:
                return False
            return any(hot(a) for a in n.args)
        return any(hot(c) for c in ast.iter_child_nodes(n))

    return hot(node)


def _targets(target: ast.AST) -> list[ast.AST]:
    return list(target.elts) if isinstance(target, (ast.Tuple, ast.List)) else [target]


def _taint(fn: ast.AST, local_clocks: set[str], returns: dict[str, list[bool]]) -> set[str]:
    """Names in ``fn`` that hold a clock reading or something computed from one (to a fixed point)."""
    tainted: set[str] = set()
    while True:
        before = len(tainted)
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.value
                for target in targets:
                    parts = _targets(target)
                    if (len(parts) > 1 and isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                            and len(returns.get(value.func.id, [])) == len(parts)):
                        hot = returns[value.func.id]   # a tuple from a function of this file: element by element
                        names = [(p, h) for p, h in zip(parts, hot)]
                    else:
                        hot = _reads_clock(value, tainted, local_clocks, returns)
                        names = [(p, hot) for p in parts]
                    for part, is_hot in names:
                        if is_hot and isinstance(part, ast.Name):
                            tainted.add(part.id)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in GROWS \
                    and isinstance(node.func.value, ast.Name) \
                    and any(_reads_clock(a, tainted, local_clocks, returns) for a in node.args):
                tainted.add(node.func.value.id)
        if len(tainted) == before:
            return tainted


def _functions(tree: ast.Module) -> list[ast.AST]:
    return [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def clock_asserts(source: str, name: str = "<test>") -> list[str]:
    """``file:line`` of every assert on a clock reading in ``source``."""
    tree = ast.parse(source, name)
    local_clocks = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "time"
                    for a in n.names if a.name in CLOCKS}
    returns: dict[str, list[bool]] = {}   # function of this file -> which elements of what it returns hold a reading
    for _ in range(3):   # functions that call functions of this file
        for fn in _functions(tree)[1:]:
            tainted = _taint(fn, local_clocks, returns)
            for node in ast.walk(fn):
                if isinstance(node, ast.Return) and node.value is not None:
                    parts = _targets(node.value)
                    hot = [_reads_clock(p, tainted, local_clocks, returns) for p in parts]
                    old = returns.get(fn.name, [False] * len(hot))
                    returns[fn.name] = [a or b for a, b in zip(hot, old)] if len(old) == len(hot) else hot
    found = set()
    for fn in _functions(tree):
        tainted = _taint(fn, local_clocks, returns)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assert) and _reads_clock(node.test, tainted, local_clocks, returns):
                found.add(f"{name}:{node.lineno}")
    return sorted(found)


def test_no_test_asserts_on_a_clock_reading():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        found += clock_asserts(path.read_text(encoding="utf-8"), str(path.relative_to(TESTS.parent)))
    assert not found, ("asserts on clock readings (measure work, or move the timing to benchmarks/): "
                       + ", ".join(found))


def test_the_check_finds_each_form_of_timing_assertion():
    """The check can fail: every form it is meant to catch is caught, and a hang guard is not."""
    caught = {
        "direct": "import time\ndef test():\n    t = time.perf_counter()\n    f()\n    assert time.perf_counter() - t < 1\n",
        "elapsed": "import time\ndef test():\n    t0 = time.monotonic()\n    f()\n    elapsed = time.monotonic() - t0\n"
                   "    assert elapsed < 60, 'slow'\n",
        "ratio": "import time\ndef cost(n):\n    s = time.perf_counter()\n    f(n)\n    return time.perf_counter() - s\n"
                 "def test():\n    small, big = cost(1), cost(4)\n    assert big < 8 * small + 0.05\n",
        "median": "import statistics, time\ndef test():\n    times = []\n    for _ in range(5):\n"
                  "        s = time.time()\n        f()\n        times.append(time.time() - s)\n"
                  "    assert statistics.median(times) < 60\n",
        "tuple": "import time\ndef run():\n    t = time.monotonic()\n    r = f()\n    return time.monotonic() - t, r\n"
                 "def test():\n    elapsed, result = run()\n    assert result == 1\n    assert elapsed < 60\n",
        "imported": "from time import perf_counter as pc\ndef test():\n    a = pc()\n    f()\n    assert pc() - a < 2.0\n",
        "dunder": "def test():\n    s = __import__('time').process_time()\n    f()\n"
                  "    assert __import__('time').process_time() - s < 1\n",
        "guard in assert": "import time\ndef test():\n    deadline = time.monotonic() + 60\n    while not done():\n"
                           "        assert time.monotonic() < deadline\n",
    }
    for label, src in caught.items():
        lines = clock_asserts(src, label)
        assert len(lines) == 1, (label, lines)
    # the tuple case flags the elapsed line alone, not the result's
    assert clock_asserts(caught["tuple"], "t") == ["t:9"]
    fine = ("import time\ndef test():\n    deadline = time.monotonic() + 60\n"
            "    while not done() and time.monotonic() < deadline:\n        time.sleep(0.1)\n"
            "    if not done():\n        raise AssertionError('never done')\n    assert done()\n"
            "    print(f'took {time.monotonic() - deadline + 60:.1f} s')\n")
    assert clock_asserts(fine, "guard") == []
