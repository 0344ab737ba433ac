"""Searching and reading pages for the Vision Search Assistant's searchers, and telling a failed search
from one that found nothing.

:func:`read_pages` runs one search and opens its new pages (web URLs through the fetch guard of
:mod:`pictrieve.tools.web.fetch`); a :func:`search_log` counts what was tried and keeps what failed, and
:func:`check_search_reached` stops the run when every search, or every page fetch, failed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from pictrieve.errors import PictrieveError

logger = logging.getLogger(__name__)


def search_log() -> dict[str, Any]:
    """An empty log of one searcher's searches and page fetches (what :func:`read_pages` fills)."""
    return {"searches": 0, "search_errors": [], "fetches": 0, "fetch_errors": []}


def read_pages(backend: Any, query: str, pages: list[dict[str, Any]], log: dict[str, Any], *, search_k: int,
               pages_per_search: int, page_chars: int, allow_hosts: Iterable[str] = ()) -> None:
    """Search ``query`` with ``backend`` and append up to ``pages_per_search`` unread pages to ``pages``
    (``{"number", "url", "title", "text"}``, numbered from 1 in the order read).

    A result with text (a local page) is read as it is; one with only a web URL is fetched through the
    guard (``allow_hosts`` exempts hosts: tests with a loopback server only), its snippet standing in
    when the fetch fails or is refused. ``log`` counts the searches and fetches and keeps what failed.
    """
    from pictrieve.tools.web.fetch import FetchError, fetch_page

    log["searches"] += 1
    try:
        results = backend.search(query, k=search_k)
    except PictrieveError as exc:
        log["search_errors"].append(exc.problem or str(exc))
        return
    read = {p["url"] for p in pages}
    added = 0
    for result in results:
        if added >= pages_per_search:
            break
        if result.url in read:
            continue
        text, title = result.text, result.title
        if not text and result.url.startswith(("http://", "https://")):
            try:
                log["fetches"] += 1
                page = fetch_page(result.url, max_chars=page_chars, allow_hosts=allow_hosts)
                text, title = page.text, title or page.title
            except PictrieveError as exc:  # refused by the guard, or failed: the snippet stands in
                logger.info("skipping %s: %s", result.url, exc)
                if isinstance(exc, FetchError):
                    log["fetch_errors"].append(str(exc))
                else:
                    log["fetches"] -= 1  # a refusal is the guard working, not a failed fetch
                text = result.snippet
        if text:
            pages.append({"number": len(pages) + 1, "url": result.url, "title": title or result.url,
                          "text": text[:page_chars]})
            read.add(result.url)
            added += 1


def check_search_reached(findings: list[dict[str, Any]], backend: Any) -> None:
    """Raise :class:`~pictrieve.tools.web.search.SearchUnavailableError` when every search so far failed
    (no network, a dead backend), or every page fetch did.

    A failed search is not a search that found nothing: answering "the search found nothing" would
    hide the failure. Some failures among successes stay in each finding's ``error``.
    """
    from pictrieve.tools.web.search import OFFLINE_SEARCH_HINT, SearchUnavailableError

    logs = [f["log"] for f in findings if f.get("log")]
    searches = sum(log["searches"] for log in logs)
    search_errors = [e for log in logs for e in log["search_errors"]]
    name = getattr(backend, "name", "the search backend")
    if searches and len(search_errors) == searches:
        raise SearchUnavailableError(f"every search failed ({searches} with {name}), e.g. {search_errors[0]}",
                                     fix=f"check the internet connection, or {OFFLINE_SEARCH_HINT}")
    fetches = sum(log["fetches"] for log in logs)
    fetch_errors = [e for log in logs for e in log["fetch_errors"]]
    if fetches and len(fetch_errors) == fetches:
        raise SearchUnavailableError(f"none of the {fetches} pages the search found could be opened, e.g. "
                                     f"{fetch_errors[0]}", fix=f"check the internet connection, or {OFFLINE_SEARCH_HINT}")
