"""The Vision Search Assistant's run settings, its input and output schemas, and the state its nodes share.

:class:`VisionSearchSettings` is the graph's ``context_schema`` (per run: ``context={"answerer": ...}``);
:class:`VisionSearchInput` and :class:`VisionSearchOutput` are what a caller sends and gets back;
:class:`VisionSearchState` is what the nodes read and write; :class:`SearchTask` is what one parallel
searcher gets (through ``Send``).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field
from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12 (server schemas)

from pictrieve.agents.settings import RunSettings, SettingsError, require_positive
from pictrieve.vectorstore.hits import ImageHit


@dataclass
class VisionSearchSettings(RunSettings):
    """Run settings of :func:`build_vsa_graph` (defaults after the authors' code, scaled down)."""
    # (the served context schema's description, shown by Studio: kept as it was before the move)

    max_regions: Annotated[int, Field(le=20, description="Regions described at most (best detections first).")] = 3
    min_score: Annotated[float, Field(description=(
        "Detector box threshold (the authors' Grounding DINO box threshold)."))] = 0.4
    max_sub_questions: Annotated[int, Field(le=10, description=(
        "Sub-questions the planner may ask (the authors allow up to 10 planning turns)."))] = 3
    search_k: Annotated[int, Field(le=20, description="Results per search (the authors: DuckDuckGo top 6).")] = 6
    pages_per_search: Annotated[int, Field(le=10, description=(
        "Pages opened per sub-question (the authors: up to 4)."))] = 2
    page_chars: Annotated[int, Field(le=100_000, description="Characters kept per page (the authors: 8,192).")] = 8192
    answer_context_chars: Annotated[int, Field(le=100_000, description=(
        "Characters of findings given to the answer step (the authors: 3,500)."))] = 3500
    correlate: Annotated[bool | None, Field(description=(
        "Rewrite each region's description with the others as context (2+ regions). None (default): yes, except with "
        "the offline 135M model, whose rewrites are worse than what they replace."))] = None
    summarize_regions: Annotated[bool | None, Field(description=(
        "One summary of the findings per region before answering (llm answerer). None: yes, except with the offline "
        "135M model."))] = None
    plan_with_llm: Annotated[bool | None, Field(description=(
        "Ask the LLM for the plan; False uses the rule plan (the question's parts with the photo's labels, and the "
        "question per region label). None: the LLM, except the offline 135M model, which rarely writes a usable JSON "
        "plan and spends a minute trying."))] = None
    candidate_k: Annotated[int, Field(le=100, description=(
        "Visual RAG: gallery photos retrieved for a question without an image."))] = 3
    max_plan_turns: Annotated[int, Field(le=10, description=(
        "Planner turns of the chain of search (the authors: 10); each turn may add sub-questions."))] = 3
    max_search_turns: Annotated[int, Field(le=10, description=(
        "Searches per sub-question: the searcher may ask for a follow-up search (the authors: 3 turns)."))] = 2
    answerer: Annotated[str, Field(description=(
        "``llm``, ``extractive`` (quoted sentences of the pages read, no generation) or ``auto``: extractive when the "
        "chat model is the offline 135M model, llm otherwise."))] = "auto"
    evidence_sentences: Annotated[int, Field(le=20, description=(
        "Extractive answerer: sentences quoted at most per part of the question."))] = 2

    def validate(self) -> None:
        for name in ("max_regions", "max_sub_questions", "search_k", "pages_per_search", "page_chars",
                     "answer_context_chars", "candidate_k", "max_plan_turns", "max_search_turns",
                     "evidence_sentences"):
            require_positive(self, name)
        if self.answerer not in ("auto", "llm", "extractive"):
            raise SettingsError(f"answerer must be auto, llm or extractive, not {self.answerer!r}")


# A ``question``, about the photo at ``image`` (a path the graph's process can read), or without one about the
# gallery's best match for the question (visual RAG). No docstring: it would become the served input schema's
# description, which stays as it was.
class VisionSearchInput(TypedDict):
    question: Annotated[str, Field(description="The question to answer about the photo.")]
    image: NotRequired[Annotated[str, Field(description=(
        "The photo asked about (without one, the gallery's best match for the question)."))]]


class VisionSearchOutput(TypedDict, total=False):
    answer: Annotated[str, Field(description="The answer, citing the numbered ``sources`` as ``[n]``.")]
    sources: Annotated[list[dict[str, Any]], Field(description=(
        "The pages read: ``{\"number\", \"url\", \"title\"}``, numbered across all searches."))]
    regions: Annotated[list[dict[str, Any]], Field(description=(
        "The photo's regions: ``{\"label\", \"score\", \"box\", \"description\"}`` (box in pixels)."))]
    sub_questions: Annotated[list[dict[str, Any]], Field(description=(
        "What the planner asked: ``{\"question\", \"region\", \"turn\", \"order\"}``."))]
    findings: Annotated[list[dict[str, Any]], Field(description=(
        "Each sub-question's search: queries, answer (global source numbers), evidence, sources, error."))]
    region_summaries: Annotated[list[str], Field(description=(
        "One summary of the findings per region (llm answerer with 2+ regions)."))]
    hits: Annotated[list[ImageHit], Field(description=(
        "The gallery photos retrieved for a question without an image (empty when one was given)."))]
    image: Annotated[str, Field(description="The photo the question was answered about.")]
    plan_mode: Annotated[str, Field(description=(
        "How the plan was made: structured, json, fallback, rules or no search."))]
    plan_turns: Annotated[int, Field(description="Planner turns taken.")]
    answerer: Annotated[str, Field(description="Who wrote the answer: llm or extractive.")]
    citations: Annotated[dict[str, Any], Field(description=(
        "``{\"cited\", \"dropped\", \"uncited\"}``: source numbers cited, citations of unread sources removed."))]
    timings: Annotated[dict[str, float], Field(description="Seconds per node (summed over the parallel searchers).")]


def merge_timings(left: dict[str, float] | None, right: dict[str, float] | None) -> dict[str, float]:
    """Seconds per node, added up when several updates (parallel searchers) time the same node."""
    out = dict(left or {})
    for key, value in (right or {}).items():
        out[key] = out.get(key, 0.0) + value
    return out


class VisionSearchState(VisionSearchInput, VisionSearchOutput, total=False):
    """What the nodes share: the input, the output, and the searchers' raw findings."""

    searched: Annotated[list[dict[str, Any]], operator.add]
    """Raw findings of the parallel searchers (source numbers local to each); summarize renumbers."""
    timings: Annotated[dict[str, float], merge_timings]
    """Seconds per node, added up over the parallel searchers."""


class SearchTask(TypedDict):
    """What one parallel searcher gets: a sub-question and what is known so far."""

    sub_question: dict[str, Any]
    order: int
    known: NotRequired[str]
    """What earlier turns found (Q&A), for a follow-up sub-question's searcher."""
    photo: NotRequired[str]
    """The photo's region labels (the extractive searcher scores sentences against them too)."""
