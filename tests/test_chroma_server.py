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


def _heartbeat(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def _start_chroma(executable: str, data: Path, attempts: int = 5) -> tuple[subprocess.Popen, str]:
    """Start `chroma run` on a free port. A port found free can be taken before the server binds it
    (another test, another program): then the server exits, or a heartbeat never comes from *our*
    process, and we retry on a new port instead of failing or talking to a stranger."""
    for _ in range(attempts):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        process = subprocess.Popen(
            [executable, "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            if _heartbeat(url):
                time.sleep(0.2)
                if process.poll() is None:  # the answer came from our server, which is still up
                    return process, url
            time.sleep(0.3)
        process.kill()
        process.wait()
    pytest.fail(f"chroma run did not start after {attempts} attempts")


@pytest.fixture
def chroma_server(tmp_path):
    executable = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
    if not Path(executable).exists():
        pytest.skip("the `chroma` command (from chromadb) is not installed")
    process, url = _start_chroma(executable, tmp_path / "server-data")
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


def test_a_port_taken_before_the_server_binds_it_is_retried(tmp_path, monkeypatch):
    """The free-port race: the first port offered is already in use, so the server on it fails and
    the fixture must try another port rather than fail the test or talk to the port's owner."""
    executable = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
    if not Path(executable).exists():
        pytest.skip("the `chroma` command (from chromadb) is not installed")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        real_free_port = _free_port
        monkeypatch.setitem(globals(), "_free_port", lambda: next(ports, None) or real_free_port())
        process, url = _start_chroma(executable, tmp_path / "data")
        try:
            assert url != f"http://127.0.0.1:{taken.getsockname()[1]}" and _heartbeat(url)
        finally:
            process.kill()
            process.wait()


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(GalleryError, match="cannot reach the Chroma server.*chroma run"):
        Gallery.open(f"http://127.0.0.1:{_free_port()}", "offline")
