"""What ``pictrieve ui`` answers, and to whom: the checks in front of every request the page's server gets.

:class:`PageGuard` is ASGI middleware around the whole app (outside Starlette's own error middleware, so
its headers reach every answer, a 500 included). In order:

- **Host** (DNS rebinding): a request whose ``Host`` is not a local name (``localhost``, ``127.0.0.0/8``,
  ``[::1]``, any port), the address the server is bound to, or a name the operator added (``--allow-host``)
  gets ``421``. A page whose name was rebound to this machine sends its own name, so it reads nothing.
- **Origin** (CSRF, another site or local port): the API (``/api/...``) and every request that is not a
  ``GET``/``HEAD`` refuse a browser request from any origin but the page's own (``403``): ``Origin`` must
  name this very host and port, and ``Sec-Fetch-Site`` must not be ``cross-site`` or ``same-site``. Programs
  that send neither (curl, scripts) may call the JSON API.
- **Body type**: a post takes JSON (a browser sends it cross-origin only after a CORS preflight, which this
  server never grants), multipart form data only with proof that the page itself sent it (its ``Origin``,
  or ``Sec-Fetch-Site: same-origin``), or no body at all (the page's cancel beacon). Everything a plain
  HTML form on another site can send (``text/plain``, urlencoded, multipart without that proof) gets ``403``
  or ``415``.
- **Body size**, before a byte is read: ``Content-Length`` above the limit gets ``413`` at once, and a body
  without a length (chunked) is counted as it is received and cut off at the limit (:class:`BodyTooLarge`,
  answered ``413`` by the app), so nothing past it is read or spooled to disk. JSON: :data:`MAX_JSON_BYTES`;
  multipart: the upload limit plus :data:`FORM_OVERHEAD`.
- **Headers on every answer**: :data:`SECURITY_HEADERS` (CSP with ``frame-ancestors 'none'``, ``nosniff``,
  ``Referrer-Policy``, ...).

Only header checks run here (no I/O), so nothing blocks the event loop.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from pictrieve.tools.core.exposure import header_host, is_loopback, normalise_host

log = logging.getLogger(__name__)

MAX_JSON_BYTES = 1024 * 1024
"""A JSON request body above this is refused (the page's largest is a few hundred bytes)."""
FORM_OVERHEAD = 64 * 1024
"""Room in a multipart body for its boundaries and text fields, beside the upload itself."""
CONTENT_SECURITY_POLICY = ("default-src 'self'; img-src 'self' blob:; style-src 'self' 'unsafe-inline'; "
                           "script-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                           "frame-ancestors 'none'")
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),  # frame-ancestors for browsers that predate it
    (b"cross-origin-resource-policy", b"same-origin"),  # no other origin embeds the photos or the script
]
"""Sent with every answer of the page's server (the page, its files, the API, errors, 404s)."""
WILDCARDS = {"0.0.0.0", "::", ""}
UNSAFE_SITES = {"cross-site", "same-site"}


class BodyTooLarge(Exception):
    """A request body went past its limit while it was being received (answered ``413``)."""


class PageGuard:
    """ASGI middleware: the Host allow-list, the same-origin rule, body types and sizes, and the headers.

    ``bound`` is the address the server listens on (a specific one is allowed as a ``Host``),
    ``allowed_hosts`` the names the operator added, ``upload_limit`` the largest upload in bytes.
    """

    def __init__(self, app: Any, *, bound: str | None = None, allowed_hosts: Iterable[str] = (),
                 upload_limit: int) -> None:
        self.app = app
        self.hosts = {normalise_host(h) for h in allowed_hosts if h.strip()}
        if bound and normalise_host(bound) not in WILDCARDS:
            self.hosts.add(normalise_host(bound))
        self.upload_limit = upload_limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                taken = {name.lower() for name, _ in message.get("headers") or []}
                message = {**message, "headers": [*(message.get("headers") or []),
                                                   *(h for h in SECURITY_HEADERS if h[0] not in taken)]}
            await send(message)

        headers = _headers(scope)
        refusal = self.refusal(scope, headers)
        if refusal is not None:
            status, text = refusal
            log.info("ui refused %s %s (Host %r, Origin %r): %s", scope.get("method"), scope.get("path"),
                     headers.get("host"), headers.get("origin"), text)
            await _answer(send_with_headers, status, text)
            return
        limit = self.body_limit(headers)
        await self.app(scope, _counted(receive, limit), send_with_headers)

    def allows_host(self, host_header: str | None) -> bool:
        """Whether ``host_header`` (``name[:port]``) names this server for its operator."""
        if not host_header:
            return False
        name = header_host(host_header)
        return name in self.hosts or is_loopback(name)

    def refusal(self, scope: dict[str, Any], headers: dict[str, str]) -> tuple[int, str] | None:
        """``(status, one line)`` for a request this server must not serve, else ``None``."""
        host = headers.get("host")
        if not self.allows_host(host):
            return 421, ("this server answers only at its own address (localhost, 127.0.0.1, [::1] or a name its "
                         "operator added with --allow-host); open the page by that address")
        method = scope.get("method", "GET")
        unsafe = method not in ("GET", "HEAD")
        if not (unsafe or scope.get("path", "").startswith("/api/")):
            return None  # the page and its files: a link from anywhere may open them
        origin = headers.get("origin")
        site = headers.get("sec-fetch-site", "").lower()
        if site in UNSAFE_SITES or (origin is not None and not _same_origin(origin, host)):
            return 403, "refused: only this page may call its API (the request came from another site or port)"
        if not unsafe:
            return None
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "application/json":
            return _too_long(headers, MAX_JSON_BYTES)
        if kind == "multipart/form-data":
            if not (site == "same-origin" or origin is not None):  # origin, if sent, was checked above
                return 403, "refused: a form upload is taken only from this page itself (send its Origin)"
            return _too_long(headers, self.upload_limit + FORM_OVERHEAD)
        if not kind and not _has_body(headers):
            return None  # a post without a body (the page's cancel beacon)
        return 415, "send JSON (Content-Type: application/json), or a picture from this page"

    def body_limit(self, headers: dict[str, str]) -> int:
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        return self.upload_limit + FORM_OVERHEAD if kind == "multipart/form-data" else MAX_JSON_BYTES


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    """The request's headers by lower-case name (the first of repeated ones)."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers") or []:
        out.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return out


def _same_origin(origin: str, host_header: str | None) -> bool:
    """Whether a browser's ``Origin`` is this page's own: the same host and port it asked for."""
    parts = urlsplit(origin.strip())
    return parts.scheme in ("http", "https") and bool(host_header) and parts.netloc.lower() == host_header.strip().lower()


def _has_body(headers: dict[str, str]) -> bool:
    return "transfer-encoding" in headers or headers.get("content-length", "0").strip() not in ("", "0")


def _too_long(headers: dict[str, str], limit: int) -> tuple[int, str] | None:
    """``413`` for a declared length above ``limit`` (before any of the body is read)."""
    length = headers.get("content-length")
    if length is None:
        return None
    try:
        declared = int(length)
    except ValueError:
        return 400, "the request's Content-Length is not a number"
    return _over(limit) if declared > limit else None


def _over(limit: int) -> tuple[int, str]:
    size = f"{limit / 2**20:.0f} MiB" if limit >= 2**20 else f"{limit / 1024:.0f} KiB"
    return 413, f"the request is larger than this server takes (about {size}); send a smaller picture or less text"


def _counted(receive: Any, limit: int) -> Any:
    """``receive`` that raises :class:`BodyTooLarge` once more than ``limit`` body bytes have come."""
    seen = 0

    async def counted() -> dict[str, Any]:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(_over(limit)[1])
        return message

    return counted


async def _answer(send: Any, status: int, text: str) -> None:
    body = json.dumps({"error": text}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

