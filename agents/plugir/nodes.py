"""PlugIR's nodes: each a top-level function of the state and the run's settings, testable alone.

What a node needs besides those comes as keyword arguments, which
:func:`pictrieve.graphs.plugir.build_plugir_graph` binds once per compiled graph:

- ``gallery`` (:class:`~.candidates.GalleryLike`) and its ``embedder``;
- ``chat``: a function of no argument returning the chat model, made on first call (the offline
  questioner never needs a language model);
- ``default_questioner``: ``"llm"`` or ``"offline"``, for runs whose settings name none;
- ``captions`` (:class:`~.candidates.CandidateCaptions`), ``vectors``
  (:class:`~.candidates.CandidateVectors`), ``caption_vectors`` (:class:`~.candidates.CaptionVectors`):
  the per-graph caches of what is read about the candidates;
- ``answerer``: a simulated user ``(question, state) -> reply``, or ``None`` to pause with ``interrupt()``.

Each node that does work appends its :class:`~.state.Timing` (the evaluation's per-node seconds).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Literal, Sequence

import numpy as np
from langchain_core.language_models.chat_models import BaseChatModel
from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from pictrieve.agents.plugir.candidates import (
    CandidateCaptions,
    CandidateVectors,
    CaptionVectors,
    GalleryLike,
    score_spread,
)
from pictrieve.agents.plugir.caption_terms import CaptionTerms, caption_terms
from pictrieve.agents.plugir.offline_questioner import (
    Question,
    answer_adjustments,
    answered_facts,
    candidate_distribution,
    candidate_questions,
    choose_question,
    clarified,
    is_valid_answer,
    query_parts,
    reformulate_with_answers,
    term_phrase,
    vector_evidence,
)
from pictrieve.agents.plugir.question_filter import select_least_disruptive, unanswerable_questions
from pictrieve.agents.plugir.questioner import FALLBACK_QUESTION, Turn
from pictrieve.agents.plugir.questioner import generate_questions as sample_questions
from pictrieve.agents.plugir.reformulator import concatenate_dialogue
from pictrieve.agents.plugir.reformulator import reformulate as reformulate_caption
from pictrieve.agents.plugir.replies import option_labels, parse_reply
from pictrieve.agents.plugir.retrieval_context import select_representatives
from pictrieve.agents.plugir.settings import MAX_REASKS, PlugIRSettings
from pictrieve.agents.plugir.simulated_user import Answerer
from pictrieve.agents.plugir.state import PlugIRState, Timing
from pictrieve.agents.settings import settings_of
from pictrieve.tools.models.llm_calls import note_fallback
from pictrieve.vectorstore.hits import ImageHit, as_hit

logger = logging.getLogger(__name__)

ChatModelMaker = Callable[[], BaseChatModel]
"""``chat()``: the graph's chat model, made on first call."""


def timed(node: str, state: PlugIRState, started: float) -> list[Timing]:
    """This round's timing of ``node``, started at ``started`` (``time.perf_counter()``)."""
    return [Timing(round=state.get("round", 0), node=node, seconds=time.perf_counter() - started)]


# --- the nodes -----------------------------------------------------------------------------------


def reformulate(state: PlugIRState, runtime: Runtime[PlugIRSettings] | None = None, *,
                chat: ChatModelMaker, default_questioner: str) -> dict[str, Any]:
    """This round's query (CR): the description at round 0; then the LLM's caption of the dialogue
    (CR), the description with the confirmed terms appended (offline), or the concatenated dialogue (ZS)."""
    started = time.perf_counter()
    settings = settings_of(runtime, PlugIRSettings)
    dialogue = state.get("dialogue", [])
    description = state["description"]
    if not dialogue:
        query = description
    elif settings.reformulate and settings.questioner_or(default_questioner) == "offline":
        query = reformulate_with_answers(description, dialogue) if settings.append_answers else description
    elif settings.reformulate:
        query = reformulate_caption(chat(), description, dialogue, previous=state.get("query"),
                                    max_tokens=settings.reformulation_max_tokens)
    else:
        query = concatenate_dialogue(description, dialogue)
    return {"query": query, "queries": [query], "timings": timed("reformulation", state, started)}


def retrieve(state: PlugIRState, runtime: Runtime[PlugIRSettings] | None = None, *, gallery: GalleryLike,
             default_questioner: str, captions: CandidateCaptions, vectors: CandidateVectors,
             caption_vectors: CaptionVectors) -> dict[str, Any]:
    """The ``ranked_k`` best images of the query (re-ranked by the answers for the offline questioner),
    the top-n ``candidates`` the questioner reads and the ``shown_k`` shown (``hits``)."""
    started = time.perf_counter()
    settings = settings_of(runtime, PlugIRSettings)
    size = gallery.count()
    n = settings.candidate_count(size)
    vector = query_vector(state, settings, gallery.embedder, default_questioner)
    ranked = gallery.search_vector(vector, k=settings.ranked_count(size))
    if settings.questioner_or(default_questioner) == "offline":
        ranked = rerank_by_answers(ranked, state.get("dialogue", []), settings, n, captions=captions,
                                   vectors=vectors, caption_vectors=caption_vectors)
    # The state holds plain data (JSON dicts), never ImageHit objects: a checkpointer LangGraph
    # brings (the server's) must read it back without a list of allowed types.
    shown = [hit.to_json() for hit in ranked[: settings.shown_k]]
    return {
        "candidates": [hit.to_json() for hit in ranked[:n]],
        "shown": shown,
        "hits": shown,
        "ranking": [(hit.id, float(hit.score)) for hit in ranked],
        "timings": timed("retrieval", state, started),
    }


def extract_context(state: PlugIRState, runtime: Runtime[PlugIRSettings] | None = None, *,
                    default_questioner: str, captions: CandidateCaptions, vectors: CandidateVectors,
                    caption_vectors: CaptionVectors) -> dict[str, Any]:
    """RCE (Algorithm 1): the caption of the most distinctive candidate of each cluster; nothing when
    the run does without RCE or asks offline questions (which read no context)."""
    started = time.perf_counter()
    settings = settings_of(runtime, PlugIRSettings)
    if not settings.retrieval_context or settings.questioner_or(default_questioner) == "offline":
        return {"retrieval_context": []}
    candidates = [as_hit(c) for c in state.get("candidates", [])]
    if not candidates:
        return {"retrieval_context": [], "timings": timed("rce", state, started)}
    texts, described = captions(candidates)
    image_vectors = vectors(candidates)
    probes = np.array(image_vectors, dtype=np.float64, copy=True)
    if described:  # the authors probe with each candidate's caption embedding
        probes[described] = caption_vectors([texts[i] for i in described])
    chosen = select_representatives(image_vectors, probes, clusters=settings.clusters, seed=settings.seed)
    return {"retrieval_context": [texts[i] for i in chosen], "timings": timed("rce", state, started)}


def generate_questions(state: PlugIRState, runtime: Runtime[PlugIRSettings] | None = None, *,
                       chat: ChatModelMaker, default_questioner: str,
                       captions: CandidateCaptions) -> dict[str, Any]:
    """This round's candidate questions: q_n from the LLM, or the offline questioner's from what tells
    the candidates' captions apart (nothing the description or an answer settles, nothing asked)."""
    started = time.perf_counter()
    settings = settings_of(runtime, PlugIRSettings)
    # Without the filter the first well-formed question is asked (the authors' arms without
    # selection ask their first sample); sampling q_n at once, in one batch, is how we retry
    # when a small model's first sample is malformed or repeats an earlier question.
    if settings.questioner_or(default_questioner) == "offline":
        terms = candidate_terms(state, captions)
        asked = [Question.from_json(t["spec"]) for t in state.get("dialogue", []) if t.get("spec")]
        _, denied = answered_facts(state.get("dialogue", []))
        known = reformulate_with_answers(state["description"], state.get("dialogue", []))
        offline = candidate_questions(terms, known=known, asked=asked, denied=denied)
        return {"questions": [q.text for q in offline], "offline_questions": [q.to_json() for q in offline],
                "timings": timed("questioner", state, started)}
    questions = ask_for_questions(chat(), state, settings, settings.questions_per_round)
    return {"questions": questions, "offline_questions": [], "timings": timed("questioner", state, started)}


def filter_and_select(state: PlugIRState, runtime: Runtime[PlugIRSettings] | None = None, *,
                      chat: ChatModelMaker, default_questioner: str, embedder: Any,
                      captions: CandidateCaptions, vectors: CandidateVectors) -> dict[str, Any]:
    """F (Algorithm 2): drop the questions the query already answers (regenerating up to
    ``filter_attempts`` times), then ask the one that moves the candidate distribution least; the
    offline questioner's most informative question; without F, the first question."""
    started = time.perf_counter()
    settings = settings_of(runtime, PlugIRSettings)
    questions = list(state.get("questions") or [])
    if settings.questioner_or(default_questioner) == "offline":
        return {**select_offline_question(state, settings, captions=captions),
                "timings": timed("filter", state, started)}
    if not settings.filter_questions:
        question = questions[0] if questions else FALLBACK_QUESTION
        return {"question": question, "question_spec": None, "timings": timed("filter", state, started)}
    context = state["query"]
    kept = unanswerable_questions(chat(), context, questions)
    attempt = 1
    rejected = list(questions)
    while not kept and attempt < settings.filter_attempts:
        attempt += 1
        fresh = ask_for_questions(chat(), state, settings, settings.questions_per_round, avoid=rejected)
        rejected += fresh
        kept = unanswerable_questions(chat(), context, fresh)
    if not kept:
        logger.info("no question survived %d filter attempts; using the unfiltered set", attempt)
        kept = questions or [FALLBACK_QUESTION]
    question = kept[0]
    if len(kept) > 1 and state.get("candidates"):
        candidates = [as_hit(c) for c in state["candidates"]]
        image_vectors = vectors(candidates)  # fetched once per round, shared with RCE
        context_scores = np.array([c.score for c in candidates])
        extended = embedder.embed_texts([f"{context}, {q}" for q in kept])
        question = kept[select_least_disruptive(context_scores, extended @ image_vectors.T)]
    return {"question": question, "question_spec": None, "timings": timed("filter", state, started)}


def ask(state: PlugIRState, *, answerer: Answerer | None = None) -> dict[str, Any]:
    """Ask the question: ``interrupt()`` with it and the images shown (or the ``answerer``'s reply), then
    record the answer as a dialogue turn, or end on a pick (``found``) or ``stop``.

    A choice answered with none of its options is asked again with the options spelled out (up to
    :data:`~.settings.MAX_REASKS` times, once for a simulated user), then recorded as ``unknown``."""
    question = state.get("question") or FALLBACK_QUESTION
    shown = [as_hit(h) for h in state.get("shown", [])]
    spec = state.get("question_spec") if (state.get("question_spec") or {}).get("text") == question else None
    choice = Question.from_json(spec) if spec and spec.get("kind") == "choice" else None
    payload = {"round": state.get("round", 0) + 1, "question": question,
               "query": state.get("query", ""), "shown": [h.to_json() for h in shown]}
    if choice:
        payload["options"] = option_labels(spec)

    def reply_to(asked: str, attempt: int) -> dict[str, Any]:
        if answerer is not None:
            return parse_reply(answerer(asked, state), shown)
        return parse_reply(interrupt({**payload, "question": asked} if attempt else payload), shown)

    parsed = reply_to(question, 0)
    # A choice answered with none of its options ("yes", "black" to "Where is it?") is asked
    # again with the options spelled out, never read into the query (a simulated user once).
    reasks = MAX_REASKS if answerer is None else 1
    attempt = 0
    while choice and "answer" in parsed and not is_valid_answer(choice, parsed["answer"]):
        if attempt >= reasks:
            logger.info("no option picked in %d answers to %r; recorded as unknown", attempt + 1, question)
            parsed = {"answer": "unknown"}
            break
        attempt += 1
        parsed = reply_to(clarified(choice), attempt)
    # A pick or a stop ends the round the person was in: ``round`` then counts it, as the
    # interrupt that asked did (its payload's round is the state's + 1).
    ended = {"stopped": True, "round": state.get("round", 0) + 1}
    if "stop" in parsed:
        return ended
    if "found" in parsed:
        return {**ended, "found": as_hit(parsed["found"]).to_json()}
    turn = Turn(question=question, answer=parsed["answer"])
    if spec:
        turn["spec"] = spec
    return {"dialogue": [turn], "round": state.get("round", 0) + 1}


# --- routing -------------------------------------------------------------------------------------


def after_retrieve(state: PlugIRState,
                   runtime: Runtime[PlugIRSettings] | None = None) -> Literal["extract_context", "__end__"]:
    """End once ``max_rounds`` answers were received (the last ranking is made), else ask again."""
    settings = settings_of(runtime, PlugIRSettings)
    return END if state.get("round", 0) >= settings.max_rounds else "extract_context"


def after_ask(state: PlugIRState) -> Literal["reformulate", "__end__"]:
    """End on a pick or a stop, else fold the answer into the next query."""
    return END if state.get("stopped") else "reformulate"


# --- what the nodes share ------------------------------------------------------------------------


def rerank_by_answers(hits: list[ImageHit], dialogue: Sequence[Turn], settings: PlugIRSettings, n: int, *,
                      captions: CandidateCaptions, vectors: CandidateVectors,
                      caption_vectors: CaptionVectors) -> list[ImageHit]:
    """The hits re-scored by what the user confirmed and denied (offline questions).

    Each image's description is its stored caption, else the captioner's (every hit when the
    captioner reads stored vectors, as tags do; only the top ``n`` when it reads files, as
    before); an image without one keeps its score."""
    confirmed, denied = answered_facts(dialogue)
    if not confirmed and not denied or not hits:
        return hits
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
        evidence = vector_evidence(caption_vectors([term_phrase(k) for k in facts]), vectors(hits))
        vector_adjustments = (settings.confirm_vector_weight * evidence[:len(confirmed)].sum(axis=0)
                              - settings.deny_vector_weight * np.clip(evidence[len(confirmed):], 0, None).sum(axis=0))
        adjustments += np.where(uncaptioned, vector_adjustments, 0.0)
    # Weights are in units of the candidates' score spread, so they mean the same with any embedder.
    scores += score_spread(scores[:n]) * adjustments
    order = np.argsort(-scores, kind="stable")
    return [hits[i].model_copy(update={"score": float(scores[i]), "rank": rank})
            for rank, i in enumerate(order, 1)]


def query_vector(state: PlugIRState, settings: PlugIRSettings, embedder: Any, default_questioner: str) -> np.ndarray:
    """The vector searched: the query text's embedding, or with ``fuse_answers`` (offline questioner)
    the normalised mean of the description's and each answer phrase's embeddings."""
    dialogue = state.get("dialogue", [])
    if not (settings.fuse_answers and dialogue and settings.append_answers
            and settings.questioner_or(default_questioner) == "offline"):
        return embedder.embed_texts([state["query"]])[0]
    vectors = np.asarray(embedder.embed_texts(query_parts(state["description"], dialogue)), dtype=np.float64)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    mean = vectors.mean(axis=0)
    return (mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32)


def candidate_terms(state: PlugIRState, captions: CandidateCaptions) -> list[CaptionTerms]:
    """The terms of each candidate's caption (what the offline questioner asks about)."""
    texts, _ = captions([as_hit(c) for c in state.get("candidates", [])])
    return [caption_terms(text) for text in texts]


def select_offline_question(state: PlugIRState, settings: PlugIRSettings, *,
                            captions: CandidateCaptions) -> dict[str, Any]:
    """The most valuable offline question (the filter already ran: none is settled by the
    query or the dialogue). The candidates' scores already hold the answers so far."""
    questions = [Question.from_json(q) for q in state.get("offline_questions") or []]
    candidates = [as_hit(c) for c in state.get("candidates", [])]
    terms = candidate_terms(state, captions)
    scores = np.array([c.score for c in candidates], dtype=np.float64)
    p = candidate_distribution(scores, settings.question_temperature * score_spread(scores))
    best = choose_question(questions, terms, p, settings.yes_weight) if candidates else None
    if best is None:  # the candidates' captions no longer differ in anything not yet asked
        return {"question": FALLBACK_QUESTION, "question_spec": None}
    return {"question": best.text, "question_spec": best.to_json()}


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
