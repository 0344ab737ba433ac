"""Loopback servers a benchmark starts and stops: ``chroma run``, ``pictrieve ui``, ``langgraph dev``.

Each is started on a free 127.0.0.1 port and waited for until it answers; a port taken between
choosing it and binding it makes the server exit, and another port is tried. Logs go to the work folder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import httpx

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _executable(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(found).exists():
        raise SystemExit(f"the `{name}` command is missing from this environment")
    return found


@dataclass
class Server:
    """A server a benchmark started: its process, its URL and its log."""

    name: str
    process: subprocess.Popen
    url: str
    log: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(name: str, command: Callable[[int], list[str]], ready_path: str, workdir: Path,
                 env: dict[str, str] | None = None, wait_s: float = 240, attempts: int = 3) -> Server:
    """Start ``command(port)`` on a free loopback port and wait until ``ready_path`` answers 200. A port
    taken between choosing and binding makes the server exit: then another port is tried."""
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}  # log lines as they happen
    for _ in range(attempts):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log_path = workdir / f"{name}-{port}.log"
        with open(log_path, "w") as log_file:
            process = subprocess.Popen(command(port), cwd=workdir, env=environment, stdout=log_file,
                                       stderr=subprocess.STDOUT)
        server = Server(name, process, url, log_path)
        deadline = time.monotonic() + wait_s
        while process.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(url + ready_path, timeout=2, trust_env=False).status_code == 200:
                    log.info("%s ready at %s", name, url)
                    return server
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        server.stop()
    raise RuntimeError(f"{name} did not start; its log: {log_path}")


def start_chroma(data: Path, workdir: Path) -> Server:
    chroma = _executable("chroma")
    return start_server("chroma", lambda port: [chroma, "run", "--path", str(data), "--host", "127.0.0.1",
                                                "--port", str(port)], "/api/v2/heartbeat", workdir)


def start_ui(gallery: str, workdir: Path) -> Server:
    pictrieve = _executable("pictrieve")
    state = workdir / "ui-state"
    return start_server("ui", lambda port: [pictrieve, "ui", "--gallery", gallery, "--host", "127.0.0.1",
                                            "--port", str(port), "--state-dir", str(state)], "/api/status", workdir)


def start_langgraph(gallery: str, workdir: Path) -> Server:
    """``langgraph dev`` serving the repository's langgraph.json (its paths made absolute, so that the
    server keeps its state in ``workdir``) over ``gallery``."""
    spec = json.loads((REPO_ROOT / "langgraph.json").read_text())
    spec["graphs"] = {name: str(REPO_ROOT / target) for name, target in spec["graphs"].items()}
    spec["dependencies"] = [str(REPO_ROOT)]
    spec["http"] = {**spec["http"], "app": str(REPO_ROOT / spec["http"]["app"])}  # the guard of every route
    config = workdir / "langgraph.json"
    config.write_text(json.dumps(spec))
    langgraph = _executable("langgraph")
    env = {"PICTRIEVE_GALLERY": gallery, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false",
           "HF_HUB_OFFLINE": "1"}
    return start_server("langgraph", lambda port: [langgraph, "dev", "--config", str(config), "--host", "127.0.0.1",
                                                   "--port", str(port), "--no-browser", "--no-reload"],
                        "/ok", workdir, env)
