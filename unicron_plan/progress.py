"""Progress on stderr for the command line (stdout carries the result)."""

from __future__ import annotations

import sys


def working(label: str, quiet: bool = False, after: float = 2.0):
    """A context showing a spinner with ``label`` on stderr once the work inside has run ``after``
    seconds (on a terminal, unless ``quiet``): anything long says it is working, nothing short
    flickers, and stdout stays the result."""
    import contextlib

    if quiet or not sys.stderr.isatty():
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def spin():
        import threading

        from rich.console import Console
        from rich.status import Status

        status = Status(label, console=Console(stderr=True))
        lock = threading.Lock()
        state = {"done": False, "shown": False}

        def show():
            with lock:
                if not state["done"]:
                    status.start()
                    state["shown"] = True
        timer = threading.Timer(after, show)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            with lock:
                state["done"] = True
                if state["shown"]:
                    status.stop()
    return spin()
