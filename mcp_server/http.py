"""Streamable HTTP for ``pictrieve mcp --transport http``: loopback by default, an optional bearer token.

The SDK's streamable HTTP app (``/mcp``) is served by uvicorn. Bound to a loopback address, however spelt
(``--host`` is normalised once, :func:`normalise_host`), requests whose ``Host`` is not a local name, or whose
``Origin`` is not this server's own or one the operator listed, are refused (DNS rebinding, a page on another
site or port; :func:`transport_security`). With a token every HTTP request
must carry ``Authorization: Bearer <token>`` (compared in constant time); anything else gets ``401`` and
never reaches the MCP session. A server on any other address must have a token (:func:`check_exposure`).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Iterable
from typing import Any

from pictrieve.tools.core import exposure
from pictrieve.tools.core.exposure import is_loopback, normalise_host, url_host

TOKEN_ENV = "PICTRIEVE_MCP_TOKEN"


def transport_security(host: str, port: int, allowed_origins: Iterable[str] = ()) -> Any:
    """The SDK's DNS-rebinding protection for a server bound to ``host``: on for every loopback spelling.

    The SDK turns it on by itself only for the exact strings ``127.0.0.1``, ``localhost`` and ``::1``; bound
    to ``127.0.0.2`` or ``LOCALHOST`` it would answer a page whose name was rebound to this machine. Allowed:
    ``Host`` headers that name a loopback address (the local names and the bound address, any port), and
    ``Origin`` headers of this server itself (the same names, its own port) and those the operator listed
    (``allowed_origins``); a page served from another local port is refused. Requests without ``Origin``
    (programs, not browsers) pass. A server on any other address returns ``None``: its token guards it.
    """
    from mcp.server.transport_security import TransportSecuritySettings

    if not is_loopback(host):
        return None
    names = list(dict.fromkeys(["localhost", "127.0.0.1", "[::1]", url_host(host)]))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*names, *(f"{name}:*" for name in names)],
        allowed_origins=[*(f"http://{name}:{port}" for name in names), *(o.rstrip("/") for o in allowed_origins)])


def check_exposure(host: str, token: str | None) -> None:
    """Refuse a non-loopback ``host`` without a bearer token (anyone on the network could use the tools), and
    a token that is blank (:func:`pictrieve.tools.core.exposure.check_exposure`, with this server's option)."""
    exposure.check_exposure(host, token, token_option="--token", token_env=TOKEN_ENV)


class BearerTokenGuard:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get ``401``."""

    def __init__(self, app: Any, token: str) -> None:
        if not token.strip():
            raise ValueError("an empty token guards nothing")
        self.app, self.token = app, token.encode("utf-8")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self._authorized(scope):
            body = json.dumps({"error": "invalid_token",
                               "error_description": "send the server's token as 'Authorization: Bearer <token>'"})
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"www-authenticate", b'Bearer realm="pictrieve", error="invalid_token"')]})
            await send({"type": "http.response.body", "body": body.encode()})
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: dict[str, Any]) -> bool:
        header = next((value for name, value in scope.get("headers") or [] if name.lower() == b"authorization"), b"")
        scheme, _, given = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)


def http_app(server: Any, token: str | None) -> Any:
    """The ASGI app: the server's streamable HTTP app at ``/mcp``, behind the token guard when there is a token."""
    app = server.streamable_http_app()
    return BearerTokenGuard(app, token) if token else app


def serve_http(server: Any, *, host: str, port: int, token: str | None) -> None:
    """Serve until interrupted (blocking)."""
    import uvicorn

    check_exposure(host, token)
    logging.getLogger("mcp.server.streamable_http").addFilter(_quiet_closed_stream)
    uvicorn.run(http_app(server, token), host=normalise_host(host), port=port, log_level="warning")


def _quiet_closed_stream(record: logging.LogRecord) -> bool:
    """Drop the SDK's traceback for a client that ended its session (mcp 1.30 logs the closed standalone
    stream of every session a client closes as an error); every other record passes."""
    if record.getMessage() != "Error in standalone SSE writer" or not record.exc_info:
        return True
    import anyio

    return not isinstance(record.exc_info[1], anyio.ClosedResourceError)
