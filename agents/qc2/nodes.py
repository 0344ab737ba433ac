"""QC2's graph parts: run settings, input and output schemas, and the nodes ``complete`` and ``retrieve``.

Each node is a top-level function taking what it needs by keyword (the trained model, the gallery), so
it runs (and is tested) without a graph; :func:`pictrieve.graphs.qc2.build_qc2_graph`
binds them and wires them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated, Any

from langgraph.runtime import Runtime
from pydantic import Field
from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12

from pictrieve.agents.qc2.bundle import QC2Model
from pictrieve.agents.qc2.completion import CompletionRequest, SamplingSettings, complete_queries
from pictrieve.agents.qc2.pipeline import retrieve_for_completions
from pictrieve.agents.settings import RunSettings, SettingsError, require_positive, settings_of
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.search_request import DEFAULT_K
from pictrieve.vectorstore.store import ImageStore

logger = logging.getLogger(__name__)

_PAPER = SamplingSettings()


@dataclass
class QC2Settings(RunSettings):
    """Run settings of :func:`build_qc2_graph` (LangGraph context); sampling defaults are the paper's."""

    k: Annotated[int, Field(description="How many images to return.")] = DEFAULT_K
    samples: Annotated[int, Field(le=16, description="completions sampled; several are fused by RRF")] = 1
    seed: Annotated[int | None, Field(description="seeds this run's sampling only")] = None
    temperature: Annotated[float, Field(description="sampling temperature of the language model")] = _PAPER.temperature
    sample_top_k: Annotated[int, Field(le=1000, description=(
        "top-k sampling of the language model (not images)"))] = _PAPER.top_k
    top_p: Annotated[float, Field(description="nucleus (top-p) sampling of the language model")] = _PAPER.top_p
    repetition_penalty: Annotated[float, Field(description="penalty on repeated tokens (1: none)")] = \
        _PAPER.repetition_penalty
    no_repeat_ngram_size: Annotated[int, Field(le=16, description=(
        "n-grams never repeated in a completion (0: off)"))] = _PAPER.no_repeat_ngram_size
    max_new_tokens: Annotated[int, Field(le=1024, description=(
        "tokens a completion adds at most"))] = _PAPER.max_new_tokens

    def validate(self) -> None:
        require_positive(self, "k", "samples", "sample_top_k", "max_new_tokens")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise SettingsError(f"temperature must be >= 0 and top_p in (0, 1], got {self.temperature}, {self.top_p}")

    def sampling(self) -> SamplingSettings:
        return SamplingSettings(temperature=self.temperature, top_k=self.sample_top_k, top_p=self.top_p,
                                repetition_penalty=self.repetition_penalty,
                                no_repeat_ngram_size=self.no_repeat_ngram_size, max_new_tokens=self.max_new_tokens)


class QC2Input(TypedDict):
    query: Annotated[str, Field(description="the user's short query, e.g. \"a dog\"")]
    levels: NotRequired[Annotated[dict[str, str], Field(description=(
        "{\"relevance\": \"high\", \"quality\": \"low\"}; missing axes: Medium"))]]


class QC2Output(TypedDict, total=False):
    resolved_levels: Annotated[dict[str, str], Field(description="canonical level per model axis")]
    completions: Annotated[list[str], Field(description="what was searched for")]
    hits: list[ImageHit]


class QC2State(QC2Input, QC2Output, total=False):
    pass


def complete(state: QC2State, runtime: Runtime[QC2Settings] | None = None, *, model: QC2Model) -> dict[str, Any]:
    """``samples`` completions of the state's ``query`` by ``model``, conditioned on its ``levels``
    (each axis's canonical level; an axis not named is Medium)."""
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


def retrieve(state: QC2State, runtime: Runtime[QC2Settings] | None = None, *, index: ImageStore) -> dict[str, Any]:
    """The ``k`` best images of ``index`` for the completion, or the RRF fusion of several completions'."""
    settings = settings_of(runtime, QC2Settings)
    return {"hits": retrieve_for_completions(index, state["completions"], k=settings.k)}
