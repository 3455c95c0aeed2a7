"""Solvers: one module per technique behind one small contract, in an explicit ordered registry.

A solver is a callable ``solve(problem, options) -> RawSolution`` plus an
``available()`` check. :func:`get_solver` turns an unknown or unavailable name
into an error that lists the valid ones.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Callable, Optional

from unicron_plan.errors import MissingExtraError, SolverUnavailableError


#: Default time limit of `unicron-plan solve` and :func:`unicron_plan.api.solve`, seconds of wall
#: time: no input makes a solve run longer unless the caller asks for it.
DEFAULT_TIME_LIMIT_SECONDS = 60.0

#: Longest time limit, seconds (about 11.6 days): the IP backends turn a deadline into a timestamp.
MAX_TIME_LIMIT_SECONDS = 1e6

#: Most worker threads an IP backend is given (each thread of HiGHS or CP-SAT holds its own memory).
MAX_THREADS = 256


ENGINE_RESERVE_SECONDS = 0.25  # at most this much of a time limit is kept for the work after a solver


def process_started() -> float:
    """The :func:`time.perf_counter` instant at which this process started (Linux: from
    /proc/self/stat, to the clock tick, rounded earlier; elsewhere the first import of this module),
    so that a command's time limit counts the interpreter's start-up and its imports too."""
    global _PROCESS_STARTED
    if _PROCESS_STARTED is None:
        _PROCESS_STARTED = _IMPORTED
        try:
            import os

            with open("/proc/self/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # the command name may hold spaces
            ticks = int(fields[19])  # field 22, starttime: clock ticks after boot
            age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
            if 0.0 <= age < 86400.0 * 365:
                _PROCESS_STARTED = min(_IMPORTED, time.perf_counter() - age)
        except (OSError, ValueError, IndexError, AttributeError):
            pass
    return _PROCESS_STARTED


_IMPORTED = time.perf_counter()
_PROCESS_STARTED: Optional[float] = None


class DeadlineReached(Exception):
    """The deadline passed while a backend was building or copying a model (nothing was solved)."""


@dataclass(frozen=True)
class SolverOptions:
    """Limits every backend honours.

    ``deadline`` is a :func:`time.perf_counter` instant; when only
    ``time_limit_seconds`` is given, the deadline is that many seconds from the
    options' creation. Every phase of a backend counts against it: model building
    checks :meth:`check` as it goes, a solver is never started once :meth:`expired`,
    and a running solver is handed :meth:`remaining` and stopped at the deadline.
    """

    time_limit_seconds: Optional[float] = None
    threads: Optional[int] = None
    deadline: Optional[float] = None
    #: Wall seconds per CPU second seen so far in the call (above 1 on a loaded machine): estimates of
    #: CPU work (a solver's import, a model's copy) are scaled by it before they are held against
    #: the deadline.
    slowdown: float = 1.0
    #: ``dp`` only: (one GPU type's jobs) -> (their Pareto options, those joined or None), as
    #: :func:`unicron_plan.solvers.dp.pareto_joined` gives them, for a caller that keeps them between
    #: problems (the incremental plan), optionally with a :class:`unicron_plan.solvers.dp.Splice` of
    #: kept parts and a memo (capacity -> the counts and value the DP found on these very options, which
    #: it reads instead of solving and fills); None: computed per problem.
    pareto: Optional[Callable] = None

    def __post_init__(self):
        if self.deadline is None and self.time_limit_seconds is not None:
            object.__setattr__(self, "deadline", time.perf_counter() + float(self.time_limit_seconds))

    def remaining(self) -> Optional[float]:
        """Seconds left before the deadline (0 once it has passed), or None without a limit."""
        if self.deadline is None:
            return None
        return max(self.deadline - time.perf_counter(), 0.0)

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return self.deadline is not None and time.perf_counter() >= self.deadline

    def affords(self, cpu_seconds: float) -> bool:
        """Whether work estimated at ``cpu_seconds`` of CPU, scaled by :attr:`slowdown`, ends before
        the deadline (always, without one): a step that cannot be stopped once started (an import,
        a model written for an external solver) is skipped when it would not."""
        left = self.remaining()
        return left is None or cpu_seconds * self.slowdown < left

    def for_engine(self, after_cpu_seconds: float = 0.0) -> "SolverOptions":
        """The options a solver engine runs under: the deadline moved earlier by a reserve for the
        work after it (reading its answer back and extracting the plan): ``after_cpu_seconds``
        (its CPU estimate, scaled by :attr:`slowdown`), and at least a tenth of the limit up to
        ENGINE_RESERVE_SECONDS."""
        if self.deadline is None:
            return self
        reserve = max(min(ENGINE_RESERVE_SECONDS, 0.1 * (self.time_limit_seconds or 0.0)),
                      after_cpu_seconds * self.slowdown)
        return SolverOptions(threads=self.threads, deadline=self.deadline - reserve, slowdown=self.slowdown)

    def check(self) -> None:
        """Raise :class:`DeadlineReached` when the deadline has passed."""
        check_deadline(self.deadline)


def check_deadline(deadline: Optional[float]) -> None:
    """Raise :class:`DeadlineReached` when ``deadline`` (a perf_counter instant, or None) has passed."""
    if deadline is not None and time.perf_counter() >= deadline:
        raise DeadlineReached


@dataclass(frozen=True)
class SolverSpec:
    """Registry entry: where the solver lives and what it is for."""

    name: str
    module: str
    summary: str


# Ordered: the first is the default.
REGISTRY: tuple[SolverSpec, ...] = (
    SolverSpec("dp", "unicron_plan.solvers.dp", "exact dynamic program over allowed counts (default)"),
    SolverSpec("brute", "unicron_plan.solvers.brute", "exhaustive enumeration, for tiny instances and tests"),
    # Integer-programming backends: exact with node-level constraints too.
    SolverSpec("milp", "unicron_plan.solvers.milp", "MILP via PuLP + HiGHS (node-level constraints)"),
    SolverSpec("milp-cbc", "unicron_plan.solvers.milp_cbc", "MILP via PuLP + CBC"),
    SolverSpec("cpsat", "unicron_plan.solvers.cpsat", "OR-Tools CP-SAT, integer-scaled objective"),
    SolverSpec("auto", "unicron_plan.solvers.auto", "dp when it is exact for the instance, else milp (or cpsat)"),
)


def solver_names() -> list[str]:
    """Registered solver names, default first."""
    return [s.name for s in REGISTRY]


#: Mixed fleets (problems whose jobs may change GPU type): the module that solves them for each
#: solver, and the IP backend it hands the model to. brute and auto choose types themselves.
MIXED_ROUTES: dict[str, tuple[str, Optional[str]]] = {
    "dp": ("unicron_plan.solvers.auto", None),  # the router: solvers/mixed.py with its sub-solver
    "milp": ("unicron_plan.solvers.mixed_ip", "highs"),
    "milp-cbc": ("unicron_plan.solvers.mixed_ip", "cbc"),
    "cpsat": ("unicron_plan.solvers.mixed_ip", "cpsat"),
}


def get_solver(name: str) -> Callable:
    """The solve function of solver ``name`` (a problem with GPU-type choices goes to the solver's
    mixed-fleet form, :data:`MIXED_ROUTES`); raises SolverUnavailableError listing the valid names."""
    spec = next((s for s in REGISTRY if s.name == name), None)
    if spec is None:
        raise SolverUnavailableError(f"unknown solver {name!r}; valid solvers: {', '.join(solver_names())}")
    module = importlib.import_module(spec.module)
    if hasattr(module, "available") and not module.available():
        raise MissingExtraError(
            f"solver {name!r} is not available here (its backend is not installed): "
            f"pip install 'unicron-plan[ip]'")
    route = MIXED_ROUTES.get(name)
    if route is None:
        return module.solve
    single = module.solve

    def solve(problem, options: Optional[SolverOptions] = None):
        if not problem.alternatives:
            return single(problem, options)
        mixed = importlib.import_module(route[0])
        return mixed.solve(problem, options) if route[1] is None else mixed.solve(problem, options, route[1])

    solve.__doc__ = single.__doc__
    return solve
