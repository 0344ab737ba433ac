"""``pictrieve mcp --transport http`` keeps its guards however ``--host`` is spelt, and what else bounds a caller.

- DNS rebinding: bound to any loopback spelling (``LOCALHOST``, ``127.0.0.2``, ``0:0:0:0:0:0:0:1``, ``[::1]``,
  ...), a request whose ``Host`` is another name is refused (421), and a browser's request from a foreign origin,
  another local port included, is refused (403); the server's own origin, an origin the operator allowed and a
  program without ``Origin`` (the official client) work. The SDK alone guards only the exact strings
  ``127.0.0.1``, ``localhost`` and ``::1``.
- ``pictrieve://image/{id}`` sends no file above ``--max-image-mb``.
- A find_photo session takes one answer at a time: a second answer while the first runs is refused.

Every server is the real command in a subprocess (:class:`helpers.mcp.HttpServer`), reached on loopback only.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from PIL import Image

from helpers import make_photo
from helpers.mcp import HttpServer

pytestmark = pytest.mark.server

HELLO = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
STUDIO = "http://localhost:6274"
"""An origin the operator allows with --allow-origin (the MCP Inspector's)."""


@pytest.fixture(scope="module")
def gallery_args(tmp_path_factory, tiny_clip_name):
    """Two small photos and one larger than 0.5 MB; the server's arguments."""
    from pictrieve.vectorstore.gallery import Gallery

    root = tmp_path_factory.mktemp("guards")
    make_photo(root / "photos" / "small.png", seed=1, size=(64, 48))
    noise = np.random.default_rng(2).integers(0, 255, size=(600, 600, 3), dtype=np.uint8)
    Image.fromarray(noise).save(root / "photos" / "big.png")  # about 1 MB
    opened = Gallery.open(root / "gallery", tiny_clip_name)
    opened.add(root / "photos", progress=False)
    ids = {item.path.rsplit("/", 1)[-1]: item.id for item in opened.items()}
    return ids, ["-g", str(root / "gallery"), "--state-dir", str(root / "state"), "--max-image-mb", "0.5"]


SPELLINGS = [  # --host as given, and the address a client connects to
    ("127.0.0.1", "127.0.0.1"), ("localhost", "127.0.0.1"), ("LOCALHOST", "127.0.0.1"), ("127.0.0.2", "127.0.0.2"),
    ("::1", "::1"), ("[::1]", "::1"), ("0:0:0:0:0:0:0:1", "::1"), (" Localhost ", "127.0.0.1")]


@pytest.mark.parametrize(("host", "address"), SPELLINGS, ids=[h.strip() for h, _ in SPELLINGS])
async def test_every_loopback_spelling_refuses_foreign_hosts_and_origins(gallery_args, host, address):
    _ids, args = gallery_args
    server = HttpServer([*args, "--allow-origin", STUDIO + "/"], host=host, address=address)
    try:
        own = server.url.removesuffix("/mcp")  # http://ADDRESS:PORT, as a page of this server would send it

        def post(**headers):
            return httpx.post(server.url, json=HELLO, timeout=30,
                              headers={"Accept": "application/json, text/event-stream", **headers}).status_code

        assert post(Host="evil.example") == 421
        assert post(Host=f"evil.example:{server.port}") == 421
        assert post(Origin="http://evil.example") == 403
        assert post(Origin=f"http://127.0.0.1:{server.port + 1}") == 403  # a page on another local port
        assert post(Origin=f"http://localhost:{server.port + 1}") == 403
        assert post() == 200  # a program (no Origin)
        assert post(Origin=own) == 200
        assert post(Origin=f"http://localhost:{server.port}") == 200
        assert post(Origin=STUDIO) == 200  # allowed by the operator
        async with server.session() as session:  # the official client, as a person would connect
            info = await session.call_tool("gallery_info", {})
            assert not info.isError and info.structuredContent["images"] == 2
    finally:
        server.stop()


@pytest.fixture(scope="module")
def guarded(gallery_args):
    server = HttpServer(gallery_args[1])
    yield server
    server.stop()


async def test_the_image_resource_sends_no_file_above_the_size_cap(gallery_args, guarded):
    from mcp.shared.exceptions import McpError

    ids, _args = gallery_args
    async with guarded.session() as session:
        small = await session.read_resource(f"pictrieve://image/{ids['small.png']}")
        assert small.contents[0].mimeType == "image/png"
        with pytest.raises(McpError, match="larger than this server sends"):
            await session.read_resource(f"pictrieve://image/{ids['big.png']}")


def test_a_session_takes_one_answer_at_a_time():
    """While an answer is being worked on, a second answer to the same session is refused, not run beside it;
    another session goes on (PhotoSessions, run by the one session runner, over a stand-in graph that holds its
    first run until released)."""
    from pictrieve.graphs.registry import get_method
    from pictrieve.graphs.sessions import MethodSessions
    from pictrieve.mcp_server.sessions import PhotoSessions, SessionError

    entered, release = threading.Event(), threading.Event()
    question = {"round": 1, "question": "Is there a dog?", "options": [], "query": "a dog", "shown": []}

    class HeldGraph:
        runs = 0

        def get_state(self, config):
            return SimpleNamespace(values={"round": 1, "query": "a dog"}, next=("ask",),
                                   tasks=[SimpleNamespace(interrupts=[SimpleNamespace(value=question)])])

        def stream(self, inputs, config, **kwargs):
            HeldGraph.runs += 1
            if HeldGraph.runs == 1:
                entered.set()
                assert release.wait(60)
            return iter(())

    sessions = PhotoSessions(MethodSessions(get_method("plugir"), HeldGraph()))
    session, other = "a" * 32, "b" * 32
    first = threading.Thread(target=sessions.answer, args=(session, "no", lambda message: None))
    first.start()
    try:
        assert entered.wait(60)
        with pytest.raises(SessionError, match="this plugir session is still working on its last step"):
            sessions.answer(session, "yes", lambda message: None)
        assert HeldGraph.runs == 1  # the refused answer never reached the graph
        assert sessions.answer(other, "yes", lambda message: None)["session"] == other  # not held up
    finally:
        release.set()
        first.join(60)
    assert sessions.answer(session, "yes", lambda message: None)["round"] == 1  # free again afterwards


@pytest.mark.parametrize(("given", "spelling", "loopback"), [
    ("LOCALHOST", "localhost", True), (" localhost. ", "localhost", True), ("[::1]", "::1", True),
    ("0:0:0:0:0:0:0:1", "::1", True), ("127.0.0.2", "127.0.0.2", True), ("0.0.0.0", "0.0.0.0", False),
    ("::", "::", False), ("evil.example", "evil.example", False)])
def test_host_is_normalised_once_into_one_spelling(given, spelling, loopback):
    from pictrieve.tools.core.exposure import is_loopback, normalise_host
    from pictrieve.mcp_server.http import transport_security

    assert normalise_host(given) == spelling and is_loopback(given) is loopback
    security = transport_security(given, 8765)
    assert (security is not None) is loopback
    if loopback:
        assert security.enable_dns_rebinding_protection and "evil.example:*" not in security.allowed_hosts
