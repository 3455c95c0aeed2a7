"""Typed errors with one root, so callers can catch exactly what they mean.

The CLI maps :class:`InvalidInstanceError` (bad input) to exit code 2 and
prints only its message; every message names the offending field and value.
"""


class UnicronError(Exception):
    """Root of every error raised on purpose by unicron_plan."""


class InvalidInstanceError(UnicronError, ValueError):
    """The input (instance, plan or scenario file) is malformed or inconsistent.

    ``field`` is the dotted path of the offending field, e.g. ``jobs[3].weight``.
    """

    def __init__(self, field: str, message: str, limit: int | None = None):
        from unicron_plan.text import MAX_ECHO, one_line

        # Both may echo input (ids, keys, values): escaped to one line and cut. A message whose
        # echoed parts are already cut may allow a longer ``limit`` (e.g. to list valid names).
        self.field = one_line(str(field), 160)
        self.message = one_line(str(message), limit or MAX_ECHO)
        super().__init__(f"{self.field}: {self.message}" if self.field else self.message)


class InfeasibleError(UnicronError):
    """No plan satisfies the constraints (only possible with extra constraints)."""


class FitFailedError(UnicronError):
    """A calibration fit found no constants that explain the measured points (exit 1)."""


class SolverUnavailableError(UnicronError):
    """The requested solver is unknown or its backend is not installed."""


class PlanValidationError(UnicronError):
    """A solver produced a plan the independent validator rejects: a bug, please report it."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("internal error, plan failed validation: " + "; ".join(problems))


class MissingExtraError(SolverUnavailableError):
    """A command needs an optional part of the package that is not installed (exit 2)."""
