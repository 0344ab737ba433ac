"""Who may reach a local server: loopback addresses however spelt, and the rule that a server reachable
from other machines needs a bearer token.

Shared by the servers pictrieve starts (``pictrieve serve``'s HTTP guard; the same rule as ``pictrieve mcp``):
``--host`` is normalised once (:func:`normalise_host`), :func:`is_loopback` decides, and
:func:`check_exposure` refuses a non-loopback bind without a token, in one line.
"""

from __future__ import annotations

import ipaddress

from pictrieve.errors import PictrieveError


class ExposureError(PictrieveError, ValueError):
    """A server that would be reachable from other machines without a token."""


def normalise_host(host: str) -> str:
    """``host`` as one spelling: trimmed, brackets and case dropped, an IP address in its canonical form
    (``LOCALHOST`` -> ``localhost``, ``[0:0:0:0:0:0:0:1]`` -> ``::1``)."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text.lower().rstrip(".")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: ``localhost``, 127.0.0.0/8 or ``::1``, however spelt."""
    host = normalise_host(host)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """``host`` as it appears in a URL or a ``Host`` header (an IPv6 address in brackets)."""
    host = normalise_host(host)
    return f"[{host}]" if ":" in host else host


def header_host(value: str) -> str:
    """The host part of a ``Host`` header (``127.0.0.1:2024`` -> ``127.0.0.1``, ``[::1]:80`` -> ``::1``)."""
    text = value.strip()
    if text.startswith("["):
        return normalise_host(text[: text.find("]") + 1] if "]" in text else text)
    return normalise_host(text.rsplit(":", 1)[0] if text.count(":") == 1 else text)


def check_exposure(host: str, token: str | None, *, token_option: str = "--token", token_env: str = "") -> None:
    """Refuse a non-loopback ``host`` without a bearer token (anyone on the network could use the server),
    and a token that is blank (it would guard nothing, wherever the server listens)."""
    where = f"{token_option}" + (f" or ${token_env}" if token_env else "")
    if not is_loopback(host) and not (token or "").strip():
        raise ExposureError(f"--host {host} is reachable from other machines: set a bearer token with {where} "
                            "(clients send it as 'Authorization: Bearer <token>')")
    if token is not None and not token.strip():
        raise ExposureError(f"the token is blank: give {where} a secret value, or leave it out on loopback")
