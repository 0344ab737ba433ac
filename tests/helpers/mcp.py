"""Starting ``pictrieve mcp`` for real and connecting the official Python MCP client to it (stdio or HTTP).

The server is the command a person runs (``python -m pictrieve.cli.main mcp ...``, the session's isolated
home and caches in its environment); nothing of it is replaced.
"""

from __future__ import annotations

import base64
import io
import os
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, AsyncIterator

import numpy as np
import pytest
from PIL import Image

from helpers import free_port, stop_process
from helpers.vsa_fakes import PAGES, save_tiny_owlvit

MCP_COMMAND = [sys.executable, "-m", "pictrieve.cli.main", "mcp"]
CALL_TIMEOUT = timedelta(seconds=600)


def server_env() -> dict[str, str]:
    """The test session's environment (isolated home and caches), with one torch thread."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@asynccontextmanager
async def stdio_session(args: list[str], env: dict[str, str] | None = None, **session_kwargs: Any) -> AsyncIterator[Any]:
    """A Python MCP client session with a fresh ``pictrieve mcp ARGS`` over stdio (the client starts it), in
    ``env`` (default: :func:`server_env`)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=MCP_COMMAND[0], args=[*MCP_COMMAND[1:], *args], env=env or server_env())
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT, **session_kwargs) as session:
            await session.initialize()
            yield session


class HttpServer:
    """``pictrieve mcp --transport http ARGS`` in a subprocess on a free loopback port, until ``stop()``."""

    def __init__(self, args: list[str], token: str | None = None, *, wait: float = 180.0, host: str | None = None,
                 address: str = "127.0.0.1") -> None:
        """``host``: the ``--host`` given (default: none, the command's own); ``address``: where it listens, as
        a client connects to it (an IPv6 address without brackets)."""
        self.token, self.address = token, address
        hosting = ["--host", host] if host is not None else []
        for _attempt in range(3):  # a free port may be taken between the probe and the bind: try another
            self.port = free_port()
            self.log = Path(os.environ.get("PICTRIEVE_CACHE", "/tmp")) / f"mcp-http-{self.port}.log"
            env = {key: value for key, value in server_env().items() if key != "PICTRIEVE_MCP_TOKEN"}
            if token:
                env["PICTRIEVE_MCP_TOKEN"] = token  # the variable, as a person would set it
            with open(self.log, "wb") as log:
                self.process = subprocess.Popen([*MCP_COMMAND, "--transport", "http", "--port", str(self.port),
                                                 *hosting, *args],
                                                env=env, stdout=log, stderr=subprocess.STDOUT)
            if self._wait_listening(wait):
                return
            self.stop()
        raise RuntimeError(f"pictrieve mcp --transport http did not start:\n{self.output()}")

    @property
    def url(self) -> str:
        return f"http://{f'[{self.address}]' if ':' in self.address else self.address}:{self.port}/mcp"

    def _wait_listening(self, wait: float) -> bool:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with socket.socket(socket.AF_INET6 if ":" in self.address else socket.AF_INET) as probe:
                if probe.connect_ex((self.address, self.port)) == 0:
                    return True
            time.sleep(0.2)
        return False

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        stop_process(self.process, grace=20)

    @asynccontextmanager
    async def session(self, token: str | None = None, **session_kwargs: Any) -> AsyncIterator[Any]:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        token = self.token if token is None else token
        headers = {"Authorization": f"Bearer {token}"} if token else None
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(self.url, http_client=http) as (read, write, _session_id):
                async with ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT, **session_kwargs) as session:
                    await session.initialize()
                    yield session


# --- what comes back --------------------------------------------------------------------------------------


def pictures(result: Any) -> list[Image.Image]:
    """The image content of a tool result, decoded (each checked to be a JPEG)."""
    out = []
    for block in result.content:
        if block.type == "image":
            assert block.mimeType == "image/jpeg"
            picture = Image.open(io.BytesIO(base64.b64decode(block.data)))
            assert picture.format == "JPEG"
            out.append(picture)
    return out


def error_text(result: Any) -> str:
    """The one line of a tool error (checked to be an error of one text line)."""
    assert result.isError, result
    assert len(result.content) == 1 and result.content[0].type == "text"
    text = result.content[0].text
    assert text.strip() and "\n" not in text and "Traceback" not in text, text
    return text


def mean_colour(image: Image.Image) -> np.ndarray:
    return np.asarray(image.convert("RGB"), dtype=float).reshape(-1, 3).mean(axis=0)


def image_data(image: Image.Image, fmt: str = "PNG") -> str:
    out = io.BytesIO()
    image.save(out, format=fmt)
    return base64.b64encode(out.getvalue()).decode("ascii")


# --- the gallery and folders a served `pictrieve mcp` works on (Python and TypeScript clients alike) ---

COLOURS = {"a red square": (220, 30, 30), "a green field": (30, 200, 40), "a blue sky": (40, 60, 230),
           "a brown horse in a field": (120, 80, 40)}
TOOLS = {"search_images", "search_by_image", "ask_about_image", "ask_gallery", "find_photo", "answer_question",
         "start_method", "answer_method",
         "gallery_info", "find_duplicates"}
SECRET = "TOP-SECRET-LINE-7731"


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_clip_name):
    """A gallery of four coloured photos (captioned), an allowed folder, files outside it, and the server's
    arguments."""
    from pictrieve.vectorstore.gallery import Gallery
    from pictrieve.vectorstore.relevance import store_cutoff

    root = tmp_path_factory.mktemp("mcp")
    rng = np.random.default_rng(0)
    for i, (caption, colour) in enumerate(COLOURS.items()):
        pixels = np.clip(np.array(colour) + rng.integers(-6, 7, size=(600, 800, 3)), 0, 255).astype(np.uint8)
        (root / "photos").mkdir(exist_ok=True)
        Image.fromarray(pixels).save(root / "photos" / f"{i}.jpg", quality=90)
        (root / "photos" / f"{i}.txt").write_text(caption + "\n")
    gallery = Gallery.open(root / "gallery", tiny_clip_name)
    gallery.add(root / "photos", progress=False)
    ids = {item.captions[0]: item.id for item in gallery.items()}
    # a relevance cutoff between the best and the second hit of "a red square": one photo matches it well
    scores = [h.score for h in gallery.search_text("a red square", k=2)]
    store_cutoff(gallery, (scores[0] + scores[1]) / 2, {"criterion": "test: split 'a red square' after its best hit"})
    allowed, outside = root / "allowed", root / "outside"
    allowed.mkdir()
    outside.mkdir()
    Image.new("RGB", (300, 200), COLOURS["a blue sky"]).save(allowed / "inside.png")
    (allowed / "notes.txt").write_text(f"not a picture {SECRET}\n")
    (outside / "secret.txt").write_text(f"{SECRET}\n")
    Image.new("RGB", (30, 20), (1, 2, 3)).save(outside / "photo.png")
    (allowed / "link.png").symlink_to(outside / "photo.png")  # inside the folder, pointing outside it
    # a sibling whose name starts with the allowed folder's (a string-prefix check would let it in)
    (root / "allowed-evil").mkdir()
    Image.new("RGB", (30, 20), (4, 5, 6)).save(root / "allowed-evil" / "photo.png")
    noise = rng.integers(0, 255, size=(600, 600, 3), dtype=np.uint8)
    Image.fromarray(noise).save(allowed / "big.png")  # about 1 MB: above the server's --max-image-mb 0.5
    save_tiny_owlvit(root / "owl")  # finds nothing at its threshold: the whole photo is the one region
    args = ["-g", str(root / "gallery"), "--state-dir", str(root / "state"), "--search", f"local:{PAGES}",
            "--detector", f"zeroshot:{root / 'owl'}", "--allow-dir", str(allowed), "--max-image-mb", "0.5"]
    return SimpleNamespace(root=root, gallery=gallery, ids=ids, colour_of={ids[c]: COLOURS[c] for c in COLOURS},
                           paths={item.id: item.path for item in gallery.items()}, allowed=allowed, outside=outside,
                           args=args)
