"""One view of a paused PlugIR session (``graphs/sessions.py``) and its step lines from the method's own table
(``agents/plugir/steps.py``), which the page, MCP and ``pictrieve chat`` all read.

A scripted chat model and a hand-made gallery (helpers/plugir_fakes.py): control flow, not retrieval quality.
"""

from __future__ import annotations

import pytest
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


def test_find_photo_sessions_run_on_the_one_runner():
    """MCP's find_photo sessions (``mcp_server/sessions.py``) are the one runner's (``MethodSessions``) with PlugIR's
    view: the server's run settings for every session, an answer read as PlugIR's declared reply, the ended thread not
    kept but told it has ended, and a round a restart cut short finished by the next answer."""
    from pictrieve.graphs.sessions import MethodSessions, SessionError
    from pictrieve.mcp_server.sessions import RESTARTED, PhotoSessions

    plugir = graph()
    sessions = PhotoSessions(MethodSessions(METHOD, plugir, context={**CONTEXT, "shown_k": 3}))
    heard: list[str] = []
    view = sessions.start("a dog in the snow", heard.append)
    assert len(heard) == len(ROUND) and heard[0] == "wrote the search description"  # each step in PlugIR's words
    assert view["question"] in QUESTIONS and (view["round"], view["done"], view["note"]) == (1, False, "")
    assert len(view["results"]) == 3 and all(isinstance(h, ImageHit) for h in view["results"])  # the server's shown_k
    second = sessions.answer(view["session"], "brown", lambda line: None)
    assert second["round"] == 2 and second["question"] in QUESTIONS and sessions.view(view["session"]) == second
    ended = sessions.answer(view["session"], "found 2", lambda line: None)
    assert ended["done"] and ended["found"] == second["results"][1] and ended["note"] == "the photo was picked"
    assert ended["question"] == "" and not plugir.get_state(thread_config(view["session"])).values  # not kept
    for session, says in [(view["session"], "has ended; start a new one with find_photo"),
                          ("0" * 32, "unknown session 0{32}: it was never started"), ("../x", "unknown session '../x'")]:
        with pytest.raises(SessionError, match=says):
            sessions.answer(session, "yes", lambda line: None)

    cut = "c" * 32  # the server went away after the first step of its first round (a new server goes on with its own
    for update in plugir.stream({"description": "a dog in the snow"}, thread_config(cut), context=CONTEXT,
                                stream_mode="updates"):  # run settings: 3 photos shown, not 5)
        if "reformulate" in update:
            break
    assert sessions.view(cut)["unfinished"]
    finished = sessions.answer(cut, "brown", lambda line: None)  # the round is finished; the answer is not read
    assert finished["note"] == RESTARTED and finished["round"] == 1 and finished["question"] in QUESTIONS
    assert not finished["unfinished"] and len(finished["results"]) == 3
