"""Search backends of the Vision Search Assistant: one protocol, one registry.

A backend answers ``search(query, k) -> list[SearchResult]``. Backends:

- ``ddgs``: DuckDuckGo through the ``ddgs`` package (or the older ``duckduckgo_search``), with
  exponential backoff on its frequent rate-limit errors and then one clear error;
- ``local:<folder>``: the offline backend (:mod:`pictrieve.tools.web.local_pages`), a folder of pages
  indexed with all-MiniLM-L6-v2 in Chroma;
- any LangChain ``BaseRetriever`` or ``BaseTool`` the application already has:
  :func:`as_search_backend` wraps it.

Results carrying ``text`` (local pages, retrievers) need no fetching; web results carry a URL the
searcher opens through :func:`pictrieve.tools.web.fetch.fetch_page`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.registry import Registry, UnknownNameError
from pictrieve.tools.web.results import SearchBackend, SearchResult

logger = logging.getLogger(__name__)


class UnknownSearchBackendError(UnknownNameError):
    """No search backend has that name."""


class SearchUnavailableError(PictrieveError, RuntimeError):
    """The search backend cannot answer now (rate limited, offline, not installed)."""


OFFLINE_SEARCH_HINT = "search a folder of pages offline with --search local:DIR"
NO_RESULTS = "No results found."
"""What ddgs raises when its engines answered but found nothing (not a failure)."""


def short_reason(exc: BaseException | None, limit: int = 200) -> str:
    """``Type: message`` of an exception on one short line."""
    if exc is None:
        return "no answer"
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class DDGSearch:
    """DuckDuckGo text search with backoff on rate limits."""

    def __init__(self, *, retries: int = 3, backoff_s: float = 2.0, region: str = "wt-wt") -> None:
        self.name = "ddgs"
        self.retries, self.backoff_s, self.region = retries, backoff_s, region

    @staticmethod
    def _client() -> Any:
        try:
            from ddgs import DDGS
        except ImportError:
            try:
                from duckduckgo_search import DDGS  # the package's former name
            except ImportError as exc:
                raise SearchUnavailableError("web search needs `pip install 'pictrieve[web]'` (ddgs)") from exc
        return DDGS()

    def search(self, query: str, *, k: int = 6) -> list[SearchResult]:
        """Up to ``k`` results; ``[]`` when the search ran and found nothing.

        ddgs asks several engines and raises "No results found." when they answered with nothing,
        or the last engine's error when every one failed (no network, a DNS error): that is a
        :class:`SearchUnavailableError`, never an empty result.
        """
        last: Exception | None = None
        limited = False
        for attempt in range(self.retries + 1):
            try:
                rows = list(self._client().text(query, max_results=k, region=self.region) or [])
                return [SearchResult(url=row.get("href") or row.get("url", ""), title=row.get("title", ""),
                                     snippet=row.get("body", "")) for row in rows][:k]
            except SearchUnavailableError:
                raise
            except Exception as exc:  # noqa: BLE001 - ddgs raises its own exception classes
                if str(exc).strip() == NO_RESULTS:
                    return []
                last = exc
                limited = "ratelimit" in type(exc).__name__.lower() or "ratelimit" in str(exc).lower() or "202" in str(exc)
                if not limited or attempt == self.retries:
                    break
                delay = self.backoff_s * 2**attempt
                logger.info("DuckDuckGo rate limit; retrying in %.0f s", delay)
                time.sleep(delay)
        raise SearchUnavailableError(
            f"DuckDuckGo search failed for {query!r}: {short_reason(last)}",
            fix=("it rate-limits often: wait a minute, or " if limited else "check the internet connection, or ")
            + OFFLINE_SEARCH_HINT,
        ) from last


class LangChainSearch:
    """A LangChain ``BaseRetriever`` (documents) or ``BaseTool`` (text or list of dicts) as a backend."""

    def __init__(self, runnable: Any, *, name: str | None = None) -> None:
        self.runnable = runnable
        self.name = name or f"langchain:{getattr(runnable, 'name', None) or type(runnable).__name__}"

    def search(self, query: str, *, k: int = 6) -> list[SearchResult]:
        from langchain_core.documents import Document

        try:
            output = self.runnable.invoke(query)
        except PictrieveError:
            raise
        except Exception as exc:  # noqa: BLE001 - any retriever or tool: reported as one line
            raise SearchUnavailableError(f"search {self.name} failed for {query!r}: {short_reason(exc)}",
                                         fix=f"check the retriever or tool, or {OFFLINE_SEARCH_HINT}") from exc
        if isinstance(output, str):
            return [SearchResult(url=self.name, title=self.name, snippet=output[:300], text=output)]
        results = []
        for item in list(output)[:k]:
            if isinstance(item, Document):
                meta = dict(item.metadata)
                url = str(meta.get("source") or meta.get("url") or self.name)
                results.append(SearchResult(url=url, title=str(meta.get("title", url)),
                                            snippet=item.page_content[:300], text=item.page_content, metadata=meta))
            elif isinstance(item, dict):
                url = str(item.get("url") or item.get("href") or item.get("link") or self.name)
                body = str(item.get("content") or item.get("body") or item.get("snippet") or "")
                results.append(SearchResult(url=url, title=str(item.get("title", url)), snippet=body[:300], text=body))
        return results


def as_search_backend(value: Any) -> SearchBackend:
    """A backend from a name (``ddgs``, ``local:DIR``), a backend, or a LangChain retriever/tool."""
    if isinstance(value, str):
        return SEARCH_BACKENDS.create(value)
    if isinstance(value, SearchBackend):
        return value
    if hasattr(value, "invoke"):
        return LangChainSearch(value)
    raise UnknownSearchBackendError(f"cannot search with {value!r}: give 'ddgs', 'local:DIR' or a LangChain retriever/tool")


def check_search_name(name: str) -> str:
    """``name`` if it names a search backend that can be built here; a one-line error otherwise.

    Cheap (no model, no index), so a command can refuse ``--search bogus``, ``local:/nonexistent`` or
    ``ddgs`` without the web extra before it spends half a minute loading its models.
    """
    name = SEARCH_BACKENDS.check(name)
    family, _, folder = name.partition(":")
    if family == "local":
        _local_folder(folder)
    elif family == "ddgs":
        from pictrieve.tools.core.extras import require_extra

        require_extra("web", "web search (ddgs)")
    return name


def _ddgs(spec: str, **kwargs: Any) -> DDGSearch:
    return DDGSearch(**kwargs)


def _local_folder(spec: str) -> Any:
    from pictrieve.tools.web.local_pages import page_folder

    if not spec:
        raise UnknownSearchBackendError("the local search backend needs a folder: local:DIR")
    return page_folder(spec)


def _local(spec: str, **kwargs: Any) -> Any:
    from pictrieve.tools.web.local_pages import LocalPages

    return LocalPages(_local_folder(spec), **kwargs)


SEARCH_BACKENDS: Registry[SearchBackend] = Registry(
    "search backend", example="ddgs, local:./pages", error=UnknownSearchBackendError
)
SEARCH_BACKENDS.register("ddgs", _ddgs, "DuckDuckGo web search (needs internet; rate-limited).")
SEARCH_BACKENDS.register("duckduckgo", _ddgs, "Alias of ddgs.")
SEARCH_BACKENDS.register("local", _local, "A folder of HTML/Markdown/text pages, searched offline with MiniLM.")
