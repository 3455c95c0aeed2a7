"""`unicron-plan serve`: run the coordinator on uvicorn, as a daemon behaves (daemon.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

#: Seconds SIGTERM waits for requests in flight before closing their connections.
GRACEFUL_SECONDS = 30


def serve(state: Path = typer.Option(..., "--state", help="Directory of the state (SQLite log); created if missing "
                                                           "(mode 0700, files 0600); one `serve` at a time."),
          host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback unless told otherwise)."),
          port: int = typer.Option(8470, "--port", help="TCP port (0: any free port, printed at start-up)."),
          token_file: Optional[Path] = typer.Option(
              None, "--token-file", help="File holding a bearer token; every request must carry it."),
          solver: Optional[str] = typer.Option(None, "--solver", "-s", help="As for `unicron-plan solve`."),
          no_contingency: bool = typer.Option(False, "--no-contingency",
                                              help="Do not keep warm contingency plans."),
          warm_workers: Optional[int] = typer.Option(
              None, "--warm-workers", help="Worker processes that build warm contingency after an upload "
                                           "(default: the CPUs this process may run on, at most 64; fewer "
                                           "where memory is short)."),
          max_body_mib: float = typer.Option(64.0, "--max-body-mib", help="Largest request body, MiB."),
          access_log: bool = typer.Option(True, "--access-log/--no-access-log",
                                          help="Log each request (method, path, status, milliseconds) on stderr."),
          log_format: str = typer.Option("text", "--log-format", help="text or json (one object a line)."),
          allow_host: list[str] = typer.Option(
              [], "--allow-host", help="A Host name clients use besides the loopback names and the bound "
                                       "address (repeatable; e.g. the machine's name behind a reverse proxy)."),
          allow_origin: list[str] = typer.Option(
              [], "--allow-origin", help="A browser Origin admitted besides the service's own, as "
                                         "scheme://host[:port] (repeatable; e.g. a reverse proxy's)."),
          read_timeout: float = typer.Option(10.0, "--read-timeout",
                                             help="Seconds a client has to send a request's headers, and "
                                                  "then its body; slower clients are dropped."),
          parse_seconds: float = typer.Option(10.0, "--parse-seconds",
                                              help="Seconds a received body has to be parsed as JSON; longer "
                                                   "bodies are refused (a 1,048,576-GPU cluster needs more).")):
    """Serve the planning coordinator over HTTP (docs/service.md)."""
    import logging
    import signal

    from unicron_plan.extras import require

    for module in ("uvicorn", "fastapi", "prometheus_client"):
        require(module, "serve")
    import uvicorn

    from unicron_plan.errors import InvalidInstanceError
    from unicron_plan.service import daemon
    from unicron_plan.service.app import create_app
    from unicron_plan.service.store import StateLock, prepare_state_dir

    token = None
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InvalidInstanceError("--token-file", f"cannot read: {exc}") from None
        if not token:
            raise InvalidInstanceError("--token-file", "the file is empty")
    if solver is not None:
        from unicron_plan.solvers import get_solver

        get_solver(solver)  # unknown names are bad input now, not on the first event
    if not 0 <= port <= 65535:
        raise InvalidInstanceError("--port", f"{port} is outside 0..65535")
    if not (math.isfinite(max_body_mib) and 0 < max_body_mib <= 4096):
        raise InvalidInstanceError("--max-body-mib", f"{max_body_mib}: must be a number in (0, 4096]")
    if log_format not in ("text", "json"):
        raise InvalidInstanceError("--log-format", f"{log_format!r}; valid: text, json")
    if not (math.isfinite(read_timeout) and 0 < read_timeout <= 3600):
        raise InvalidInstanceError("--read-timeout", f"{read_timeout}: must be a number in (0, 3600]")
    if not (math.isfinite(parse_seconds) and 0 < parse_seconds <= 3600):
        raise InvalidInstanceError("--parse-seconds", f"{parse_seconds}: must be a number in (0, 3600]")
    from unicron_plan.service.coordinator import MAX_WARM_WORKERS

    if warm_workers is not None and not 1 <= warm_workers <= MAX_WARM_WORKERS:
        raise InvalidInstanceError("--warm-workers", f"{warm_workers}: must be in 1..{MAX_WARM_WORKERS}")
    hosts, origins = _admitted(host, allow_host, allow_origin)
    daemon.setup_logging(log_format)
    created = _missing_dirs(state)  # what a start that fails removes again
    lock = StateLock(prepare_state_dir(state))  # first: a second serve on DIR names the holder
    try:
        try:
            sock = daemon.bind(host, port)
        except InvalidInstanceError:
            lock.release()
            _remove_created(state, created)
            raise
        try:
            try:
                app = create_app(state, token=token, solver=solver, contingency=not no_contingency,
                                 max_body_bytes=int(max_body_mib * 1024 * 1024), settle_heap=True, parse_seconds=parse_seconds,
                                 access_log=access_log, hosts=hosts, origins=origins, warm_workers=warm_workers)
            except InvalidInstanceError:
                lock.release()
                _remove_created(state, created)
                raise
            coord = app.state.coordinator
            url = daemon.url_of(sock)

            def started() -> None:  # the start-up line, once uvicorn accepts connections
                daemon.log(logging.INFO, f"unicron-plan serve: listening on {url}, state {coord.store.path} "
                                         f"(revision {coord.state.revision}), token {'on' if token else 'off'}",
                           kind="start", url=url, state=str(coord.store.path), revision=coord.state.revision,
                           token=token is not None)
                warning = daemon.exposure_warning(sock, token)
                if warning:
                    daemon.log(logging.WARNING, warning, kind="no-token", host=host)

            config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False,
                                    http=daemon.json_error_protocol(read_timeout), lifespan="on",
                                    timeout_graceful_shutdown=GRACEFUL_SECONDS)
            # While it runs, uvicorn turns SIGTERM/SIGINT into a graceful shutdown (requests in flight
            # finish), then re-raises them to the handlers it found: these exit 0 (also before it runs).
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, _exit_0)
            try:
                daemon.Server(config, started).run(sockets=[sock])
            finally:  # the stop line, also when a signal ends the run
                why = f" on {_STOPPED_BY[0]}" if _STOPPED_BY else ""
                daemon.log(logging.INFO, f"unicron-plan serve: stopped{why}", kind="stop",
                           signal=_STOPPED_BY[0] if _STOPPED_BY else None)
        finally:
            sock.close()
    finally:
        lock.release()


_STOPPED_BY: list[str] = []  # the signal that stopped the service, if one did


def _exit_0(signum=None, *_) -> None:
    import signal

    if signum is not None and not _STOPPED_BY:
        _STOPPED_BY.append(signal.Signals(signum).name)
    raise SystemExit(0)


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, deepest first."""
    out = []
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        out.append(p)
        p = p.parent
    return out


def _remove_created(state: Path, created: list[Path]) -> None:
    """Undo what a start that failed created: the state directory's files and the directories made for it
    (only when this start made the directory; an existing state is never touched)."""
    import contextlib

    from unicron_plan.service.store import STATE_FILES

    if not created:
        return
    for name in STATE_FILES:
        with contextlib.suppress(OSError):
            (Path(state) / name).unlink()
    for d in created:
        with contextlib.suppress(OSError):
            d.rmdir()  # only if empty


def _admitted(bound: str, hosts: list[str], origins: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The Host names (the bound address unless a wildcard, and ``--allow-host``) and origins
    (``--allow-origin``) the service admits besides its loopback names and its own origin."""
    import ipaddress
    from urllib.parse import urlsplit

    from unicron_plan.errors import InvalidInstanceError
    from unicron_plan.service.guard import host_name, normal_origin
    from unicron_plan.text import one_line

    names = []
    for k, h in enumerate(hosts):
        if host_name(h) is None or host_name(h) != h.lower().strip("[]"):  # a name, no port
            raise InvalidInstanceError(f"--allow-host[{k}]", f"{one_line(h, 100)!r} is not a host name")
        names.append(host_name(h))
    try:
        if not ipaddress.ip_address(bound).is_unspecified:
            names.append(bound)
    except ValueError:
        names.append(bound)  # a name: clients use it
    for k, o in enumerate(origins):
        parts = urlsplit(normal_origin(o))
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query \
                or host_name(parts.netloc) is None:
            raise InvalidInstanceError(f"--allow-origin[{k}]", f"{one_line(o, 100)!r}: expected scheme://host[:port]")
    return tuple(names), tuple(normal_origin(o) for o in origins)
