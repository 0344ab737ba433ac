"""Plain search's parts: run settings, input and output schemas, and the ``retrieve`` node.

The node is a top-level function taking the gallery as a keyword argument, so it runs (and is tested)
without a graph; :func:`pictrieve.graphs.search.build_search_graph` binds the gallery and wires it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph.runtime import Runtime
from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12 (server schemas)

from pictrieve.agents.settings import RunSettings, SettingsError, require_positive, settings_of
from pictrieve.vectorstore.hits import ImageHit


@dataclass
class SearchSettings(RunSettings):
    """Run settings of plain search."""

    k: int = 10
    """How many images to return."""
    only_relevant: bool = False
    """Drop the hits below the embedder's relevance cutoff (every hit carries ``relevant`` either way)."""

    def validate(self) -> None:
        require_positive(self, "k")


class SearchInput(TypedDict):
    """A text ``query`` or an ``image`` (path of a file the graph's process can read)."""

    query: NotRequired[str]
    image: NotRequired[str]


class SearchOutput(TypedDict):
    hits: list[ImageHit]
    """Best first, each with ``relevant``: whether it reaches the embedder's relevance cutoff."""


class SearchState(SearchInput, SearchOutput, total=False):
    pass


def retrieve(state: SearchState, runtime: Runtime[SearchSettings] | None = None, *, index: Any) -> dict[str, Any]:
    """The ``k`` best images of ``index`` for the state's ``image`` (if any) or text ``query``, each marked
    ``relevant`` or not (with ``only_relevant``, only those that are)."""
    settings = settings_of(runtime, SearchSettings)
    options = {"only_relevant": True} if settings.only_relevant else {}  # an index without the option still works
    if state.get("image"):
        return {"hits": index.search_image(state["image"], k=settings.k, **options)}
    if (state.get("query") or "").strip():
        return {"hits": index.search_text(state["query"], k=settings.k, **options)}
    raise SettingsError("the search graph needs a text 'query' or an 'image' path in its input")
