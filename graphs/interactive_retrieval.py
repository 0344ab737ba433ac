"""PlugIR interactive text-to-image retrieval as a LangGraph graph.

The user describes a photo briefly; each round the graph asks one question, the user answers, and
the ranking is recomputed from everything said so far (Lee et al., 2024, "Interactive
Text-to-Image Retrieval with Large Language Models: A Plug-and-Play Approach")::

    START -> reformulate -> retrieve --(budget spent)--> END
                 ^             |
                 |        extract_context -> generate_questions -> filter_and_select -> ask
                 |                                                                      |
                 +------------------------- answer ------------------------------------+
                                                         ("found <n>" / "stop") -> END

- ``reformulate`` (CR): the LLM folds the description and dialogue into one caption; without CR
  (the ZS arm) the raw dialogue is concatenated.
- ``retrieve``: top-n candidates of that query (n ~ 1% of the gallery, at least 20).
- ``extract_context`` (RCE, Algorithm 1): captions of the most distinctive candidate per cluster.
- ``generate_questions``: q_n questions (grounded prompt with RCE, baseline prompt without).
- ``filter_and_select`` (F, Algorithm 2): drop questions the context already answers, pick the
  one with the smallest KL change of the candidate distribution.
- ``ask``: ``interrupt()`` with the question and the current top-k; resume with
  ``Command(resume=answer)``. With an ``answerer`` (simulated user) the graph runs unattended.

The ablation arms of the paper (ZS, CR, CR+RCE, CR+RCE+F) are run settings of this one graph: the
context keys ``reformulate``, ``retrieval_context``, ``filter_questions``, or ``arm`` to set all three
(see :class:`PlugIRSettings` and :data:`ARMS`). The ``offline`` arm (``questioner="offline"``) needs
no language model: ``generate_questions`` makes yes/no and short-choice questions from the terms
that tell the candidates' captions apart, ``filter_and_select`` drops what is known or asked and
picks the question of highest expected information, ``reformulate`` appends confirmed terms to the
description, ``retrieve`` re-ranks the best ``ranked_k`` images by the answers (a denied thing
lowers the images whose description holds it, a confirmed one raises them), and the interrupt
carries the choice question's ``options``; an answer that picks none of them is asked again with
the options spelled out (:mod:`pictrieve.agents.plugir.offline_questioner`). Each round's
``ranking`` (ids and scores of the ``ranked_k`` best, in the order shown) is what an evaluation
ranks. A run that names no questioner gets the
offline one when the graph was built with the bundled offline model (whose own questions made
rankings worse, BENCHMARKS.md) and the LLM's otherwise, so a served graph needs no context to ask
sensible questions.

Usage::

    from langgraph.types import Command
    graph = build_plugir_graph(Gallery.open("./my.gallery"), llm="openai:gpt-4o-mini",
                               checkpointer="sessions.sqlite")
    config = {"configurable": {"thread_id": "s1"}}
    context = {"max_rounds": 10, "shown_k": 10}
    result = graph.invoke({"description": "a dog in the snow"}, config, context=context)
    while "__interrupt__" in result:
        payload = result["__interrupt__"][0].value  # {"round", "question", "query", "shown"}
        result = graph.invoke(Command(resume=input(payload["question"] + " ")), config, context=context)
"""

from __future__ import annotations

import functools
import logging
import math
import operator
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping, Protocol, Sequence

import numpy as np
from langchain_core.language_models.chat_models import BaseChatModel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12 (server schemas)

from pictrieve.agents.plugir.caption_terms import CaptionTerms, caption_terms, vocabulary
from pictrieve.agents.plugir.offline_questioner import (
    Question,
    answer_adjustments,
    answered_facts,
    candidate_distribution,
    candidate_questions,
    choose_question,
    clarified,
    is_valid_answer,
    reformulate_with_answers,
    term_phrase,
    vector_evidence,
)
from pictrieve.agents.plugir.question_filter import (
    select_least_disruptive,
    unanswerable_questions,
)
from pictrieve.agents.plugir.questioner import FALLBACK_QUESTION, Turn, generate_questions
from pictrieve.agents.plugir.reformulator import concatenate_dialogue, reformulate
from pictrieve.agents.plugir.retrieval_context import select_representatives
from pictrieve.agents.plugir.simulated_user import Answerer
from pictrieve.graphs.checkpoints import sqlite_checkpointer  # noqa: F401  (re-exported: its old home)
from pictrieve.graphs.settings import RunSettings, SettingsError, require_positive, settings_of
from pictrieve.tools.llm_calls import note_fallback
from pictrieve.vectorstore.hits import ImageHit, as_hit

logger = logging.getLogger(__name__)

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
(:mod:`pictrieve.agents.plugir.offline_questioner`)."""
QUESTIONERS = ("llm", "offline")


def default_arm(llm: Any) -> str:
    """The arm a person gets when they name none: ``offline`` with the bundled offline model, whose
    questions did not help and take minutes per round on a CPU (BENCHMARKS.md, PlugIR), else the
    paper's full method ``cr+rce+f``."""
    from pictrieve.tools.chat_models import is_offline_chat_model

    return "offline" if is_offline_chat_model(llm) else "cr+rce+f"


# --- the gallery seam ----------------------------------------------------------------------------
class GalleryLike(Protocol):
    """The part of :class:`pictrieve.vectorstore.gallery.Gallery` this graph uses."""

    embedder: Any  # .embed_texts(list[str]) -> (n, dim) float32 unit rows

    def search_vector(self, vector: np.ndarray, k: int = 10) -> list[ImageHit]: ...

    def embeddings(self, ids: Sequence[str] | None = None) -> np.ndarray: ...

    def count(self) -> int: ...


Captioner = Callable[[Sequence[str]], list[str]]
"""``captions = captioner(image_paths)``: for candidates without a stored caption."""


def resolve_captioner(choice: Captioner | str | None, gallery: GalleryLike) -> Captioner | None:
    """The captioner PlugIR uses for candidates without a stored caption.

    ``None`` or ``"none"``: none (file names stand in); ``"auto"``: zero-shot tags in the gallery's
    own text-image space (``tags``, :mod:`pictrieve.tools.image_tags`), read from the candidates'
    stored vectors; any other string: a captioner name for
    :func:`pictrieve.tools.captioners.create_captioner` (``"tags"``, ``"offline"``, ``"blip:<model>"``);
    a callable (paths -> captions) is used as is. A captioner with ``describe_vectors`` is given the
    stored image vectors instead of the files.
    """
    if choice is None or callable(choice):
        return choice
    if choice == "none":
        return None
    from pictrieve.tools.captioners import caption_files, create_captioner

    captioner = create_captioner("tags" if choice == "auto" else choice, embedder=gallery.embedder)
    return captioner if hasattr(captioner, "describe_vectors") else caption_files(captioner)


# --- state and settings --------------------------------------------------------------------------
class Timing(TypedDict):
    round: int
    node: str
    seconds: float


class PlugIRInput(TypedDict):
    """What a session starts from: the user's first description of the photo (D_0)."""

    description: str


class PlugIROutput(TypedDict, total=False):
    """What a caller reads back: the dialogue, the queries, what was shown and what was found."""

    dialogue: Annotated[list[Turn], operator.add]  # (Q_1, A_1), ..., (Q_t, A_t)
    round: int  # t: answers received so far
    query: str  # this round's retrieval query (reformulated caption or concatenation)
    queries: Annotated[list[str], operator.add]  # query of every round, index = round
    shown: list[ImageHit]  # the top images shown to the user this round
    hits: list[ImageHit]  # the same images: every method's output carries ``hits``
    ranking: list[tuple[str, float]]  # (id, score) of the ranked_k best this round, in the order shown
    retrieval_context: list[str]  # RCE captions shown to the questioner this round
    question: str  # the question asked this round
    question_spec: dict[str, Any] | None  # the offline questioner's question (kind, term, options)
    found: ImageHit | None  # the image the user picked
    stopped: bool
    timings: Annotated[list[Timing], operator.add]


class PlugIRState(PlugIRInput, PlugIROutput, total=False):
    """The graph state. Lists that grow round by round use ``operator.add`` reducers."""

    candidates: list[ImageHit]  # top-n of this round's query
    questions: list[str]  # this round's candidate questions
    offline_questions: list[dict[str, Any]]  # the offline questioner's candidate questions (specs)


@dataclass
class PlugIRSettings(RunSettings):
    """Run settings of :func:`build_plugir_graph` (LangGraph context). ``arm`` sets the three flags."""

    shown_k: int = 10  # images shown per round
    candidate_k: int | None = None  # retrieval candidates; None = max(20, 1% of the gallery)
    clusters: int = 10  # m in Algorithm 1
    questions_per_round: int = 5  # q_n
    max_rounds: int = 10  # question budget T
    filter_attempts: int = 3  # regenerations before falling back to unfiltered questions
    reformulation_max_tokens: int = 512  # paper setting; a caption needs far fewer
    reformulate: bool = True  # CR
    retrieval_context: bool = True  # RCE (grounded questioner)
    filter_questions: bool = True  # F
    seed: int = 0
    # "llm" (the paper's), "offline" (caption terms + expected information), or None: the graph's
    # default, offline with the bundled offline model and llm with any other (see default_arm)
    questioner: str | None = None
    arm: str | None = None  # "zs", "cr", "cr+rce", "cr+rce+f" or "offline": overrides the flags above
    # The offline questioner (chosen on flickr8k-train's dev rows, BENCHMARKS.md "PlugIR offline"):
    ranked_k: int | None = None  # images re-ranked by the answers each round; None: RANKED_K
    # weights and temperature in units of the candidates' score spread (standard deviation)
    confirm_weight: float = 1.0  # score added per confirmed term a stored caption implies
    deny_weight: float = 3.0  # score taken per denied term a stored caption implies
    described_trust: float = 0.2  # weight of a captioner's description (tags) relative to a stored caption
    # photos without a stored caption, per confirmed term: its text vector's standardised similarity to
    # each image (added); per denied term: the above-average part of it (taken off)
    confirm_vector_weight: float = 0.0
    deny_vector_weight: float = 0.0
    question_temperature: float = 100.0  # softmax temperature of the candidate distribution
    append_answers: bool = True  # confirmed terms are appended to the query text (else they only re-rank)
    yes_weight: float = 0.0  # value of a likely "yes" beside the expected information

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



# --- user replies --------------------------------------------------------------------------------
_FOUND = re.compile(r"^\s*(?:found|select|pick|it'?s)\s*#?\s*(\S+)?\s*$", re.I)
_STOP = {"stop", "quit", "exit", "q", "done", "give up"}


def parse_reply(reply: Any, shown: Sequence[ImageHit]) -> dict[str, Any]:
    """Turn a resume value into ``{"answer": str}``, ``{"found": ImageHit}`` or ``{"stop": True}``.

    Accepts a string (``"found 3"`` = the 3rd shown image, or an image id; ``"stop"``; anything
    else is an answer) or a mapping with ``answer`` / ``found`` / ``stop`` keys.
    """
    if isinstance(reply, Mapping):
        if reply.get("stop"):
            return {"stop": True}
        if reply.get("found") is not None:
            return _found(str(reply["found"]), shown)
        reply = reply.get("answer", "")
    text = str(reply or "").strip()
    if text.lower() in _STOP:
        return {"stop": True}
    match = _FOUND.match(text)
    if match and text.lower().split()[0] in {"found", "select", "pick"}:
        return _found(match.group(1) or "1", shown)
    return {"answer": text or "unknown"}


def _found(token: str, shown: Sequence[ImageHit]) -> dict[str, Any]:
    shown = [as_hit(hit) for hit in shown]
    for hit in shown:
        if hit.id == token:
            return {"found": hit}
    if token.isdigit() and 1 <= int(token) <= len(shown):
        return {"found": shown[int(token) - 1]}
    # Not one of the shown images: record the pick as given rather than failing the session.
    logger.warning("'found %s' matches no shown image; ending with it recorded as given", token)
    return {"found": ImageHit(id=token)}


# --- the graph -----------------------------------------------------------------------------------
def build_plugir_graph(
    index: GalleryLike,
    *,
    llm: BaseChatModel | str | None = None,
    checkpointer: Any = None,
    name: str = "plugir",
    answerer: Answerer | None = None,
    captioner: Captioner | str | None = None,
    base_url: str | None = None,
) -> CompiledStateGraph:
    """Compile the PlugIR graph over ``index``.

    Args:
        index: the :class:`~pictrieve.vectorstore.gallery.Gallery` searched (or anything with
            ``embedder``, ``search_vector``, ``embeddings`` and ``count``).
        llm: a LangChain chat model or a name for
            :func:`pictrieve.tools.chat_models.create_chat_model` (default: the offline model).
        answerer: ``(question, state) -> answer``; when given the graph never interrupts
            (simulated user). Without it, ``ask`` pauses with ``interrupt()``.
        checkpointer: a LangGraph checkpointer, or a path to a SQLite file
            (:func:`sqlite_checkpointer`). Needed for ``interrupt()`` to pause a session; none is
            made implicitly (the LangGraph server brings its own).
        name: the compiled graph's name.
        captioner: captions for candidate images that have none (else the file name is used):
            a callable or a name, see :func:`resolve_captioner` (``"auto"`` is what the CLI uses).
    """
    from pictrieve.tools.chat_models import create_chat_model

    gallery = index
    # Made on first use: the offline questioner never needs a language model.
    chat = functools.cache(lambda: create_chat_model(llm, base_url=base_url))
    default_questioner = ARMS[default_arm(llm)]["questioner"]

    def questioner_of(settings: PlugIRSettings) -> str:
        return settings.questioner or default_questioner
    captioner = resolve_captioner(captioner, gallery)
    vectors_of = _CandidateVectors(gallery)
    # A photo's description does not change: each is described once per compiled graph, not in
    # every node and round that reads it (the offline questioner reads them twice a round).
    descriptions = _DescriptionMemo()

    def timed(name: str, state: PlugIRState, started: float) -> list[Timing]:
        return [Timing(round=state.get("round", 0), node=name, seconds=time.perf_counter() - started)]

    def reformulate_node(state: PlugIRState, runtime: Runtime[PlugIRSettings]) -> dict[str, Any]:
        started = time.perf_counter()
        settings = settings_of(runtime, PlugIRSettings)
        dialogue = state.get("dialogue", [])
        description = state["description"]
        if not dialogue:
            query = description
        elif settings.reformulate and questioner_of(settings) == "offline":
            query = reformulate_with_answers(description, dialogue) if settings.append_answers else description
        elif settings.reformulate:
            query = reformulate(chat(), description, dialogue, previous=state.get("query"),
                                max_tokens=settings.reformulation_max_tokens)
        else:
            query = concatenate_dialogue(description, dialogue)
        return {"query": query, "queries": [query], "timings": timed("reformulation", state, started)}

    def retrieve_node(state: PlugIRState, runtime: Runtime[PlugIRSettings]) -> dict[str, Any]:
        started = time.perf_counter()
        settings = settings_of(runtime, PlugIRSettings)
        size = gallery.count()
        n = settings.candidate_count(size)
        vector = gallery.embedder.embed_texts([state["query"]])[0]
        ranked = gallery.search_vector(vector, k=settings.ranked_count(size))
        if questioner_of(settings) == "offline":
            ranked = rerank_by_answers(ranked, state.get("dialogue", []), settings, n)
        shown = ranked[: settings.shown_k]
        return {
            "candidates": ranked[:n],
            "shown": shown,
            "hits": shown,
            "ranking": [(hit.id, float(hit.score)) for hit in ranked],
            "timings": timed("retrieval", state, started),
        }

    def rerank_by_answers(hits: list[ImageHit], dialogue: Sequence[Turn], settings: PlugIRSettings,
                          n: int) -> list[ImageHit]:
        """The hits re-scored by what the user confirmed and denied (offline questions).

        Each image's description is its stored caption, else the captioner's (every hit when the
        captioner reads stored vectors, as tags do; only the top ``n`` when it reads files, as
        before); an image without one keeps its score."""
        confirmed, denied = answered_facts(dialogue)
        if not confirmed and not denied or not hits:
            return hits
        hits = [as_hit(h) for h in hits]
        cheap = captioner is not None and hasattr(captioner, "describe_vectors")
        head, described = _fill_captions(hits[:n], captioner, vectors_of, descriptions)
        tail, described_tail = _fill_captions(hits[n:], captioner if cheap else None, vectors_of, descriptions)
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
            evidence = vector_evidence(caption_vectors([term_phrase(k) for k in facts]), vectors_of(hits))
            vector_adjustments = (settings.confirm_vector_weight * evidence[:len(confirmed)].sum(axis=0)
                                  - settings.deny_vector_weight * np.clip(evidence[len(confirmed):], 0, None).sum(axis=0))
            adjustments += np.where(uncaptioned, vector_adjustments, 0.0)
        # Weights are in units of the candidates' score spread, so they mean the same with any embedder.
        scores += score_spread(scores[:n]) * adjustments
        order = np.argsort(-scores, kind="stable")
        return [hits[i].model_copy(update={"score": float(scores[i]), "rank": rank})
                for rank, i in enumerate(order, 1)]

    # Candidates of one round are mostly the next round's too: their caption vectors are kept (per
    # caption text, for this compiled graph's embedder) instead of re-embedding them every round.
    caption_cache: dict[str, np.ndarray] = {}

    def caption_vectors(texts: list[str]) -> np.ndarray:
        if len(caption_cache) > 50_000:  # bounded for long-lived served graphs
            caption_cache.clear()
        missing = list(dict.fromkeys(t for t in texts if t not in caption_cache))
        if missing:
            caption_cache.update(zip(missing, np.asarray(gallery.embedder.embed_texts(missing))))
        return np.stack([caption_cache[t] for t in texts])

    def extract_context_node(state: PlugIRState, runtime: Runtime[PlugIRSettings]) -> dict[str, Any]:
        started = time.perf_counter()
        settings = settings_of(runtime, PlugIRSettings)
        if not settings.retrieval_context or questioner_of(settings) == "offline":  # it reads none
            return {"retrieval_context": []}
        candidates = [as_hit(c) for c in state.get("candidates", [])]
        if not candidates:
            return {"retrieval_context": [], "timings": timed("rce", state, started)}
        captions, described = _fill_captions(candidates, captioner, vectors_of, descriptions)
        image_vectors = vectors_of(candidates)
        probes = np.array(image_vectors, dtype=np.float64, copy=True)
        if described:  # the authors probe with each candidate's caption embedding
            probes[described] = caption_vectors([captions[i] for i in described])
        chosen = select_representatives(image_vectors, probes, clusters=settings.clusters,
                                        seed=settings.seed)
        return {"retrieval_context": [captions[i] for i in chosen],
                "timings": timed("rce", state, started)}

    def generate_questions_node(state: PlugIRState, runtime: Runtime[PlugIRSettings]) -> dict[str, Any]:
        started = time.perf_counter()
        settings = settings_of(runtime, PlugIRSettings)
        # Without the filter the first well-formed question is asked (the authors' arms without
        # selection ask their first sample); sampling q_n at once, in one batch, is how we retry
        # when a small model's first sample is malformed or repeats an earlier question.
        if questioner_of(settings) == "offline":
            terms = candidate_terms(state)
            asked = [Question.from_json(t["spec"]) for t in state.get("dialogue", []) if t.get("spec")]
            _, denied = answered_facts(state.get("dialogue", []))
            known = reformulate_with_answers(state["description"], state.get("dialogue", []))
            offline = candidate_questions(terms, known=known, asked=asked, denied=denied)
            return {"questions": [q.text for q in offline], "offline_questions": [q.to_json() for q in offline],
                    "timings": timed("questioner", state, started)}
        questions = _ask_for_questions(state, settings, settings.questions_per_round)
        return {"questions": questions, "offline_questions": [], "timings": timed("questioner", state, started)}

    def filter_and_select_node(state: PlugIRState, runtime: Runtime[PlugIRSettings]) -> dict[str, Any]:
        started = time.perf_counter()
        settings = settings_of(runtime, PlugIRSettings)
        questions = list(state.get("questions") or [])
        if questioner_of(settings) == "offline":
            return {**select_offline_question(state, settings), "timings": timed("filter", state, started)}
        if not settings.filter_questions:
            question = questions[0] if questions else FALLBACK_QUESTION
            return {"question": question, "question_spec": None, "timings": timed("filter", state, started)}
        context = state["query"]
        kept = unanswerable_questions(chat(), context, questions)
        attempt = 1
        rejected = list(questions)
        while not kept and attempt < settings.filter_attempts:
            attempt += 1
            fresh = _ask_for_questions(state, settings, settings.questions_per_round, avoid=rejected)
            rejected += fresh
            kept = unanswerable_questions(chat(), context, fresh)
        if not kept:
            logger.info("no question survived %d filter attempts; using the unfiltered set",
                        attempt)
            kept = questions or [FALLBACK_QUESTION]
        question = kept[0]
        if len(kept) > 1 and state.get("candidates"):
            candidates = [as_hit(c) for c in state["candidates"]]
            vectors = vectors_of(candidates)  # fetched once per round, shared with RCE
            context_scores = np.array([c.score for c in candidates])
            extended = gallery.embedder.embed_texts([f"{context}, {q}" for q in kept])
            question = kept[select_least_disruptive(context_scores, extended @ vectors.T)]
        return {"question": question, "question_spec": None, "timings": timed("filter", state, started)}

    def ask_node(state: PlugIRState) -> dict[str, Any]:
        question = state.get("question") or FALLBACK_QUESTION
        shown = [as_hit(h) for h in state.get("shown", [])]
        spec = state.get("question_spec") if (state.get("question_spec") or {}).get("text") == question else None
        choice = Question.from_json(spec) if spec and spec.get("kind") == "choice" else None
        payload = {"round": state.get("round", 0) + 1, "question": question,
                   "query": state.get("query", ""), "shown": [h.to_json() for h in shown]}
        if choice:
            payload["options"] = _option_labels(spec)

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
        if "stop" in parsed:
            return {"stopped": True}
        if "found" in parsed:
            return {"found": parsed["found"], "stopped": True}
        turn = Turn(question=question, answer=parsed["answer"])
        if spec:
            turn["spec"] = spec
        return {"dialogue": [turn], "round": state.get("round", 0) + 1}

    def candidate_terms(state: PlugIRState) -> list[CaptionTerms]:
        candidates = [as_hit(c) for c in state.get("candidates", [])]
        captions, _ = _fill_captions(candidates, captioner, vectors_of, descriptions)
        return [caption_terms(text) for text in captions]

    def select_offline_question(state: PlugIRState, settings: PlugIRSettings) -> dict[str, Any]:
        """The most valuable offline question (the filter already ran: none is settled by the
        query or the dialogue). The candidates' scores already hold the answers so far."""
        questions = [Question.from_json(q) for q in state.get("offline_questions") or []]
        candidates = [as_hit(c) for c in state.get("candidates", [])]
        terms = candidate_terms(state)
        scores = np.array([c.score for c in candidates], dtype=np.float64)
        p = candidate_distribution(scores, settings.question_temperature * score_spread(scores))
        best = choose_question(questions, terms, p, settings.yes_weight) if candidates else None
        if best is None:  # the candidates' captions no longer differ in anything not yet asked
            return {"question": FALLBACK_QUESTION, "question_spec": None}
        return {"question": best.text, "question_spec": best.to_json()}

    def _ask_for_questions(state: PlugIRState, settings: PlugIRSettings, n: int,
                           avoid: Sequence[str] = ()) -> list[str]:
        grounded = state.get("retrieval_context") if settings.retrieval_context else None
        questions: list[str] = []
        for _ in range(2):  # one retry when every reply was malformed
            questions = generate_questions(chat(), state["description"], state.get("dialogue", []),
                                           candidates=grounded, n=n, avoid=avoid)
            if questions:
                return questions
            logger.info("questioner produced no usable question; retrying")
        note_fallback(logger, "the questioner's replies held no usable question twice; asking the fallback question")
        return [FALLBACK_QUESTION]

    def after_retrieve(state: PlugIRState, runtime: Runtime[PlugIRSettings]) -> Literal["extract_context", "__end__"]:
        settings = settings_of(runtime, PlugIRSettings)
        return END if state.get("round", 0) >= settings.max_rounds else "extract_context"

    def after_ask(state: PlugIRState) -> Literal["reformulate", "__end__"]:
        return END if state.get("stopped") else "reformulate"

    builder = StateGraph(PlugIRState, context_schema=PlugIRSettings, input_schema=PlugIRInput,
                         output_schema=PlugIROutput)
    builder.add_node("reformulate", reformulate_node)
    builder.add_node("retrieve", retrieve_node)
    builder.add_node("extract_context", extract_context_node)
    builder.add_node("generate_questions", generate_questions_node)
    builder.add_node("filter_and_select", filter_and_select_node)
    builder.add_node("ask", ask_node)
    builder.add_edge(START, "reformulate")
    builder.add_edge("reformulate", "retrieve")
    builder.add_conditional_edges("retrieve", after_retrieve)
    builder.add_edge("extract_context", "generate_questions")
    builder.add_edge("generate_questions", "filter_and_select")
    builder.add_edge("filter_and_select", "ask")
    builder.add_conditional_edges("ask", after_ask)

    if isinstance(checkpointer, (str, Path)):
        checkpointer = sqlite_checkpointer(checkpointer)
    return builder.compile(checkpointer=checkpointer, name=name)


class _CandidateVectors:
    """Stored vectors of a round's candidates, fetched once and shared by RCE and the filter.

    Keyed by the candidates' ids, so concurrent sessions never see each other's rows; only the last
    few rounds are kept.
    """

    def __init__(self, gallery: GalleryLike, keep: int = 8) -> None:
        self.gallery = gallery
        self.keep = keep
        self._rows: dict[tuple[str, ...], np.ndarray] = {}

    def __call__(self, candidates: Sequence[ImageHit]) -> np.ndarray:
        key = tuple(c.id for c in candidates)
        rows = self._rows.get(key)
        if rows is None:
            rows = self.gallery.embeddings(list(key))
            self._rows[key] = rows
            while len(self._rows) > self.keep:
                self._rows.pop(next(iter(self._rows)))
        return rows


def score_spread(scores: np.ndarray) -> float:
    """The standard deviation of the candidates' scores (the unit of the offline questioner's weights
    and temperature); a small floor keeps it positive when they are all alike."""
    return max(float(np.std(scores)), 1e-4) if len(scores) else 1.0


def _option_labels(spec: Mapping[str, Any]) -> list[str]:
    """The words a person picks from for a choice question ("black", not "black dog")."""
    options = list(spec.get("options", []))
    labels = [o.split(" ", 1)[0] for o in options] if spec.get("noun") else options
    return labels + [vocabulary()["none_option"]]


class _DescriptionMemo(dict):
    """Captioner output by image id, the oldest forgotten past ``keep`` entries."""

    def __init__(self, keep: int = 20_000) -> None:
        super().__init__()
        self.keep = keep

    def remember(self, id_: str, text: str) -> None:
        self[id_] = text
        while len(self) > self.keep:
            del self[next(iter(self))]


def _fill_captions(candidates: Sequence[ImageHit], captioner: Captioner | None,
                   vectors_of: Callable[[Sequence[ImageHit]], np.ndarray] | None = None,
                   memo: _DescriptionMemo | None = None) -> tuple[list[str], list[int]]:
    """Captions for every candidate, and the indices whose caption describes the image.

    Stored captions come first, then the captioner's (from the stored vectors when it has
    ``describe_vectors``, else from the files; remembered in ``memo`` by image id); file names fill
    the rest but are not used as RCE probes (those candidates are probed with their image vector).
    """
    captions = [c.caption or (memo or {}).get(c.id, "") for c in candidates]
    missing = [i for i, c in enumerate(captions) if not c]
    if missing and captioner is not None:
        if hasattr(captioner, "describe_vectors") and vectors_of is not None:
            texts = captioner.describe_vectors(vectors_of(candidates)[missing])
        else:
            texts = captioner([candidates[i].path for i in missing])
        for i, text in zip(missing, texts):
            captions[i] = text
            if memo is not None and text:
                memo.remember(candidates[i].id, text)
    described = [i for i, text in enumerate(captions) if text]
    for i in missing:
        if not captions[i]:
            # Deliberate difference: without a captioner we describe the image by its file name.
            captions[i] = Path(candidates[i].path or candidates[i].id).stem.replace("_", " ")
    return captions, described
