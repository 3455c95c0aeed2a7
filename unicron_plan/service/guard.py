"""The service in a browser's world: which requests a web page can make, refused before any route.

A page the operator has open can send requests to the coordinator (a form, ``fetch`` with
``mode: "no-cors"``, a name that resolves to 127.0.0.1 after the page loaded). So every request is
checked here (docs/security.md, "The service and browsers"):

* ``Host`` names this service: a loopback name (``localhost``, ``127.0.0.1``, ``::1``), the
  address ``serve`` binds, or a name given with ``--allow-host`` (a DNS-rebinding page sends its
  own name and gets 421);
* ``Origin``, when sent, is the service's own (``http://`` + the Host) or one given with
  ``--allow-origin`` (a reverse proxy's); without it, a browser's ``Sec-Fetch-Site`` saying the
  request comes from another site is refused too (403);
* a write (POST, PUT, PATCH, DELETE) that carries a body says ``Content-Type: application/json``
  (415 otherwise): forms and ``text/plain`` bodies are what a page can send without asking;
* every answer carries ``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY``,
  ``Referrer-Policy: no-referrer`` and a Content-Security-Policy with ``frame-ancestors 'none'``
  (the console's pages: scripts and styles from the service itself only, inline scripts by hash).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re

#: Host names that always mean this machine.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_SECURITY_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
                     (b"referrer-policy", b"no-referrer"))
#: The policy of every answer that is not one of the console's pages.
API_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
_HOST_RE = re.compile(r"(?:\[([0-9A-Fa-f:.]{1,64})\]|([A-Za-z0-9._-]{1,253}))(?::([0-9]{1,5}))?")
_SCRIPT_RE = re.compile(rb"<script>(.*?)</script>", re.S)


def page_policy(html: bytes) -> str:
    """The Content-Security-Policy of a console page: its inline scripts allowed by their hash."""
    hashes = " ".join("'sha256-" + base64.b64encode(hashlib.sha256(body).digest()).decode() + "'"
                      for body in _SCRIPT_RE.findall(html))
    return ("default-src 'none'; script-src 'self'" + (" " + hashes if hashes else "") +
            "; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
            "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


def host_name(value: str) -> str | None:
    """The name part of a ``Host`` header (``[::1]:8470`` -> ``::1``), lower case; None if malformed."""
    m = _HOST_RE.fullmatch(value)
    if m is None or (m.group(3) is not None and int(m.group(3)) > 65535):
        return None
    return (m.group(1) or m.group(2)).lower()


def normal_origin(value: str) -> str:
    """An origin as browsers send it: scheme://host[:port], lower case, no trailing slash."""
    return value.strip().rstrip("/").lower()


class BrowserGuard:
    """Pure ASGI middleware doing what the module docstring says; outermost of the application's own."""

    def __init__(self, app, hosts=(), origins=()):
        self.app = app
        self.hosts = LOOPBACK_NAMES | {h.lower().strip("[]") for h in hosts}
        self.origins = frozenset(normal_origin(o) for o in origins)

    def refusal(self, scope) -> tuple[int, str] | None:
        """(status, message) of a request to refuse, or None."""
        seen: dict[bytes, list[bytes]] = {}
        for k, v in scope.get("headers", ()):
            if k in (b"host", b"origin", b"content-type", b"content-length", b"transfer-encoding",
                     b"sec-fetch-site"):
                seen.setdefault(k, []).append(v)
        if any(len(v) > 1 for k, v in seen.items() if k != b"transfer-encoding"):
            return 400, "headers: Host, Origin, Content-Type and Content-Length may each be sent once"
        host = seen.get(b"host", [b""])[0].decode("latin-1")
        name = host_name(host)
        if name is None or name not in self.hosts:
            return 421, (f"Host: {host[:100]!r} is not a name of this service (loopback names, the bound "
                         "address and --allow-host names are)")
        origin = seen.get(b"origin", [None])[0]
        if origin is not None:
            got = normal_origin(origin.decode("latin-1"))
            if got not in self.origins and got != f"{scope.get('scheme', 'http')}://{host.lower()}":
                return 403, f"Origin: {got[:100]!r} may not use this service (--allow-origin admits one)"
        elif seen.get(b"sec-fetch-site", [b""])[0] in (b"cross-site", b"same-site"):
            return 403, "Sec-Fetch-Site: a request from another site without an allowed Origin"
        if scope.get("method") in _WRITES:
            length = seen.get(b"content-length", [b"0"])[0]
            has_body = b"transfer-encoding" in seen or length.strip() not in (b"0", b"")
            media = seen.get(b"content-type", [b""])[0].split(b";")[0].strip().lower()
            if has_body and media != b"application/json":
                return 415, (f"Content-Type: {media.decode('latin-1')[:100]!r}: a write's body must be "
                             "application/json")
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_secured(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                names = {k.lower() for k, _ in headers}
                headers += [h for h in _SECURITY_HEADERS if h[0] not in names]
                if b"content-security-policy" not in names:
                    headers.append((b"content-security-policy", API_POLICY.encode()))
                message = {**message, "headers": headers}
            await send(message)

        refused = self.refusal(scope)
        if refused is None:
            return await self.app(scope, receive, send_secured)
        status, text = refused
        body = json.dumps({"error": text}).encode()
        await send_secured({"type": "http.response.start", "status": status,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
        await send_secured({"type": "http.response.body", "body": body})
