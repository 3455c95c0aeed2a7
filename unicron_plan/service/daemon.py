"""What `unicron-plan serve` does around the application: the listening socket, the logs (start-up line, access log, text or JSON) and shutdown.

Every refusal is an :class:`InvalidInstanceError` naming the option, so the CLI exits 2.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import os
import socket
import sys
import time
from datetime import datetime, timezone

from unicron_plan.errors import InvalidInstanceError

LOGGER = "unicron_plan.service"


# --------------------------------------------------------------------------- socket
def bind(host: str, port: int) -> socket.socket:
    """A bound TCP socket for ``host:port`` (port 0: a free one); bad host or busy port name the option."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise InvalidInstanceError("--host", f"{host!r} does not resolve: {exc}") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InvalidInstanceError("--port", f"{host}:{port} is already in use") from None
        raise InvalidInstanceError("--host", f"cannot bind {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def is_loopback(sock: socket.socket) -> bool:
    try:
        return ipaddress.ip_address(sock.getsockname()[0]).is_loopback
    except ValueError:
        return False


def exposure_warning(sock: socket.socket, token: str | None) -> str | None:
    """The start-up warning for a socket reachable beyond this machine without a token, else None."""
    if token is not None or is_loopback(sock):
        return None
    return (f"{sock.getsockname()[0]} is reachable beyond this machine and no --token-file is set: "
            "anyone who reaches it can change the state")


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


# --------------------------------------------------------------------------- logs
class _JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, message and the record's ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {"time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
               .replace("+00:00", "Z"), "level": record.levelname.lower(), "message": record.getMessage()}
        doc.update(getattr(record, "fields", {}))
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, separators=(",", ":"), default=str)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        line = f"{stamp} {level}{record.getMessage()}"
        if record.exc_info:  # a bug: its type and message on the line, the traceback with UNICRON_DEBUG=1
            exc = record.exc_info[1]
            line += f": {type(exc).__name__}: {exc}"
            if os.environ.get("UNICRON_DEBUG"):
                line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(fmt: str, stream=None) -> logging.Logger:
    """The service's logger on stderr, in ``text`` or ``json``; uvicorn's own loggers go through it."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    log = logging.getLogger(LOGGER)
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    for name in ("uvicorn", "uvicorn.error"):  # uvicorn's errors, in the same format; its access log is off
        u = logging.getLogger(name)
        u.handlers[:] = [handler]
        u.setLevel(logging.WARNING)
        u.propagate = False
    return log


def log(level: int, message: str, **fields) -> None:
    logging.getLogger(LOGGER).log(level, message, extra={"fields": fields})


class AccessLog:
    """Pure ASGI middleware: one line per request (method, path, status, milliseconds)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), [0]

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            ms = (time.perf_counter() - start) * 1000
            path = scope.get("path", "")
            if len(path) > 200:
                path = path[:200] + "..."
            client = scope.get("client") or ("", 0)
            log(logging.INFO, f"{scope.get('method', '')} {json.dumps(path)[1:-1]} {status[0]} {ms:.1f} ms",
                kind="access", method=scope.get("method", ""), path=path, status=status[0],
                ms=round(ms, 2), client=client[0])


# --------------------------------------------------------------------------- server
def Server(config, started):
    """A uvicorn server that calls ``started()`` once it accepts connections."""
    import uvicorn

    class _Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if not self.should_exit:
                started()

    return _Server(config)


# --------------------------------------------------------------------------- HTTP protocol
#: Longest a client may take to send a request's headers, and then its body (``serve --read-timeout``).
READ_SECONDS = 10.0


def json_error_protocol(read_seconds: float = READ_SECONDS):
    """uvicorn's httptools protocol whose answer to an unparsable request (e.g. a 100 KB URL) is the
    service's JSON error instead of plain text, and which drops slow clients: a request's headers
    must arrive within ``read_seconds`` of its first byte (or of the connection), its body within
    ``read_seconds`` of its headers; else the answer is 408 (headers) or 400 (body) and the
    connection is closed."""
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

    class JsonErrorProtocol(HttpToolsProtocol):
        _read_timer = None

        def send_400_response(self, msg: str) -> None:
            self._close_with(400, f"request: {msg}")

        def _close_with(self, status: int, message: str) -> None:
            body = json.dumps({"error": message}).encode()
            content = [STATUS_LINE[status]]
            for name, value in self.server_state.default_headers:
                content.extend([name, b": ", value, b"\r\n"])
            content.extend([b"content-type: application/json\r\n",
                            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                            b"connection: close\r\n", b"\r\n", body])
            self.transport.write(b"".join(content))
            self.transport.close()

        # read deadlines: armed for the headers and then the body, disarmed once they are in
        def _arm(self, what: str) -> None:
            self._disarm()
            self._read_timer = self.loop.call_later(read_seconds, self._too_slow, what)

        def _disarm(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

        def _too_slow(self, what: str) -> None:
            self._read_timer = None
            if self.transport.is_closing():
                return
            if self.cycle is not None and self.cycle.response_started:
                self.transport.close()
            elif what == "headers":
                self._close_with(408, f"request: headers not received within {read_seconds:g} s")
            else:
                self._close_with(400, f"body: not received within {read_seconds:g} s")

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm("headers")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._read_timer is None:  # a new request on a kept-alive connection: its own deadline
                self._arm("headers")

        def on_headers_complete(self) -> None:
            self._arm("body")
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    return JsonErrorProtocol
