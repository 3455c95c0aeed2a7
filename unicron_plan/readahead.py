"""The instance file of a ``solve`` command line, read while the program loads.

The console script (:mod:`unicron_plan.launch`) calls :func:`start` before it imports the command
line's modules (typer, pydantic, numpy, the solvers: 0.2-0.3 s). When the command line is
``solve`` with one existing regular file of at least READ_AHEAD_BYTES as its instance, a thread scans
that file with the compiled table scan (``_tablescan.strip``, which runs without the GIL) on the
machine's other core meanwhile. The reader takes the scan (:func:`take`) when it comes to the same
file, unchanged since (device, inode, size and modification time as the scan found them); otherwise
it reads the file itself, as it always can. This module imports nothing heavy.
"""

from __future__ import annotations

import os
import stat
import threading

MAX_BYTES = 512 * 1024 * 1024  # a larger input file is refused before it is read
READ_AHEAD_BYTES = 1 << 20  # a smaller file is read in the call: a thread would not pay for itself

#: The ``solve`` command's options that take a value (the word after one is not the instance).
SOLVE_VALUE_OPTIONS = frozenset({"--solver", "-s", "--out", "-o", "--time-limit", "--threads", "--contingency",
                                 "--contingency-use"})

_pending: "tuple[os.stat_result, threading.Thread, list] | None" = None


def solve_instance(args: list[str]) -> "str | None":
    """The instance argument of a ``solve`` command line (``args`` without the program's name), or None
    when it is another command, or the instance cannot be told from the words alone."""
    if not args or args[0] != "solve":
        return None
    found = []
    words = iter(args[1:])
    for word in words:
        if word == "--":
            found += list(words)
        elif word in SOLVE_VALUE_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            found.append(word)
    return found[0] if len(found) == 1 else None


def start(args: list[str]) -> None:
    """Start reading the instance file of a ``solve`` command line (see the module's text); nothing when
    there is none to read ahead, or the compiled scan is not built."""
    global _pending
    path = solve_instance(args)
    if path is None:
        return
    try:
        from unicron_plan import _tablescan
    except ImportError:
        return
    try:  # (looked at before it is opened: opening a pipe would wait for its writer)
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or not READ_AHEAD_BYTES <= st.st_size <= MAX_BYTES:
            return
        f = open(path, "rb", buffering=0)
    except (OSError, ValueError):
        return
    try:
        st = os.fstat(f.fileno())
    except OSError:
        f.close()
        return
    if not stat.S_ISREG(st.st_mode) or not READ_AHEAD_BYTES <= st.st_size <= MAX_BYTES:
        f.close()
        return
    box: list = []

    def scan() -> None:
        with f:
            try:
                box.append(_tablescan.strip(f.fileno(), MAX_BYTES))
            except (OSError, MemoryError):
                pass  # (the reader reads the file itself, and names the error)

    thread = threading.Thread(target=scan, name="unicron-plan read-ahead", daemon=True)
    thread.start()
    _pending = (st, thread, box)


def _identity(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def take(path: "str | os.PathLike") -> "tuple[bool, tuple | None]":
    """(True, the scan's answer: ``_tablescan.strip``'s, or None) when :func:`start` read the file at
    ``path`` and it is unchanged since; else (False, None), and the caller reads it. Once only: the
    scan is dropped either way."""
    global _pending
    pending, _pending = _pending, None
    if pending is None:
        return False, None
    st, thread, box = pending
    try:
        now = os.stat(path)
    except (OSError, ValueError):
        return False, None
    if _identity(now) != _identity(st):
        return False, None
    thread.join()
    if not box:
        return False, None
    return True, box[0]
