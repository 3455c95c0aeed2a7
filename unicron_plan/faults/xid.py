"""Node-level error sources: the NVIDIA driver's Xid lines in the kernel log, and DCGM's health check.

Standard library only. The catalogue maps the Xid codes a training cluster acts on to the
signal kinds of :mod:`unicron_plan.faults.signals`, after NVIDIA's "Xid Errors" documentation
and its Xid catalogue (docs/detection.md, "Node-level sources", gives each row's source).
Example::

    >>> ev = parse_kernel_line("kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=2211, GPU has fallen off the bus.")
    >>> ev.code, ev.pci, ev.kind
    (79, '0000:3b:00', 'gpu_driver_error')
"""

from __future__ import annotations

import calendar
import json
import re
import time
from dataclasses import dataclass
from typing import Iterable, Iterator

#: Xid code -> (NVIDIA's name for it, signal kind).
XID_CATALOGUE: dict[int, tuple[str, str]] = {
    13: ("Graphics Engine Exception", "cuda_error"),
    31: ("GPU memory page fault", "illegal_memory_access"),
    43: ("GPU stopped processing", "cuda_error"),
    45: ("Preemptive cleanup, due to previous errors", "other_software_error"),
    48: ("Double Bit ECC Error", "ecc_error"),
    61: ("Internal micro-controller breakpoint/warning", "gpu_driver_error"),
    62: ("Internal micro-controller halt", "gpu_driver_error"),
    63: ("ECC page retirement or row remapping recording event", "ecc_error"),
    64: ("ECC page retirement or row remapper recording failure", "ecc_error"),
    74: ("NVLINK Error", "nvlink_error"),
    79: ("GPU has fallen off the bus", "gpu_driver_error"),
    94: ("Contained ECC error", "ecc_error"),
    95: ("Uncontained ECC error", "ecc_error"),
    119: ("GSP RPC Timeout", "gpu_driver_error"),
    120: ("GSP Error", "gpu_driver_error"),
}
#: The kind of a code the catalogue above does not list: a driver-reported GPU error.
UNLISTED_KIND = "gpu_driver_error"

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=2211, name=python, GPU has fallen off the bus."
# older drivers: "NVRM: Xid (0000:03:00): 14, Channel 00000001"
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): "
                  r"(?P<code>\d{1,4}),\s*(?P<rest>.*)")
# "NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus." / "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."
_OFF_BUS = re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
                      r":? .*has fallen off the bus")
_PID = re.compile(r"pid=(\d+)")
#: Longest kernel line read (longer ones are cut): bounded work per line.
MAX_LINE = 4096


@dataclass(frozen=True)
class XidEvent:
    """One Xid the driver logged: the GPU's PCI address, the code, the process if named, the kind."""

    pci: str
    code: int
    pid: int | None
    kind: str
    name: str
    line: str
    #: When the line says it was logged (seconds since the epoch), None when it carries no readable time.
    time: float | None = None


def kind_of_xid(code: int) -> str:
    """The signal kind of an Xid code (catalogue above; unlisted codes are driver errors)."""
    return XID_CATALOGUE.get(code, ("", UNLISTED_KIND))[1]


def parse_kernel_line(line: str, now: float | None = None, boot: float | None = None) -> XidEvent | None:
    """The Xid event of one kernel log line (dmesg, ``journalctl -k`` or syslog prefix), or None.
    Its ``time`` is read from the prefix (:func:`line_time`; ``now`` and ``boot`` as there)."""
    line = line[:MAX_LINE].rstrip("\n")
    m = _XID.search(line)
    if m:
        code = int(m.group("code"))
        pid = _PID.search(m.group("rest"))
        name = XID_CATALOGUE.get(code, ("unlisted Xid",))[0]
        return XidEvent(m.group("pci").lower(), code, int(pid.group(1)) if pid else None, kind_of_xid(code), name,
                        line, line_time(line, now, boot))
    m = _OFF_BUS.search(line)
    if m:
        return XidEvent(m.group("pci").lower(), 79, None, kind_of_xid(79), XID_CATALOGUE[79][0], line,
                        line_time(line, now, boot))
    return None


def read_kernel_log(lines: Iterable[str], max_lines: int = 1_000_000) -> Iterator[XidEvent]:
    """The Xid events of a kernel log, in order (at most ``max_lines`` lines are read)."""
    now, boot = time.time(), boot_time()
    for k, line in enumerate(lines):
        if k >= max_lines:
            return
        ev = parse_kernel_line(line, now, boot)
        if ev is not None:
            yield ev


# --------------------------------------------------------------------------- the time of a line
_MONTHS = {m: k for k, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                        "Dec"), 1)}
# journalctl -o short-iso / short-iso-precise, RFC 5424 syslog: "2026-12-07T04:00:00.123456+00:00 host kernel: ..."
_ISO = re.compile(r"\s*(?:<\d{1,3}>\d?\s*)?(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"
                  r"(Z|[+-]\d{2}:?\d{2})?(?=\s)")
# journalctl -o short / short-precise, RFC 3164 syslog: "Dec 07 04:00:00[.123456] host kernel: ..." (no year)
_SYSLOG = re.compile(r"\s*(?:<\d{1,3}>)?([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?=\s)")
# dmesg -T: "[Mon Dec  7 04:00:00 2026] NVRM: ..."
_DMESG_T = re.compile(r"\s*(?:<\d{1,3}>)?\[\s*[A-Z][a-z]{2} ([A-Z][a-z]{2}) +(\d{1,2}) "
                      r"(\d{2}):(\d{2}):(\d{2}) (\d{4})\]")
# dmesg: "[ 1021.402335] NVRM: ..." (seconds since boot)
_DMESG = re.compile(r"\s*(?:<\d{1,3}>)?\[\s*(\d{1,10}(?:\.\d{1,9})?)\]")


def boot_time() -> float | None:
    """When this machine booted (seconds since the epoch, from /proc/uptime), or None."""
    try:
        with open("/proc/uptime", encoding="ascii") as fh:
            return time.time() - float(fh.read(64).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _clock_ok(day: int, h: int, m: int, s: int) -> bool:
    """A day of a month and a time of day as a log prints them (a leap second allowed)."""
    return 1 <= day <= 31 and h < 24 and m < 60 and s < 61


def _local(year: int, month: int, day: int, h: int, m: int, s: int) -> float | None:
    try:
        return time.mktime((year, month, day, h, m, s, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def line_time(line: str, now: float | None = None, boot: float | None = None) -> float | None:
    """When a kernel log line says it was logged, in seconds since the epoch, or None when its prefix
    carries no time this reads: ISO 8601 (``journalctl -o short-iso``; without a zone, local time),
    ``Dec 07 04:00:00`` (``journalctl -o short``, syslog: local time, the year the latest that is not
    more than a day after ``now``), ``dmesg -T``'s ``[Mon Dec  7 04:00:00 2026]``, or dmesg's seconds
    since ``boot`` (``[ 1021.402335]``; without ``boot``, None)."""
    line = line[:MAX_LINE]
    m = _ISO.match(line)
    if m:
        y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
        frac = float("0." + m.group(7)) if m.group(7) else 0.0
        zone = m.group(8)
        if not (1 <= mo <= 12 and _clock_ok(d, h, mi, sec)):
            return None
        if zone is None:
            t = _local(y, mo, d, h, mi, sec)
            return None if t is None else t + frac
        offset = 0
        if zone != "Z":
            z = zone.replace(":", "")
            offset = (1 if z[0] == "+" else -1) * (int(z[1:3]) * 3600 + int(z[3:5]) * 60)
        return calendar.timegm((y, mo, d, h, mi, sec, 0, 0, 0)) - offset + frac
    m = _SYSLOG.match(line)
    if m and m.group(1) in _MONTHS:
        mo, d, h, mi, sec = _MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5))
        if not _clock_ok(d, h, mi, sec):
            return None
        frac = float("0." + m.group(6)) if m.group(6) else 0.0
        now = time.time() if now is None else now
        year = time.localtime(now).tm_year
        t = _local(year, mo, d, h, mi, sec)
        if t is not None and t > now + 86400:  # a December line read in January
            t = _local(year - 1, mo, d, h, mi, sec)
        return None if t is None else t + frac
    m = _DMESG_T.match(line)
    if m and m.group(1) in _MONTHS:
        d, h, mi, sec = int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5))
        if not _clock_ok(d, h, mi, sec):
            return None
        return _local(int(m.group(6)), _MONTHS[m.group(1)], d, h, mi, sec)
    m = _DMESG.match(line)
    if m and boot is not None:
        return boot + float(m.group(1))
    return None


# --------------------------------------------------------------------------- DCGM
#: DCGM health-watch system -> signal kind (DCGM's health systems; docs/detection.md).
DCGM_SYSTEMS = {
    "pcie": "gpu_driver_error", "memory": "ecc_error", "nvlink": "nvlink_error", "nvswitch": "nvlink_error",
    "inforom": "gpu_driver_error", "driver": "gpu_driver_error", "sm": "cuda_error", "thermal": "other_software_error",
    "power": "other_software_error", "pmu": "gpu_driver_error", "mcu": "gpu_driver_error",
}
_BAD = ("fail", "warn")
#: Deepest DCGM document walked, and most entries read: bounded work on any input.
MAX_DEPTH, MAX_NODES = 16, 100_000


@dataclass(frozen=True)
class DcgmFinding:
    """One unhealthy system of one GPU in ``dcgmi health -c -j`` output."""

    gpu: str
    system: str
    health: str
    kind: str
    message: str


def parse_dcgmi_health(text: str) -> list[DcgmFinding]:
    """The failures and warnings of ``dcgmi health -c -j`` output (a JSON tree of ``children``
    objects holding ``value`` leaves: entity group, GPU id, system, ``Health`` and ``Error``).

    Walks the tree generically, so that DCGM's nesting may vary between versions; a
    system named under a GPU with a ``Health`` of Failure or Warning is one finding."""
    doc = json.loads(text)
    found: list[DcgmFinding] = []
    budget = [MAX_NODES]

    def value(node) -> str:
        return str(node.get("value", "")) if isinstance(node, dict) else str(node)

    def walk(node, path: tuple[str, ...], depth: int) -> None:
        if depth > MAX_DEPTH or not isinstance(node, dict):
            return
        entries = {k: v for k, v in node.items() if k != "children"}
        kids = node.get("children")
        if isinstance(kids, dict):
            entries.update(kids)
        budget[0] -= len(entries)
        if budget[0] < 0:
            return
        health = next((v for k, v in entries.items() if str(k).lower() == "health"), None)
        system = path[-1].lower() if path else ""
        if health is not None and system in DCGM_SYSTEMS and any(b in value(health).lower() for b in _BAD):
            gpu = next((p for p in reversed(path[:-1]) if p.isdigit()), "")
            found.append(DcgmFinding(gpu, system, value(health), DCGM_SYSTEMS[system], _errors(entries)))
        for key, child in entries.items():
            if str(key).lower() != "health" and isinstance(child, dict):
                walk(child, path + (str(key),), depth + 1)

    walk(doc, (), 0)
    return found


def _errors(node: dict) -> str:
    """The error messages DCGM gives for one system (``Error``/``Errors`` values), joined."""
    out = []
    for key, child in node.items():
        if key.lower().startswith("error"):
            out.append(child.get("value", "") if isinstance(child, dict) else str(child))
            if isinstance(child, dict):
                out += [str(c.get("value", "")) for c in (child.get("children") or {}).values() if isinstance(c, dict)]
    return "; ".join(x for x in out if x)[:MAX_LINE]
