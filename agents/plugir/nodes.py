"""PlugIR's nodes: each a top-level function of the state and the run's settings, testable alone.

What a node needs besides those comes as keyword arguments, which
:func:`pictrieve.graphs.plugir.build_plugir_graph` binds once per compiled graph:

- ``gallery`` (:class:`~.candidates.GalleryLike`), searched by ``retrieve``;
- ``questioners`` (:class:`~.questioners.Questioners`): the LLM and the offline questioner, one picked per
  run by its settings. Everything that differs between them is theirs, so no node forks on which;
- ``chat``: a function of no argument returning the chat model, made on first call (CR's caption of the
  dialogue);
- ``answerer``: a simulated user ``(question, state) -> reply``, or ``None`` to pause with ``interrupt()``.

Each node that does work appends its :class:`~.state.Timing` (the evaluation's per-node seconds).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Literal

from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from pictrieve.agents.plugir.candidates import GalleryLike
from pictrieve.agents.plugir.offline_answers import DialogueFacts, clarified, is_valid_answer, turn_facts
from pictrieve.agents.plugir.offline_questions import Question
from pictrieve.agents.plugir.questioner import FALLBACK_QUESTION, Turn
from pictrieve.agents.plugir.questioners import Questioners
from pictrieve.agents.plugir.reformulator import concatenate_dialogue
from pictrieve.agents.plugir.replies import option_labels, parse_reply
from pictrieve.agents.plugir.settings import MAX_REASKS, PlugIRSettings
from pictrieve.agents.plugir.simulated_user import Answerer
from pictrieve.agents.plugir.state import PlugIRState, Timing
from pictrieve.agents.settings import settings_of
from pictrieve.vectorstore.hits import as_hit

logger = logging.getLogger(__name__)


def timed(node: str, state: PlugIRState, started: float) -> list[Timing]:
    """This round's timing of ``node``, started at ``started`` (``time.perf_counter()``)."""
    return [Timing(round=state.get("round", 0), node=node, seconds=time.perf_counter() - started)]


# --- the nodes -----------------------------------------------------------------------------------


def reformulate(state: PlugIRState, runtime: Runtime[PlugIRSettings] | None = None, *,
                questioners: Questioners) -> dict[str, Any]:
    """This round's query: the description at round 0; then the run's questioner's reformulation of
    the dialogue (CR: the LLM's caption; offline: the description with the confirmed answers), or,
    without CR, the concatenated dialogue (ZS)."""
    started = time.perf_counter()
    settings = settings_of(runtime, PlugIRSettings)
    dialogue = state.get("dialogue", [])
    description = state["description"]
    if not dialogue:
        query = description
    elif settings.reformulate:
        query = questioners.for_run(settings).query(state, settings)
    else:
        query = concatenate_dialogue(description, dialogue)
    return {"query": query, "queries": [query], "timings": timed("reformulation", state, started)}


def retrieve(state: PlugIRState, runtime: Runtime[PlugIRSettings] | None = None, *, gallery: GalleryLike,
             questioners: Questioners) -> dict[str, Any]:
    """The ``ranked_k`` best images of the query (re-ranked by the answers where the questioner does),
    the top-n ``candidates`` the questioner reads and the ``shown_k`` shown (``hits``)."""
    started = time.perf_counter()
    settings = settings_of(runtime, PlugIRSettings)
    questioner = questioners.for_run(settings)
    size = gallery.count()
    n = settings.candidate_count(size)
    ranked = gallery.search_vector(questioner.query_vector(state, settings), k=settings.ranked_count(size))
    ranked = questioner.rank(ranked, state, settings, n)
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
                    questioners: Questioners) -> dict[str, Any]:
    """The retrieval context the questioner is grounded in (RCE, Algorithm 1, for the LLM questioner);
    nothing when the run does without RCE or its questioner reads no context."""
    started = time.perf_counter()
    settings = settings_of(runtime, PlugIRSettings)
    context = questioners.for_run(settings).context(state, settings)
    if context is None:
        return {"retrieval_context": []}
    return {"retrieval_context": context, "timings": timed("rce", state, started)}


def generate_questions(state: PlugIRState, runtime: Runtime[PlugIRSettings] | None = None, *,
                       questioners: Questioners) -> dict[str, Any]:
    """This round's candidate questions: q_n from the LLM, or the offline questioner's from what tells
    the candidates' captions apart (nothing the description or an answer settles, nothing asked)."""
    started = time.perf_counter()
    settings = settings_of(runtime, PlugIRSettings)
    return {**questioners.for_run(settings).questions(state, settings),
            "timings": timed("questioner", state, started)}


def filter_and_select(state: PlugIRState, runtime: Runtime[PlugIRSettings] | None = None, *,
                      questioners: Questioners) -> dict[str, Any]:
    """The question asked: F (Algorithm 2) and the least disruptive question for the LLM questioner
    (without F, its first question); the offline questioner's most informative question."""
    started = time.perf_counter()
    settings = settings_of(runtime, PlugIRSettings)
    return {**questioners.for_run(settings).select(state, settings), "timings": timed("filter", state, started)}


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

    def reply_to(asked: str, attempt: int, notice: str = "") -> dict[str, Any]:
        if answerer is not None:
            return parse_reply(answerer(asked, state), shown)
        if notice:  # said in the question itself, so every front end shows it; "notice" for programs
            return parse_reply(interrupt({**payload, "question": f"{notice} {asked}", "notice": notice}), shown)
        return parse_reply(interrupt({**payload, "question": asked} if attempt else payload), shown)

    def refusing(parsed: dict[str, Any], asked: str, attempt: int) -> dict[str, Any]:
        """Ask again while the reply picks a photo that was not shown (a simulated user: once, then unknown)."""
        tries = 0
        while "refused" in parsed:
            if answerer is not None and tries >= 1:
                return {"answer": "unknown"}
            tries += 1
            parsed = reply_to(asked, attempt, parsed["refused"])
        return parsed

    parsed = refusing(reply_to(question, 0), question, 0)
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
        parsed = refusing(reply_to(clarified(choice), attempt), clarified(choice), attempt)
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
    # The answer's meaning is read once, here; the state's reducer folds it into the dialogue's facts.
    said = turn_facts(turn)
    facts = DialogueFacts(confirmed=sorted(said.confirmed), denied=sorted(said.denied), phrases=list(said.phrases))
    return {"dialogue": [turn], "facts": facts, "round": state.get("round", 0) + 1}


# --- routing -------------------------------------------------------------------------------------


def after_retrieve(state: PlugIRState,
                   runtime: Runtime[PlugIRSettings] | None = None) -> Literal["extract_context", "__end__"]:
    """End once ``max_rounds`` answers were received (the last ranking is made), else ask again."""
    settings = settings_of(runtime, PlugIRSettings)
    return END if state.get("round", 0) >= settings.max_rounds else "extract_context"


def after_ask(state: PlugIRState) -> Literal["reformulate", "__end__"]:
    """End on a pick or a stop, else fold the answer into the next query."""
    return END if state.get("stopped") else "reformulate"
