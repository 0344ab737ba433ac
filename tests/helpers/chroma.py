"""A real ``chroma run`` server on 127.0.0.1, started and stopped by the test that uses it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from helpers import free_port, stop_process


def heartbeat(url: str) -> bool:
    """Whether a Chroma server answers at ``url``."""
    try:
        with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def chroma_executable() -> str:
    """The ``chroma`` command of this environment; skips the test when chromadb did not install it."""
    executable = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
    if not Path(executable).exists():
        pytest.skip("the `chroma` command (from chromadb) is not installed")
    return executable


def start_chroma(executable: str, data: Path, attempts: int = 5, port_source=None) -> tuple[subprocess.Popen, str]:
    """Start `chroma run` on a free port (``port_source()``, default :func:`free_port`). A port found free
    can be taken before the server binds it (another test, another program): then the server exits, or
    a heartbeat never comes from *our* process, and we retry on a new port instead of failing or talking
    to a stranger."""
    for _ in range(attempts):
        port = (port_source or free_port)()
        url = f"http://127.0.0.1:{port}"
        process = subprocess.Popen(
            [executable, "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            if heartbeat(url):
                time.sleep(0.2)
                if process.poll() is None:  # the answer came from our server, which is still up
                    return process, url
            time.sleep(0.3)
        process.kill()
        process.wait()
    pytest.fail(f"chroma run did not start after {attempts} attempts")


@pytest.fixture
def chroma_server(tmp_path):
    """The URL of a fresh `chroma run` server on 127.0.0.1, stopped after the test."""
    process, url = start_chroma(chroma_executable(), tmp_path / "server-data")
    yield url
    stop_process(process, grace=20)
