"""Quality-controllable retrieval (QC2) as a LangGraph graph.

The wiring only; the parts (run settings, schemas, the nodes ``complete`` and ``retrieve``) are in
:mod:`pictrieve.agents.qc2.nodes`, its :class:`~pictrieve.agents.method.Method` in
:mod:`pictrieve.agents.qc2`::

    START -> complete -> retrieve -> END

- ``complete``: the gallery's fine-tuned QC2 model turns the short query into ``samples`` descriptive
  queries conditioned on the requested level per axis (e.g. relevance High, quality Low).
- ``retrieve``: search the gallery with the completed query; with several samples, fuse their
  rankings by Reciprocal Rank Fusion.

The completed queries are part of the output (``completions``), so an app can show the user what was
actually searched for: QC2's transparency. Run settings (:class:`QC2Settings`, LangGraph context):
``k``, ``samples``, ``seed`` and the sampling settings, whose defaults are the paper's.

>>> graph = build_qc2_graph(Gallery.open("./my.gallery"))     # the model trained for this gallery
>>> graph.invoke({"query": "a dog", "levels": {"quality": "high"}}, context={"k": 5, "samples": 3})
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from pictrieve.agents.qc2.nodes import (
    QC2Input,
    QC2Output,
    QC2Settings,
    QC2State,
    complete,
    retrieve,
)
from pictrieve.agents.qc2.pipeline import load_for_gallery
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.store import ImageStore


def build_qc2_graph(
    index: ImageStore,
    *,
    checkpointer: Any = None,
    name: str = "qc2",
    qc2_model: Any = None,
) -> CompiledStateGraph:
    """Compile the ``complete -> retrieve`` graph over ``index`` (a Gallery).

    ``qc2_model`` is a loaded :class:`~pictrieve.agents.qc2.bundle.QC2Model` or the folder it was
    saved in; by default the model trained for this gallery (``<gallery>/qc2``) is loaded, and refused
    if it was trained for another gallery. QC2 takes no chat model: its language model is its own
    fine-tuned completer.
    """
    model = qc2_model
    if model is None or isinstance(model, (str, Path)):
        model = load_for_gallery(index, model)
    builder = StateGraph(QC2State, context_schema=QC2Settings, input_schema=QC2Input, output_schema=QC2Output)
    builder.add_node("complete", partial(complete, model=model))
    builder.add_node("retrieve", partial(retrieve, index=index))
    builder.add_edge(START, "complete")
    builder.add_edge("complete", "retrieve")
    builder.add_edge("retrieve", END)
    return builder.compile(checkpointer=checkpointer, name=name)


@dataclass
class QualitySearchResult:
    query: str
    levels: dict[str, str]
    completions: list[str]
    hits: list[ImageHit] = field(default_factory=list)


def quality_search(
    gallery: ImageStore,
    query: str,
    levels: dict[str, str],
    *,
    model: Any = None,
    model_dir: str | Path | None = None,
    k: int = 10,
    samples: int = 1,
    seed: int | None = None,
    on_step: Callable[[str], None] | None = None,
) -> QualitySearchResult:
    """Complete ``query`` toward ``levels`` (``{"relevance": "high", "quality": "low"}``) and retrieve:
    one run of :func:`build_qc2_graph`. ``on_step(line)`` hears each step as it starts (a command line shows
    them: loading the model and completing take seconds on a CPU)."""
    say = on_step or (lambda line: None)
    model = model or load_for_gallery(gallery, model_dir)
    model.resolve_levels(levels)  # fail here, with a clean message, on an axis the model lacks
    graph = build_qc2_graph(gallery, qc2_model=model)
    say(f"completing {query!r} ({samples} sample{'s' if samples != 1 else ''} from {model.base_model}) ...")
    state: dict[str, Any] = {}
    for update in graph.stream({"query": query, "levels": levels}, context=QC2Settings(k=k, samples=samples, seed=seed),
                               stream_mode=["updates", "values"]):
        mode, chunk = update
        if mode == "values":
            state = chunk
        elif "complete" in chunk:
            say(f"searching {gallery.count()} photos ...")
    return QualitySearchResult(query, state["resolved_levels"], state["completions"], state["hits"])
