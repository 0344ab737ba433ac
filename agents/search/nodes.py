"""Plain search's parts: run settings, input and output schemas, and the ``retrieve`` node.

The node is a top-level function taking the gallery as a keyword argument, so it runs (and is tested)
without a graph; :func:`pictrieve.graphs.search.build_search_graph` binds the gallery and wires it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from langgraph.runtime import Runtime
from pydantic import Field
from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12 (server schemas)

from pictrieve.agents.settings import RunSettings, SettingsError, require_positive, settings_of
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.photo_filter import FilterError, PhotoFilter
from pictrieve.vectorstore.store import ImageStore


@dataclass
class SearchSettings(RunSettings):
    """Run settings of plain search."""

    k: Annotated[int, Field(description="How many images to return.")] = 10
    only_relevant: Annotated[bool, Field(description=(
        "Drop the hits below the embedder's relevance cutoff (every hit carries ``relevant`` either way)."))] = False

    def validate(self) -> None:
        require_positive(self, "k")


class SearchInput(TypedDict):
    """A text ``query`` or an ``image`` (path of a file the graph's process can read), and optional ``filters``
    on the photos' own metadata: ``after``, ``before`` (YYYY-MM-DD), ``near`` ("LAT,LON" or a city),
    ``radius_km``, ``place``, ``camera``, ``folder`` (:meth:`PhotoFilter.parse`), applied in the store.
    ``hybrid`` (default true): a text query ranks by the photos' own words too (folder and file names,
    captions, place, photo text), fused with the vectors; false ranks by vectors alone.
    ``collapse_duplicates``: show each group of near-identical photos once (the hit's ``copies`` lists the others)."""

    query: NotRequired[Annotated[str, Field(description="What to find, in words.")]]
    image: NotRequired[Annotated[str, Field(description=(
        "A photo to search with instead of words (a path; a served graph takes what its operator allows)."))]]
    filters: NotRequired[Annotated[dict[str, Any], Field(description=(
        "Only photos whose own metadata match: after, before (YYYY-MM-DD), near (\"LAT,LON\" or a city), "
        "radius_km, place, camera, folder."))]]
    hybrid: NotRequired[Annotated[bool, Field(description=(
        "Rank by the photos' own words too (names, captions, place, photo text), fused with the vectors "
        "(default true)."))]]
    collapse_duplicates: NotRequired[Annotated[bool, Field(description=(
        "Show each group of near-identical photos once; the hit's copies lists the others (default false)."))]]


class SearchOutput(TypedDict):
    hits: Annotated[list[ImageHit], Field(description=(
        "Best first, each with ``relevant``: whether it reaches the embedder's relevance cutoff."))]


class SearchState(SearchInput, SearchOutput, total=False):
    pass


def retrieve(state: SearchState, runtime: Runtime[SearchSettings] | None = None, *, index: ImageStore) -> dict[str, Any]:
    """The ``k`` best images of ``index`` for the state's ``image`` (if any) or text ``query``, each marked
    ``relevant`` or not (with ``only_relevant``, only those that are)."""
    settings = settings_of(runtime, SearchSettings)
    options: dict[str, Any] = {"only_relevant": True} if settings.only_relevant else {}  # an index without
    where = photo_filter(state.get("filters"))  # these options still works
    if where is not None:
        options["where"] = where
    collapse = state.get("collapse_duplicates")
    if collapse not in (None, False, True):
        raise SettingsError("'collapse_duplicates' must be true or false")
    if collapse:
        options["collapse_duplicates"] = True
    if state.get("image"):
        return {"hits": index.search_image(state["image"], k=settings.k, **options)}
    if (state.get("query") or "").strip():
        hybrid = state.get("hybrid", True)
        if not isinstance(hybrid, bool):
            raise SettingsError(f"'hybrid' must be true or false, not {hybrid!r}")
        if hybrid and _takes_hybrid(index):
            options["hybrid"] = True
        return {"hits": index.search_text(state["query"], k=settings.k, **options)}
    raise SettingsError("the search graph needs a text 'query' or an 'image' path in its input")


def _takes_hybrid(index: ImageStore) -> bool:
    """Whether ``index.search_text`` can rank by keywords too (a :class:`Gallery` can; a plugin's index may not)."""
    import inspect

    try:
        return "hybrid" in inspect.signature(index.search_text).parameters
    except (TypeError, ValueError):
        return False


def photo_filter(filters: dict[str, Any] | None) -> PhotoFilter | None:
    """The input's ``filters`` as a :class:`PhotoFilter` (``None`` when there are none); one line when bad."""
    if not filters:
        return None
    if not isinstance(filters, dict):
        raise SettingsError("'filters' must be an object such as {\"after\": \"2023-06-01\", \"near\": \"Lisbon\"}")
    unknown = sorted(set(filters) - FILTER_WORDS)
    if unknown:
        raise SettingsError(f"unknown filter {', '.join(map(repr, unknown))}: use {', '.join(sorted(FILTER_WORDS))}")
    try:
        found = PhotoFilter.parse(**{key: value for key, value in filters.items() if value not in (None, "")})
    except (FilterError, ValueError) as exc:
        raise SettingsError(str(exc).splitlines()[0]) from None
    return None if found.is_empty else found


FILTER_WORDS = frozenset({"after", "before", "near", "radius_km", "place", "camera", "folder"})
