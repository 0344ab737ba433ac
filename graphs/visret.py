"""VisRet (visualize, then retrieve): search a gallery with pictures of the query instead of its text.

The wiring only; the parts (settings, schemas, nodes) are in :mod:`pictrieve.agents.visret.nodes`, its
:class:`~pictrieve.agents.method.Method` in :mod:`pictrieve.agents.visret`::

    START -> rewrite -> visualize -> retrieve -> END
                                             -> read -> END     (when the input has a question)

>>> graph = build_visret_graph(Gallery.open("./my.gallery"), visualizers="exemplar:/data/flickr8k-train")
>>> graph.invoke({"query": "a dog catching a frisbee"}, context={"k": 5, "guides": 3})["hits"]
"""

from __future__ import annotations

from functools import partial
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from pictrieve.agents.guided import GalleryViews
from pictrieve.agents.visret.nodes import (
    VisRetInput,
    VisRetOutput,
    VisRetSettings,
    VisRetState,
    after_retrieve,
    one_visualizer,
    read,
    retrieve,
    rewrite,
    visualize,
)
from pictrieve.vectorstore.store import ImageStore


def build_visret_graph(
    index: ImageStore,
    *,
    llm: Any = None,
    checkpointer: Any = None,
    name: str = "visret",
    visualizers: Any = None,
    reader: Any = None,
    captioner: Any = None,
    cache_dir: Any = None,
    visualizer: Any = None,
) -> CompiledStateGraph:
    """Compile VisRet over ``index`` (a Gallery).

    ``visualizers``: the visualizer making the guide images, an object or a name such as
    ``exemplar:/data/flickr8k-train`` (or a list holding one: VisRet uses one, NEEDLE several);
    ``visualizer=`` is the same argument under its earlier name. ``llm`` (optional) rewrites queries
    into visualization prompts; ``reader`` (default: ``llm``) answers questions from the retrieved
    images; ``captioner`` (a Captioner or a name such as ``offline``) describes images without captions
    to a text-only reader; ``cache_dir`` overrides where generated guides are kept.
    """
    if visualizer is not None and visualizers is not None:
        raise TypeError("pass the visualizer once: visualizers=... (visualizer= is its earlier name)")
    chosen = one_visualizer(visualizers if visualizers is not None else visualizer)
    if isinstance(captioner, str):
        from pictrieve.tools.models.captioners import caption_files, create_captioner

        captioner = caption_files(create_captioner(captioner, embedder=index.embedder))

    builder = StateGraph(VisRetState, context_schema=VisRetSettings, input_schema=VisRetInput, output_schema=VisRetOutput)
    builder.add_node("rewrite", partial(rewrite, llm=llm))
    builder.add_node("visualize", partial(visualize, visualizer=chosen, cache_dir=cache_dir))
    builder.add_node("retrieve", partial(retrieve, views=GalleryViews(index)))
    builder.add_node("read", partial(read, reader=reader if reader is not None else llm, captioner=captioner))
    builder.add_edge(START, "rewrite")
    builder.add_edge("rewrite", "visualize")
    builder.add_edge("visualize", "retrieve")
    builder.add_conditional_edges("retrieve", after_retrieve, ["read", END])
    builder.add_edge("read", END)
    return builder.compile(checkpointer=checkpointer, name=name)
