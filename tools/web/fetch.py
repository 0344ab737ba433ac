"""Fetching web pages safely: the security boundary between the Vision Search Assistant and the web.

A search result's URL comes from the internet, so opening it must not let a page (or a planted
search result) reach this machine's own services. :func:`fetch_page`:

- accepts ``http`` and ``https`` only;
- resolves the host and refuses loopback, private, link-local, multicast, reserved and cloud
  metadata addresses (169.254.169.254 and friends), and re-checks every redirect target itself
  (redirects are followed by hand, never by the HTTP library);
- caps the bytes read (``max_bytes``) and the time spent (``timeout``);
- reads only textual content types (HTML, plain text, Markdown, XML);
- extracts the readable text with trafilatura (plain text and Markdown: their paragraphs, unwrapped).

Tests need a loopback server; they pass ``allow_hosts={"127.0.0.1"}`` explicitly. The default
allows nothing private.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import urljoin, urlsplit

import requests

from pictrieve.errors import PictrieveError

MAX_BYTES = 2_000_000
TIMEOUT_S = 10.0
MAX_REDIRECTS = 5
TEXT_TYPES = ("text/html", "text/plain", "text/markdown", "application/xhtml+xml", "text/xml", "application/xml")
METADATA_HOSTS = {"metadata.google.internal", "metadata", "instance-data"}


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


def _address_is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not (
        ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast or ip.is_reserved
        or ip.is_unspecified or str(ip) in {"169.254.169.254", "100.100.100.200", "fd00:ec2::254"}
        or (isinstance(ip, ipaddress.IPv4Address) and ip in ipaddress.ip_network("100.64.0.0/10"))
    )


def check_url(url: str, *, allow_hosts: Iterable[str] = ()) -> str:
    """Return ``url`` if it is safe to fetch, else raise :class:`UnsafeURLError` (or :class:`FetchError`
    when its host cannot be resolved).

    ``allow_hosts`` names hosts (or addresses) exempt from the address check; meant for tests with
    a local server, never for production use.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise UnsafeURLError(f"refusing {url!r}: only http and https pages are fetched")
    host = (parts.hostname or "").lower()
    if not host:
        raise UnsafeURLError(f"refusing {url!r}: no host")
    if host in set(allow_hosts):
        return url
    if host in METADATA_HOSTS or host.endswith(".internal") or host == "localhost" or host.endswith(".localhost"):
        raise UnsafeURLError(f"refusing {url!r}: {host} is a local or metadata host")
    try:
        infos = socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:  # a network failure, not a refusal: nothing was fetched
        raise FetchError(f"could not fetch {url}: cannot resolve {host} ({exc})") from exc
    for info in infos:
        address = str(info[4][0])
        if not _address_is_public(address):
            raise UnsafeURLError(f"refusing {url!r}: {host} resolves to the non-public address {address}")
    return url


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
    session: requests.Session | None = None,
) -> FetchedPage:
    """Fetch ``url`` within the caps and return its readable text (see the module docstring)."""
    allow = set(allow_hosts)
    http = session or requests.Session()
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        check_url(current, allow_hosts=allow)
        try:
            response = http.get(current, timeout=timeout, stream=True, allow_redirects=False,
                                headers={"User-Agent": "pictrieve-vsa/0.1 (+https://github.com/)"})
        except requests.RequestException as exc:
            raise FetchError(f"could not fetch {current}: {exc}") from exc
        if response.is_redirect or response.status_code in (301, 302, 303, 307, 308):
            location = response.headers.get("Location")
            response.close()
            if not location:
                raise FetchError(f"{current} redirects nowhere")
            current = urljoin(current, location)
            continue
        break
    else:
        raise FetchError(f"too many redirects from {url}")
    with response:
        if response.status_code >= 400:
            raise FetchError(f"{current} answered HTTP {response.status_code}")
        content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type and not content_type.startswith(TEXT_TYPES):
            raise FetchError(f"{current} is {content_type}, not a text page")
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > max_bytes:
            raise FetchError(f"{current} is {declared} bytes, over the {max_bytes}-byte cap")
        chunks, size = [], 0
        for chunk in response.iter_content(65536):
            size += len(chunk)
            if size > max_bytes:
                raise FetchError(f"{current} is over the {max_bytes}-byte cap")
            chunks.append(chunk)
        encoding = response.encoding or "utf-8"
    body = b"".join(chunks).decode(encoding, errors="replace")
    title, text = extract_text(body, content_type or "text/html", current)
    if max_chars is not None:
        text = text[:max_chars]
    return FetchedPage(url=current, title=title or current, text=text, content_type=content_type)
