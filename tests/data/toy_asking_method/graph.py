"""The asking toy's settings, schemas, its question and reply, its nodes and its wiring."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from pydantic import Field
from typing_extensions import TypedDict

from pictrieve.agents.settings import RunSettings, require_positive, settings_of
from pictrieve.vectorstore.hits import as_hit


@dataclass
class AskSettings(RunSettings):
    k: Annotated[int, Field(description="How many images to find before asking.")] = 3

    def validate(self) -> None:
        require_positive(self, "k")


class AskInput(TypedDict):
    query: str


class AskOutput(TypedDict, total=False):
    hits: list[dict[str, Any]]
    note: str


class AskState(AskInput, AskOutput, total=False):
    pass


class OrderQuestion(TypedDict):
    """What it asks: the order to show the photos in, and which of them to drop."""

    question: str
    options: list[str]
    hits: list[dict[str, Any]]


class OrderReply(TypedDict):
    order: Annotated[Literal["best first", "worst first"], Field(description="The order to show the photos in.")]
    drop: Annotated[list[str], Field(description="The photos to leave out.")]


def rank(state: AskState, runtime: Any = None, *, index: Any) -> dict[str, Any]:
    hits = index.search_text(state["query"], k=settings_of(runtime, AskSettings).k)
    return {"hits": [hit.to_json() for hit in hits]}


def ask(state: AskState) -> dict[str, Any]:
    reply = interrupt({"question": f"In which order should the photos for {state['query']!r} come, and which "
                                   "should go?", "options": ["best first", "worst first"], "hits": state["hits"]})
    hits = [hit for hit in state["hits"] if hit["id"] not in reply["drop"]]
    if reply["order"] == "worst first":
        hits = hits[::-1]
    hits = [as_hit(hit).model_copy(update={"rank": rank}).to_json() for rank, hit in enumerate(hits, start=1)]
    return {"hits": hits, "note": f"asked once: {reply['order']}, {len(reply['drop'])} dropped"}


def build_graph(index: Any, *, checkpointer: Any = None, name: str = "toy_ask") -> Any:
    builder = StateGraph(AskState, context_schema=AskSettings, input_schema=AskInput, output_schema=AskOutput)
    builder.add_node("rank", partial(rank, index=index))
    builder.add_node("ask", ask)
    builder.add_edge(START, "rank")
    builder.add_edge("rank", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=checkpointer, name=name)
