"""Daemon manners of `unicron-plan serve`: a stop line naming the signal, nothing left behind by a start
that fails, and usage errors of every command in one line."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest

from test_service_daemon import _start, _stop


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_line_names_the_signal(tmp_path, sig):
    proc, _, _ = _start(tmp_path / "s")
    proc.send_signal(sig)
    try:
        proc.wait(30)
    finally:
        code, rest = _stop(proc)  # (kills it if it did not stop)
    assert code == 0
    assert rest.strip().splitlines()[-1].endswith(f"unicron-plan serve: stopped on {sig.name}"), rest


def test_busy_port_leaves_no_new_state_directory(tmp_path):
    state = tmp_path / "new" / "state"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "serve", "--state", str(state),
                            "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "already in use" in r.stderr
    assert not (tmp_path / "new").exists()


def test_busy_port_leaves_an_existing_state_directory_as_it_was(tmp_path):
    state = tmp_path / "s"
    state.mkdir()
    (state / "keep.txt").write_text("x")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "serve", "--state", str(state),
                            "--port", str(busy.getsockname()[1])], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert (state / "keep.txt").read_text() == "x"


@pytest.mark.parametrize("args,line", [
    (["serve"], "error: Missing option '--state'. (see 'unicron-plan serve --help')"),
    (["validate"], "error: Missing argument 'instance'. (see 'unicron-plan validate --help')"),
    (["nosuchcommand"], "error: No such command 'nosuchcommand'. (see 'unicron-plan --help')"),
])
def test_usage_errors_are_one_line_exit_2(args, line, capsys, monkeypatch):
    from unicron_plan.cli import main

    with pytest.raises(SystemExit) as exc:  # the console script's own entry point, in this process
        # (not `solve`: its process ends at once, with os._exit)
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() == line
