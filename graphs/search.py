"""The minimal method: search a gallery by text or by example image.

It is the smallest instance of the method contract (:mod:`pictrieve.graphs.registry`): a builder
taking the gallery first and everything else by keyword, declared input and output schemas, run
settings as LangGraph context, :class:`~pictrieve.vectorstore.hits.ImageHit` results::

    START -> retrieve -> END

>>> graph = build_search_graph(Gallery.open("./my.gallery"))
>>> graph.invoke({"query": "a dog in the snow"}, context={"k": 5})["hits"]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from typing_extensions import NotRequired, TypedDict

from pictrieve.graphs.settings import RunSettings, SettingsError, require_positive, settings_of
from pictrieve.vectorstore.hits import ImageHit


@dataclass
class SearchSettings(RunSettings):
    """Run settings of :func:`build_search_graph`."""

    k: int = 10
    """How many images to return."""

    def validate(self) -> None:
        require_positive(self, "k")


class SearchInput(TypedDict):
    """A text ``query`` or an ``image`` (path of a file the graph's process can read)."""

    query: NotRequired[str]
    image: NotRequired[str]


class SearchOutput(TypedDict):
    hits: list[ImageHit]


class SearchState(SearchInput, SearchOutput, total=False):
    pass


def build_search_graph(
    index: Any, *, llm: Any = None, checkpointer: Any = None, name: str = "search"
) -> CompiledStateGraph:
    """Compile a graph that searches ``index`` (a Gallery) by text or by image.

    ``llm`` is accepted for the contract's sake and unused: plain search needs no language model.
    """
    del llm

    def retrieve(state: SearchState, runtime: Runtime[SearchSettings]) -> dict[str, Any]:
        settings = settings_of(runtime, SearchSettings)
        if state.get("image"):
            return {"hits": index.search_image(state["image"], k=settings.k)}
        if (state.get("query") or "").strip():
            return {"hits": index.search_text(state["query"], k=settings.k)}
        raise SettingsError("the search graph needs a text 'query' or an 'image' path in its input")

    builder = StateGraph(SearchState, context_schema=SearchSettings, input_schema=SearchInput, output_schema=SearchOutput)
    builder.add_node("retrieve", retrieve)
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", END)
    return builder.compile(checkpointer=checkpointer, name=name)
