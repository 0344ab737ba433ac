"""Quality-controllable retrieval (QC2) as a LangGraph graph::

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

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12

from pictrieve.agents.qc2.completion import CompletionRequest, SamplingSettings, complete_queries
from pictrieve.agents.qc2.pipeline import load_for_gallery, retrieve_for_completions
from pictrieve.graphs.settings import RunSettings, SettingsError, require_positive, settings_of
from pictrieve.vectorstore.hits import ImageHit

logger = logging.getLogger(__name__)

_PAPER = SamplingSettings()


@dataclass
class QC2Settings(RunSettings):
    """Run settings of :func:`build_qc2_graph` (LangGraph context); sampling defaults are the paper's."""

    k: int = 10  # images returned
    samples: int = 1  # completions sampled; several are fused by RRF
    seed: int | None = None  # seeds this run's sampling only
    temperature: float = _PAPER.temperature
    sample_top_k: int = _PAPER.top_k  # top-k sampling of the language model (not images)
    top_p: float = _PAPER.top_p
    repetition_penalty: float = _PAPER.repetition_penalty
    no_repeat_ngram_size: int = _PAPER.no_repeat_ngram_size
    max_new_tokens: int = _PAPER.max_new_tokens

    def validate(self) -> None:
        require_positive(self, "k", "samples", "sample_top_k", "max_new_tokens")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise SettingsError(f"temperature must be >= 0 and top_p in (0, 1], got {self.temperature}, {self.top_p}")

    def sampling(self) -> SamplingSettings:
        return SamplingSettings(temperature=self.temperature, top_k=self.sample_top_k, top_p=self.top_p,
                                repetition_penalty=self.repetition_penalty,
                                no_repeat_ngram_size=self.no_repeat_ngram_size, max_new_tokens=self.max_new_tokens)


class QC2Input(TypedDict):
    query: str  # the user's short query, e.g. "a dog"
    levels: NotRequired[dict[str, str]]  # {"relevance": "high", "quality": "low"}; missing axes: Medium


class QC2Output(TypedDict, total=False):
    resolved_levels: dict[str, str]  # canonical level per model axis
    completions: list[str]  # what was searched for
    hits: list[ImageHit]


class QC2State(QC2Input, QC2Output, total=False):
    pass


def build_qc2_graph(
    index: Any,
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

    def complete(state: QC2State, runtime: Runtime[QC2Settings]) -> dict[str, Any]:
        settings = settings_of(runtime, QC2Settings)
        levels = model.resolve_levels(state.get("levels") or {})
        completions = complete_queries(
            model.model,
            model.tokenizer,
            [CompletionRequest(state["query"], levels)],
            model.axis_names,
            samples=settings.samples,
            settings=settings.sampling(),
            allowed_token_ids=model.allowed_token_ids,
            seed=settings.seed,
        )[0]
        logger.info("completed %r -> %s", state["query"], completions)
        return {"resolved_levels": dict(zip(model.axis_names, levels)), "completions": completions}

    def retrieve(state: QC2State, runtime: Runtime[QC2Settings]) -> dict[str, Any]:
        settings = settings_of(runtime, QC2Settings)
        return {"hits": retrieve_for_completions(index, state["completions"], k=settings.k)}

    builder = StateGraph(QC2State, context_schema=QC2Settings, input_schema=QC2Input, output_schema=QC2Output)
    builder.add_node("complete", complete)
    builder.add_node("retrieve", retrieve)
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
    gallery: Any,
    query: str,
    levels: dict[str, str],
    *,
    model: Any = None,
    model_dir: str | Path | None = None,
    k: int = 10,
    samples: int = 1,
    seed: int | None = None,
) -> QualitySearchResult:
    """Complete ``query`` toward ``levels`` (``{"relevance": "high", "quality": "low"}``) and retrieve:
    one run of :func:`build_qc2_graph`."""
    model = model or load_for_gallery(gallery, model_dir)
    model.resolve_levels(levels)  # fail here, with a clean message, on an axis the model lacks
    graph = build_qc2_graph(gallery, qc2_model=model)
    state = graph.invoke({"query": query, "levels": levels}, context=QC2Settings(k=k, samples=samples, seed=seed))
    return QualitySearchResult(query, state["resolved_levels"], state["completions"], state["hits"])
