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
  outside (``POST /threads/ID/state``, a ``command`` carrying ``update`` or ``goto``, a new thread's
  ``supersteps``, LangGraph's event-streaming ``input.respond``) is refused (``403``): the graph checks a
  caller's input in its first step (``served_input``) and trusts its state after that. The guard judges the
  JSON the server decodes (escapes, repeated keys, any depth, any route), never the body's bytes, and refuses
  a body it cannot decode as the server would. Answering a pause (``command={"resume": ...}``) is a run like
  any other.
- **Size**: every body is read up to :data:`MAX_BODY_BYTES` on a route that starts runs and
  :data:`MAX_OTHER_BODY_BYTES` on any other (``413`` beyond; the store's ``PUT /store/items`` too), and a
  run's text (its input but a picture, its resume value, context and config) is at most
  :data:`~pictrieve.agents.settings.MAX_TEXT` characters a string and :data:`RUN_TEXT_FACTOR` times that in all,
  refused before the run is stored. The body is judged in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
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

        if scope["type"] == "http" and scope.get("method") in _BODY_METHODS:
            receive, refusal = await _judged_request(scope, receive)
            if refusal is not None:
                await _refuse(scope, send, *refusal)
                return
        elif scope["type"] == "websocket" and _PROTOCOL_V2.search(normalised_path(scope.get("path", ""))):
            await _refuse(scope, send, 403, PROTOCOL_V2)
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


MAX_BODY_BYTES = 64 * 1024 * 1024
"""The largest request body the guard reads (and so the server takes) on a route that starts runs (``/runs``
in its path): a run's picture sent as base64 (20 MiB of image, about 27 MiB of text) fits; LangGraph's own
limit is 300 MiB."""
MAX_OTHER_BODY_BYTES = 1024 * 1024
"""The largest body on every other route (threads, assistants, the store's ``PUT /store/items``): what they keep
(metadata, store values) stays with the server for its life, and no served graph needs more there."""
_MAX_CHECKED_BODY = MAX_BODY_BYTES  # the name older tests import
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_STATE_EDIT = re.compile(r"/threads/[^/]+/state\Z")
_PROTOCOL_V2 = re.compile(r"/threads/[^/]+/(commands|stream/events)\Z")
IMAGE_KEYS = frozenset({"image"})
"""Run inputs that carry a picture (base64 data may be megabytes): bounded by the body cap and the picture
rules of :mod:`pictrieve.tools.core.image_inputs`, not by :data:`~pictrieve.agents.settings.MAX_TEXT`."""
STATE_WRITES = ("a served graph's state is written by its own steps only: start a run with an input, or answer "
                "a pause with command={'resume': ...}")
PROTOCOL_V2 = ("this server does not serve LangGraph's event-streaming protocol (its input.respond may write a "
               "thread's state): use /threads/ID/runs/stream")


def normalised_path(path: str) -> str:
    """``path`` as the server's router matches it, for the guard's own matching: repeated slashes as one, no
    trailing slash (Starlette redirects ``/threads/ID/state/`` to ``/threads/ID/state``)."""
    return re.sub(r"/{2,}", "/", path).rstrip("/") or "/"


async def _judged_request(scope: dict[str, Any], receive: Any) -> tuple[Any, tuple[int, str] | None]:
    """``(receive, refusal)`` for a request that may carry a body (POST, PUT, PATCH, DELETE) on any route.

    The body is read here, up to :data:`MAX_BODY_BYTES` (:data:`MAX_OTHER_BODY_BYTES` where no run starts),
    decoded as the server decodes it (``orjson``, which LangGraph's request parser uses: escapes such as
    ``\\u0063ommand`` decoded, a repeated key's last value kept, any depth), and judged on what was decoded,
    never on its bytes:

    - a state written from outside the graph's steps (:func:`writes_state`): ``POST /threads/ID/state``, a
      ``command`` with anything but ``resume``, ``supersteps``, wherever in the document, on any route;
    - text a caller sends beyond :data:`~pictrieve.agents.settings.MAX_TEXT` characters, one string or a run's
      text in all (:func:`judged_document`), and a body of more than :data:`MAX_VALUES` values;
    - a body the server could not read either (not JSON, or compressed: the server decodes no
      ``Content-Encoding``), refused rather than passed unjudged.

    A body that passes is handed on unchanged. The graph checks a caller's input again in its first step
    (``served_input``) and its settings on every run, resumes included."""
    path, method = normalised_path(scope.get("path", "")), scope.get("method", "")
    if method == "POST" and _STATE_EDIT.search(path):
        return receive, (403, STATE_WRITES)
    if _PROTOCOL_V2.search(path):
        return receive, (403, PROTOCOL_V2)
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers") or []}
    encoding = headers.get("content-encoding", "").strip().lower()
    starts_runs = "/runs" in path
    most, route = (MAX_BODY_BYTES, "a route that starts runs") if starts_runs else (MAX_OTHER_BODY_BYTES, "this route")
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":  # the client went away before its body was read
            return receive, (400, "the request ended before its body did")
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        more = message.get("more_body", False)
        if size > most:
            return receive, (413, f"the request body is too large (at most {most // 2**20} MiB on {route})")
    body = b"".join(chunks)
    if not body.strip():
        return _replay(body, receive), None
    if encoding not in ("", "identity"):
        return receive, (415, f"this server reads request bodies as sent, not {encoding[:40]}-encoded")
    # Parsed and walked in a worker thread: a large body never holds up the requests the loop is serving.
    problem = await asyncio.to_thread(judged_body, body)
    if problem is not None:
        return receive, problem
    return _replay(body, receive), None


MAX_VALUES = 200_000
"""The most values (counted by the body's commas, before anything is parsed) a request body may hold: a run is
a few dozen values and a picture one string, while a megabyte of ``[0,0,...]`` is half a million values that
the server's parser and the guard's walk would each spend their time on (``413`` beyond)."""
RUN_TEXT_FACTOR = 10
"""A run's text in all (every string of its input but a picture, its resume value, context and config, keys
too) is at most this many times :data:`~pictrieve.agents.settings.MAX_TEXT`: room for a query, a description,
an answer and a hundred result ids, while 15,000 strings of 2,000 characters, each inside the bound on one
text, are refused."""


def judged_body(body: bytes) -> tuple[int, str] | None:
    """``(status, reason)`` for a request body the guard refuses, judged on the document the server decodes
    from it (:func:`_judged_request`, which calls this in a worker thread: the event loop serves other requests
    meanwhile); ``None`` when it may pass. A body with more than :data:`MAX_VALUES` values is refused before
    it is parsed, so the parse and the walk over what it decoded stay short."""
    import orjson  # LangGraph's own parser (langgraph_api.route.ApiRequest.json)

    if body.count(b",") > MAX_VALUES:  # every value but a container's first follows a comma
        return 413, f"the request body holds more than {MAX_VALUES:,} values; send fewer"
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return 400, "the request body is not JSON this server reads"
    return judged_document(document)


def judged_document(document: Any) -> tuple[int, str] | None:
    """``(status, reason)`` for a decoded request body the guard refuses, from one walk over every value in it
    (an object's keys too, at any depth, without recursion: orjson reads up to 1,024 levels):

    - ``403`` when it writes a thread's state from outside its graph's steps (:func:`writes_state`);
    - ``413`` when a run in it (an object with ``assistant_id``, or a list of them) sends a text longer than
      :data:`~pictrieve.agents.settings.MAX_TEXT` characters, or more than :data:`RUN_TEXT_FACTOR` times that
      in all: any string in its ``input`` but a picture (:data:`IMAGE_KEYS`), its ``command`` (the resume
      value), ``context`` or ``config``. The same bound the web page keeps, checked before the run is stored.

    ``None`` when it may pass."""
    from pictrieve.agents.settings import MAX_TEXT

    most_in_run = RUN_TEXT_FACTOR * MAX_TEXT
    too_long: str | None = None
    # (value, where its text counts: (the run's running total, the part's name) or None outside a run's text)
    pending: list[tuple[Any, tuple[list[int], str] | None]] = [(document, None)]
    while pending:
        value, counted = pending.pop()
        if isinstance(value, str):
            if counted is None or too_long is not None:
                continue
            total, where = counted
            total[0] += len(value)
            if len(value) > MAX_TEXT:
                too_long = f"{where} holds text longer than {MAX_TEXT} characters; say it in fewer words"
            elif total[0] > most_in_run:
                too_long = (f"a run's text is longer than {most_in_run} characters in all (its input, resume value, "
                            f"context and config together; {where} went past it); say it in fewer words")
        elif isinstance(value, list):
            pending.extend((item, counted) for item in value)
        elif isinstance(value, dict):
            if writes_state(value):
                return 403, STATE_WRITES
            if "assistant_id" in value:
                # A run nested in a run's text still counts toward the outer run's total.
                total = counted[0] if counted is not None else [0]
                for key, item in value.items():
                    pending.append((key, counted))
                    if key == "input" and isinstance(item, dict):
                        for name, given in item.items():
                            pending.append((name, (total, "input")))
                            pending.append((given, None if name in IMAGE_KEYS else (total, f"input.{name}")))
                    elif key in _RUN_TEXT_PARTS:
                        pending.append((item, (total, key)))
                    else:
                        pending.append((item, counted))
            else:
                for key, item in value.items():
                    pending.append((key, counted))
                    pending.append((item, counted))
    if too_long is not None:
        return 413, f"{too_long} (a picture goes in input.image)"
    return None


_RUN_TEXT_PARTS = ("input", "command", "context", "config")


def writes_state(obj: dict[str, Any]) -> bool:
    """Whether the JSON object ``obj`` asks the server to write a thread's state from outside its graph's steps:
    ``supersteps`` (a new thread's state), or a ``command`` that is anything but ``{"resume": ...}``
    (``update``, ``goto``, or a shape the guard does not know)."""
    if obj.get("supersteps") not in (None, [], {}):
        return True
    command = obj.get("command")
    if command is None:
        return False
    if not isinstance(command, dict):
        return True
    return any(value is not None for key, value in command.items() if key != "resume")


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
