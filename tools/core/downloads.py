"""Downloading pinned files: the bytes are checked against a SHA-256 before anything uses them."""

from __future__ import annotations

import hashlib
import urllib.request

from pictrieve.errors import PictrieveError


class DownloadError(PictrieveError, RuntimeError):
    """The file could not be fetched, or its content is not the one pinned."""


def download_verified(url: str, sha256: str, *, timeout: float = 120.0) -> bytes:
    """The content at ``url`` if its SHA-256 is ``sha256``; :class:`DownloadError` otherwise."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            payload = response.read()
    except OSError as exc:
        raise DownloadError(f"could not download {url} ({exc})") from exc
    digest = hashlib.sha256(payload).hexdigest()
    if digest != sha256:
        raise DownloadError(f"{url} has SHA-256 {digest}, expected {sha256}; refusing it")
    return payload
