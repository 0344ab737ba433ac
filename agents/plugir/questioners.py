"""PlugIR's two questioners as strategies, so the graph's nodes never fork on which one a run uses.

A questioner decides everything that differs between the paper's LLM questioner and our offline one:

- the query of a round that has answers (the LLM's caption of the dialogue, CR; or the description with
  the confirmed answers appended, offline);
- the vector searched and how the ranking is re-scored by the answers (offline only);
- the retrieval context it reads (RCE, LLM only);
- its candidate questions, and which one is asked (the filter F and the least disruptive question, or
  the most informative offline question).

Both are built once per compiled graph (:class:`Questioners`, from the parts the nodes share) and picked
per run by the run's ``questioner`` setting, else the graph's default.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
from langchain_core.language_models.chat_models import BaseChatModel

from pictrieve.agents.plugir.candidates import CandidateCaptions, CandidateVectors, CaptionVectors, score_spread
from pictrieve.agents.plugir.caption_terms import CaptionTerms, caption_terms
from pictrieve.agents.plugir.offline_answers import DialogueFacts, dialogue_facts, query_parts, reformulate_with_answers
from pictrieve.agents.plugir.offline_questions import (
    Question,
    candidate_distribution,
    candidate_questions,
    choose_question,
)
from pictrieve.agents.plugir.offline_reranking import answer_adjustments, term_phrase, vector_evidence
from pictrieve.agents.plugir.question_filter import select_least_disruptive, unanswerable_questions
from pictrieve.agents.plugir.questioner import FALLBACK_QUESTION
from pictrieve.agents.plugir.questioner import generate_questions as sample_questions
from pictrieve.agents.plugir.reformulator import reformulate as reformulate_caption
from pictrieve.agents.plugir.retrieval_context import select_representatives
from pictrieve.agents.plugir.settings import PlugIRSettings
from pictrieve.agents.plugir.state import PlugIRState
from pictrieve.tools.models.llm_calls import note_fallback
from pictrieve.vectorstore.hits import ImageHit, as_hit

logger = logging.getLogger(__name__)

ChatModelMaker = Callable[[], BaseChatModel]
"""``chat()``: the graph's chat model, made on first call (the offline questioner never calls it)."""


@dataclass(frozen=True)
class QuestionerParts:
    """What the questioners share, made once per compiled graph: the chat model (on first call), the
    gallery's embedder and the per-graph caches of what is read about the candidates."""

    chat: ChatModelMaker
    embedder: Any
    captions: CandidateCaptions
    vectors: CandidateVectors
    caption_vectors: CaptionVectors


class Questioner(Protocol):
    """What differs between PlugIR's questioners; every method reads the state and the run's settings."""

    name: ClassVar[str]

    def query(self, state: PlugIRState, settings: PlugIRSettings) -> str:
        """The query of a round that has answers, when the run reformulates."""

    def query_vector(self, state: PlugIRState, settings: PlugIRSettings) -> np.ndarray:
        """The vector searched this round."""

    def rank(self, hits: list[ImageHit], state: PlugIRState, settings: PlugIRSettings, n: int) -> list[ImageHit]:
        """The gallery's ranking, re-scored by what the answers say (``n``: the candidates read)."""

    def context(self, state: PlugIRState, settings: PlugIRSettings) -> list[str] | None:
        """The retrieval context the questioner is grounded in, or ``None`` when it reads none."""

    def questions(self, state: PlugIRState, settings: PlugIRSettings) -> dict[str, Any]:
        """This round's candidate questions (the state update: ``questions``, ``offline_questions``)."""

    def select(self, state: PlugIRState, settings: PlugIRSettings) -> dict[str, Any]:
        """The question asked (the state update: ``question``, ``question_spec``)."""


class LLMQuestioner:
    """The paper's questioner: an LLM asks, grounded in the candidates (RCE), its questions filtered (F),
    the dialogue reformulated into a caption by the LLM (CR)."""

    name: ClassVar[str] = "llm"

    def __init__(self, parts: QuestionerParts) -> None:
        self.parts = parts

    def query(self, state: PlugIRState, settings: PlugIRSettings) -> str:
        return reformulate_caption(self.parts.chat(), state["description"], state.get("dialogue", []),
                                   previous=state.get("query"), max_tokens=settings.reformulation_max_tokens)

    def query_vector(self, state: PlugIRState, settings: PlugIRSettings) -> np.ndarray:
        return self.parts.embedder.embed_texts([state["query"]])[0]

    def rank(self, hits: list[ImageHit], state: PlugIRState, settings: PlugIRSettings, n: int) -> list[ImageHit]:
        return hits

    def context(self, state: PlugIRState, settings: PlugIRSettings) -> list[str] | None:
        """RCE (Algorithm 1): the caption of the most distinctive candidate of each cluster."""
        if not settings.retrieval_context:
            return None
        candidates = [as_hit(c) for c in state.get("candidates", [])]
        if not candidates:
            return []
        texts, described = self.parts.captions(candidates)
        image_vectors = self.parts.vectors(candidates)
        probes = np.array(image_vectors, dtype=np.float64, copy=True)
        if described:  # the authors probe with each candidate's caption embedding
            probes[described] = self.parts.caption_vectors([texts[i] for i in described])
        chosen = select_representatives(image_vectors, probes, clusters=settings.clusters, seed=settings.seed)
        return [texts[i] for i in chosen]

    def questions(self, state: PlugIRState, settings: PlugIRSettings) -> dict[str, Any]:
        # Without the filter the first well-formed question is asked (the authors' arms without
        # selection ask their first sample); sampling q_n at once, in one batch, is how we retry
        # when a small model's first sample is malformed or repeats an earlier question.
        questions = ask_for_questions(self.parts.chat(), state, settings, settings.questions_per_round)
        return {"questions": questions, "offline_questions": []}

    def select(self, state: PlugIRState, settings: PlugIRSettings) -> dict[str, Any]:
        """F (Algorithm 2): drop the questions the query already answers (regenerating up to
        ``filter_attempts`` times), then ask the one that moves the candidate distribution least;
        without F, the first question."""
        questions = list(state.get("questions") or [])
        if not settings.filter_questions:
            return {"question": questions[0] if questions else FALLBACK_QUESTION, "question_spec": None}
        chat, context = self.parts.chat(), state["query"]
        kept = unanswerable_questions(chat, context, questions)
        attempt = 1
        rejected = list(questions)
        while not kept and attempt < settings.filter_attempts:
            attempt += 1
            fresh = ask_for_questions(chat, state, settings, settings.questions_per_round, avoid=rejected)
            rejected += fresh
            kept = unanswerable_questions(chat, context, fresh)
        if not kept:
            logger.info("no question survived %d filter attempts; using the unfiltered set", attempt)
            kept = questions or [FALLBACK_QUESTION]
        question = kept[0]
        if len(kept) > 1 and state.get("candidates"):
            candidates = [as_hit(c) for c in state["candidates"]]
            image_vectors = self.parts.vectors(candidates)  # fetched once per round, shared with RCE
            context_scores = np.array([c.score for c in candidates])
            extended = self.parts.embedder.embed_texts([f"{context}, {q}" for q in kept])
            question = kept[select_least_disruptive(context_scores, extended @ image_vectors.T)]
        return {"question": question, "question_spec": None}


class OfflineQuestioner:
    """Our offline questioner: questions about what tells the candidates' captions apart, answers read
    into confirmed and denied facts that re-score the ranking (no language model)."""

    name: ClassVar[str] = "offline"

    def __init__(self, parts: QuestionerParts) -> None:
        self.parts = parts

    def query(self, state: PlugIRState, settings: PlugIRSettings) -> str:
        return reformulate_with_answers(state["description"], facts_of(state)) if settings.append_answers \
            else state["description"]

    def query_vector(self, state: PlugIRState, settings: PlugIRSettings) -> np.ndarray:
        """The query text's embedding, or with ``fuse_answers`` the normalised mean of the description's
        and each answer phrase's embeddings."""
        dialogue = state.get("dialogue", [])
        embedder = self.parts.embedder
        if not (settings.fuse_answers and dialogue and settings.append_answers):
            return embedder.embed_texts([state["query"]])[0]
        vectors = np.asarray(embedder.embed_texts(query_parts(state["description"], facts_of(state))),
                             dtype=np.float64)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        mean = vectors.mean(axis=0)
        return (mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32)

    def rank(self, hits: list[ImageHit], state: PlugIRState, settings: PlugIRSettings, n: int) -> list[ImageHit]:
        """The hits re-scored by what the user confirmed and denied.

        Each image's description is its stored caption, else the captioner's (every hit when the
        captioner reads stored vectors, as tags do; only the top ``n`` when it reads files); an image
        without one keeps its score."""
        facts = facts_of(state)
        confirmed, denied = set(facts.get("confirmed", ())), set(facts.get("denied", ()))
        if not confirmed and not denied or not hits:
            return hits
        captions, vectors = self.parts.captions, self.parts.vectors
        hits = [as_hit(h) for h in hits]
        head, described = captions(hits[:n])
        tail, described_tail = captions(hits[n:], caption=captions.reads_vectors)
        described = set(described) | {n + i for i in described_tail}
        terms = [caption_terms(text) if i in described else None for i, text in enumerate(head + tail)]
        trust = [1.0 if hit.caption else settings.described_trust for hit in hits]
        scores = np.array([h.score for h in hits], dtype=np.float64)
        adjustments = answer_adjustments(terms, confirmed, denied, confirm_weight=settings.confirm_weight,
                                         deny_weight=settings.deny_weight, trust=trust)
        uncaptioned = np.array([not hit.caption for hit in hits])
        if (settings.confirm_vector_weight or settings.deny_vector_weight) and uncaptioned.any():
            # Photos without a stored caption: what their own vectors say of each term (stored
            # captions are better evidence and are used alone where they exist).
            facts = sorted(confirmed) + sorted(denied)
            evidence = vector_evidence(self.parts.caption_vectors([term_phrase(k) for k in facts]), vectors(hits))
            vector_adjustments = (settings.confirm_vector_weight * evidence[:len(confirmed)].sum(axis=0)
                                  - settings.deny_vector_weight
                                  * np.clip(evidence[len(confirmed):], 0, None).sum(axis=0))
            adjustments += np.where(uncaptioned, vector_adjustments, 0.0)
        # Weights are in units of the candidates' score spread, so they mean the same with any embedder.
        scores += score_spread(scores[:n]) * adjustments
        order = np.argsort(-scores, kind="stable")
        return [hits[i].model_copy(update={"score": float(scores[i]), "rank": rank})
                for rank, i in enumerate(order, 1)]

    def context(self, state: PlugIRState, settings: PlugIRSettings) -> list[str] | None:
        return None  # its questions come from the candidates' captions, not from a context

    def questions(self, state: PlugIRState, settings: PlugIRSettings) -> dict[str, Any]:
        """Questions about what tells the candidates' captions apart: nothing the description or an answer
        settles, nothing asked before."""
        dialogue = state.get("dialogue", [])
        asked = [Question.from_json(t["spec"]) for t in dialogue if t.get("spec")]
        facts = facts_of(state)
        known = reformulate_with_answers(state["description"], facts)
        offline = candidate_questions(self.candidate_terms(state), known=known, asked=asked,
                                      denied=set(facts.get("denied", ())))
        return {"questions": [q.text for q in offline], "offline_questions": [q.to_json() for q in offline]}

    def select(self, state: PlugIRState, settings: PlugIRSettings) -> dict[str, Any]:
        """The most valuable question (none left is settled by the query or the dialogue); the
        candidates' scores already hold the answers so far."""
        questions = [Question.from_json(q) for q in state.get("offline_questions") or []]
        candidates = [as_hit(c) for c in state.get("candidates", [])]
        terms = self.candidate_terms(state)
        scores = np.array([c.score for c in candidates], dtype=np.float64)
        p = candidate_distribution(scores, settings.question_temperature * score_spread(scores))
        best = choose_question(questions, terms, p, settings.yes_weight) if candidates else None
        if best is None:  # the candidates' captions no longer differ in anything not yet asked
            return {"question": FALLBACK_QUESTION, "question_spec": None}
        return {"question": best.text, "question_spec": best.to_json()}

    def candidate_terms(self, state: PlugIRState) -> list[CaptionTerms]:
        """The terms of each candidate's caption (what the questions are about)."""
        texts, _ = self.parts.captions([as_hit(c) for c in state.get("candidates", [])])
        return [caption_terms(text) for text in texts]


QUESTIONER_TYPES: dict[str, type[LLMQuestioner] | type[OfflineQuestioner]] = {
    LLMQuestioner.name: LLMQuestioner, OfflineQuestioner.name: OfflineQuestioner}


class Questioners:
    """Both questioners of one compiled graph; :meth:`for_run` picks the one a run's settings name."""

    def __init__(self, parts: QuestionerParts, default: str) -> None:
        if default not in QUESTIONER_TYPES:
            raise ValueError(f"unknown questioner {default!r}; choose from {', '.join(QUESTIONER_TYPES)}")
        self.default = default
        self._made = {name: kind(parts) for name, kind in QUESTIONER_TYPES.items()}

    def for_run(self, settings: PlugIRSettings) -> Questioner:
        return self._made[settings.questioner_or(self.default)]


def facts_of(state: PlugIRState) -> DialogueFacts:
    """What the answers so far mean: the state's ``facts`` (read once per answer by ``ask``), or, for a
    state made without it (an older checkpoint, a hand-made state), read from the dialogue's text."""
    if "facts" in state or not state.get("dialogue"):
        return state.get("facts") or {}
    return dialogue_facts(state["dialogue"])


def ask_for_questions(llm: BaseChatModel, state: PlugIRState, settings: PlugIRSettings, n: int,
                      avoid: Sequence[str] = ()) -> list[str]:
    """``n`` questions from ``llm`` (grounded in the RCE captions when the run uses RCE), retried once
    when no reply held a usable question, then the fallback question."""
    grounded = state.get("retrieval_context") if settings.retrieval_context else None
    questions: list[str] = []
    for _ in range(2):  # one retry when every reply was malformed
        questions = sample_questions(llm, state["description"], state.get("dialogue", []),
                                     candidates=grounded, n=n, avoid=avoid)
        if questions:
            return questions
        logger.info("questioner produced no usable question; retrying")
    note_fallback(logger, "the questioner's replies held no usable question twice; asking the fallback question")
    return [FALLBACK_QUESTION]
