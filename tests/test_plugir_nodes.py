"""PlugIR's nodes called alone, without a graph: each with its state, its run settings and the
dependencies the builder would bind (a hand-made gallery, a scripted chat model, the candidate caches).

Control flow and what each node promises; no claim about retrieval quality (the scripted model answers
by rote, the gallery's vectors are bags of random word vectors).
"""

from pathlib import Path

import numpy as np
import pytest
from langgraph.runtime import Runtime

from helpers.plugir_fakes import ScriptedChatModel, make_gallery

from pictrieve.agents.plugir import nodes
from pictrieve.agents.plugir.candidates import (
    CandidateCaptions,
    CandidateVectors,
    CaptionVectors,
)
from pictrieve.agents.plugir.offline_questions import Question
from pictrieve.agents.plugir.question_filter import select_least_disruptive
from pictrieve.agents.plugir.questioner import FALLBACK_QUESTION
from pictrieve.agents.plugir.questioners import QuestionerParts, Questioners
from pictrieve.agents.plugir.retrieval_context import cluster_candidates
from pictrieve.agents.plugir.settings import PlugIRSettings
from pictrieve.vectorstore.hits import as_hit

QUESTIONS = ["What color is the dog?", "Where is the dog running?", "Is the dog alone?",
             "What time of day is it?", "Is the dog wearing a collar?"]
DESCRIPTION = "a dog running in the park"
RED_DOG = Question(text="Is there a red dog in the photo?", kind="yes_no", key="red dog", phrase="a red dog")
DOG_COLOUR = Question(text="What colour is the dog: black, brown or white?", kind="choice", key="colour of dog",
                      options=("black dog", "brown dog", "white dog"), noun="dog")


def settings(**values) -> Runtime:
    """A node's runtime holding these run settings (what LangGraph passes a node)."""
    return Runtime(context=PlugIRSettings(**values))


def no_chat():
    raise AssertionError("this node must not make a chat model")


class Parts:
    """What the builder binds: the gallery and the per-graph caches over it."""

    def __init__(self, captioner=None):
        self.gallery = make_gallery()
        self.vectors = CandidateVectors(self.gallery)
        self.captions = CandidateCaptions(captioner, self.vectors)
        self.caption_vectors = CaptionVectors(self.gallery.embedder)

    def questioners(self, default="llm", chat=no_chat):
        """Both questioners over these parts, ``default`` for runs that name none."""
        return Questioners(QuestionerParts(chat=chat, embedder=self.gallery.embedder, captions=self.captions,
                                           vectors=self.vectors, caption_vectors=self.caption_vectors), default)

    def retrieve(self, state, runtime, default_questioner="llm"):
        return nodes.retrieve(state, runtime, gallery=self.gallery, questioners=self.questioners(default_questioner))

    def candidates(self, query=DESCRIPTION, k=12):
        state = {"description": DESCRIPTION, "query": query}
        # the state holds them as JSON dicts; read back as hits for the checks
        return [as_hit(c) for c in self.retrieve(state, settings(candidate_k=k, questioner="llm"))["candidates"]]


# --- reformulate ---------------------------------------------------------------------------------


def test_reformulate_starts_from_the_description_and_folds_answers_in_by_arm():
    turn = {"question": "What color is the dog?", "answer": "brown"}
    first = nodes.reformulate({"description": DESCRIPTION}, settings(), questioners=Parts().questioners("llm"))
    assert first["query"] == DESCRIPTION and first["queries"] == [DESCRIPTION]
    assert [t["node"] for t in first["timings"]] == ["reformulation"]

    llm = ScriptedChatModel(reformulation=lambda prompt: "a brown dog running in the park")
    state = {"description": DESCRIPTION, "dialogue": [turn], "query": DESCRIPTION}
    cr = nodes.reformulate(state, settings(arm="cr"), questioners=Parts().questioners("llm", chat=lambda: llm))
    assert cr["query"] == "a brown dog running in the park" and llm.kinds() == ["reformulate"]
    assert llm.calls[0][2]["max_tokens"] == 512  # reformulation_max_tokens reaches the model
    zs = nodes.reformulate(state, settings(arm="zs"), questioners=Parts().questioners("llm"))
    assert zs["query"] == f"{DESCRIPTION}, What color is the dog? brown"


def test_reformulate_offline_appends_what_was_confirmed_without_a_model():
    dialogue = [{"question": DOG_COLOUR.text, "answer": "black", "spec": DOG_COLOUR.to_json()},
                {"question": RED_DOG.text, "answer": "no", "spec": RED_DOG.to_json()}]
    state = {"description": DESCRIPTION, "dialogue": dialogue}
    offline = nodes.reformulate(state, settings(), questioners=Parts().questioners("offline"))
    assert offline["query"] == f"{DESCRIPTION}, black dog"  # the denied red dog stays out of the text
    kept = nodes.reformulate(state, settings(arm="offline", append_answers=False),
                             questioners=Parts().questioners("llm"))
    assert kept["query"] == DESCRIPTION


# --- retrieve ------------------------------------------------------------------------------------


def test_retrieve_returns_candidates_shown_hits_and_the_whole_ranking():
    parts = Parts()
    state = {"description": DESCRIPTION, "query": "a red dog running in the park"}
    out = parts.retrieve(state, settings(candidate_k=12, shown_k=5, ranked_k=30))
    assert out["shown"][0]["captions"] == ["a red dog running in the park"]
    assert len(out["candidates"]) == 12 and len(out["shown"]) == 5 and out["hits"] == out["shown"]
    assert [h["rank"] for h in out["shown"]] == [1, 2, 3, 4, 5]
    assert [i for i, _ in out["ranking"]] == [h.id for h in parts.gallery.search_vector(
        parts.gallery.embedder.embed_texts([state["query"]])[0], k=30)]
    assert [i for i, _ in out["ranking"][:12]] == [h["id"] for h in out["candidates"]]
    assert [t["node"] for t in out["timings"]] == ["retrieval"]


def test_retrieve_offline_lowers_what_was_denied_and_only_offline():
    parts = Parts()
    denied = {"description": DESCRIPTION, "query": DESCRIPTION,
              "dialogue": [{"question": RED_DOG.text, "answer": "no", "spec": RED_DOG.to_json()}]}
    plain = parts.retrieve(denied, settings(candidate_k=12, shown_k=5, ranked_k=30, questioner="llm"))
    assert "a red dog running in the park" in [as_hit(h).caption for h in plain["shown"]]  # else the check is vacuous
    offline = parts.retrieve(denied, settings(candidate_k=12, shown_k=5, ranked_k=30), default_questioner="offline")
    assert not any("red" in as_hit(h).caption for h in offline["shown"])
    assert [h["rank"] for h in offline["shown"]] == [1, 2, 3, 4, 5]
    scores = [s for _, s in offline["ranking"]]
    assert scores == sorted(scores, reverse=True)  # the ranking is the order shown, re-scored


# --- extract_context ------------------------------------------------------------------------------


def test_extract_context_gives_one_candidate_caption_per_cluster():
    parts = Parts()
    candidates = parts.candidates()
    state = {"description": DESCRIPTION, "candidates": candidates}
    out = nodes.extract_context(state, settings(clusters=4), questioners=parts.questioners("llm"))
    texts = out["retrieval_context"]
    captions = [c.caption for c in candidates]
    assert len(texts) == 4 and len(set(texts)) == 4 and set(texts) <= set(captions)
    # one candidate from each cluster of the candidates' vectors (Algorithm 1), in rank order
    labels = cluster_candidates(parts.gallery.embeddings([c.id for c in candidates]), 4, seed=0)
    chosen = [captions.index(t) for t in texts]
    assert chosen == sorted(chosen) and len({labels[i] for i in chosen}) == 4
    assert [t["node"] for t in out["timings"]] == ["rce"]
    # nothing without RCE, nor for the offline questioner (which reads no context)
    for run, default in ((settings(clusters=4, retrieval_context=False), "llm"), (settings(clusters=4), "offline")):
        skipped = nodes.extract_context(state, run, questioners=parts.questioners(default))
        assert skipped == {"retrieval_context": []}


def test_extract_context_describes_uncaptioned_candidates_with_the_captioner():
    described: list[str] = []

    def captioner(paths):
        described.extend(paths)
        return [f"a photo numbered {Path(p).stem[3:]}" for p in paths]

    parts = Parts(captioner)
    candidates = [h.model_copy(update={"captions": []}) for h in parts.candidates()]
    out = nodes.extract_context({"description": DESCRIPTION, "candidates": candidates}, settings(clusters=3),
                                questioners=parts.questioners("llm"))
    assert len(out["retrieval_context"]) == 3
    assert all(t.startswith("a photo numbered ") for t in out["retrieval_context"])
    assert sorted(described) == sorted(c.path for c in candidates)


# --- generate_questions ----------------------------------------------------------------------------


def test_generate_questions_asks_the_model_grounded_in_the_context_when_rce_is_on():
    llm = ScriptedChatModel(questions=QUESTIONS)
    state = {"description": DESCRIPTION, "retrieval_context": ["a red dog running in the park"]}
    out = nodes.generate_questions(state, settings(questions_per_round=3),
                                   questioners=Parts().questioners("llm", chat=lambda: llm))
    assert out["questions"] == QUESTIONS[:3] and out["offline_questions"] == []
    assert [t["node"] for t in out["timings"]] == ["questioner"]
    prompts = [p for kind, p, _ in llm.calls if kind == "questioner"]
    assert prompts and all("a red dog running in the park" in p for p in prompts)

    ungrounded = ScriptedChatModel(questions=QUESTIONS)
    nodes.generate_questions(state, settings(retrieval_context=False),
                             questioners=Parts().questioners("llm", chat=lambda: ungrounded))
    assert not any("a red dog running in the park" in p for _, p, _ in ungrounded.calls)


def test_generate_questions_falls_back_when_no_reply_holds_a_question():
    llm = ScriptedChatModel(questions=["Sure! Here it comes:"])
    out = nodes.generate_questions({"description": DESCRIPTION}, settings(),
                                   questioners=Parts().questioners("llm", chat=lambda: llm))
    assert out["questions"] == [FALLBACK_QUESTION]
    assert llm.kinds().count("questioner") == 2 * 5  # one retry of q_n samples


def test_generate_questions_offline_asks_about_what_tells_the_candidates_apart():
    parts = Parts()
    state = {"description": DESCRIPTION, "candidates": parts.candidates()}
    out = nodes.generate_questions(state, settings(), questioners=parts.questioners("offline"))
    specs = [Question.from_json(q) for q in out["offline_questions"]]
    assert out["questions"] == [q.text for q in specs]
    keys = {q.key for q in specs}
    assert "colour of dog" in keys and "red dog" in keys
    assert "park" not in keys and "dog" not in keys  # the description already says them

    # asked once, never again (even unanswered); denied, nor anything said of it
    asked = {**state, "dialogue": [{"question": RED_DOG.text, "answer": "not sure", "spec": RED_DOG.to_json()}]}
    again = nodes.generate_questions(asked, settings(), questioners=parts.questioners("offline"))
    assert keys - {Question.from_json(q).key for q in again["offline_questions"]} == {"red dog"}
    no_dog = {**state, "dialogue": [{"question": "Is there a dog?", "answer": "no",
                                     "spec": Question(text="Is there a dog?", kind="yes_no", key="dog").to_json()}]}
    left = nodes.generate_questions(no_dog, settings(), questioners=parts.questioners("offline"))
    assert not any("dog" in Question.from_json(q).key for q in left["offline_questions"])


# --- filter_and_select -----------------------------------------------------------------------------


def test_filter_and_select_keeps_unanswerable_questions_and_asks_the_least_disruptive():
    parts = Parts()
    llm = ScriptedChatModel(questions=QUESTIONS, filter_answer="Uncertain")
    state = {"description": DESCRIPTION, "query": DESCRIPTION, "questions": QUESTIONS[:3],
             "candidates": parts.candidates()}
    out = nodes.filter_and_select(state, settings(), questioners=parts.questioners("llm", chat=lambda: llm))
    assert llm.kinds() == ["filter"] * 3 and out["question_spec"] is None
    candidates = state["candidates"]
    vectors = parts.gallery.embeddings([c.id for c in candidates])
    extended = parts.gallery.embedder.embed_texts([f"{DESCRIPTION}, {q}" for q in QUESTIONS[:3]])
    expected = QUESTIONS[select_least_disruptive(np.array([c.score for c in candidates]), extended @ vectors.T)]
    assert out["question"] == expected and expected != QUESTIONS[0]  # not merely the first kept
    assert [t["node"] for t in out["timings"]] == ["filter"]


def test_filter_and_select_regenerates_then_falls_back_to_the_unfiltered_first_question():
    llm = ScriptedChatModel(questions=[f"{q[:-1]} number {i}?" for i in range(3) for q in QUESTIONS],
                            filter_answer="In the park.")
    state = {"description": DESCRIPTION, "query": DESCRIPTION, "questions": QUESTIONS[:2]}
    out = nodes.filter_and_select(state, settings(filter_attempts=3),
                                  questioners=Parts().questioners("llm", chat=lambda: llm))
    assert llm.kinds().count("filter") == 2 + 2 * 5  # the given two, then two fresh batches of q_n
    assert out["question"] == QUESTIONS[0]

    unfiltered = nodes.filter_and_select(state, settings(filter_questions=False),
                                         questioners=Parts().questioners("llm"))
    assert unfiltered["question"] == QUESTIONS[0]
    empty = nodes.filter_and_select({**state, "questions": []}, settings(filter_questions=False),
                                    questioners=Parts().questioners("llm"))
    assert empty["question"] == FALLBACK_QUESTION


def test_filter_and_select_offline_picks_one_of_its_questions_with_its_spec():
    parts = Parts()
    state = {"description": DESCRIPTION, "candidates": parts.candidates()}
    asked = nodes.generate_questions(state, settings(), questioners=parts.questioners("offline"))
    asked["offline_questions"].reverse()  # the best is not merely the first
    out = nodes.filter_and_select({**state, **asked}, settings(), questioners=parts.questioners("offline"))
    assert out["question"] in asked["questions"] and out["question_spec"]["text"] == out["question"]
    assert out["question_spec"] in asked["offline_questions"]
    # The candidates' colours split them most evenly: the colour question is worth the most.
    assert out["question_spec"]["key"] == "colour of dog"
    nothing = nodes.filter_and_select({**state, "offline_questions": []}, settings(),
                                      questioners=parts.questioners("offline"))
    assert nothing == {"question": FALLBACK_QUESTION, "question_spec": None, "timings": nothing["timings"]}


# --- ask and the routing ---------------------------------------------------------------------------


def shown_state(question, spec=None):
    shown = make_gallery().search_vector(make_gallery().vectors[0], k=3)
    return {"description": DESCRIPTION, "query": DESCRIPTION, "question": question, "question_spec": spec,
            "shown": shown, "round": 2}


def test_ask_records_the_answer_a_pick_or_a_stop():
    heard = []
    state = shown_state("What color is the dog?")
    out = nodes.ask(state, answerer=lambda q, s: heard.append((q, s)) or "brown")
    assert out == {"dialogue": [{"question": "What color is the dog?", "answer": "brown"}], "round": 3,
                   "facts": {"confirmed": ["brown"], "denied": [], "phrases": ["brown"]}}  # its meaning, read once
    assert heard == [("What color is the dog?", state)]
    picked = nodes.ask(state, answerer=lambda q, s: "found 2")
    # a pick or a stop ends the round it was made in (the state said 2 answers, this was round 3)
    assert picked == {"found": state["shown"][1].to_json(), "stopped": True, "round": 3}
    assert nodes.ask(state, answerer=lambda q, s: "stop") == {"stopped": True, "round": 3}


def test_ask_asks_a_choice_again_for_an_answer_that_picks_no_option():
    asked = []
    state = shown_state(DOG_COLOUR.text, DOG_COLOUR.to_json())
    out = nodes.ask(state, answerer=lambda q, s: asked.append(q) or "yes")
    assert len(asked) == 2 and asked[0] == DOG_COLOUR.text and "black, brown, white" in asked[1]
    assert out["dialogue"] == [{"question": DOG_COLOUR.text, "answer": "unknown", "spec": DOG_COLOUR.to_json()}]
    replies = iter(["yes", "brown"])
    second = nodes.ask(state, answerer=lambda q, s: next(replies))
    assert second["dialogue"][0]["answer"] == "brown"


def test_the_routing_ends_on_the_budget_a_pick_or_a_stop():
    assert nodes.after_retrieve({"round": 2}, settings(max_rounds=3)) == "extract_context"
    assert nodes.after_retrieve({"round": 3}, settings(max_rounds=3)) == "__end__"
    assert nodes.after_retrieve({}, settings(max_rounds=0)) == "__end__"
    assert nodes.after_ask({"stopped": True}) == "__end__"
    assert nodes.after_ask({"dialogue": []}) == "reformulate"


# --- the caches the builder hands the nodes ---------------------------------------------------------


def test_the_candidate_caches_read_each_thing_once():
    parts = Parts()
    fetched, embedded = [], []
    real_embeddings, real_embed = parts.gallery.embeddings, parts.gallery.embedder.embed_texts
    parts.gallery.embeddings = lambda ids=None: fetched.append(list(ids)) or real_embeddings(ids)
    parts.gallery.embedder.embed_texts = lambda texts: embedded.extend(texts) or real_embed(texts)
    candidates = parts.candidates()
    first = parts.vectors(candidates)
    assert np.array_equal(parts.vectors(candidates), first) and len(fetched) == 1
    assert np.array_equal(first, real_embeddings([c.id for c in candidates]))
    embedded.clear()
    texts = ["a red dog", "a blue dog", "a red dog"]
    vectors = parts.caption_vectors(texts)
    parts.caption_vectors(["a blue dog"])
    assert embedded == ["a red dog", "a blue dog"] and np.array_equal(vectors[0], vectors[2])

    described = []
    captions = CandidateCaptions(lambda paths: described.extend(paths) or ["a photo"] * len(paths), parts.vectors)
    bare = [c.model_copy(update={"captions": []}) for c in candidates[:2]]
    assert captions(bare, caption=False)[1] == [] and described == []  # the captioner is not run
    assert captions(bare) == (["a photo", "a photo"], [0, 1]) and len(described) == 2
    assert captions(bare, caption=False) == (["a photo", "a photo"], [0, 1]) and len(described) == 2


@pytest.mark.parametrize("value", [{"shown_k": 0}, {"arm": "nope"}, {"questioner": "x"}, {"deny_weight": -1}])
def test_settings_refuse_bad_values(value):
    with pytest.raises(ValueError):
        PlugIRSettings(**value)


def test_no_node_forks_on_which_questioner_a_run_uses():
    """Issue 29: what differs between the LLM and the offline questioner is theirs (agents/plugir/questioners.py);
    a node names neither, so a third questioner is a class, not an edit of five nodes."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(nodes))
    named = [node.lineno for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and node.value in ("offline", "llm")]
    assert named == []
    assert "questioner_or" not in inspect.getsource(nodes)


def test_each_run_gets_the_questioner_its_settings_name_else_the_graphs_default():
    parts = Parts()
    questioners = parts.questioners("offline")
    assert questioners.for_run(PlugIRSettings()).name == "offline"
    assert questioners.for_run(PlugIRSettings(questioner="llm")).name == "llm"
    assert parts.questioners("llm").for_run(PlugIRSettings(arm="offline")).name == "offline"
    with pytest.raises(ValueError, match="unknown questioner 'oracle'"):
        parts.questioners("oracle")
