"""PlugIR interactive text-to-image retrieval as a LangGraph graph.

The wiring only; the parts are in :mod:`pictrieve.agents.plugir` (its ``METHOD``): the run settings and
arms in :mod:`~pictrieve.agents.plugir.settings`, the schemas in :mod:`~pictrieve.agents.plugir.state`,
the nodes in :mod:`~pictrieve.agents.plugir.nodes` and what they read about the candidates in
:mod:`~pictrieve.agents.plugir.candidates`.

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
the options spelled out (:mod:`pictrieve.agents.plugir.offline_answers`). Each round's
``ranking`` (ids and scores of the ``ranked_k`` best, in the order shown) is what an evaluation
ranks. A run that names no questioner gets the
offline one when the graph was built with the bundled offline model (whose own questions made
rankings worse, BENCHMARKS.md) and the LLM's otherwise, so a served graph needs no context to ask
sensible questions.

Usage::

    from langgraph.types import Command
    graph = build_plugir_graph(Gallery.open("./my.gallery"), llm=create_chat_model("openai:gpt-4o-mini"),
                               checkpointer="sessions.sqlite")
    config = {"configurable": {"thread_id": "s1"}}
    context = {"max_rounds": 10, "shown_k": 10}
    result = graph.invoke({"description": "a dog in the snow"}, config, context=context)
    while "__interrupt__" in result:
        payload = result["__interrupt__"][0].value  # {"round", "question", "query", "shown"}
        result = graph.invoke(Command(resume=input(payload["question"] + " ")), config, context=context)
"""

from __future__ import annotations

from functools import cache, partial
from pathlib import Path
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langgraph.graph import START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from pictrieve.agents.plugir.candidates import (
    CandidateCaptions,
    CandidateVectors,
    Captioner,
    CaptionVectors,
    GalleryLike,
    resolve_captioner,
)
from pictrieve.agents.plugir.nodes import (
    after_ask,
    after_retrieve,
    ask,
    extract_context,
    filter_and_select,
    generate_questions,
    reformulate,
    retrieve,
)
from pictrieve.agents.plugir.questioners import QuestionerParts, Questioners
from pictrieve.agents.plugir.settings import ARMS, PlugIRSettings, default_arm
from pictrieve.agents.plugir.simulated_user import Answerer
from pictrieve.agents.plugir.state import PlugIRInput, PlugIROutput, PlugIRState
from pictrieve.graphs.checkpoints import sqlite_checkpointer


def build_plugir_graph(
    index: GalleryLike,
    *,
    llm: BaseChatModel | str | None = None,
    checkpointer: Any = None,
    name: str = "plugir",
    answerer: Answerer | None = None,
    captioner: Captioner | str | None = None,
) -> CompiledStateGraph:
    """Compile the PlugIR graph over ``index``.

    Args:
        index: the :class:`~pictrieve.vectorstore.gallery.Gallery` searched (or anything with
            ``embedder``, ``search_vector``, ``embeddings`` and ``count``).
        llm: a ready LangChain chat model (default: the offline model, made on first need): a front end makes
            it from a name with the need registry (:func:`pictrieve.agents.needs.resolve_needs`), a program with
            :func:`pictrieve.tools.models.chat_models.create_chat_model`.
        answerer: ``(question, state) -> answer``; when given the graph never interrupts
            (simulated user). Without it, ``ask`` pauses with ``interrupt()``.
        checkpointer: a LangGraph checkpointer, or a path to a SQLite file
            (:func:`sqlite_checkpointer`). Needed for ``interrupt()`` to pause a session; none is
            made implicitly (the LangGraph server brings its own).
        name: the compiled graph's name.
        captioner: captions for candidate images that have none (else the file name is used):
            a callable or a name, see :func:`resolve_captioner` (``"auto"`` is what the CLI uses).
    """
    from pictrieve.tools.models.chat_models import create_chat_model

    if isinstance(llm, str):
        raise TypeError(f"build_plugir_graph takes a chat model, not the name {llm!r}: make it with "
                        "pictrieve.tools.models.chat_models.create_chat_model(name, base_url=...)")
    gallery = index
    # The default made on first use: the offline questioner never needs a language model.
    chat = cache(lambda: llm if llm is not None else create_chat_model(None))
    # What is read about the candidates is kept for this compiled graph (the nodes' caches).
    vectors = CandidateVectors(gallery)
    parts = QuestionerParts(chat=chat, embedder=gallery.embedder, vectors=vectors,
                            captions=CandidateCaptions(resolve_captioner(captioner, gallery), vectors),
                            caption_vectors=CaptionVectors(gallery.embedder))
    questioners = Questioners(parts, default=ARMS[default_arm(llm)]["questioner"])

    builder = StateGraph(PlugIRState, context_schema=PlugIRSettings, input_schema=PlugIRInput,
                         output_schema=PlugIROutput)
    builder.add_node("reformulate", partial(reformulate, questioners=questioners))
    builder.add_node("retrieve", partial(retrieve, gallery=gallery, questioners=questioners))
    builder.add_node("extract_context", partial(extract_context, questioners=questioners))
    builder.add_node("generate_questions", partial(generate_questions, questioners=questioners))
    builder.add_node("filter_and_select", partial(filter_and_select, questioners=questioners))
    builder.add_node("ask", partial(ask, answerer=answerer))
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
