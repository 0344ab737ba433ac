"""Plain search's one node, :func:`pictrieve.agents.search.nodes.retrieve`, called alone with a state, its
run settings and the index it is bound to (no graph; the wiring is tested in test_retriever_and_search_graph.py).

The index is a stand-in that records what it was asked (control flow only): the node's job is which search
it calls with which ``k``, not the ranking.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.runtime import Runtime

from pictrieve.agents.search.nodes import SearchSettings, retrieve
from pictrieve.agents.settings import SettingsError
from pictrieve.vectorstore.hits import ImageHit


class RecordingIndex:
    """Answers each search with a hit labelled by the call, and keeps the calls (with the options the
    :class:`~pictrieve.vectorstore.store.ImageStore` protocol names: every store takes them)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def search_text(self, query: str, k: int, where: Any = None, *, hybrid: bool = False, **options: Any) -> list[ImageHit]:
        self.calls.append(("text", query, k, hybrid, where, options))
        return [ImageHit(id=f"text:{query}")]

    def search_image(self, image: str, k: int, where: Any = None, **options: Any) -> list[ImageHit]:
        self.calls.append(("image", image, k, where, options))
        return [ImageHit(id=f"image:{image}")]


def test_retrieve_searches_by_image_first_then_by_text_with_the_runs_k():
    index = RecordingIndex()
    both = retrieve({"query": "a dog", "image": "/p/dog.jpg"}, Runtime(context=SearchSettings(k=3)), index=index)
    text = retrieve({"query": "a dog"}, None, index=index)  # no context: the default k
    assert [h.id for h in both["hits"]] == ["image:/p/dog.jpg"] and [h.id for h in text["hits"]] == ["text:a dog"]
    assert [call[:3] for call in index.calls] == [("image", "/p/dog.jpg", 3), ("text", "a dog", SearchSettings().k)]
    assert index.calls[1][3] is True  # hybrid by default: every store takes it (no signature is inspected)
    assert retrieve({"query": "a dog", "hybrid": False}, None, index=index)["hits"][0].matched_by == "vector"
    assert index.calls[-1][3] is False


@pytest.mark.parametrize("state", [{}, {"query": "   "}, {"query": None, "image": ""}])
def test_retrieve_without_a_query_an_image_or_filters_says_what_it_needs(state):
    index = RecordingIndex()
    with pytest.raises(SettingsError, match="it takes words saying what to find, an image, or filters to browse by"):
        retrieve(state, None, index=index)
    assert index.calls == []


@pytest.mark.parametrize(("filters", "words"), [
    ({"after": 123}, "after: 123 is not accepted; it takes a date as YYYY-MM-DD"),
    ({"radius_km": float("nan"), "near": "1,2"}, "radius_km: nan is not accepted; it takes a number of kilometres above 0"),
    ({"radius_km": -1}, "radius_km: -1 is not accepted; it takes a number of kilometres above 0"),
    ({"place": 7}, "place: 7 is not accepted; it takes words of a city, region or country (name or code) as text"),
    ({"when": "today"}, "filters: 'when' is not accepted; it takes only after, before, near, radius_km, place"),
])
def test_a_bad_filter_value_is_refused_in_words_naming_it(filters, words):
    index = RecordingIndex()
    with pytest.raises(SettingsError) as refused:
        retrieve({"query": "a dog", "filters": filters}, None, index=index)
    assert str(refused.value).startswith(words) and index.calls == []
