"""In-band reporting for training processes: heartbeats, exceptions and exits (docs/detection.md).

Standard library only, so a training script can import it beside any framework::

    from unicron_plan.watch import Watch

    with Watch("http://coordinator:8470", job="1234", rank=rank, token_file="/etc/unicron/token") as w:
        for batch in loader:
            train_step(batch)
            w.step()          # a heartbeat with the iteration's duration

An exception that escapes the block is classified from its type and message
(:func:`unicron_plan.faults.signals.classify_exception`), reported, and re-raised; leaving
the block normally closes the watch (a rank that ends is not a hang).

Reporting never blocks or crashes training: :meth:`Watch.step` only updates counters and
wakes a background thread; the thread sends, each request bounded in time; reports that
cannot be sent (a full queue, the coordinator down) are counted in :attr:`Watch.lost` and
logged; after a failed send the thread waits before it tries again (doubling up to
``MAX_BACKOFF`` seconds) and drops heartbeats meanwhile.
"""

from __future__ import annotations

import collections
import http.client
import json
import logging
import os
import socket
import threading
import time
import urllib.parse

from unicron_plan.faults.signals import MAX_TEXT, classify_exception

log = logging.getLogger("unicron_plan.watch")

#: Longest a send may take (connect and answer), seconds.
SEND_TIMEOUT = 2.0
#: Heartbeats are sent this often (the steps between are summed into one).
HEARTBEAT_INTERVAL = 0.5
#: Most error reports held while they wait to be sent; more are dropped and counted.
QUEUE_SIZE = 256
#: Longest wait between attempts while the coordinator cannot be reached.
MAX_BACKOFF = 30.0
#: Longest :meth:`Watch.report` and :meth:`Watch.close` wait for their report to be sent.
FLUSH_SECONDS = 3.0


def _read_token(token_file: str | None) -> str | None:
    if token_file is None:
        return None
    with open(token_file, encoding="utf-8") as fh:
        return fh.read(4096).strip()


class Watch:
    """Reports one rank of one job to the coordinator at ``coordinator`` (``http://host:port``).

    ``node``: the cluster's node id (default ``$SLURMD_NODENAME``, else the host name);
    ``token_file``: the coordinator's bearer token, read once.
    """

    def __init__(self, coordinator: str, job: str | None, rank: int, node: str | None = None,
                 token_file: str | None = None, timeout: float = SEND_TIMEOUT,
                 heartbeat_interval: float = HEARTBEAT_INTERVAL, queue_size: int = QUEUE_SIZE):
        url = urllib.parse.urlsplit(coordinator)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"coordinator: {coordinator!r} is not an http(s)://host:port URL")
        self._url = url
        self._path = (url.path.rstrip("/") or "") + "/v1/signals"
        self.job, self.rank = (None if job is None else str(job)), int(rank)
        self.node = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        token = _read_token(token_file)
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self.timeout, self.interval = float(timeout), float(heartbeat_interval)
        self.steps = 0          # steps taken
        self.sent = 0           # reports delivered
        self.lost = 0           # reports dropped (queue full, send failed)
        self._reported_steps = 0
        self._step_seconds = 0.0  # iteration time summed since the last heartbeat sent
        self._last = time.monotonic()
        self._queue: collections.deque = collections.deque(maxlen=queue_size)
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._closing = False
        self._retry_at = 0.0
        self._backoff = 0.0
        self._conn = None
        self._thread = threading.Thread(target=self._run, name=f"unicron-watch-{self.rank}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the training side
    def step(self) -> None:
        """Mark the end of one iteration (microseconds: two counters; the sender reads them)."""
        now = time.monotonic()
        self._step_seconds += now - self._last
        self._last = now
        self.steps += 1

    def report(self, kind: str, evidence: str = "", wait: bool = True, **fields) -> None:
        """Queue a report of ``kind`` (e.g. ``cuda_error``) with its evidence; with ``wait``, give the
        sender up to FLUSH_SECONDS to deliver it (the process is usually about to end)."""
        item = {"job": self.job, "rank": self.rank, "node": self.node, "kind": kind,
                "evidence": evidence[:MAX_TEXT], "step": self.steps, **fields}
        if not self._thread.is_alive():
            self._lose(1, "the watch is closed")
            return
        if len(self._queue) == self._queue.maxlen:
            self._lose(1, "queue full")
        self._queue.append(item)
        self._wake.set()
        if wait:
            self._flush(FLUSH_SECONDS)

    def close(self) -> None:
        """A clean end: report it (the coordinator stops expecting heartbeats) and stop the sender."""
        if self._closing:
            return
        self.report("closed", wait=False)
        self._flush(FLUSH_SECONDS)
        self.stop()

    def stop(self) -> None:
        """Stop the sender after what it holds is sent (once; at most one send's time)."""
        self._closing = True
        self._wake.set()
        self._thread.join(self.timeout + 1.0)

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None and isinstance(exc, Exception):
            self.report(classify_exception(exc), f"{type(exc).__name__}: {exc}", source="exception")
            self.stop()
        else:
            self.close()
        return False  # never swallows the exception

    # ------------------------------------------------------------------ the sender thread
    def _flush(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        with self._idle:
            while self._queue and time.monotonic() < deadline and self._thread.is_alive():
                if self._retry_at > time.monotonic():
                    break  # the coordinator is down: do not wait for it
                self._idle.wait(min(0.05, max(0.0, deadline - time.monotonic())))

    def _lose(self, count: int, why: str) -> None:
        if count <= 0:
            return
        self.lost += count
        if self.lost == count or self.lost % 100 < count:  # the first loss, then every 100th
            log.warning("unicron watch: %d report(s) of job %s rank %d not sent so far (%s)",
                        self.lost, self.job, self.rank, why)

    def _batch(self) -> list[dict]:
        items = []
        while self._queue and len(items) < 64:
            items.append(self._queue.popleft())
        if self.steps > self._reported_steps:
            count = self.steps - self._reported_steps
            items.append({"job": self.job, "rank": self.rank, "node": self.node, "kind": "heartbeat",
                          "step": self.steps, "iteration_seconds": self._step_seconds / count})
            self._reported_steps = self.steps
            self._step_seconds = 0.0
        return items

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval)  # woken at once by a report, else every interval
            self._wake.clear()
            now = time.monotonic()
            if now < self._retry_at:  # the coordinator is down: heartbeats are dropped, errors kept
                if self.steps > self._reported_steps:
                    self._reported_steps = self.steps
                    self._step_seconds = 0.0
                    self._lose(1, "coordinator unreachable")
                if self._closing:
                    self._lose(len(self._queue), "coordinator unreachable at the end")
                    break
                continue
            batch = self._batch()
            if batch:
                self._send(batch)
            with self._idle:
                self._idle.notify_all()
            if self._closing and not self._queue:
                break
        self._close_conn()
        with self._idle:
            self._idle.notify_all()

    def _send(self, batch: list[dict]) -> None:
        body = json.dumps({"signals": batch}, separators=(",", ":"))
        try:
            conn = self._connection()
            conn.request("POST", self._path, body=body, headers=self._headers)
            resp = conn.getresponse()
            answer = resp.read(65536)
            if resp.status >= 400:
                raise OSError(f"HTTP {resp.status}: {answer[:200].decode('utf-8', 'replace')}")
        except (OSError, http.client.HTTPException) as exc:
            self._close_conn()
            self._backoff = min(MAX_BACKOFF, max(0.5, self._backoff * 2))
            self._retry_at = time.monotonic() + self._backoff
            errors = [b for b in batch if b["kind"] != "heartbeat"]
            for item in reversed(errors):  # errors wait for the next attempt (if there is room)
                if len(self._queue) < self._queue.maxlen:
                    self._queue.appendleft(item)
                else:
                    self._lose(1, "queue full")
            self._lose(len(batch) - len(errors), f"{type(exc).__name__}: {exc}")
            return
        self._backoff = 0.0
        self._retry_at = 0.0
        self.sent += len(batch)

    def _connection(self):
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._url.scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self._url.hostname, self._url.port, timeout=self.timeout)
        return self._conn

    def _close_conn(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
            self._conn = None

    @classmethod
    def from_env(cls, **overrides) -> "Watch":
        """A watch configured from the environment: ``UNICRON_COORDINATOR``, ``UNICRON_TOKEN_FILE``, the job
        from ``SLURM_JOB_ID``, the rank from ``RANK`` (torchrun), ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK`` or
        ``SLURM_PROCID``, the node from ``SLURMD_NODENAME``."""
        given = {k: v for k, v in overrides.items() if v is not None}
        env = environment(rank="rank" not in given)
        env.update(given)
        missing = [k for k in ("coordinator", "job", "rank") if env.get(k) is None]
        if missing:
            raise ValueError(f"{', '.join(missing)}: not given and not in the environment "
                             "(UNICRON_COORDINATOR, SLURM_JOB_ID, SLURM_PROCID)")
        return cls(**env)


def environment(rank: bool = True) -> dict:
    """The watch's settings found in the environment (absent ones are None; ``rank=False``: the
    rank is not read). ValueError when the rank's variable holds no rank."""
    e = os.environ
    return {"coordinator": e.get("UNICRON_COORDINATOR"), "job": e.get("SLURM_JOB_ID"),
            "rank": environment_rank() if rank else None, "node": e.get("SLURMD_NODENAME"),
            "token_file": e.get("UNICRON_TOKEN_FILE")}


#: Where the rank is found, in this order: the launcher's first (under `mpirun` inside a Slurm job
#: SLURM_PROCID is that of mpirun's daemon).
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")


def environment_rank() -> int | None:
    """The rank found in the environment (RANK_VARIABLES), or None; ValueError naming the variable
    when its value is not a rank (a non-negative integer)."""
    for name in RANK_VARIABLES:
        if name in os.environ:
            value = os.environ[name]
            text = value.strip()
            if not (text.isascii() and text.isdigit()):
                raise ValueError(f"${name}={value[:64]!r} is not a rank")
            return int(text)
    return None


#: Signals passed on to the supervised command; those in STOPPING mean "stop" (its exit is then not a failure).
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT")
STOPPING = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
#: At most this many stderr lines of one run are reported (the first ones; all are passed through).
MAX_LINES_REPORTED = 20
#: Longest stderr line read at once (a longer one is passed through in pieces).
MAX_LINE = 65536


def supervise(argv: list[str], watch: Watch) -> int:
    """Run ``argv``, passing its output through unchanged; report the error lines of its stderr
    (those :func:`unicron_plan.faults.signals.classify_text` names) and an abnormal exit. The exit
    status is the command's (128 + the signal when a signal ended it)."""
    import errno
    import signal
    import subprocess
    import sys

    from unicron_plan.faults.signals import classify_text

    try:
        child = subprocess.Popen(argv, stderr=subprocess.PIPE)
    except OSError as exc:  # the shell's convention: 127 not found, 126 found but not runnable
        code = 127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126
        why = exc.strerror or type(exc).__name__
        try:
            sys.stderr.write(f"unicron-plan watch: {argv[0]}: {why}\n")
            sys.stderr.flush()
        except OSError:
            pass
        watch.report("exited_abnormally", f"{argv[0]} could not be run: {why}", exit_code=code, source="exit")
        watch.stop()
        return code
    stopped = []

    def forward(signum, frame):
        if signal.Signals(signum).name in STOPPING:
            stopped.append(signum)
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    old = {}
    for name in FORWARDED:
        signum = getattr(signal, name)
        old[signum] = signal.signal(signum, forward)
    reported = 0
    out = sys.stderr.buffer
    try:
        for raw in iter(lambda: child.stderr.readline(MAX_LINE), b""):
            if out is not None:
                try:
                    out.write(raw)
                    out.flush()
                except OSError:  # our stderr is gone (its reader ended): keep supervising, drop the text
                    out = None
                    _silence_stderr()
            if reported >= MAX_LINES_REPORTED:
                continue
            line = raw.decode("utf-8", "replace").rstrip("\n")
            kind = classify_text(line)
            if kind is not None:
                watch.report(kind, line, wait=False, source="stderr")
                reported += 1
        code = child.wait()
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
    status = code if code >= 0 else 128 - code
    if code == 0 or stopped:  # a clean end, or stopped from outside (scancel, a requeue)
        watch.close()
    elif code < 0:
        watch.report("exited_abnormally", f"{argv[0]} killed by signal {-code} ({signal.Signals(-code).name})",
                     signal=-code, source="exit")
        watch.stop()
    else:
        watch.report("exited_abnormally", f"{argv[0]} exited with code {code}", exit_code=code, source="exit")
        watch.stop()
    return status


def _silence_stderr() -> None:
    """Point file descriptor 2 at /dev/null, so that later writes (logging, the exit's flush) cannot fail."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 2)
        os.close(fd)
    except OSError:
        pass


def kernel_events(lines, since: float | None = None, after: float | None = None, max_events: int = 100):
    """The Xid events of kernel log ``lines`` to report, and the newest time an Xid line read says.

    With ``since`` only the lines logged at or after it, with ``after`` only those logged later than
    it (seconds since the epoch); with either, a line whose time cannot be read is left out (its age
    is unknown: an old error reported again would isolate a repaired node). The first event of each
    GPU and kind, at most ``max_events``."""
    from unicron_plan.faults.xid import read_kernel_log

    events, seen, newest = [], set(), None
    for ev in read_kernel_log(lines):
        if ev.time is not None and (newest is None or ev.time > newest):
            newest = ev.time
        if (since is not None or after is not None) and (
                ev.time is None or (since is not None and ev.time < since) or (after is not None and ev.time <= after)):
            continue
        if (ev.kind, ev.pci) not in seen and len(seen) < max_events:
            seen.add((ev.kind, ev.pci))
            events.append(ev)
    return events, newest


def report_node(watch: Watch, lines, dcgm_text: str | None = None, max_reports: int = 100,
                since: float | None = None, events=None) -> int:
    """Report the Xid events of kernel log ``lines`` (with ``since``, only those logged at or after it;
    or ``events`` chosen by :func:`kernel_events`) and the findings of ``dcgmi health -c -j`` output
    ``dcgm_text`` as errors of ``watch.node`` (no job: the coordinator acts on the node's jobs).
    Returns the number of reports (at most ``max_reports``; one per GPU and kind)."""
    from unicron_plan.faults.xid import parse_dcgmi_health

    seen: set = set()
    if events is None:
        events = kernel_events(lines, since=since, max_events=max_reports)[0]
    found = [(ev.kind, ev.pci, ev.line, "kernel") for ev in events]
    if dcgm_text:
        found += [(f.kind, f.gpu, f"DCGM {f.system} {f.health}: {f.message}", "dcgm")
                  for f in parse_dcgmi_health(dcgm_text)]
    for kind, gpu, evidence, source in found:
        if (kind, gpu) in seen or len(seen) >= max_reports:
            continue
        seen.add((kind, gpu))
        watch.report(kind, evidence, wait=False, source=source)
    return len(seen)


def node_heartbeat(watch: Watch, seconds: float, stop) -> None:
    """Send the node's heartbeat every ``seconds`` until ``stop`` (a threading.Event) is set: the
    coordinator calls a node silent for its threshold ``lost_connection`` (SEV1)."""
    while not stop.wait(seconds):
        watch.step()
