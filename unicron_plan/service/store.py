"""The append-only log in SQLite (WAL, synchronous commits): every change is one row.

Rows are ``(revision, type, at, body)``; ``revision`` is the row's place in the
log, given by the single writer. Idempotency keys map to the first answer, written in the same
transaction as the change they answered, so a retry never records twice.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sqlite3
import stat
import threading
from datetime import datetime, timezone
from pathlib import Path

from unicron_plan.errors import InvalidInstanceError

#: Files of the state directory: the log, SQLite's companions, the lock of `serve`.
STATE_FILES = ("state.sqlite3", "state.sqlite3-wal", "state.sqlite3-shm", "serve.lock")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS log (
  revision INTEGER PRIMARY KEY,
  type TEXT NOT NULL,
  at TEXT NOT NULL,
  body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency (
  key TEXT PRIMARY KEY,
  response TEXT NOT NULL,
  digest TEXT
);
"""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --------------------------------------------------------------------------- state directory
def prepare_state_dir(directory: str | Path) -> Path:
    """Create the state directory (0700) or check an existing one.

    Every state file is checked before anything is changed: a symbolic link, a file that is not
    regular or one with another hard link is refused. Then the directory is made 0700 when it is
    ours (new, empty, or holding ``state.sqlite3``); any other directory that others may write
    (a shared ``/tmp``, a non-empty 0777 one) is refused, never changed (docs/security.md)."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise InvalidInstanceError("--state", f"{d}: exists and is not a directory")
    fresh = not d.exists()
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInstanceError("--state", f"{d}: cannot create: {exc.strerror}") from None
    for name in STATE_FILES:
        p = d / name
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise InvalidInstanceError("--state", f"{p}: is a symbolic link; refused")
        if not stat.S_ISREG(st.st_mode):
            raise InvalidInstanceError("--state", f"{p}: not a regular file")
        if st.st_nlink > 1:
            raise InvalidInstanceError("--state", f"{p}: has {st.st_nlink} hard links; refused")
    if fresh or (d / "state.sqlite3").exists() or not any(d.iterdir()):
        os.chmod(d, 0o700)  # only our own directory (never, say, a shared /tmp passed by mistake)
    elif os.stat(d).st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InvalidInstanceError("--state", f"{d}: others may write in it (mode {os.stat(d).st_mode & 0o7777:04o}) "
                                              "and it holds other files: give a directory of its own")
    return d


def create_private(path: Path) -> None:
    """Create ``path`` 0600 without following a symbolic link (or make an existing file 0600)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InvalidInstanceError("--state", f"{path}: is a symbolic link; refused") from None
        raise InvalidInstanceError("--state", f"{path}: cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidInstanceError("--state", f"{path}: not a regular file")
        if st.st_nlink > 1:  # before any chmod: the mode is the other name's too
            raise InvalidInstanceError("--state", f"{path}: has {st.st_nlink} hard links; refused")
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


class StateLock:
    """An exclusive ``flock`` on ``DIR/serve.lock`` holding the owner's pid, for the process's life."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / "serve.lock"
        create_private(self.path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self.fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(self.fd)
            raise InvalidInstanceError(
                "--state", f"{directory} is in use by another `unicron-plan serve` (pid {holder})") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing drops the flock
            self.fd = -1


class Store:
    """One SQLite file in the state directory; writers are serialised by the caller."""

    def __init__(self, directory: str | Path):
        d = prepare_state_dir(directory)
        self.path = d / "state.sqlite3"
        create_private(self.path)  # 0600; SQLite gives its -wal and -shm files the same mode
        self._local = threading.local()
        try:
            self._write = self._connect()
            self._write.executescript(_SCHEMA)
            cols = {row[1] for row in self._write.execute("PRAGMA table_info(idempotency)")}
            if "digest" not in cols:  # a log written before keys kept their body's digest
                self._write.execute("ALTER TABLE idempotency ADD COLUMN digest TEXT")
            self._write.execute("SELECT COUNT(*) FROM log").fetchone()
        except sqlite3.DatabaseError as exc:
            raise InvalidInstanceError("--state", f"{self.path}: not a state database ({exc})") from None
        for name in STATE_FILES[1:3]:
            if (d / name).exists():
                create_private(d / name)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")  # a commit is on disk before the reply is sent
        conn.execute("PRAGMA busy_timeout=10000")
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    def last_revision(self) -> int:
        row = self._write.execute("SELECT MAX(revision) FROM log").fetchone()
        return int(row[0] or 0)

    def append(self, rows: list[tuple[int, str, dict]], idempotency: tuple[str, dict, str] | None = None) -> None:
        """Append ``(revision, type, body)`` rows (and an idempotent answer: key, answer, digest of the
        request body) in one committed transaction."""
        conn, at = self._write, _now()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT INTO log (revision, type, at, body) VALUES (?, ?, ?, ?)",
                             [(rev, kind, at, json.dumps(body, separators=(",", ":"), allow_nan=False))
                              for rev, kind, body in rows])
            if idempotency is not None:
                conn.execute("INSERT INTO idempotency (key, response, digest) VALUES (?, ?, ?)",
                             (idempotency[0], json.dumps(idempotency[1], separators=(",", ":")), idempotency[2]))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def idempotent(self, key: str) -> tuple[dict, str | None] | None:
        """(the first answer, the digest of its request body) for ``key``, or None."""
        row = self._reader().execute("SELECT response, digest FROM idempotency WHERE key = ?", (key,)).fetchone()
        return None if row is None else (json.loads(row[0]), row[1])

    def entries(self, since: int = 0, limit: int | None = None, types: tuple[str, ...] | None = None):
        """Yield ``(revision, type, at, body)`` after ``since``, in order."""
        sql, args = "SELECT revision, type, at, body FROM log WHERE revision > ?", [since]
        if types:
            sql += f" AND type IN ({','.join('?' * len(types))})"
            args += list(types)
        sql += " ORDER BY revision"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        for rev, kind, at, body in self._reader().execute(sql, args):
            yield rev, kind, at, json.loads(body)

    def get(self, revision: int, kind: str) -> dict | None:
        row = self._reader().execute("SELECT body FROM log WHERE revision = ? AND type = ?",
                                     (revision, kind)).fetchone()
        return None if row is None else json.loads(row[0])
