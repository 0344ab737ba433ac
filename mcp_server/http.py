"""Streamable HTTP for ``pictrieve mcp --transport http``: loopback by default, an optional bearer token.

The SDK's streamable HTTP app (``/mcp``) is served by uvicorn. Bound to a loopback address, the SDK also
refuses requests whose ``Host``/``Origin`` is not local (DNS rebinding). With a token every HTTP request
must carry ``Authorization: Bearer <token>`` (compared in constant time); anything else gets ``401`` and
never reaches the MCP session. A server on any other address must have a token (:func:`check_exposure`).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from typing import Any

from pictrieve.errors import PictrieveError

TOKEN_ENV = "PICTRIEVE_MCP_TOKEN"


class ExposureError(PictrieveError, ValueError):
    """A server that would be reachable from other machines without a token."""


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Refuse a non-loopback ``host`` without a bearer token (anyone on the network could use the tools)."""
    if not is_loopback(host) and not token:
        raise ExposureError(f"--host {host} is reachable from other machines: set a bearer token with --token "
                            f"or ${TOKEN_ENV} (clients send it as 'Authorization: Bearer <token>')")


class BearerTokenGuard:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get ``401``."""

    def __init__(self, app: Any, token: str) -> None:
        if not token:
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
    uvicorn.run(http_app(server, token), host=host, port=port, log_level="warning")


def _quiet_closed_stream(record: logging.LogRecord) -> bool:
    """Drop the SDK's traceback for a client that ended its session (mcp 1.30 logs the closed standalone
    stream of every session a client closes as an error); every other record passes."""
    if record.getMessage() != "Error in standalone SSE writer" or not record.exc_info:
        return True
    import anyio

    return not isinstance(record.exc_info[1], anyio.ClosedResourceError)
