"""The toy method's settings, schemas, its one node and its wiring."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from pydantic import Field
from typing_extensions import TypedDict

from pictrieve.agents.method import config_value
from pictrieve.agents.settings import RunSettings, require_positive, settings_of
from pictrieve.vectorstore.hits import ImageHit


@dataclass
class ToySettings(RunSettings):
    k: Annotated[int, Field(description="How many images to return.")] = 3
    reverse: Annotated[bool, Field(description="Return the k best images worst first.")] = False

    def validate(self) -> None:
        require_positive(self, "k")


class ToyInput(TypedDict):
    query: str


class ToyOutput(TypedDict):
    hits: list[ImageHit]
    note: str


class ToyState(ToyInput, ToyOutput, total=False):
    pass


def rank(state: ToyState, runtime: Any = None, *, index: Any, label: str = "toy") -> dict[str, Any]:
    settings = settings_of(runtime, ToySettings)
    hits = index.search_text(state["query"], k=settings.k)
    if settings.reverse:
        hits = hits[::-1]
    hits = [hit.model_copy(update={"rank": rank}) for rank, hit in enumerate(hits, start=1)]
    return {"hits": hits, "note": f"{label} ranked {len(hits)} images for {state['query']!r}"}


def served_arguments(config: Any) -> dict[str, Any]:
    """What the LangGraph server passes besides the needs: the label, from the run's config or the environment."""
    return {"label": config_value(config, "toy_label", "TOY_LABEL", "toy")}


def build_toy_graph(index: Any, *, checkpointer: Any = None, name: str = "toy", label: str = "toy") -> Any:
    builder = StateGraph(ToyState, context_schema=ToySettings, input_schema=ToyInput, output_schema=ToyOutput)
    builder.add_node("rank", partial(rank, index=index, label=label))
    builder.add_edge(START, "rank")
    builder.add_edge("rank", END)
    return builder.compile(checkpointer=checkpointer, name=name)
