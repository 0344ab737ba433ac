"""``helpers.free_port`` and ``free_ports``: the ports every test server, and each Ray node, is started on.

Two probes of the kernel's ``bind(0)`` once gave one port to two of a Ray head's components, and ``ray start``
exited (``ValueError: ... trying to use a port number ... that is used by other components``)."""

from __future__ import annotations

import socket

import pytest

import helpers
from helpers import free_ports, has_ipv6_loopback, ports_below_the_kernels


def test_ports_are_distinct_and_never_the_kernels_own_nor_ray_workers():
    window = ports_below_the_kernels()
    ports = free_ports(15)
    assert len(set(ports)) == 15
    if window:  # (a machine whose ephemeral range starts too low gets the kernel's probes, held at once)
        assert all(port in window for port in ports)


def test_no_port_is_handed_out_twice_nor_one_in_use(monkeypatch):
    """Every port below the kernel's range, once: none twice (a server may not have bound its port yet), none
    in use."""
    window = ports_below_the_kernels()
    if not window:
        pytest.skip("this machine's ephemeral port range leaves too few ports below it")
    monkeypatch.setattr(helpers, "_handed_out", set())  # this test takes them all; the other tests keep theirs
    held = [_listening(socket.AF_INET, "127.0.0.1", window)]
    if has_ipv6_loopback():
        held.append(_listening(socket.AF_INET6, "::1", window))  # a server on IPv6 only holds its port too
    taken = {sock.getsockname()[1] for sock in held}
    try:
        seen: list[int] = []
        with pytest.raises(RuntimeError, match="free ports"):
            for _ in range(len(window) // 1000 + 2):  # more than the range holds
                seen += free_ports(1000)
    finally:
        for sock in held:
            sock.close()
    assert len(seen) == len(set(seen)) > len(window) // 2
    assert len(taken) == len(held) and not taken & set(seen)


def test_the_kernels_probes_held_at_once_repeat_nothing(monkeypatch):
    monkeypatch.setattr(helpers, "_handed_out", set())
    monkeypatch.setattr(helpers, "ports_below_the_kernels", lambda: range(0))
    first = free_ports(50)
    again = free_ports(50)
    assert len(set(first + again)) == 100 and set(first + again) <= helpers._handed_out


def _listening(family: int, address: str, window: range) -> socket.socket:
    """A socket listening on ``address`` at a free port of ``window``."""
    sock = socket.socket(family)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    for port in window:
        if helpers._bindable(port):
            sock.bind((address, port))
            sock.listen()
            return sock
    raise AssertionError("no free port to hold")
