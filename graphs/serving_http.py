"""The HTTP guard of the served graphs: the custom app ``langgraph.json`` names (``http.app``), whose
middleware wraps every route of the LangGraph server (``langgraph dev`` and the platform server alike).

The server trusts only what its operator set when starting it (``pictrieve serve`` passes these through the
environment; the guard reads them once, when the server imports this module):

- **Host**: on a connection to a loopback address, a request whose ``Host`` names anything but this
  machine (``localhost``, 127.0.0.0/8, ``::1``, any port) is refused (``403``): a page whose name was rebound
  to 127.0.0.1 (DNS rebinding) gets nothing.
- **Origin**: a request a browser made for a page on another origin (an ``Origin`` header, or
  ``Sec-Fetch-Site: cross-site/same-site`` without one) is refused unless the operator listed that origin
  (``$PICTRIEVE_SERVE_CORS_ORIGINS``, ``pictrieve serve --cors-origin``). Only listed origins get CORS
  headers (their own origin, never ``*``), and only they get Chrome's private-network grant; whatever the
  LangGraph server itself would send (``Access-Control-Allow-Origin: *``,
  ``Access-Control-Allow-Private-Network: true``) is dropped.
- **Token**: with ``$PICTRIEVE_SERVE_TOKEN`` set, every request but a listed origin's CORS preflight must
  carry ``Authorization: Bearer <token>`` (compared in constant time), else ``401``. A connection to an
  address that is not loopback is refused outright when there is no token (``pictrieve serve`` refuses to
  start so; this covers a plain ``langgraph dev --host 0.0.0.0``).
- **State**: a thread's state is written by its graph's own steps only. A request that would write it from
  outside (``POST /threads/ID/state``, a run whose ``command`` carries ``update`` or ``goto``, a new thread's
  ``supersteps``) is refused (``403``): the graph checks a caller's input in its first step (``served_input``)
  and trusts its state after that. Answering a pause (``command={"resume": ...}``) is a run like any other.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
from collections.abc import Iterable
from typing import Any

from pictrieve.tools.core.exposure import header_host, is_loopback, url_host

ENV_TOKEN = "PICTRIEVE_SERVE_TOKEN"
ENV_CORS_ORIGINS = "PICTRIEVE_SERVE_CORS_ORIGINS"
LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")

logger = logging.getLogger(__name__)


def cors_origins(text: str | None) -> tuple[str, ...]:
    """The origins in ``text`` (commas or spaces between them), each without a trailing slash."""
    return tuple(dict.fromkeys(o.strip().rstrip("/") for o in (text or "").replace(",", " ").split() if o.strip()))


class ServeGuard:
    """ASGI middleware: the Host, Origin and token checks of the module docstring, before any route."""

    def __init__(self, app: Any, *, token: str | None = None, origins: Iterable[str] | None = None) -> None:
        self.app = app
        token = os.environ.get(ENV_TOKEN) if token is None else token
        self.token = token.encode("utf-8") if token and token.strip() else None
        self.origins = frozenset(cors_origins(os.environ.get(ENV_CORS_ORIGINS)) if origins is None else origins)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers") or []}
        origin = headers.get("origin", "").rstrip("/")
        refusal = self._refusal(scope, headers, origin)
        if refusal is not None:
            await _refuse(scope, send, *refusal)
            return
        listed = bool(origin) and origin in self.origins
        if scope["type"] == "http" and scope.get("method") == "OPTIONS" and "access-control-request-method" in headers:
            await _preflight(send, origin, headers)  # only a listed origin (or the server's own) gets here
            return
        if self.token is not None and not self._authorized(headers):
            await _refuse(scope, send, 401, "send the server's token as 'Authorization: Bearer <token>'",
                          [(b"www-authenticate", b'Bearer realm="pictrieve"')])
            return

        if scope["type"] == "http" and scope.get("method") == "POST":
            receive, refusal = await _state_writes_refused(scope, receive)
            if refusal is not None:
                await _refuse(scope, send, 403, refusal)
                return

        async def send_guarded(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers") or [] if not k.lower().startswith(b"access-control-")]
                if listed:
                    kept += [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin"),
                             (b"access-control-expose-headers",
                              b"x-pagination-total, x-pagination-next, content-location")]
                message = {**message, "headers": kept}
            await send(message)

        await self.app(scope, receive, send_guarded)

    def _refusal(self, scope: dict[str, Any], headers: dict[str, str], origin: str) -> tuple[int, str] | None:
        server_host, server_port = (scope.get("server") or ("127.0.0.1", None))[:2]
        local = is_loopback(str(server_host))
        if not local and self.token is None:
            return 403, ("this server is reachable from other machines and has no token: its operator must restart it "
                         f"with a token (pictrieve serve --token, or ${ENV_TOKEN})")
        if local and not is_loopback(header_host(headers.get("host", ""))):
            return 403, "this server answers only requests addressed to this machine (Host: localhost or 127.0.0.1)"
        own = {f"http://{name}:{server_port}" for name in (*LOCAL_NAMES, url_host(str(server_host)))}
        if origin and origin not in self.origins and origin not in own:
            return 403, (f"requests from pages on {origin[:100]} are refused; the server's operator can allow an origin "
                         "with `pictrieve serve --cors-origin ORIGIN`")
        if not origin and headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            return 403, "requests from pages on other sites are refused"
        return None

    def _authorized(self, headers: dict[str, str]) -> bool:
        scheme, _, given = headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode("utf-8"), self.token or b"")


_STATE_EDIT = re.compile(r"/threads/[^/]+/state/?\Z")
_CARRIES_RUNS = re.compile(r"(/threads/[^/]+)?/runs(/wait|/stream|/batch|/crons)?/?\Z|/threads/?\Z")
_MAX_CHECKED_BODY = 64 * 1024 * 1024
STATE_WRITES = ("a served graph's state is written by its own steps only: start a run with an input, or answer "
                "a pause with command={'resume': ...}")


async def _state_writes_refused(scope: dict[str, Any], receive: Any) -> tuple[Any, str | None]:
    """``(receive, refusal)``: a request that would write a thread's state from outside its graph is refused
    (``POST /threads/ID/state``; a run whose ``command`` carries ``update`` or ``goto``; a new thread with
    ``supersteps``), since the graph checks a caller's input in its first step and trusts its state after
    that (an image path put there would be read unchecked). Run bodies are read here and handed on
    unchanged; they are parsed only when they mention a command or supersteps (a resume is small)."""
    path = scope.get("path", "")
    if _STATE_EDIT.search(path):
        return receive, STATE_WRITES
    if not _CARRIES_RUNS.search(path):
        return receive, None
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":  # the client went away before its body was read
            return receive, "the request ended before its body did"
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        more = message.get("more_body", False)
        if size > _MAX_CHECKED_BODY:
            return receive, "the request body is too large"
    body = b"".join(chunks)
    if (b'"command"' in body or b'"supersteps"' in body) and _writes_state(body):
        return receive, STATE_WRITES
    return _replay(body, receive), None


def _writes_state(body: bytes) -> bool:
    try:
        payload = json.loads(body)
    except ValueError:
        return False  # the server answers a body it cannot read itself
    runs = payload if isinstance(payload, list) else [payload]
    for run in runs:
        if not isinstance(run, dict):
            continue
        command = run.get("command")
        writes = isinstance(command, dict) and any(value is not None for key, value in command.items() if key != "resume")
        if run.get("supersteps") or writes:
            return True
    return False


def _replay(body: bytes, upstream: Any) -> Any:
    """A ``receive`` that gives the body read here first, then whatever the client sends next (a disconnect,
    which a streaming run listens for)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return pending.pop() if pending else await upstream()

    return receive


async def _refuse(scope: dict[str, Any], send: Any, status: int, detail: str,
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


async def _preflight(send: Any, origin: str, headers: dict[str, str]) -> None:
    """The CORS preflight answer for an allowed ``origin``; the private-network grant only where asked."""
    answer = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin"),
              (b"access-control-allow-methods", b"GET, POST, PUT, PATCH, DELETE, OPTIONS"),
              (b"access-control-allow-headers",
               headers.get("access-control-request-headers", "content-type").encode("latin-1")),
              (b"access-control-max-age", b"600"), (b"content-length", b"0")]
    if headers.get("access-control-request-private-network") == "true":
        answer.append((b"access-control-allow-private-network", b"true"))
    await send({"type": "http.response.start", "status": 204, "headers": answer})
    await send({"type": "http.response.body", "body": b""})


def _app() -> Any:
    from starlette.applications import Starlette
    from starlette.middleware import Middleware

    from pictrieve.graphs.serving import lifespan

    return Starlette(middleware=[Middleware(ServeGuard)], lifespan=lifespan)


app = _app()
"""The custom HTTP app ``langgraph.json`` names: no routes of its own, only :class:`ServeGuard` around all."""
