"""Fetching web pages safely: the security boundary between the Vision Search Assistant and the web.

A search result's URL comes from the internet, so opening it must not let a page (or a planted
search result) reach this machine's own services. :func:`fetch_page`:

- accepts ``http`` and ``https`` only;
- resolves the host once and refuses it when any of its addresses is not globally reachable (loopback,
  private, shared, link-local, site-local, multicast, reserved, a cloud metadata address such as
  169.254.169.254) or embeds an IPv4 address that is not (IPv4-mapped, 6to4, Teredo, NAT64), then connects to an
  address it checked, never to what a second lookup answers: the name is not resolved again, so a name
  whose answers change between lookups (DNS rebinding: a public address for the check, 127.0.0.1 for the
  connection) cannot lead it anywhere it did not check. The request still names the host (``Host``
  header; for HTTPS the TLS server name and the certificate check), and every redirect target is checked
  and pinned the same way (redirects are followed by hand, never by the HTTP library);
- connects directly, never through a proxy named in the environment (a proxy would resolve the name
  again, out of our sight);
- caps the bytes read (``max_bytes``) and the time spent (``timeout``);
- reads only textual content types (HTML, plain text, Markdown, XML);
- extracts the readable text with trafilatura (plain text and Markdown: their paragraphs, unwrapped).

Tests need a loopback server; they pass ``allow_hosts={"127.0.0.1"}`` explicitly (an allowed host is still
resolved once and connected to at that address). The default allows nothing private.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Any, Iterable
from urllib.parse import urljoin, urlsplit

import urllib3

from pictrieve.errors import PictrieveError

MAX_BYTES = 2_000_000
TIMEOUT_S = 10.0
MAX_REDIRECTS = 5
TEXT_TYPES = ("text/html", "text/plain", "text/markdown", "application/xhtml+xml", "text/xml", "application/xml")
METADATA_HOSTS = {"metadata.google.internal", "metadata", "instance-data"}
USER_AGENT = "pictrieve-vsa/0.1 (+https://github.com/)"


class UnsafeURLError(PictrieveError, ValueError):
    """The URL points somewhere a fetched page must never come from (or uses a forbidden scheme)."""


class FetchError(PictrieveError, RuntimeError):
    """The page could not be fetched within the caps (size, time, content type, status)."""


@dataclass(frozen=True)
class FetchedPage:
    url: str
    title: str
    text: str
    content_type: str


_NOT_PUBLIC_V6 = tuple(ipaddress.ip_network(n) for n in ("::/96", "fec0::/10", "64:ff9b:1::/48", "100::/64"))
"""IPv6 ranges no page comes from, which this Python's ``is_global`` may still call global: IPv4-compatible
(deprecated), site-local (deprecated), local-use NAT64 (RFC 8215) and discard-only."""
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to: 6to4 (``2002:7f00:1::`` is 127.0.0.1), Teredo (its server
    and client), the NAT64 well-known prefix."""
    found = [ip.sixtofour, *(ip.teredo or ())]
    if ip in _NAT64:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return [address for address in found if address is not None]


def _address_is_public(address: str) -> bool:
    """Whether ``address`` is one a page on the internet may come from: globally reachable (``is_global``:
    no loopback, private, shared, link-local, documentation or reserved range), not multicast, not a cloud
    metadata address, and every IPv4 address it embeds (IPv4-mapped, 6to4, Teredo, NAT64) public too."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return _address_is_public(str(ip.ipv4_mapped))
        if any(ip in network for network in _NOT_PUBLIC_V6):
            return False
        if not all(_address_is_public(str(embedded)) for embedded in _embedded_ipv4(ip)):
            return False
    return ip.is_global and not (
        ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast or ip.is_reserved
        or ip.is_unspecified or str(ip) in {"169.254.169.254", "100.100.100.200", "fd00:ec2::254"}
    )


def check_url(url: str, *, allow_hosts: Iterable[str] = ()) -> str:
    """Return ``url`` if it is safe to fetch, else raise :class:`UnsafeURLError` (or :class:`FetchError`
    when its host cannot be resolved). :func:`fetch_page` uses :func:`checked_addresses`, which also gives
    the addresses checked, to connect to one of them.

    ``allow_hosts`` names hosts (or addresses) exempt from the address check; meant for tests with
    a local server, never for production use.
    """
    checked_addresses(url, allow_hosts=allow_hosts)
    return url


def checked_addresses(url: str, *, allow_hosts: Iterable[str] = ()) -> list[str]:
    """The addresses of ``url``'s host, resolved once and each checked to be public (see :func:`check_url`);
    a connection for ``url`` must go to one of these, never to a fresh lookup of the name."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise UnsafeURLError(f"refusing {url!r}: only http and https pages are fetched")
    host = (parts.hostname or "").lower()
    if not host:
        raise UnsafeURLError(f"refusing {url!r}: no host")
    allowed = host in set(allow_hosts)
    if not allowed and (host in METADATA_HOSTS or host.endswith(".internal") or host == "localhost"
                        or host.endswith(".localhost")):
        raise UnsafeURLError(f"refusing {url!r}: {host} is a local or metadata host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError) as exc:  # a network failure, not a refusal: nothing fetched
        raise FetchError(f"could not fetch {url}: cannot resolve {host} ({exc})") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        if not allowed and not _address_is_public(address):
            raise UnsafeURLError(f"refusing {url!r}: {host} resolves to the non-public address {address}")
    if not addresses:
        raise FetchError(f"could not fetch {url}: {host} has no address")
    return addresses


def _get_pinned(url: str, addresses: list[str], timeout: float) -> Any:
    """GET ``url`` (no redirect followed) over a connection to the first of ``addresses`` that answers; the
    request names ``url``'s host (``Host``; for HTTPS the TLS server name and the certificate's name), so the
    server sees what a browser would send, while the name is never looked up again."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    shown_host = f"[{host}]" if ":" in host else host
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {**urllib3.util.make_headers(accept_encoding=True), "User-Agent": USER_AGENT,
               "Host": shown_host if parts.port is None else f"{shown_host}:{parts.port}"}
    limits = urllib3.Timeout(connect=timeout, read=timeout)
    failure: Exception | None = None
    for address in addresses:
        if parts.scheme == "https":
            pool: Any = urllib3.HTTPSConnectionPool(address, port, timeout=limits, retries=False, maxsize=1,
                                                    server_hostname=host, assert_hostname=host,
                                                    cert_reqs="CERT_REQUIRED", ca_certs=_ca_bundle())
        else:
            pool = urllib3.HTTPConnectionPool(address, port, timeout=limits, retries=False, maxsize=1)
        try:
            return pool.urlopen("GET", target, headers=headers, redirect=False, retries=False,
                                preload_content=False, assert_same_host=False)
        except urllib3.exceptions.NewConnectionError as exc:  # this address does not answer: the next checked one
            failure = exc
            pool.close()
        except urllib3.exceptions.HTTPError as exc:
            pool.close()
            raise FetchError(f"could not fetch {url}: {exc}") from exc
    raise FetchError(f"could not fetch {url}: {failure}")


def extract_text(body: str, content_type: str, url: str = "") -> tuple[str, str]:
    """(title, readable text) of a page, one paragraph per line: trafilatura for HTML; plain text and
    Markdown with hard-wrapped paragraphs joined (:func:`~pictrieve.tools.web.page_text.unwrap_paragraphs`)."""
    if "html" not in content_type and "xml" not in content_type:
        from pictrieve.tools.web.page_text import unwrap_paragraphs

        text = unwrap_paragraphs(body)
        first = text.splitlines()[0] if text else ""
        return first.lstrip("# ").strip(), text
    import trafilatura

    text = trafilatura.extract(body, url=url or None, include_comments=False, include_tables=True) or ""
    title = ""
    try:
        metadata = trafilatura.extract_metadata(body)
        title = (metadata.title if metadata else "") or ""
    except Exception:  # noqa: BLE001 - a title is a nicety
        title = ""
    return title, text.strip()


def fetch_page(
    url: str,
    *,
    max_bytes: int = MAX_BYTES,
    timeout: float = TIMEOUT_S,
    max_chars: int | None = 8192,
    allow_hosts: Iterable[str] = (),
) -> FetchedPage:
    """Fetch ``url`` within the caps and return its readable text (see the module docstring)."""
    allow = set(allow_hosts)
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        response = _get_pinned(current, checked_addresses(current, allow_hosts=allow), timeout)
        if response.status in (301, 302, 303, 307, 308):
            location = response.headers.get("Location")
            response.release_conn()
            if not location:
                raise FetchError(f"{current} redirects nowhere")
            current = urljoin(current, location)
            continue
        break
    else:
        raise FetchError(f"too many redirects from {url}")
    try:
        if response.status >= 400:
            raise FetchError(f"{current} answered HTTP {response.status}")
        content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type and not content_type.startswith(TEXT_TYPES):
            raise FetchError(f"{current} is {content_type}, not a text page")
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > max_bytes:
            raise FetchError(f"{current} is {declared} bytes, over the {max_bytes}-byte cap")
        chunks, size = [], 0
        try:
            for chunk in response.stream(65536, decode_content=True):
                size += len(chunk)
                if size > max_bytes:
                    raise FetchError(f"{current} is over the {max_bytes}-byte cap")
                chunks.append(chunk)
        except urllib3.exceptions.HTTPError as exc:
            raise FetchError(f"could not fetch {current}: {exc}") from exc
        encoding = _charset(response.headers.get("Content-Type", "")) or "utf-8"
    finally:
        response.release_conn()
    try:
        body = b"".join(chunks).decode(encoding, errors="replace")
    except LookupError:  # a charset Python does not know
        body = b"".join(chunks).decode("utf-8", errors="replace")
    title, text = extract_text(body, content_type or "text/html", current)
    if max_chars is not None:
        text = text[:max_chars]
    return FetchedPage(url=current, title=title or current, text=text, content_type=content_type)


def _ca_bundle() -> str:
    """The certificates HTTPS pages are checked against: ``REQUESTS_CA_BUNDLE`` or ``SSL_CERT_FILE`` when set
    (as requests, which fetched these pages before, honours them: a company's own CA), else certifi's."""
    for variable in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        if os.environ.get(variable):
            return os.environ[variable]
    import certifi

    return certifi.where()


def _charset(content_type: str) -> str | None:
    """The ``charset`` parameter of a ``Content-Type`` header, if any."""
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"\'')
    return None
