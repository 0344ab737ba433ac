"""``helpers.free_port`` and ``free_ports``: the ports every test server, and each Ray node, is started on.

Two probes of the kernel's ``bind(0)`` once gave one port to two of a Ray head's components, and ``ray start``
exited (``ValueError: ... trying to use a port number ... that is used by other components``)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import helpers
from helpers import free_ports


def _kernel_range_starts() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_ports_are_never_the_kernels_own_nor_ray_workers():
    low = _kernel_range_starts()
    ports = free_ports(15)
    assert len(set(ports)) == 15
    assert all(20_000 <= port < low for port in ports)


def test_no_port_is_handed_out_twice_nor_one_in_use(monkeypatch):
    """Every port of the range, once: none twice (a server may not have bound its port yet), none in use."""
    monkeypatch.setattr(helpers, "_handed_out", set())  # this test takes them all; the other tests keep theirs
    with socket.socket() as held:
        for port in range(20_000, _kernel_range_starts()):
            try:
                held.bind(("127.0.0.1", port))
                break
            except OSError:
                continue
        held.listen()
        seen: list[int] = []
        with pytest.raises(RuntimeError, match="free ports"):
            for _ in range(20):  # 20,000 ports: more than the range holds
                seen += free_ports(1000)
    assert len(seen) == len(set(seen)) > 10_000
    assert port not in seen
