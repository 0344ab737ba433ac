"""Gallery in Chroma server mode, against a real `chroma run` on 127.0.0.1."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pictrieve.vectorstore.gallery import Gallery, GalleryError

pytestmark = pytest.mark.server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def chroma_server(tmp_path):
    executable = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
    if not Path(executable).exists():
        pytest.skip("the `chroma` command (from chromadb) is not installed")
    port = _free_port()
    process = subprocess.Popen(
        [executable, "run", "--path", str(tmp_path / "server-data"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"chroma run did not start on {url}")
            time.sleep(0.3)
    yield url
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def test_gallery_over_http(chroma_server, photo_folder, tiny_clip_embedder):
    gallery = Gallery.open(chroma_server, tiny_clip_embedder)
    assert gallery.add(photo_folder, progress=False).indexed == 6
    target = photo_folder / "a" / "img1.png"
    assert gallery.search_image(target, k=1)[0].path == str(target)

    reopened = Gallery.open(chroma_server)  # the server remembers the embedder
    assert reopened.embedder_name == tiny_clip_embedder.name and reopened.count() == 6
    assert reopened.add(photo_folder, progress=False).unchanged == 6


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(GalleryError, match="cannot reach the Chroma server.*chroma run"):
        Gallery.open(f"http://127.0.0.1:{_free_port()}", "offline")
