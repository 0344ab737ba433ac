"""What several test modules share, in one place: plain functions, fakes and fixtures that tests import.

``tests/`` is on ``sys.path`` while pytest runs (it holds the root ``conftest.py`` and no ``__init__.py``:
pytest's default import mode puts it there), so a test module imports ``from helpers.<module> import ...``.
Fixtures that only some modules use live here and are imported by those modules (pytest registers an
imported fixture in the importing module); fixtures every module may use live in ``tests/conftest.py``.
No test module imports another test module: what two of them share moves here.

- this module: the repository's paths, small random photos, free ports, stopping a started server
- ``isolated_home``: the session's own home and caches (started by conftest), and the guard on the real home
- ``home_audit``: the audit hook that logs the test processes' own writes under the real home
- ``plugir_fakes``, ``qc2_fakes``, ``vsa_fakes``, ``visret_fakes``, ``needle_fakes``: each method's stand-ins
  and shared fixtures (control flow only, never a quality claim)
- ``galleries``: small real galleries built with the tiny random CLIP model
- ``stores``: a new gallery of each store (Chroma, in memory) opened the same way, for contract tests
- ``chroma``: a real ``chroma run`` server started and stopped (the ``chroma_server`` fixture)
- ``chat_checkpoints``: a tiny local chat-model checkpoint and a private cache
- ``openai_fake``: a local OpenAI-compatible endpoint and a dead one
- ``canary``: a loopback listener that records every connection (a server must never reach it)
- ``cli``: the ``pictrieve`` command in a subprocess
- ``langgraph_dev``: the real ``langgraph dev`` started and stopped
- ``web_page``: the web page served by uvicorn, driven in headless Chromium
- ``mcp``: ``pictrieve mcp`` started for real, with the official MCP client
- ``method_plugins``: method plugins installed the way pip would
- ``benchmark_scripts``: the scripts of ``benchmarks/`` imported as modules
"""

from __future__ import annotations

import errno
import os
import random
import socket
import subprocess
from pathlib import Path

import numpy as np
from PIL import Image

REPO_ROOT = Path(__file__).resolve().parents[2]
FLICKR8K_DEV = Path(os.environ.get("PICTRIEVE_FLICKR8K_DEV", REPO_ROOT.parent / "shared" / "datasets" / "flickr8k-dev"))


# Ray starts its workers on ports 10002-19999 unless told otherwise; ours sit between those and the kernel's own.
_BELOW_EPHEMERAL_FROM = 20_000
_FEWEST_BELOW = 2_000  # a kernel range that leaves fewer below it: take the kernel's probes instead
_handed_out: set[int] = set()  # never handed out twice by one test process: a server may not have bound it yet


def free_port() -> int:
    """A TCP port free now that no other process is handed meanwhile (see :func:`free_ports`); a server started
    on it can still fail to bind it (another program chose it on purpose): callers retry with another port."""
    return free_ports(1)[0]


def ports_below_the_kernels() -> range:
    """The ports :func:`free_ports` chooses from: above Ray's worker ports, below the kernel's ephemeral range
    (empty when that range starts too low to leave enough)."""
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ephemeral.read_text().split()[0]) if ephemeral.is_file() else 32_768  # Linux's default
    return range(_BELOW_EPHEMERAL_FROM, low) if low - _BELOW_EPHEMERAL_FROM >= _FEWEST_BELOW else range(0)


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports, free now, none handed out before by this process: for servers, and for a
    program that must be given all its ports up front (a Ray node: a port given twice, or taken before the node
    binds it, makes ``ray start`` exit).

    The kernel's ``bind(0)`` can give a just-closed port out again (two probes once returned one port to two of a
    Ray head's components), and any port of its ephemeral range can go to another ``bind(0)`` or an outgoing
    connection before the server binds it. So these come from below that range, where the kernel hands out no
    port by itself, each checked free on every address (IPv4 and IPv6). On a machine whose ephemeral range leaves
    too few below it, the kernel's probes are used, all held at once so that none repeats."""
    window = ports_below_the_kernels()
    if not window:
        return _kernel_probes(count)
    candidates = [port for port in window if port not in _handed_out]
    random.shuffle(candidates)  # test processes running at once rarely pick the same ones
    ports: list[int] = []
    for port in candidates:
        if _bindable(port):
            ports.append(port)
            if len(ports) == count:
                _handed_out.update(ports)
                return ports
    raise RuntimeError(f"found only {len(ports)} of {count} free ports in {window.start}-{window.stop - 1}")


def _bindable(port: int) -> bool:
    """Whether nothing holds ``port`` on any IPv4 or IPv6 address now."""
    with socket.socket() as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    try:
        sock = socket.socket(socket.AF_INET6)
    except OSError:  # no IPv6 on this machine: nothing can hold the port there
        return True
    with sock:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind(("::", port))
        except OSError as exc:
            return exc.errno == errno.EADDRNOTAVAIL  # no IPv6 address here: nothing can hold the port there
    return True


def has_ipv6_loopback() -> bool:
    """Whether this machine can listen on ``::1`` (containers often have no IPv6)."""
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


def _kernel_probes(count: int) -> list[int]:
    """``count`` ports from the kernel's ``bind(0)``, all held until every one is chosen so that none repeats."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket()
            held.append(sock)
            sock.bind(("", 0))
            if sock.getsockname()[1] not in _handed_out:  # one handed out before stays held, so is not offered again
                ports.append(sock.getsockname()[1])
    finally:
        for sock in held:
            sock.close()
    _handed_out.update(ports)
    return ports


def stop_process(process: subprocess.Popen, grace: float = 30) -> None:
    """Stop a started server: terminate, and kill it if it has not ended within ``grace`` seconds (a server
    waiting on open connections must neither outlive the test nor replace its error with a timeout)."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def make_photo(path: Path, seed: int, size: tuple[int, int] = (48, 40)) -> Path:
    """Write a small random RGB image (distinct content per seed)."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, size=(size[1], size[0], 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)
    return path
