"""The minimal LangGraph search graph: one typed state, one retrieval node.

Later graphs (interactive, quality-controlled, visualise-then-retrieve) grow from this shape: the
gallery is injected when the graph is built, per-call settings come through ``RunnableConfig``.

>>> graph = build_search_graph(Gallery.open("./my.gallery"))
>>> graph.invoke({"query": "a dog in the snow"}, {"configurable": {"k": 5}})["hits"]
"""

from __future__ import annotations

from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from typing_extensions import NotRequired

from pictrieve.vectorstore.gallery import Gallery, SearchHit

DEFAULT_K = 10


class SearchState(TypedDict):
    """Input: a text ``query`` or an ``image`` path. Output: ranked ``hits``."""

    query: NotRequired[str]
    image: NotRequired[str]
    hits: NotRequired[list[SearchHit]]


def build_search_graph(gallery: Gallery, *, checkpointer: Any = None) -> Any:
    """Compile a graph that searches ``gallery`` by text or by image (``configurable.k`` results)."""

    def retrieve(state: SearchState, config: RunnableConfig) -> dict[str, Any]:
        k = int(config.get("configurable", {}).get("k", DEFAULT_K))
        if state.get("image"):
            return {"hits": gallery.search_image(state["image"], k=k)}
        if state.get("query"):
            return {"hits": gallery.search_text(state["query"], k=k)}
        raise ValueError("search graph needs a 'query' (text) or an 'image' (path) in its input")

    builder = StateGraph(SearchState)
    builder.add_node("retrieve", retrieve)
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", END)
    return builder.compile(checkpointer=checkpointer, name="pictrieve-search")
