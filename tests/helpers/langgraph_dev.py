"""The real ``langgraph dev`` started on a config file, waited for, and stopped (tests that serve graphs).

``serve_repository`` serves the repository's own langgraph.json; ``start`` serves any config (a plugin's,
written by ``pictrieve serve --write-config``). A port taken between choosing and binding is retried.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO_ROOT, free_port, stop_process

LANGGRAPH_JSON = REPO_ROOT / "langgraph.json"


def start(config: Path, env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen, str]:
    """`langgraph dev` serving ``config`` in ``cwd`` (its log there) with ``env``; the process and its URL once
    it answers ``/ok`` (skips the test where the command is missing)."""
    executable = shutil.which("langgraph") or str(Path(sys.executable).with_name("langgraph"))
    if not Path(executable).exists():
        pytest.skip('the `langgraph` command is missing: pip install "pictrieve[serve]"')
    for _ in range(3):  # a port taken between choosing and binding: try another
        port = free_port()
        log = open(cwd / f"langgraph-{port}.log", "w")
        process = subprocess.Popen(
            [executable, "dev", "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
             "--no-browser", "--no-reload"],
            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        if answers(process, url):
            return process, url
        process.kill()
        process.wait()
    pytest.fail(f"langgraph dev did not start; log in {cwd}")


def answers(process: subprocess.Popen, url: str, seconds: float = 180) -> bool:
    """Whether the server ``process`` started answers ``url``/ok within ``seconds`` (False if it exits)."""
    import httpx

    deadline = time.monotonic() + seconds
    while process.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def serve_repository(root: Path, gallery: Path, **env: str) -> tuple[subprocess.Popen, str]:
    """`langgraph dev` serving the repository's langgraph.json over ``gallery``, working in ``root``.

    The repository's own langgraph.json, with its relative paths made absolute so that the server's
    working directory (where it keeps its state) can be a temporary folder.
    """
    spec = json.loads(LANGGRAPH_JSON.read_text())
    spec["graphs"] = {name: str(REPO_ROOT / target) for name, target in spec["graphs"].items()}
    spec["dependencies"] = [str(REPO_ROOT)]
    spec["http"] = {**spec["http"], "app": str(REPO_ROOT / spec["http"]["app"])}
    config = root / "langgraph.json"
    config.write_text(json.dumps(spec))
    return start(config, {**os.environ, "PICTRIEVE_GALLERY": str(gallery), "PICTRIEVE_CACHE": str(root / "cache"),
                           "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false", "HF_HUB_OFFLINE": "1",
                           **env}, root)


stop = stop_process  # a started `langgraph dev`: terminate, and kill it if it has not ended within 30 s
