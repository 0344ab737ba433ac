"""The web page (``pictrieve ui``) for tests: a small gallery, a job polled to its end, the app served by a
real uvicorn, and headless Chromium (Debian's ``chromium``, driven by playwright).

The gallery's first caption carries markup that the page must show as text, never run.
"""

from __future__ import annotations

import shutil
import threading
import time
from contextlib import contextmanager

import pytest

from helpers import free_port, make_photo

SCRIPT_CAPTION = "<script>window.__pwned = 1</script>a red square"
PAGE_ORIGIN = "http://127.0.0.1"
"""Where an in-process client says it is (a loopback Host the page's server accepts) and the Origin it sends."""
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def gallery(tmp_path_factory, tiny_clip_name):
    """Six small photos (tiny random CLIP); the first one's caption is ``SCRIPT_CAPTION``."""
    from pictrieve.vectorstore.gallery import Gallery

    root = tmp_path_factory.mktemp("ui")
    photos = root / "photos"
    for i in range(6):
        make_photo(photos / f"img{i}.png", seed=i, size=(64, 48))
    (photos / "img0.txt").write_text(SCRIPT_CAPTION + "\n")
    opened = Gallery.open(root / "gallery", tiny_clip_name)
    opened.add([photos])
    return opened


def page_client(app, raise_server_exceptions: bool = True):
    """A TestClient that calls ``app`` as the page itself does: a loopback ``Host`` and the page's own
    ``Origin`` (the server refuses other Hosts, and form uploads without proof of coming from the page)."""
    from fastapi.testclient import TestClient

    return TestClient(app, base_url=PAGE_ORIGIN, headers={"Origin": PAGE_ORIGIN},
                      raise_server_exceptions=raise_server_exceptions)


def finished(client, started, timeout=180):
    """Poll a job (``client``: a TestClient, or an httpx.Client on a served page) until it is done."""
    view = started
    deadline = time.time() + timeout
    while not view["done"]:
        assert time.time() < deadline, f"job still running: {view['steps']}"
        time.sleep(0.2)
        view = client.get(f"/api/jobs/{view['id']}").json()
    return view


def chat_step(client, response):
    """The chat view a chat request's job ends with (start and reply run as jobs)."""
    started = response.json()
    assert "error" not in started or not started["error"], started
    view = finished(client, started)
    assert not view["error"], view["error"]
    return view["result"]


@contextmanager
def serve(app):
    """``app`` on a free loopback port, served by a real uvicorn in a thread; yields its URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline and thread.is_alive():
        time.sleep(0.05)
    try:
        assert server.started, f"uvicorn did not start on port {port}"  # not a refused connection 30 s later
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (skips where Chromium or playwright is missing)."""
    if not CHROMIUM:
        pytest.skip("Chromium not found: install Debian's `chromium` package (.ci/run does as root) to run browser tests")
    sync_api = pytest.importorskip("playwright.sync_api", reason="browser tests need playwright (the 'test' extra)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    """A fresh 1200x800 page in its own browser context."""
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    opened = context.new_page()
    yield opened
    context.close()
