"""What every search backend returns: :class:`SearchResult`, and the :class:`SearchBackend` protocol.

The backends (:mod:`pictrieve.tools.web.search`: DuckDuckGo, LangChain retrievers and tools;
:mod:`pictrieve.tools.web.local_pages`: a folder of pages) all import these from here, and the
registry imports the backends, so the imports go one way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class SearchResult:
    """One search result: ``url`` and ``title``, a ``snippet``, and the page ``text`` when known."""

    url: str
    title: str = ""
    snippet: str = ""
    text: str = ""
    score: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)


@runtime_checkable
class SearchBackend(Protocol):
    name: str

    def search(self, query: str, *, k: int = 6) -> list[SearchResult]: ...
