"""Quality-controllable retrieval (QC2) as a LangGraph graph::

    START -> complete -> retrieve -> END

- ``complete``: the gallery's fine-tuned QC2 model turns the short query into ``samples`` descriptive
  queries conditioned on the requested level per axis (e.g. relevance High, quality Low).
- ``retrieve``: search the gallery with the completed query; with several samples, fuse their
  rankings by Reciprocal Rank Fusion.

The completed queries stay in the state (``completions``), so an app can show the user what was
actually searched for: QC2's transparency. Sampling settings come from
``config["configurable"]`` keys ``temperature``, ``top_k``, ``top_p``, ``repetition_penalty``,
``no_repeat_ngram_size``, ``max_new_tokens`` (defaults: the paper's).
"""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from pictrieve.agents.qc2.completion import CompletionRequest, SamplingSettings, complete_queries
from pictrieve.agents.qc2.pipeline import retrieve_for_completions
from pictrieve.agents.qc2.training import QC2Model

logger = logging.getLogger(__name__)


class QualityRetrievalInput(TypedDict, total=False):
    query: str  # the user's short query, e.g. "a dog"
    levels: dict[str, str]  # {"relevance": "high", "quality": "low"}; missing axes: Medium
    k: int
    samples: int
    seed: int | None


class QualityRetrievalState(QualityRetrievalInput, total=False):
    resolved_levels: dict[str, str]  # canonical level per model axis
    completions: list[str]
    hits: list[Any]  # SearchHit


def sampling_settings(config: RunnableConfig | None) -> SamplingSettings:
    """Generation settings from ``config["configurable"]`` (unknown keys are ignored)."""
    configurable = (config or {}).get("configurable", {})
    names = {f.name for f in fields(SamplingSettings)}
    return SamplingSettings(**{k: v for k, v in configurable.items() if k in names})


def build_quality_retrieval_graph(model: QC2Model, gallery: Any, *, checkpointer: Any = None):
    """Compile the ``complete -> retrieve`` graph for one trained model and its gallery."""

    def complete(state: QualityRetrievalState, config: RunnableConfig) -> dict[str, Any]:
        levels = model.resolve_levels(state.get("levels") or {})
        completions = complete_queries(
            model.model,
            model.tokenizer,
            [CompletionRequest(state["query"], levels)],
            model.axis_names,
            samples=max(1, int(state.get("samples") or 1)),
            settings=sampling_settings(config),
            allowed_token_ids=model.allowed_token_ids,
            seed=state.get("seed"),
        )[0]
        logger.info("completed %r -> %s", state["query"], completions)
        return {"resolved_levels": dict(zip(model.axis_names, levels)), "completions": completions}

    def retrieve(state: QualityRetrievalState) -> dict[str, Any]:
        return {"hits": retrieve_for_completions(gallery, state["completions"], k=int(state.get("k") or 10))}

    builder = StateGraph(QualityRetrievalState, input_schema=QualityRetrievalInput)
    builder.add_node("complete", complete)
    builder.add_node("retrieve", retrieve)
    builder.add_edge(START, "complete")
    builder.add_edge("complete", "retrieve")
    builder.add_edge("retrieve", END)
    return builder.compile(checkpointer=checkpointer)
