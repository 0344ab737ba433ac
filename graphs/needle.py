"""NEEDLE: search a gallery with guide pictures of the query, through several embedders it learns to trust.

The wiring only; the parts (settings, schemas, nodes) are in :mod:`pictrieve.agents.needle.nodes`, its
:class:`~pictrieve.agents.method.Method` in :mod:`pictrieve.agents.needle`::

    START -> refine -> visualize -+-> review_guides <-> regenerate     (feedback "guides"/"both")
                                  +-> screen_guides                     (otherwise)
                                         -> rank -> review_results -> learn -> END   (feedback "results"/"both")
                                                 -> END

>>> graph = build_needle_graph(Gallery.open("./my.gallery"), visualizers=["exemplar:/data/flickr8k-train"])
>>> graph.invoke({"query": "a kite over a beach", "topic": "outdoors"}, context={"k": 5, "guides": 2})["hits"]
"""

from __future__ import annotations

from functools import partial
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from pictrieve.agents.guided import as_visualizers
from pictrieve.agents.needle.nodes import (
    NeedleGallery,
    NeedleInput,
    NeedleOutput,
    NeedleSettings,
    NeedleState,
    after_rank,
    after_regenerate,
    after_review,
    after_visualize,
    learn,
    rank,
    refine,
    regenerate,
    review_guides,
    review_results,
    screen,
    visualize,
)
from pictrieve.vectorstore.store import ImageStore


def build_needle_graph(
    index: ImageStore,
    *,
    llm: Any = None,
    checkpointer: Any = None,
    name: str = "needle",
    visualizers: Any = None,
    cache_dir: Any = None,
) -> CompiledStateGraph:
    """Compile NEEDLE over ``index`` (a Gallery, ideally indexed with several embedders).

    ``visualizers`` is one visualizer or a list (objects or names such as
    ``exemplar:/data/flickr8k-train``); ``llm`` (optional) refines the query; ``cache_dir`` overrides
    where generated guides are kept. Feedback modes pause with ``interrupt()``: pass a
    ``checkpointer`` and resume with ``Command(resume=...)``.
    """
    gallery = NeedleGallery(index)
    made = as_visualizers(visualizers)
    builder = StateGraph(NeedleState, context_schema=NeedleSettings, input_schema=NeedleInput, output_schema=NeedleOutput)
    builder.add_node("refine", partial(refine, gallery=gallery, llm=llm))
    builder.add_node("visualize", partial(visualize, visualizers=made, cache_dir=cache_dir))
    builder.add_node("review_guides", review_guides)
    builder.add_node("regenerate", partial(regenerate, visualizers=made, cache_dir=cache_dir))
    builder.add_node("screen_guides", partial(screen, gallery=gallery))
    builder.add_node("rank", partial(rank, gallery=gallery))
    builder.add_node("review_results", review_results)
    builder.add_node("learn", partial(learn, gallery=gallery))
    builder.add_edge(START, "refine")
    builder.add_edge("refine", "visualize")
    builder.add_conditional_edges("visualize", after_visualize, ["review_guides", "screen_guides"])
    builder.add_conditional_edges("review_guides", after_review, ["regenerate", "rank"])
    builder.add_conditional_edges("regenerate", after_regenerate, ["review_guides", "rank"])
    builder.add_edge("screen_guides", "rank")
    builder.add_conditional_edges("rank", after_rank, ["review_results", END])
    builder.add_edge("review_results", "learn")
    builder.add_edge("learn", END)
    return builder.compile(checkpointer=checkpointer, name=name)
