"""A local OpenAI-compatible HTTP server for tests: the real `openai` / langchain-openai clients talk to it.

It answers ``POST /v1/chat/completions`` with the text a test's ``reply(messages) -> str`` returns
(streamed or not), ``POST /v1/images/generations`` with small solid-colour PNGs and ``GET /v1/models`` with
its ``models`` (none by default), and records every request (``requests``: POSTs; ``listings``: GETs) so a test can check what the client sent (e.g.
image content blocks).

>>> with OpenAIFake(lambda messages: "Is it red?") as fake:
...     llm = ChatOpenAI(model="fake", base_url=fake.base_url, api_key="test")

``OpenAIFake(status=401)`` (or 404, 403, 429, 500) answers every request with that HTTP error and an
OpenAI-style error body instead, as a real endpoint does for a wrong key or an unknown model;
:func:`dead_endpoint` is a base URL where nothing listens.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

Reply = Callable[[list[dict[str, Any]]], str]


class OpenAIFake:
    """Serve on 127.0.0.1 (a free port) until the ``with`` block ends."""

    def __init__(self, reply: Reply = lambda messages: "", *, status: int | None = None,
                 models: tuple[str, ...] = ()) -> None:
        self.reply = reply
        self.status = status
        self.models = models
        self.listings: list[dict[str, Any]] = []
        """Each ``GET .../models`` (its path and Authorization header); ``requests`` holds the POSTs."""
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 - the model list, which pictrieve's endpoint check asks for
                fake.listings.append({"path": self.path, "authorization": self.headers.get("Authorization")})
                if fake.status is not None:
                    self._json(fake.status, _error_body(fake.status, ""))
                elif self.path.endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "fake"}
                                                                for name in fake.models]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                fake.requests.append({"path": self.path, "body": body})
                if fake.status is not None:
                    self._json(fake.status, _error_body(fake.status, body.get("model", "")))
                elif self.path.endswith("/chat/completions"):
                    self._chat(body)
                elif self.path.endswith("/images/generations"):
                    self._images(body)
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def _chat(self, body: dict[str, Any]) -> None:
                text = fake.reply(body.get("messages", []))
                created = int(time.time())
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for delta in ({"role": "assistant", "content": text}, {}):
                        chunk = {"id": "fake", "object": "chat.completion.chunk", "created": created,
                                 "model": body.get("model", "fake"),
                                 "choices": [{"index": 0, "delta": delta, "finish_reason": None if delta else "stop"}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                n = int(body.get("n") or 1)
                self._json(200, {
                    "id": "fake", "object": "chat.completion", "created": created, "model": body.get("model", "fake"),
                    "choices": [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                                for i in range(n)],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                })

            def _images(self, body: dict[str, Any]) -> None:
                from PIL import Image

                data = []
                for i in range(int(body.get("n") or 1)):
                    buffer = io.BytesIO()
                    Image.new("RGB", (32, 32), (40 * i % 255, 120, 200)).save(buffer, format="PNG")
                    data.append({"b64_json": base64.b64encode(buffer.getvalue()).decode()})
                self._json(200, {"created": int(time.time()), "data": data})

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "OpenAIFake":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


_ERRORS = {  # what OpenAI answers, abridged
    401: ("Incorrect API key provided: test-***-key.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to use this model.", "invalid_request_error", "model_not_allowed"),
    404: ("The model `{model}` does not exist or you do not have access to it.", "invalid_request_error",
          "model_not_found"),
    429: ("You exceeded your current quota.", "insufficient_quota", "insufficient_quota"),
    500: ("The server had an error while processing your request.", "server_error", None),
}


def _error_body(status: int, model: str) -> dict[str, Any]:
    message, kind, code = _ERRORS.get(status, (f"HTTP {status}", "error", None))
    return {"error": {"message": message.format(model=model), "type": kind, "param": None, "code": code}}


@contextmanager
def dead_endpoint() -> Iterator[str]:
    """A base URL whose port is bound but not listening: every connection is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


EXPECTED_ERRORS = {  # what pictrieve's one-line error says of each failing endpoint (besides model and URL)
    "401": "refused the API key",
    "404": "no such model there",
    "closed": "could not connect",
}


@contextmanager
def silent_endpoint() -> Iterator[str]:
    """A base URL whose server takes every connection and never answers (its port listens; nothing accepts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)  # the kernel completes each handshake; the request then waits for an answer forever
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
