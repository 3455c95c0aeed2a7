"""The append-only log in SQLite (WAL, synchronous commits): every change is one row.

Rows are ``(revision, type, at, body)``; ``revision`` is the row's place in the
log, given by the single writer. Idempotency keys map to the first answer, written in the same
transaction as the change they answered, so a retry never records twice.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS log (
  revision INTEGER PRIMARY KEY,
  type TEXT NOT NULL,
  at TEXT NOT NULL,
  body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency (
  key TEXT PRIMARY KEY,
  response TEXT NOT NULL
);
"""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Store:
    """One SQLite file in the state directory; writers are serialised by the caller."""

    def __init__(self, directory: str | Path):
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.path = d / "state.sqlite3"
        self._local = threading.local()
        self._write = self._connect()
        self._write.executescript(_SCHEMA)

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

    def append(self, rows: list[tuple[int, str, dict]], idempotency: tuple[str, dict] | None = None) -> None:
        """Append ``(revision, type, body)`` rows (and an idempotent answer) in one committed transaction."""
        conn, at = self._write, _now()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT INTO log (revision, type, at, body) VALUES (?, ?, ?, ?)",
                             [(rev, kind, at, json.dumps(body, separators=(",", ":"), allow_nan=False))
                              for rev, kind, body in rows])
            if idempotency is not None:
                conn.execute("INSERT INTO idempotency (key, response) VALUES (?, ?)",
                             (idempotency[0], json.dumps(idempotency[1], separators=(",", ":"))))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def idempotent(self, key: str) -> dict | None:
        row = self._reader().execute("SELECT response FROM idempotency WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

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
