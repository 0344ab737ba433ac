"""A real OpenAI-compatible model server for tests: ``transformers serve`` running the bundled SmolLM2-135M.

The fake in :mod:`helpers.openai_fake` answers what a test scripts, which is right for fault cases and control
flow; this one runs a real model behind the same HTTP API a user's Ollama, vLLM or llama.cpp server offers, so
the clients' real requests (chat templates, streaming, sampling settings, error bodies) meet a real server.

The server is pinned to one checkpoint (``transformers serve DIR``): it answers only requests that name that
directory as the model (anything else is HTTP 400), which is what :attr:`ModelServer.model` gives. Nothing is
downloaded: the checkpoint is the one ``pictrieve fetch-models`` converted, and the server runs with the hub
switched off. Its log (``log``) holds uvicorn's access lines, so a test can see that a command really called it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from helpers import free_port, stop_process

STARTUP_SECONDS = 240
"""How long the server may take to load the model and answer ``/health`` (about 20 s on an idle 2-core
machine; several times that beside other jobs)."""


@dataclass
class ModelServer:
    """A started ``transformers serve``: its OpenAI base URL, the model name to ask for, its process and log."""

    base_url: str
    model: str
    process: subprocess.Popen
    log: Path

    @property
    def llm(self) -> str:
        """The pictrieve chat-model name for this server (``openai:<model>``), used with ``base_url``."""
        return f"openai:{self.model}"

    def completion_requests(self) -> int:
        """How many chat completions the server has been asked for so far (its access log's lines)."""
        return sum("POST /v1/chat/completions" in line for line in self.log.read_text(errors="replace").splitlines())

    def stop(self) -> None:
        stop_process(self.process)


def serving_command() -> list[str] | None:
    """The ``transformers serve`` command of this Python's environment, or None when it cannot serve here
    (the ``transformers`` script missing, or FastAPI/uvicorn, which its serving needs, not installed)."""
    script = Path(sys.executable).parent / "transformers"
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return None
    return [str(script), "serve"] if script.is_file() else None


def start_model_server(checkpoint: Path, workdir: Path) -> ModelServer:
    """Start ``transformers serve`` on a free loopback port, pinned to ``checkpoint``, and wait until it is
    healthy; raises RuntimeError with the end of its log if it exits or stays unhealthy."""
    command = serving_command()
    if command is None:
        raise RuntimeError("transformers serve is not available in this environment")
    port = free_port()
    log = workdir / "transformers-serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(workdir / "hf"),
           "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    with log.open("wb") as out:
        process = subprocess.Popen([*command, str(checkpoint), "--host", "127.0.0.1", "--port", str(port),
                                    "--device", "cpu", "--dtype", "float32"],
                                   stdout=out, stderr=subprocess.STDOUT, cwd=workdir, env=env)
    server = ModelServer(f"http://127.0.0.1:{port}/v1", str(checkpoint), process, log)
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"transformers serve exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as reply:
                if reply.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(1)
    server.stop()
    raise RuntimeError(f"transformers serve was not healthy in {STARTUP_SECONDS} s:\n{log.read_text()[-3000:]}")
