"""Plain search's one node, :func:`pictrieve.agents.search.nodes.retrieve`, called alone with a state, its
run settings and the index it is bound to (no graph; the wiring is tested in test_retriever_and_search_graph.py).

The index is a stand-in that records what it was asked (control flow only): the node's job is which search
it calls with which ``k``, not the ranking.
"""

from __future__ import annotations

import pytest
from langgraph.runtime import Runtime

from pictrieve.agents.search.nodes import SearchSettings, retrieve
from pictrieve.agents.settings import SettingsError


class RecordingIndex:
    """Answers each search with a label of the call, and keeps the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def search_text(self, query: str, k: int) -> list[str]:
        self.calls.append(("text", query, k))
        return [f"text:{query}"]

    def search_image(self, image: str, k: int) -> list[str]:
        self.calls.append(("image", image, k))
        return [f"image:{image}"]


def test_retrieve_searches_by_image_first_then_by_text_with_the_runs_k():
    index = RecordingIndex()
    both = retrieve({"query": "a dog", "image": "/p/dog.jpg"}, Runtime(context=SearchSettings(k=3)), index=index)
    text = retrieve({"query": "a dog"}, None, index=index)  # no context: the default k
    assert both == {"hits": ["image:/p/dog.jpg"]} and text == {"hits": ["text:a dog"]}
    assert index.calls == [("image", "/p/dog.jpg", 3), ("text", "a dog", SearchSettings().k)]


@pytest.mark.parametrize("state", [{}, {"query": "   "}, {"query": None, "image": ""}])
def test_retrieve_without_a_query_or_an_image_says_what_it_needs(state):
    index = RecordingIndex()
    with pytest.raises(SettingsError, match="needs a text 'query' or an 'image'"):
        retrieve(state, None, index=index)
    assert index.calls == []
