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
from pictrieve.vectorstore.search_request import DEFAULT_K, FILTER_FIELDS, SearchRequest, SearchRequestError, run_search
from pictrieve.vectorstore.store import ImageStore


@dataclass
class SearchSettings(RunSettings):
    """Run settings of plain search."""

    k: Annotated[int, Field(description="How many images to return.")] = DEFAULT_K
    only_relevant: Annotated[bool, Field(description=(
        "Drop the hits below the embedder's relevance cutoff (every hit carries ``relevant`` either way)."))] = False

    def validate(self) -> None:
        require_positive(self, "k")


class SearchInput(TypedDict):
    """A text ``query`` or an ``image`` (path of a file the graph's process can read), and optional ``filters``
    on the photos' own metadata: ``after``, ``before`` (YYYY-MM-DD), ``near`` ("LAT,LON" or a city),
    ``radius_km``, ``place``, ``camera``, ``folder``, applied in the store; ``filters`` alone browse the photos
    that pass them, newest first. These are the fields of the one
    :class:`~pictrieve.vectorstore.search_request.SearchRequest` (its defaults, its checks).
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
        "Best first, each with ``relevant`` (whether it reaches the embedder's relevance cutoff) and ``matched_by`` "
        "(vector, words, both, or filters when browsing)."))]
    why: NotRequired[Annotated[str, Field(description=(
        "When no photo came back, why: the gallery holds none, which filter left nothing (and what the gallery "
        "has), or the relevance cutoff removed every photo found."))]]


class SearchState(SearchInput, SearchOutput, total=False):
    pass


def retrieve(state: SearchState, runtime: Runtime[SearchSettings] | None = None, *, index: ImageStore) -> dict[str, Any]:
    """The ``k`` best images of ``index`` for the state's ``image`` (if any) or text ``query`` (or, with neither,
    the photos that pass its ``filters``, newest first), each marked ``relevant`` or not (with
    ``only_relevant``, only those that are); ``why`` says why none came back. The search is the one every front
    end makes (:func:`~pictrieve.vectorstore.search_request.run_search`)."""
    answer = run_search(index, search_request(state, settings_of(runtime, SearchSettings)))
    return {"hits": answer.hits, "why": answer.why}


def search_request(state: SearchInput, settings: SearchSettings) -> SearchRequest:
    """The state's input and the run's settings as the one :class:`SearchRequest` (an ``image`` wins over a
    ``query``); a bad value is one line naming its field."""
    try:
        return SearchRequest.from_input(state, k=settings.k, only_relevant=settings.only_relevant)
    except SearchRequestError as exc:
        raise SettingsError(str(exc)) from exc


FILTER_WORDS = frozenset(FILTER_FIELDS)
"""The filters the input's ``filters`` takes (:data:`~pictrieve.vectorstore.search_request.FILTER_FIELDS`)."""
