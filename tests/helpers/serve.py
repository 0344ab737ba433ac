"""`pictrieve serve` started for real on 127.0.0.1 (its own session, its own temporary folder), and the pieces
the tests that attack it share: a page server of another origin, a tiny gallery served with an allowed folder.

``served_gallery`` is the module-scoped server of ``tests/test_serve_guards.py`` and ``tests/security/``: a
tiny gallery, images read only under ``allowed/``, one origin the operator listed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from helpers import free_port, make_photo

TOKEN = "serve-test-token-8f3a"


def serve_env(root: Path, **extra: str) -> dict[str, str]:
    """The environment a test's `pictrieve serve` runs in: caches and ``TMPDIR`` inside ``root``, no tracing, a
    canary key that must never leave the machine."""
    return {**os.environ, "PICTRIEVE_CACHE": str(root / "cache"), "LANGSMITH_TRACING": "false", "HF_HUB_OFFLINE": "1",
            "LANGGRAPH_CLI_NO_ANALYTICS": "1", "OPENAI_API_KEY": "canary-key-must-stay-home", "TMPDIR": str(root / "tmp"),
            **extra}


def start_serve(root: Path, gallery: Path, *args: str, token: str | None = None) -> tuple[subprocess.Popen, str]:
    """`pictrieve serve` on a free port (its own session), once it answers ``/ok``; its log in ``root``."""
    (root / "tmp").mkdir(exist_ok=True)
    for _ in range(3):
        port = free_port()
        log = open(root / f"serve-{port}.log", "w")
        process = subprocess.Popen(
            [sys.executable, "-m", "pictrieve.cli.main", "serve", "-g", str(gallery), "--port", str(port), *args],
            cwd=root, env=serve_env(root, **({"PICTRIEVE_SERVE_TOKEN": token} if token else {})),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        deadline = time.monotonic() + 180
        while process.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/ok", headers=headers, timeout=2).status_code == 200:
                    return process, url
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        stop_group(process)
    pytest.fail(f"pictrieve serve did not start; logs in {root}")


def wait_for_warm_up(root: Path, logs: str = "serve-*.log", seconds: float = 300) -> str:
    """The "served methods ready" line of the server started in ``root`` (its log one of ``logs``: `pictrieve
    serve`'s by default), once its warm-up (the methods' models, loaded in a background thread after the server
    answers) is done."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for log in root.glob(logs):
            ready = [line for line in log.read_text(errors="replace").splitlines() if "served methods ready" in line]
            if ready:
                return ready[-1]
        time.sleep(0.5)
    pytest.fail(f"the server's warm-up did not end in {seconds:.0f} s; logs in {root}")


def stop_group(process: subprocess.Popen) -> None:
    """End a started `pictrieve serve` and everything in its session (test cleanup)."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, signum)
            process.wait(timeout=30)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


@contextmanager
def static_site(folder: Path) -> Iterator[str]:
    """``folder`` served over HTTP on another loopback port: a web page of another origin."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietFiles, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def served_gallery(root: Path, tiny_clip_name: str) -> Iterator[dict[str, Any]]:
    """`pictrieve serve` over a tiny gallery (4 photos), loopback, no token; images read only under
    ``allowed/``; the page server's origin ``listed`` is the one origin the operator allowed, ``evil`` another.
    Yields ``{"url", "root", "gallery", "listed", "evil", "process"}``."""
    from pictrieve.vectorstore.gallery import Gallery

    photos = root / "photos"
    for i in range(4):
        make_photo(photos / f"img{i}.png", seed=i)
    gallery = Gallery.open(root / "g.gallery", tiny_clip_name)
    gallery.add(photos, progress=False)
    make_photo(root / "allowed" / "inside.png", seed=7)
    make_photo(root / "allowed-evil" / "outside.png", seed=8)  # shares the allowed folder's name as a prefix
    (root / "allowed" / "broken.png").write_bytes(b"not an image")
    site = root / "site"
    site.mkdir()
    (site / "index.html").write_text("<!doctype html><title>another origin</title><body></body>")
    with static_site(site) as listed, static_site(site) as evil:
        process, url = start_serve(root, root / "g.gallery", "--allow-dir", str(root / "allowed"),
                                   "--allow", "llm=offline,openai:gpt-4o-mini", "--cors-origin", listed)
        try:
            yield {"url": url, "root": root, "gallery": gallery, "listed": listed, "evil": evil, "process": process}
        finally:
            stop_group(process)


def sdk_client(url: str) -> Any:
    """The LangGraph SDK's sync client for ``url``."""
    from langgraph_sdk import get_sync_client

    return get_sync_client(url=url)


@contextmanager
def guarded(host: str, **guard):
    """A tiny ASGI app behind the served graphs' guard (graphs/serving_http.py), bound by a real uvicorn to
    ``host``; yields (URL, port)."""
    import uvicorn

    from pictrieve.graphs.serving_http import ServeGuard
    from pictrieve.tools.core.exposure import url_host

    async def hello(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"access-control-allow-origin", b"*")]})
        await send({"type": "http.response.body", "body": b"gallery"})

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(ServeGuard(hello, **guard), host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.05)
    try:
        assert server.started, f"uvicorn did not start on {host} port {port}"  # not a refused connection later
        yield f"http://{url_host(host)}:{port}", port
    finally:
        server.should_exit = True
        thread.join(10)
