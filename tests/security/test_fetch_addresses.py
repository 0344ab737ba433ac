"""The Ask fetcher's address rule (tools/web/fetch.py) and what it stands on (issue 38 review, findings 8 and 9):

- an IPv6 address that leads to a local IPv4 address (6to4 ``2002:7f00:1::1`` is 127.0.0.1, Teredo, NAT64) or
  lies in a range no page comes from (site-local ``fec0::/10``) was taken as public; each is refused now, with
  the name resolving to it (the resolver is replaced in process: nothing is looked up or connected to);
- the streamed read decompresses with urllib3, which before 2.6 inflated a whole chunk unbounded
  (CVE-2025-66471): the floor the package states admits no such version.
"""

from __future__ import annotations

import socket
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("address", [
    "2002:7f00:1::1",            # 6to4 of 127.0.0.1
    "2002:a00:1::1",             # 6to4 of 10.0.0.1
    "2002:a9fe:a9fe::1",         # 6to4 of 169.254.169.254 (cloud metadata)
    "fec0::1",                   # site-local (deprecated, still routed on some networks)
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo whose client is 127.0.0.1
    "64:ff9b::7f00:1",           # NAT64 of 127.0.0.1
    "64:ff9b:1::a00:1",          # local-use NAT64
    "::127.0.0.1",               # IPv4-compatible (deprecated)
    "::ffff:10.0.0.1", "ff0e::1", "100::1", "2001:db8::1", "100.64.0.1", "192.0.0.1", "198.18.0.1", "240.0.0.1",
])
def test_an_address_that_leads_somewhere_local_is_not_public(address, monkeypatch):
    from pictrieve.tools.web.fetch import UnsafeURLError, check_url

    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [(family, socket.SOCK_STREAM, 6, "", (address, 80))])
    with pytest.raises(UnsafeURLError, match="non-public address"):
        check_url("http://pages.example/")


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "2002:5db8:d822::1",
                                     "::ffff:93.184.216.34"])
def test_a_public_address_is_public(address):
    from pictrieve.tools.web.fetch import _address_is_public

    assert _address_is_public(address)


def _floor(requirements: list[str], name: str) -> tuple[int, ...]:
    spec = next(r for r in requirements if r.split(">=")[0].strip().lower() == name)
    return tuple(int(part) for part in spec.split(">=")[1].split(",")[0].strip().split("."))


def test_the_web_extra_asks_for_a_urllib3_that_bounds_what_a_chunk_decompresses_to():
    import urllib3

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert _floor(extras["web"], "urllib3") >= (2, 6)
    assert tuple(int(p) for p in urllib3.__version__.split(".")[:2]) >= (2, 6)
