"""One view of a paused PlugIR session (``graphs/sessions.py``) and its step lines from the method's own table
(``agents/plugir/steps.py``), which the page, MCP and ``pictrieve chat`` all read.

A scripted chat model and a hand-made gallery (helpers/plugir_fakes.py): control flow, not retrieval quality.
"""

from __future__ import annotations

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from helpers.plugir_fakes import ScriptedChatModel, make_gallery

from pictrieve.agents.plugir import METHOD
from pictrieve.agents.steps import step_line
from pictrieve.graphs.plugir import build_plugir_graph
from pictrieve.graphs.sessions import run_session, session_view, thread_config
from pictrieve.vectorstore.hits import ImageHit

QUESTIONS = ["What color is the dog?", "Where is the dog running?", "Is the dog alone?"]
CONTEXT = {"candidate_k": 20, "clusters": 4, "shown_k": 5, "arm": "cr+rce+f"}
ROUND = ["reformulate", "retrieve", "extract_context", "generate_questions", "filter_and_select"]


def graph():
    return build_plugir_graph(make_gallery(), llm=ScriptedChatModel(questions=QUESTIONS), checkpointer=InMemorySaver())


def test_a_session_paused_at_its_question_then_found():
    plugir = graph()
    assert session_view(plugir, "t1") is None  # never started
    heard: list[tuple[str, str]] = []
    view = run_session(plugir, {"description": "a dog in the snow"}, "t1", CONTEXT,
                       lambda node, update: heard.append((node, step_line(METHOD.step_table(), node, update,
                                                                          detail=True))))
    assert [node for node, _ in heard] == ROUND
    lines = dict(heard)
    assert lines["retrieve"].startswith("searched the gallery: ") and lines["retrieve"].endswith(" candidates")
    assert lines["filter_and_select"] == f"chose a question: {view.question!r}"
    assert view.question in QUESTIONS and view.pending is not None
    assert (view.round, view.question_number) == (0, 1)  # no answer yet; the first question
    assert not view.done and not view.unfinished and view.outcome == ""
    assert len(view.shown) == 5 and all(isinstance(h, ImageHit) for h in view.shown)
    assert [h.rank for h in view.shown] == [1, 2, 3, 4, 5] and view.description == "a dog in the snow"
    assert session_view(plugir, "t1") == view  # read again, the same view

    second = run_session(plugir, Command(resume="brown"), "t1", CONTEXT, lambda *_: None)
    assert (second.round, second.question_number) == (1, 2) and second.dialogue == ({"question": view.question, "answer": "brown"},)
    ended = run_session(plugir, Command(resume="found 2"), "t1", CONTEXT, lambda *_: None)
    assert ended.done and ended.pending is None and ended.question == ""
    assert ended.found == second.shown[1] and ended.outcome == "the photo was picked"


def test_a_round_cut_short_between_steps_is_unfinished_until_run_on():
    plugir = graph()
    config = thread_config("t2")
    for update in plugir.stream({"description": "a dog in the snow"}, config, context=CONTEXT, stream_mode="updates"):
        if "retrieve" in update:
            break  # the process went away after the search
    cut = session_view(plugir, "t2")
    assert cut.unfinished and not cut.done and cut.question == "" and cut.pending is None
    heard: list[str] = []
    view = run_session(plugir, None, "t2", CONTEXT, lambda node, update: heard.append(node))
    assert heard == ROUND[2:] and view.question in QUESTIONS and not view.unfinished


def test_every_plugir_node_has_a_step_and_other_methods_get_node_done():
    table = METHOD.step_table()
    nodes = set(graph().get_graph().nodes) - {"__start__", "__end__"}
    assert nodes == set(table)
    assert step_line(table, "retrieve", {"candidates": [1, 2]}) == "searched the gallery"  # MCP's progress
    assert step_line(table, "retrieve", {"candidates": [1, 2]}, detail=True) == "searched the gallery: 2 candidates"
    assert step_line({}, "rank", {"hits": []}) == "rank: done"  # a method without a table
