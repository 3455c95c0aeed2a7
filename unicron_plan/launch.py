"""The ``unicron-plan`` console script: reads a ``solve`` command's instance file ahead
(:mod:`unicron_plan.readahead`), then runs the command line (:func:`unicron_plan.cli.main`)."""

from __future__ import annotations

import sys


def main() -> None:
    from unicron_plan import readahead

    readahead.start(sys.argv[1:])
    from unicron_plan.cli import main as run

    run()
