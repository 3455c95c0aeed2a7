"""Unicron's error taxonomy (Table 1): error kind -> severity -> action, and detection time.

Example::

    >>> from unicron_plan.faults import severity
    >>> severity.classify("ecc_error").action
    <Action.RECONFIGURE: 'isolate_and_replan'>
    >>> severity.detection_seconds("task_hang"), severity.detection_seconds("task_hang", in_band=False)
    (60.0, 1800.0)

The constants live in :mod:`unicron_plan.faults.faultdata`, with their sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from unicron_plan.faults import faultdata


class Severity(str, Enum):
    """SEV1 is the most severe (hardware: the node leaves), SEV3 the least (transient network)."""

    SEV1 = "sev1"
    SEV2 = "sev2"
    SEV3 = "sev3"


class Action(str, Enum):
    """What Unicron does per severity (Table 1)."""

    RECONFIGURE = "isolate_and_replan"
    RESTART = "restart_process"
    REATTEMPT = "reattempt_in_place"


class Detection(str, Enum):
    """How an error is noticed in band (Table 1); the alternative is the NCCL timeout."""

    NODE_HEALTH = "node_health"
    PROCESS_SUPERVISION = "process_supervision"
    EXCEPTION_PROPAGATION = "exception_propagation"
    STATISTICAL_MONITORING = "statistical_monitoring"


ACTION_OF: dict[Severity, Action] = {
    Severity.SEV1: Action.RECONFIGURE,
    Severity.SEV2: Action.RESTART,
    Severity.SEV3: Action.REATTEMPT,
}


@dataclass(frozen=True)
class ErrorClass:
    """One error kind with its severity, action and in-band detection method."""

    error: str
    severity: Severity
    action: Action
    detection: Detection


def error_kinds() -> list[str]:
    """Every error kind of the taxonomy, in Table 1 order."""
    return list(faultdata.ERROR_TAXONOMY)


def classify(error: str) -> ErrorClass:
    """The severity, action and detection method of ``error``; ValueError lists the known kinds."""
    try:
        sev, method = faultdata.ERROR_TAXONOMY[error]
    except KeyError:
        raise ValueError(f"unknown error kind {error!r}; known: {', '.join(error_kinds())}") from None
    severity = Severity(sev)
    return ErrorClass(error, severity, ACTION_OF[severity], Detection(method))


def detection_seconds(error: str, in_band: bool = True) -> float:
    """Seconds from the error to its detection: in band per method, else the NCCL timeout."""
    if not in_band:
        return faultdata.NCCL_TIMEOUT_SECONDS
    return faultdata.IN_BAND_DETECTION_SECONDS[classify(error).detection.value]


def errors_of(severity: Severity | str) -> list[str]:
    """Error kinds of one severity."""
    sev = Severity(severity)
    return [e for e, (s, _) in faultdata.ERROR_TAXONOMY.items() if s == sev.value]


def figure1_severity_mix() -> dict[str, float]:
    """Share of each severity among the failures of Unicron's Figure 1 (NCCL timeouts left out)."""
    totals = {s.value: sum(faultdata.FIGURE1_PERCENT[e] for e in errors_of(s)) for s in Severity}
    whole = sum(totals.values())
    return {s: v / whole for s, v in totals.items()}


def draw_error(rng: np.random.Generator, severity: Severity | str) -> str:
    """An error kind of ``severity``, drawn with Figure 1's frequencies."""
    kinds = errors_of(severity)
    weights = np.array([faultdata.FIGURE1_PERCENT[e] for e in kinds], dtype=float)
    return kinds[int(rng.choice(len(kinds), p=weights / weights.sum()))]
