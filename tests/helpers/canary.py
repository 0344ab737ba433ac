"""A canary: a loopback HTTP listener that records every connection and request made to it, so a test can
show that a server never reached a URL its caller named (and never sent it a key)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Canary:
    """Listen on 127.0.0.1 (a free port) until the ``with`` block ends; ``connections`` counts accepted
    connections, ``requests`` holds each request's method, path and headers."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[dict[str, Any]] = []
        canary = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _record(self) -> None:
                canary.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers)})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"canary": "this body must never be quoted"}')

            do_GET = do_POST = do_PUT = do_HEAD = _record  # noqa: N815

        class Server(ThreadingHTTPServer):
            def process_request(self, request: Any, client_address: Any) -> None:
                canary.connections += 1
                super().process_request(request, client_address)

        self._server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "Canary":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
