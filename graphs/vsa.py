"""Vision Search Assistant: answer a question about a photo from what is in it and what the web says.

Specification: the Vision Search Assistant paper and section 3 of the implementation notes (in the
papers folder beside the repository, ``../shared/papers``). This module is the wiring only; the parts are
in :mod:`pictrieve.agents.vsa` (run settings and schemas in ``state``, the nodes in ``nodes``, the models
they use in ``parts``, the LLM steps in ``steps``, the extractive answerer in ``extractive``, prompts in
``prompts/vsa/``). The graph::

    START -> retrieve -> regions -> describe -> plan -(Send per new sub-question)-> search -> plan ...
                                                    plan -(done or out of turns)-> summarize -> answer -> END

- ``retrieve`` (visual RAG): when the input has no ``image`` but the graph has a gallery, the
  question retrieves the best-matching photo from it (its hits are returned too).
- ``regions``: a Detector (offline SSD-MobileNet COCO by default) prompted with the question's
  words plus the COCO classes; no detection -> the whole image is one region.
- ``describe``: each crop described by a Captioner in the light of the question (a VLM via any
  OpenAI-compatible endpoint, or offline the offline embedder's description); with 2+ regions each
  description is rewritten with the others as context.
- ``plan`` (the chain of search): turn 1 proposes structured sub-questions (never executed code;
  see :mod:`pictrieve.agents.vsa.steps`); after each round of searches the planner sees what was
  found and either asks new sub-questions (children of what is known) or says it is done, for at
  most ``max_plan_turns`` turns. The rule plan (for models that cannot plan) has one turn.
- ``search`` (parallel via ``Send``): search, open up to ``pages_per_search`` new pages (through
  the fetch guard for web URLs), answer the sub-question from fenced page text with citations; the
  searcher may ask for a follow-up search, up to ``max_search_turns`` searches per sub-question.
- ``summarize``: sources numbered globally, one summary per region.
- ``answer``: one answer citing sources by number; says so when the search found nothing. A search
  that could not run is not one that found nothing: when every search failed (no network, a dead
  backend) or every page fetch did, the run stops with one
  :class:`~pictrieve.tools.web.search.SearchUnavailableError` line instead of answering. Every
  answer's citations are checked against the sources read: a number that is not one is removed and
  reported in ``citations["dropped"]``.

Two answerers (setting ``answerer``): ``llm`` (the searcher and answer steps are the chat model, as
in the paper) and ``extractive`` (:mod:`pictrieve.agents.vsa.extractive`: the best sentences of the
pages read, quoted with their source numbers, chosen by MiniLM similarity to the question and the
photo's labels; no generation). ``auto`` (default) is extractive when the chat model is the offline
135M model, which cannot write a grounded answer, and llm otherwise.

Where we differ from the authors' code: the planner emits JSON (pydantic), not Python run with
``exec``; fewer turns by default (planner 3 instead of 10, searcher 2 instead of 3) so that an
offline run fits in two minutes on a CPU; offline descriptions come from a classifier-based
describer, not LLaVA; the extractive answerer is ours.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from pictrieve.agents.vsa.nodes import (
    answer,
    describe,
    plan,
    regions,
    retrieve,
    route_searches,
    search_sub_question,
    summarize,
)
from pictrieve.agents.vsa.parts import make_parts
from pictrieve.agents.vsa.state import VisionSearchInput, VisionSearchOutput, VisionSearchSettings, VisionSearchState
from pictrieve.vectorstore.store import ImageStore


def build_vsa_graph(
    index: ImageStore | None = None,
    *,
    llm: Any = None,
    checkpointer: Any = None,
    name: str = "vsa",
    vlm: Any = None,
    detector: Any = None,
    search: Any = None,
    fetch_allow_hosts: tuple[str, ...] = (),
) -> CompiledStateGraph:
    """Compile the Vision Search Assistant graph.

    ``index``: a Gallery for visual RAG (questions without an image), or None for photo QA.
    ``llm``: a chat model or a name for :func:`~pictrieve.tools.models.chat_models.create_chat_model`
    (default offline). ``vlm``: a Captioner or name (default ``offline``). ``detector``: a Detector
    or registry name (default ``ssd``). ``search``: ``ddgs``, ``local:DIR``, a SearchBackend or a
    LangChain retriever/tool; None searches nothing (the answer then says so). Models load when first
    used (:func:`~pictrieve.agents.vsa.parts.make_parts`); a search name is checked now.
    ``fetch_allow_hosts`` exempts hosts from the fetch guard (tests with a loopback server only).
    """
    parts = make_parts(llm=llm, vlm=vlm, detector=detector, search=search)
    chat, backend = parts.chat, parts.backend
    builder = StateGraph(VisionSearchState, context_schema=VisionSearchSettings, input_schema=VisionSearchInput,
                         output_schema=VisionSearchOutput)
    builder.add_node("retrieve", partial(retrieve, index=index))
    builder.add_node("regions", partial(regions, detector=parts.detector))
    builder.add_node("describe", partial(describe, vlm=parts.vlm, chat=chat))
    builder.add_node("plan", partial(plan, chat=chat, backend=backend))
    builder.add_node("search", partial(search_sub_question, chat=chat, backend=backend,
                                       allow_hosts=tuple(fetch_allow_hosts)))
    builder.add_node("summarize", partial(summarize, chat=chat))
    builder.add_node("answer", partial(answer, chat=chat))
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "regions")
    builder.add_edge("regions", "describe")
    builder.add_edge("describe", "plan")
    builder.add_conditional_edges("plan", route_searches, ["search", "summarize"])
    builder.add_edge("search", "plan")
    builder.add_edge("summarize", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=checkpointer, name=name)
