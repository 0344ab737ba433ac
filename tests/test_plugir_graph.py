"""Control flow of the PlugIR graph with a scripted chat model and a hand-made gallery.

These tests check routing, interrupts, checkpoints, budgets and the arm flags; they make no claim
about retrieval quality (the scripted model answers by rote).
"""

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from helpers.plugir_fakes import ScriptedChatModel, make_gallery

from pictrieve.agents.plugir.questioner import FALLBACK_QUESTION
from pictrieve.agents.plugir.settings import ARMS, PlugIRSettings
from pictrieve.graphs.plugir import build_plugir_graph
from pictrieve.agents.plugir.replies import parse_reply
from pictrieve.graphs.checkpoints import sqlite_checkpointer

QUESTIONS = ["What color is the dog?", "Where is the dog running?", "Is the dog alone?",
             "What time of day is it?", "Is the dog wearing a collar?"]


def config(thread: str, **settings):
    """A run config with its thread and the run settings (LangGraph context) that go with it."""
    return {"configurable": {"thread_id": thread}, "context": {"candidate_k": 20, "clusters": 4, **settings}}


def run(graph, value, cfg):
    return graph.invoke(value, {"configurable": cfg["configurable"]}, context=cfg["context"])


def build(gallery, llm, **kwargs):
    """The graph with an in-memory checkpointer (interrupts need one; none is made implicitly)."""
    kwargs.setdefault("checkpointer", InMemorySaver())
    return build_plugir_graph(gallery, llm=llm, **kwargs)


def pending(result):
    interrupts = result.get("__interrupt__") or []
    return interrupts[0].value if interrupts else None


def test_interrupt_carries_question_and_top_k_then_resume_adds_turn():
    llm = ScriptedChatModel(questions=QUESTIONS)
    graph = build(make_gallery(), llm)
    cfg = config("resume", shown_k=5)
    first = pending(run(graph, {"description": "a dog in the snow"}, cfg))
    assert first["round"] == 1 and first["question"] in QUESTIONS
    assert len(first["shown"]) == 5 and [h["rank"] for h in first["shown"]] == [1, 2, 3, 4, 5]

    result = run(graph, Command(resume="brown"), cfg)
    second = pending(result)
    assert second["round"] == 2
    assert result["dialogue"] == [{"question": first["question"], "answer": "brown"}]
    assert result["queries"] == ["a dog in the snow", "a brown dog in the snow"]
    assert second["question"] != first["question"]  # asked questions are not repeated


def test_found_ends_with_the_picked_image_and_stop_ends_without():
    graph = build(make_gallery(), ScriptedChatModel(questions=QUESTIONS))
    cfg = config("found")
    shown = pending(run(graph, {"description": "a dog in the snow"}, cfg))["shown"]
    result = run(graph, Command(resume="found 2"), cfg)
    assert pending(result) is None and result["found"] == shown[1] and result["stopped"]

    cfg = config("stop")
    run(graph, {"description": "a dog in the snow"}, cfg)
    result = run(graph, Command(resume="stop"), cfg)
    assert pending(result) is None and result["stopped"] and not result.get("found")


def test_budget_ends_after_last_retrieval_with_an_answerer():
    asked = []
    graph = build(make_gallery(), ScriptedChatModel(questions=QUESTIONS),
        answerer=lambda q, state: asked.append(q) or "brown",
    )
    result = run(graph, {"description": "a dog in the snow"}, config("budget", max_rounds=3))
    assert "__interrupt__" not in result
    assert result["round"] == 3 and len(asked) == 3
    assert len(result["queries"]) == 4  # rounds 0..T each have a query and a ranking
    nodes = {t["node"] for t in result["timings"]}
    assert nodes == {"reformulation", "retrieval", "rce", "questioner", "filter"}


def test_session_survives_restart_with_sqlite_checkpoint(tmp_path):
    db = tmp_path / "sessions.sqlite"
    cfg = config("persisted")
    graph = build(make_gallery(), ScriptedChatModel(questions=QUESTIONS),
                                              checkpointer=sqlite_checkpointer(db))
    question = pending(run(graph, {"description": "a dog in the snow"}, cfg))["question"]
    del graph

    reopened = build(make_gallery(), ScriptedChatModel(questions=QUESTIONS),
                                                 checkpointer=db)  # a path works too
    result = run(reopened, Command(resume="brown"), cfg)
    assert result["dialogue"] == [{"question": question, "answer": "brown"}]
    assert pending(result)["round"] == 2


@pytest.mark.parametrize("arm", [a for a in ARMS if ARMS[a]["questioner"] == "llm"])
def test_arms_are_configuration_of_one_graph(arm):
    llm = ScriptedChatModel(questions=QUESTIONS)
    graph = build(make_gallery(), llm, answerer=lambda q, s: "brown")
    result = run(graph, {"description": "a dog in the snow"}, config(arm, arm=arm, max_rounds=2))
    flags = ARMS[arm]
    question_prompts = [p for k, p, _ in llm.calls if k == "questioner"]
    assert question_prompts  # otherwise the checks below hold vacuously
    grounded = ["[Retrieval Candidates]" in p.split("### ")[0] and "0. a " in p for p in question_prompts]
    assert all(grounded) if flags["retrieval_context"] else not any(grounded)
    assert ("filter" in llm.kinds()) == flags["filter_questions"]
    assert ("reformulate" in llm.kinds()) == flags["reformulate"]
    if flags["reformulate"]:
        assert result["queries"][1] == "a brown dog in the snow"
    else:  # ZS: the raw dialogue concatenated onto the description
        turn = result["dialogue"][0]
        assert result["queries"][1] == f"a dog in the snow, {turn['question']} brown"


def test_malformed_questioner_output_falls_back_without_crashing():
    llm = ScriptedChatModel(questions=["", "the dog is nice and the snow is white and " * 5])
    graph = build(make_gallery(), llm)
    question = pending(run(graph, {"description": "a dog in the snow"}, config("bad")))["question"]
    assert question == FALLBACK_QUESTION


def test_run_on_question_is_cut_at_the_question_mark():
    llm = ScriptedChatModel(questions=["Question: what breed is the dog? Explanation: candidates 1"])
    graph = build(make_gallery(), llm)
    payload = pending(run(graph, {"description": "a dog in the snow"},
                                   config("runon", filter_questions=False)))
    assert payload["question"] == "What breed is the dog?"


def test_filter_regenerates_when_everything_is_answerable_then_falls_back():
    many = [f"{q[:-1]} number {i}?" for i in range(3) for q in QUESTIONS]
    llm = ScriptedChatModel(questions=many, filter_answer="In the snow.")
    graph = build(make_gallery(), llm)
    payload = pending(run(graph, {"description": "a dog in the snow"},
                                   config("filter", filter_attempts=3)))
    assert llm.kinds().count("filter") == 15  # 3 attempts x 5 fresh questions
    assert payload["question"] in many[:5]  # fallback: the unfiltered first batch


def test_paraphrase_when_reformulation_repeats_last_query():
    llm = ScriptedChatModel(questions=QUESTIONS)
    graph = build(make_gallery(), llm, answerer=lambda q, s: "brown")
    result = run(graph, {"description": "a dog in the snow"}, config("para", max_rounds=2))
    # round 1 rewrites to "a brown dog in the snow"; round 2 gives the same text -> paraphrased
    assert result["queries"][1:] == ["a brown dog in the snow", "a dog with brown fur in snow"]
    params = [kw for k, _, kw in llm.calls if k == "paraphrase"][0]
    assert params["temperature"] == 0.7 and params["top_p"] == 0.8


def test_sampling_settings_follow_the_paper():
    llm = ScriptedChatModel(questions=QUESTIONS)
    graph = build(make_gallery(), llm, answerer=lambda q, s: "brown")
    run(graph, {"description": "a dog in the snow"}, config("params", max_rounds=1))
    by_kind = {k: kw for k, _, kw in llm.calls}
    assert by_kind["questioner"]["temperature"] == 0.7 and by_kind["questioner"]["max_tokens"] == 32
    assert by_kind["filter"] == {"temperature": 0.0, "max_tokens": 10, "stop": ["\n"]}
    assert by_kind["reformulate"]["temperature"] == 0.0 and by_kind["reformulate"]["max_tokens"] == 512


def test_questions_cut_at_a_stop_string_keep_their_question_mark():
    """A real endpoint drops the stop string itself: the question must still read as a question."""
    llm = ScriptedChatModel(questions=["What colour is the dog? It is probably brown."])
    graph = build(make_gallery(), llm)
    payload = pending(run(graph, {"description": "a dog in the snow"}, config("stop", filter_questions=False)))
    assert payload["question"] == "What colour is the dog?"
    stops = [kw.get("stop") for kind, _, kw in llm.calls if kind == "questioner"]
    assert stops and all(stops)  # the questioner asks the endpoint to stop after one question


def test_parse_reply_and_settings():
    top = [{"id": "a", "path": "", "score": 1.0, "rank": 1},  # JSON hits, as a client sends them back
           {"id": "b", "path": "", "score": 0.5, "rank": 2}]
    assert parse_reply("found 2", top)["found"].id == "b"
    assert parse_reply("found b", top)["found"].id == "b"
    assert parse_reply({"found": "a"}, top)["found"].id == "a"
    # a pick of no photo shown is refused with a line saying what a pick can be, never ends the session
    for reply, said in (("found zz", "No photo shown has the id 'zz'"), ("found 3", "There is no photo 3 here"),
                        ("found 0", "There is no photo 0 here")):
        refused = parse_reply(reply, top)
        assert set(refused) == {"refused"} and refused["refused"].startswith(said)
        assert "found 1 to found 2" in refused["refused"]
    assert parse_reply("STOP", top) == {"stop": True}
    assert parse_reply("it is found in a park", top) == {"answer": "it is found in a park"}
    assert parse_reply("", top) == {"answer": "unknown"}
    assert PlugIRSettings().candidate_count(500) == 20
    assert PlugIRSettings().candidate_count(30_000) == 300  # ~1% of the gallery
    settings = PlugIRSettings.coerce({"arm": "cr", "max_rounds": 4})
    assert (settings.reformulate, settings.retrieval_context, settings.max_rounds) == (True, False, 4)
    with pytest.raises(ValueError, match="unknown arm"):
        PlugIRSettings(arm="nope")
    with pytest.raises(ValueError, match="shown_k"):
        PlugIRSettings(shown_k=0)


def test_no_checkpointer_is_made_implicitly():
    """The LangGraph server refuses graphs that bring their own checkpointer."""
    graph = build_plugir_graph(make_gallery(), llm=ScriptedChatModel(questions=QUESTIONS))
    assert graph.checkpointer is None
    assert set(graph.get_input_jsonschema()["properties"]) == {"description"}
    assert "shown" in graph.get_output_jsonschema()["properties"]
    assert "shown_k" in graph.get_context_jsonschema()["properties"]


class FailingChatModel(ScriptedChatModel):
    """Every call raises, as a timed-out or refusing endpoint would."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.calls.append(("failed", "", dict(kwargs)))
        raise TimeoutError("the model endpoint timed out")


def test_a_failing_language_model_is_reported_not_hidden():
    """A model that cannot be called (a timed-out endpoint) ends the run at its first call with one
    ModelCallError line, instead of a round of fallback questions built on empty replies (issue 19.4);
    nothing is lost: the session waits at the failed step, to resume once the model answers."""
    from pictrieve.tools.models.llm_calls import ModelCallError

    llm = FailingChatModel()
    graph = build(make_gallery(), llm)
    cfg = config("failing")
    with pytest.raises(ModelCallError, match="no answer in time") as failed:
        run(graph, {"description": "a dog in the snow"}, cfg)
    assert "\n" not in str(failed.value) and failed.value.reason == "timeout"
    assert llm.kinds() == ["failed"]  # no retry round after round
    assert graph.get_state({"configurable": cfg["configurable"]}).next == ("generate_questions",)


def test_an_unusable_reply_falls_back_and_is_logged_once(monkeypatch, caplog):
    """Only a reply that arrived but holds no question falls back (to the fallback question), and that
    is said once, not every round."""
    from pictrieve.tools.models import llm_calls

    monkeypatch.setattr(llm_calls, "_NOTED", set())
    graph = build(make_gallery(), ScriptedChatModel(questions=["Sure! Here it comes:"]))
    cfg = config("unusable")
    with caplog.at_level("WARNING"):
        assert pending(run(graph, {"description": "a dog in the snow"}, cfg))["question"] == FALLBACK_QUESTION
        assert pending(run(graph, Command(resume="brown"), cfg))["question"] == FALLBACK_QUESTION
    notes = [r for r in caplog.records if "no usable question" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelname == "WARNING"


def test_candidate_captions_are_embedded_once_across_rounds():
    """RCE probes with caption vectors; a caption seen in an earlier round is not embedded again."""
    gallery = make_gallery()
    embedded: list[str] = []
    real = gallery.embedder.embed_texts

    def counting(texts):
        embedded.extend(texts)
        return real(texts)

    gallery.embedder.embed_texts = counting
    graph = build(gallery, ScriptedChatModel(questions=QUESTIONS), answerer=lambda q, state: "brown")
    result = run(graph, {"description": "a dog in the snow"}, config("cache", max_rounds=3))
    assert result["round"] == 3
    captions = [t for t in embedded if t in set(gallery.captions)]
    assert captions, "RCE never embedded a candidate caption"
    assert len(captions) == len(set(captions))  # each caption embedded once over three rounds


def _plain(value) -> bool:
    """Whether ``value`` is plain data (what any checkpointer stores and reads back as it was)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


def test_checkpointed_state_is_plain_data_with_the_servers_own_serializer(tmp_path):
    """Issue 28: served PlugIR kept ImageHit objects in its checkpoints, which LangGraph's default
    serializer (the server's) reads back only with a warning that a future version will refuse them."""
    import sqlite3

    from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener
    from langgraph.checkpoint.sqlite import SqliteSaver

    events = []
    unregister = register_serde_event_listener(events.append)
    try:
        saver = SqliteSaver(sqlite3.connect(str(tmp_path / "served.sqlite"), check_same_thread=False))  # default serde
        graph = build(make_gallery(), ScriptedChatModel(questions=QUESTIONS), checkpointer=saver)
        cfg = config("served", max_rounds=3)
        run(graph, {"description": "a dog in the snow"}, cfg)
        run(graph, Command(resume="brown"), cfg)
        result = run(graph, Command(resume="found 1"), cfg)
        history = list(graph.get_state_history({"configurable": cfg["configurable"]}))
    finally:
        unregister()
    assert result["found"]["id"] and len(history) > 5  # the checks below read real checkpoints
    assert [e for e in events if e.get("kind") != "msgpack_method_blocked"] == [], events
    for snapshot in history:
        bad = {k: type(v).__name__ for k, v in snapshot.values.items() if not _plain(v)}
        assert not bad, bad


def test_the_final_round_counts_the_round_of_a_pick_or_a_stop():
    """Issue 28: after two rounds (one answer, then a pick) the final view said round 1."""
    graph = build(make_gallery(), ScriptedChatModel(questions=QUESTIONS))
    for reply in ["found 2", "stop"]:
        cfg = config(f"two-rounds-{reply}")
        first = pending(run(graph, {"description": "a dog in the snow"}, cfg))
        second = pending(run(graph, Command(resume="brown"), cfg))
        assert (first["round"], second["round"]) == (1, 2)
        final = run(graph, Command(resume=reply), cfg)
        assert pending(final) is None and final["round"] == 2, reply
