"""The minimal method: search a gallery by text or by example image.

The wiring only; the parts (settings, schemas, the ``retrieve`` node) are in
:mod:`pictrieve.agents.search.nodes`, its :class:`~pictrieve.agents.method.Method` in
:mod:`pictrieve.agents.search`::

    START -> retrieve -> END

>>> graph = build_search_graph(Gallery.open("./my.gallery"))
>>> graph.invoke({"query": "a dog in the snow"}, context={"k": 5})["hits"]
"""

from __future__ import annotations

from functools import partial
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from pictrieve.agents.search.nodes import (
    SearchInput,
    SearchOutput,
    SearchSettings,
    SearchState,
    retrieve,
)
from pictrieve.vectorstore.store import ImageStore


def build_search_graph(index: ImageStore, *, checkpointer: Any = None, name: str = "search") -> CompiledStateGraph:
    """Compile a graph that searches ``index`` (a Gallery) by text or by image."""
    builder = StateGraph(SearchState, context_schema=SearchSettings, input_schema=SearchInput, output_schema=SearchOutput)
    builder.add_node("retrieve", partial(retrieve, index=index))
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", END)
    return builder.compile(checkpointer=checkpointer, name=name)
