"""Start `unicron-plan serve` as a real process on a free loopback port (tests and benchmarks)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``with Server(state_dir) as srv:`` runs the service until the block ends (or :meth:`kill`)."""

    def __init__(self, state_dir: Path, *args: str, token: str | None = None):
        self.state_dir = Path(state_dir)
        self.args = list(args)
        self.token = token
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout: float = 60.0) -> "Server":
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "unicron_plan.cli", "serve", "--state", str(self.state_dir),
               "--port", str(port), *self.args]
        if self.token:
            tf = self.state_dir.parent / f"token-{port}"
            tf.write_text(self.token + "\n")
            cmd += ["--token-file", str(tf)]
        # the log goes to a file: an unread pipe would fill up with access-log lines and stall the server
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited: {self.log_text()}")
                try:
                    if httpx.get(self.url + "/healthz", headers=headers, timeout=1).status_code == 200:
                        return self
                except httpx.HTTPError:
                    time.sleep(0.05)
            raise RuntimeError("server did not start")
        except BaseException:  # never leave the process behind (an interrupt included)
            self.stop()
            raise

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_text(self) -> str:
        """What the server wrote on stderr so far."""
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
