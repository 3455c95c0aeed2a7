"""The live classification of in-band signals: signal kind -> severity -> action (docs/detection.md).

Standard library only (training processes import it through :mod:`unicron_plan.watch`).
The kinds of Unicron's Table 1 keep the names, severities and detection methods of
:data:`unicron_plan.faults.faultdata.ERROR_TAXONOMY`; the few kinds the paper does not
name are added here, each marked with its source. Example::

    >>> classify_text("RuntimeError: CUDA error: an illegal memory access was encountered")
    'illegal_memory_access'
    >>> CLASSES["ecc_error"].severity, CLASSES["ecc_error"].action
    ('SEV1', 'reconfigure')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from unicron_plan.faults import faultdata

#: Action per severity (Unicron Table 1: SEV1 reconfigure the cluster, SEV2 restart, SEV3 reattempt).
ACTION_OF = {"SEV1": "reconfigure", "SEV2": "restart", "SEV3": "reattempt"}


@dataclass(frozen=True)
class SignalClass:
    """One kind of signal: its severity, the action it calls for, how it is detected and the source."""

    kind: str
    severity: str
    action: str
    detection: str
    source: str


_TABLE1 = "Unicron Table 1 (docs/data/failures.md)"
#: Kinds the paper's Table 1 does not name: (severity, detection method, source).
_EXTRA = {
    # the paper's Figure 1 lists it as its own ending; one secondary source labels it SEV3, and Table 1
    # says its causes are caught earlier by the other methods: a reattempt that escalates on a repeat
    "nccl_timeout": ("SEV3", "exception_propagation", "Unicron Figure 1; SEV3 after one secondary source "
                                                      "(docs/detection.md)"),
    "out_of_memory": ("SEV2", "exception_propagation", "ASSUMPTION: a software error (Table 1's "
                                                       "other software errors)"),
}

CLASSES: dict[str, SignalClass] = {
    **{kind: SignalClass(kind, sev.upper(), ACTION_OF[sev.upper()], method, _TABLE1)
       for kind, (sev, method) in faultdata.ERROR_TAXONOMY.items()},
    **{kind: SignalClass(kind, sev, ACTION_OF[sev], method, source) for kind, (sev, method, source) in _EXTRA.items()},
}

#: The other kinds a reporter sends: heartbeats and a rank's clean end (no severity).
PROGRESS_KINDS = ("heartbeat", "closed")

# Text -> kind, first match wins: the more specific patterns come first. Each is written from the
# message the library or driver prints (docs/detection.md, "Which text means what").
_PATTERNS: list[tuple[str, str]] = [
    (r"\bXid\b", "xid"),  # resolved by NVIDIA's Xid catalogue (faults/xid.py)
    (r"uncorrectable ECC|ECC error|double[- ]bit ECC|\bDBE\b", "ecc_error"),
    (r"NVLink|NVLINK", "nvlink_error"),
    (r"DMA mapping|dma_map|IOMMU fault|DMAR", "invalid_dma_mapping"),
    (r"illegal memory access|an illegal instruction|misaligned address|out of bounds", "illegal_memory_access"),
    (r"CUDA out of memory|out of memory|OutOfMemoryError|cudaErrorMemoryAllocation", "out_of_memory"),
    (r"driver version is insufficient|CUDA driver|NVRM|no CUDA-capable device|GPU has fallen off the bus|"
     r"cudaErrorNoDevice|unknown error.*CUDA|CUDA.*unknown error", "gpu_driver_error"),
    (r"Watchdog caught collective operation timeout|NCCL.*[Tt]imeout|[Tt]imed out.*NCCL|ProcessGroupNCCL.*timeout",
     "nccl_timeout"),
    (r"CUDA error|cudaError|CUBLAS_STATUS|CUDNN_STATUS|cuda runtime error", "cuda_error"),
    (r"Connection refused|ECONNREFUSED|ConnectionRefusedError", "connection_refused"),
    (r"Connection reset|ECONNRESET|ConnectionResetError|Broken pipe", "connection_reset"),
    (r"link (is )?(down|flap)|port state.*(DOWN|INIT)|ibv_poll_cq|IBV_WC_RETRY_EXC_ERR", "link_flapping"),
    (r"NCCL WARN|NCCL error|ncclSystemError|ncclRemoteError|ncclInternalError|unhandled system error|"
     r"Gloo.*(error|closed)|Network is unreachable|No route to host|socket", "other_network_error"),
]
_COMPILED = [(re.compile(p), kind) for p, kind in _PATTERNS]
#: Longest text a classification reads (a line of a log, an exception's message): bounded work.
MAX_TEXT = 4096


_XID_CODE = re.compile(r"\bXid\s*:?\s*(\d{1,4})\b")  # "Xid 79" in a message (the driver's line: faults/xid.py)


def classify_text(text: str) -> str | None:
    """The kind a message names (an Xid by its code), or None when it names none."""
    from unicron_plan.faults.xid import UNLISTED_KIND, kind_of_xid, parse_kernel_line

    text = text[:MAX_TEXT]
    for pattern, kind in _COMPILED:
        if pattern.search(text):
            if kind == "xid":
                line = parse_kernel_line(text)
                if line is not None:
                    return line.kind
                code = _XID_CODE.search(text)
                return kind_of_xid(int(code.group(1))) if code else UNLISTED_KIND
            return kind
    return None


def classify_exception(exc: BaseException) -> str:
    """The kind of an exception escaping a training step, from its type and message."""
    name = type(exc).__name__
    text = f"{name}: {exc}"
    kind = classify_text(text)
    if kind is not None:
        return kind
    if isinstance(exc, ConnectionRefusedError):
        return "connection_refused"
    if isinstance(exc, ConnectionResetError):
        return "connection_reset"
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return "other_network_error"
    if isinstance(exc, MemoryError):
        return "out_of_memory"
    return "other_software_error"
