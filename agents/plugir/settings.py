"""PlugIR's run settings (LangGraph context) and the paper's ablation arms, which are settings of one graph.

:class:`PlugIRSettings` is the graph's ``context_schema``; ``arm`` sets the three flags of an arm of
:data:`ARMS` at once. :func:`default_arm` is what a person gets who names no arm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from pictrieve.agents.settings import RunSettings, SettingsError, require_positive

MIN_CANDIDATES = 20
CANDIDATE_FRACTION = 0.01
RANKED_K = 100
"""Images re-ranked by the offline answers each round when ``ranked_k`` is not set."""
MAX_REASKS = 3
"""Times a choice question is asked again for an answer that is none of its options."""

ARMS: dict[str, dict[str, Any]] = {
    "zs": {"questioner": "llm", "reformulate": False, "retrieval_context": False, "filter_questions": False},
    "cr": {"questioner": "llm", "reformulate": True, "retrieval_context": False, "filter_questions": False},
    "cr+rce": {"questioner": "llm", "reformulate": True, "retrieval_context": True, "filter_questions": False},
    "cr+rce+f": {"questioner": "llm", "reformulate": True, "retrieval_context": True, "filter_questions": True},
    "offline": {"questioner": "offline", "reformulate": True, "retrieval_context": False, "filter_questions": True},
}
"""The paper's ablation arms (Table 13) as run settings of the same graph, and ``offline``: questions
made from the candidates' captions and chosen by expected information, no language model at all
(:mod:`pictrieve.agents.plugir.offline_questions`)."""
QUESTIONERS = ("llm", "offline")


def default_arm(llm: Any) -> str:
    """The arm a person gets when they name none: ``offline`` with the bundled offline model, whose
    questions did not help and take minutes per round on a CPU (BENCHMARKS.md, PlugIR), else the
    paper's full method ``cr+rce+f``."""
    from pictrieve.tools.models.chat_models import is_offline_chat_model

    return "offline" if is_offline_chat_model(llm) else "cr+rce+f"


@dataclass
class PlugIRSettings(RunSettings):
    """Run settings of :func:`build_plugir_graph` (LangGraph context). ``arm`` sets the three flags."""

    shown_k: Annotated[int, Field(le=100, description="images shown per round")] = 10
    candidate_k: Annotated[int | None, Field(le=10_000, description=(
        "retrieval candidates; None = max(20, 1% of the gallery)"))] = None
    clusters: Annotated[int, Field(le=100, description="m in Algorithm 1")] = 10
    questions_per_round: Annotated[int, Field(le=20, description="q_n")] = 5
    max_rounds: Annotated[int, Field(le=50, description="question budget T")] = 10
    filter_attempts: Annotated[int, Field(le=10, description=(
        "regenerations before falling back to unfiltered questions"))] = 3
    reformulation_max_tokens: Annotated[int, Field(le=2048, description=(
        "paper setting; a caption needs far fewer"))] = 512
    reformulate: Annotated[bool, Field(description="CR")] = True
    retrieval_context: Annotated[bool, Field(description="RCE (grounded questioner)")] = True
    filter_questions: Annotated[bool, Field(description="F")] = True
    seed: Annotated[int, Field(description="seed of RCE's clustering")] = 0
    questioner: Annotated[str | None, Field(description=(
        "\"llm\" (the paper's), \"offline\" (caption terms + expected information), or None: the graph's "
        "default, offline with the bundled offline model and llm with any other"))] = None
    arm: Annotated[str | None, Field(description=(
        "\"zs\", \"cr\", \"cr+rce\", \"cr+rce+f\" or \"offline\": overrides the flags above"))] = None
    # The offline questioner (chosen on flickr8k-train's dev rows, BENCHMARKS.md "PlugIR offline"):
    ranked_k: Annotated[int | None, Field(le=10_000, description=(
        "images re-ranked by the answers each round; None: RANKED_K"))] = None
    # weights and temperature in units of the candidates' score spread (standard deviation)
    confirm_weight: Annotated[float, Field(description="score added per confirmed term a stored caption implies")] = 1.0
    deny_weight: Annotated[float, Field(description="score taken per denied term a stored caption implies")] = 3.0
    described_trust: Annotated[float, Field(description=(
        "weight of a captioner's description (tags) relative to a stored caption"))] = 0.2
    # 0.3 chosen on flickr8k-train with the free-text user (BENCHMARKS.md, "PlugIR offline: a chat that hears")
    confirm_vector_weight: Annotated[float, Field(description=(
        "photos without a stored caption: score added per confirmed term, times its text vector's standardised "
        "similarity to the photo"))] = 0.3
    deny_vector_weight: Annotated[float, Field(description=(
        "photos without a stored caption: score taken per denied term, times the above-average part of that "
        "similarity"))] = 0.0
    question_temperature: Annotated[float, Field(description=(
        "softmax temperature of the candidate distribution"))] = 100.0
    append_answers: Annotated[bool, Field(description=(
        "confirmed terms are appended to the query text (else they only re-rank)"))] = True
    fuse_answers: Annotated[bool, Field(description=(
        "search with the mean of the description's and each answer phrase's embeddings (so long free answers "
        "do not drown the description) instead of the embedding of the whole text"))] = False
    yes_weight: Annotated[float, Field(description="value of a likely \"yes\" beside the expected information")] = 0.0

    def validate(self) -> None:
        require_positive(self, "shown_k", "candidate_k", "clusters", "questions_per_round", "filter_attempts",
                         "reformulation_max_tokens", "ranked_k")
        for name in ("confirm_weight", "deny_weight", "described_trust", "yes_weight", "question_temperature",
                     "confirm_vector_weight", "deny_vector_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or \
                    (name == "question_temperature" and value <= 0):
                raise SettingsError(f"{name} must be a number >= 0 (temperature > 0), got {value!r}")
        if not isinstance(self.max_rounds, int) or self.max_rounds < 0:
            raise SettingsError(f"max_rounds must be a whole number >= 0, got {self.max_rounds!r}")
        if self.questioner is not None and self.questioner not in QUESTIONERS:
            raise SettingsError(f"unknown questioner {self.questioner!r}; choose from {', '.join(QUESTIONERS)}")
        if self.arm is not None:
            if self.arm not in ARMS:
                raise SettingsError(f"unknown arm {self.arm!r}; choose from {', '.join(ARMS)}")
            for flag, value in ARMS[self.arm].items():
                setattr(self, flag, value)

    def candidate_count(self, gallery_size: int) -> int:
        if self.candidate_k:
            return max(1, int(self.candidate_k))
        return max(MIN_CANDIDATES, math.ceil(CANDIDATE_FRACTION * gallery_size))

    def ranked_count(self, gallery_size: int) -> int:
        return max(self.ranked_k or RANKED_K, self.candidate_count(gallery_size), self.shown_k)

    def questioner_or(self, default: str) -> str:
        """The questioner this run uses: the one it names, else the graph's ``default``."""
        return self.questioner or default
