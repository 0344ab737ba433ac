"""The offline PlugIR questioner and the caption-based simulated user: caption reading, expected
information against hand-computed values, the redundancy rule, answer reading, the reformulation,
and the graph's ``offline`` arm running with no language model at all."""

import math

import numpy as np
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from helpers.plugir_fakes import FakeGallery, make_gallery

from pictrieve.agents.plugir.caption_terms import caption_terms, singular
from pictrieve.agents.plugir.offline_answers import (
    answered_facts,
    is_valid_answer,
    read_answer,
    reformulate_with_answers,
)
from pictrieve.agents.plugir.offline_questions import (
    Question,
    answer_outcomes,
    candidate_distribution,
    candidate_questions,
    choose_question,
    expected_information,
)
from pictrieve.agents.plugir.offline_reranking import answer_adjustments, term_phrase, vector_evidence
from pictrieve.agents.plugir.simulated_user import CaptionUser
from pictrieve.graphs.plugir import build_plugir_graph


def test_caption_terms_find_things_colours_counts_and_actions():
    terms = caption_terms("A black and white dog catches a tennis ball on the beach")
    assert {"dog", "tennis ball", "beach"} <= terms.things
    assert {"black dog", "white dog"} <= terms.coloured
    assert "catches" not in " ".join(terms.keys)  # a verb after a noun is not a thing
    two = caption_terms("Two children are playing in the water .")
    assert {"child", "water"} <= two.things and "two child" in two.counted and "playing" in two.actions
    assert two.display["two child"] == "two children"
    assert caption_terms("Dog runs through snow").things >= {"dog", "snow"}  # opens with its noun
    assert [singular(w) for w in ["dogs", "puppies", "benches", "grass", "men", "clothes"]] == \
        ["dog", "puppy", "bench", "grass", "man", "clothes"]


def test_expected_information_matches_hand_computed_values():
    terms = [caption_terms(c) for c in ["a dog on the beach", "a dog in the snow", "a cat on the beach",
                                        "a cat in the park"]]
    uniform = np.full(4, 0.25)
    dog = Question(text="Is there a dog in the photo?", kind="yes_no", key="dog")
    assert expected_information(dog, terms, uniform) == pytest.approx(math.log(2))
    # Skewed mass: P(yes) = 0.7 + 0.1 = 0.8 -> H = -(0.8 ln 0.8 + 0.2 ln 0.2).
    skewed = np.array([0.7, 0.1, 0.1, 0.1])
    assert expected_information(dog, terms, skewed) == pytest.approx(-(0.8 * math.log(0.8) + 0.2 * math.log(0.2)))
    place = Question(text="Where is it: beach or snow?", kind="choice", key="place", options=("beach", "snow"))
    assert answer_outcomes(place, terms).tolist() == [0, 1, 0, 2]  # 2 = none of these
    assert expected_information(place, terms, uniform) == pytest.approx(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))
    everywhere = Question(text="Is there a dog?", kind="yes_no", key="dog")
    assert expected_information(everywhere, terms[:2], np.full(2, 0.5)) == pytest.approx(0.0)


def test_questions_skip_what_is_known_or_asked_and_the_best_is_chosen():
    terms = [caption_terms(c) for c in ["a brown dog on the beach", "a black dog in the snow",
                                        "a brown dog in the snow", "a white dog in the park"]]
    questions = candidate_questions(terms, known="a dog in the snow")
    keys = {q.key for q in questions}
    assert "dog" not in keys  # the description already says it
    assert "place" not in keys  # "snow" is known, so where it is was said
    assert "colour of dog" in keys
    colour = next(q for q in questions if q.key == "colour of dog")
    assert colour.text == "What colour is the dog: brown, black or white?"
    p = np.full(4, 0.25)
    # brown/black/white splits 2/1/1 (1.04 nats): more than any yes/no question (at most ln 2).
    assert choose_question(questions, terms, p).key == "colour of dog"
    jeans = candidate_questions([caption_terms("a man in jeans"), caption_terms("a man in a hat")])
    assert "Are there jeans in the photo?" in [q.text for q in jeans]
    asked = candidate_questions(terms, known="a dog in the snow", asked=[colour])
    assert "colour of dog" not in {q.key for q in asked} and "brown dog" not in {q.key for q in asked}


def test_answers_become_facts_that_move_the_candidates_scores():
    terms = [caption_terms(c) for c in ["a dog with a ball", "a puppy with a stick", "a cat", "a bird"]]
    ball = Question(text="Is there a ball in the photo?", kind="yes_no", key="ball", phrase="a ball")
    dog = Question(text="Is there a dog in the photo?", kind="yes_no", key="dog", phrase="a dog")
    place = Question(text="Where is it: beach or snow?", kind="choice", key="place", options=("beach", "snow"))
    colour = Question(text="What colour is the dog: brown or black?", kind="choice", key="colour of dog",
                      options=("brown dog", "black dog"), noun="dog")
    turns = [{"question": q.text, "answer": a, "spec": q.to_json()}
             for q, a in [(ball, "no"), (dog, "yes"), (place, "none of these"), (colour, "red")]]
    confirmed, denied = answered_facts(turns)
    assert confirmed == {"dog", "red dog"} and denied == {"ball", "beach", "snow", "brown dog", "black dog"}
    assert answered_facts([{"question": ball.text, "answer": "I don't know", "spec": ball.to_json()}]) == (set(), set())
    adjust = answer_adjustments(terms + [None], {"dog"}, {"ball"}, confirm_weight=0.1, deny_weight=0.3)
    # the puppy is a dog (hypernym table); the undescribed fifth candidate is left alone
    assert adjust.tolist() == pytest.approx([0.1 - 0.3, 0.1, 0.0, 0.0, 0.0])
    halved = answer_adjustments(terms, set(), {"ball"}, confirm_weight=0.1, deny_weight=0.3, trust=[0.5] * 4)
    assert halved[0] == pytest.approx(-0.15)
    p = candidate_distribution([0.5, 0.4], temperature=0.1)
    assert p[0] / p[1] == pytest.approx(math.e)


def test_vector_evidence_is_each_terms_standardised_similarity():
    terms = np.array([[1.0, 0.0], [0.0, 1.0]])
    images = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    evidence = vector_evidence(terms, images)
    first = np.array([1.0, 0.0, 0.6])
    np.testing.assert_allclose(evidence[0], (first - first.mean()) / first.std())
    assert evidence.shape == (2, 3) and evidence[1].argmax() == 1
    assert [term_phrase(k) for k in ["dog", "grass", "jumping", "black dog"]] == \
        ["a dog", "grass", "someone jumping", "black dog"]


def test_a_denial_changes_the_ranking():
    """Issue 19: four "no"s left the query and the results unchanged; with default settings each
    denial now lowers the candidates whose descriptions hold the denied thing."""
    captions = ([f"a dog with a {thing} in the park" for thing in ["ball", "stick", "frisbee", "rope", "toy"]]
                + ["a dog in the park", "a dog lying in the park", "a dog near a bench in the park"])
    gallery = FakeGallery(captions)
    graph = build_plugir_graph(gallery, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "deny"}}
    context = {"arm": "offline", "max_rounds": 5, "candidate_k": 8, "shown_k": 8}
    result = graph.invoke({"description": "a dog in the park"}, cfg, context=context)
    before = [h["id"] for h in result["__interrupt__"][0].value["shown"]]
    denied = []
    for _ in range(4):
        payload = result["__interrupt__"][0].value
        assert "options" not in payload, payload["question"]  # yes/no questions only here
        result = graph.invoke(Command(resume="no"), cfg, context=context)
        denied.append(result["dialogue"][-1]["spec"]["key"])
    payload = result["__interrupt__"][0].value
    assert payload["query"] == "a dog in the park"  # denials stay out of the text ...
    after = [h["id"] for h in payload["shown"]]
    assert after != before  # ... but not out of the ranking
    holds = {f"img{i:02d}": any(d in c.split() for d in denied) for i, c in enumerate(captions)}
    assert any(holds.values()) and not all(holds.values())

    def mean_position(order, holding):
        return np.mean([r for r, i in enumerate(order) if holds[i] == holding])

    # the images whose caption holds a denied thing moved down, the others up
    assert mean_position(after, True) > mean_position(before, True), (denied, before, after)
    assert mean_position(after, False) < mean_position(before, False)


def test_settled_things_are_not_asked_counting_broader_words():
    """Issue 19: after "two dogs running" it asked "Is there an animal in the photo?"."""
    terms = [caption_terms(c) for c in ["an animal in a field", "a dog on the grass", "a puppy with a ball",
                                        "a cat on a sofa", "a person with a dog"]]
    keys = {q.key for q in candidate_questions(terms, known="two dogs running")}
    assert "animal" not in keys and "dog" not in keys and "two dog" not in keys
    assert {"puppy", "cat", "ball"} <= keys  # narrower or unrelated things are still open
    # an earlier "no" settles the narrower words too, and what is said of them
    after_no = {q.key for q in candidate_questions(terms, known="something in a field", denied={"animal"})}
    assert not after_no & {"animal", "dog", "puppy", "cat"} and "ball" in after_no
    # an earlier "yes" (in the query) settles the broader words
    after_yes = {q.key for q in candidate_questions(terms, known="something in a field, a puppy")}
    assert not after_yes & {"puppy", "dog", "animal"}


def test_an_action_is_asked_as_an_action():
    """Issue 19: it asked "Is there a jumping in the photo?"."""
    terms = [caption_terms(c) for c in ["The jumping dog", "a dog with a jumping", "a dog sleeping"]]
    assert "jumping" not in terms[0].things and "jumping" in terms[0].actions
    questions = {q.key: q.text for q in candidate_questions(terms, known="a dog")}
    assert questions["jumping"] == "Is someone or something jumping?"
    assert not any("a jumping" in text or "a sleeping" in text for text in questions.values())


def test_a_choice_answered_with_no_option_is_asked_again_with_the_options():
    """Issue 19: "yes" to a choice was ignored and "black" to "Where is it: ..." entered the query."""
    gallery = FakeGallery([f"a {c} dog in the {p}" for c in ["red", "blue"] for p in ["snow", "park", "beach"]])
    graph = build_plugir_graph(gallery, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "again"}}
    context = {"arm": "offline", "max_rounds": 2, "candidate_k": 6}
    first = graph.invoke({"description": "a dog"}, cfg, context=context)["__interrupt__"][0].value
    assert first["question"] == "Where is it: beach, park or snow?"
    for wrong in ["yes", "black"]:
        again = graph.invoke(Command(resume=wrong), cfg, context=context)["__interrupt__"][0].value
        assert again["round"] == 1 and again["options"] == first["options"]
        assert again["question"] == ("Where is it: beach, park or snow? Please answer with one of: "
                                     "beach, park, snow or none of these.")
    answered = graph.invoke(Command(resume="snow"), cfg, context=context)
    assert answered["dialogue"] == [{"question": first["question"], "answer": "snow",
                                     "spec": answered["dialogue"][0]["spec"]}]
    assert answered["queries"][-1] == "a dog, the snow" and "black" not in answered["queries"][-1]
    # a value of the same kind outside the options is an answer, not a reason to ask again
    place = Question.from_json(answered["dialogue"][0]["spec"])
    assert is_valid_answer(place, "on a lake") and not is_valid_answer(place, "black")
    assert reformulate_with_answers("a dog", [{"question": place.text, "answer": "on a lake",
                                               "spec": place.to_json()}]) == "a dog, the lake"


def test_answers_are_read_and_only_confirmations_enter_the_query():
    ball = Question(text="Is there a ball in the photo?", kind="yes_no", key="ball", phrase="a ball")
    colour = Question(text="What colour is the dog: brown or black?", kind="choice", key="colour of dog",
                      options=("brown dog", "black dog"), noun="dog")
    place = Question(text="Where is it: beach or snow?", kind="choice", key="place", options=("beach", "snow"))
    assert [read_answer(ball, a) for a in ["yes", "Yes, a red one", "no", "not sure", "a ball"]] == [1, 1, 0, None, 1]
    assert [read_answer(colour, a) for a in ["black", "it is brown", "none of these", "??"]] == [1, 0, 2, None]
    turns = [{"question": ball.text, "answer": "no", "spec": ball.to_json()},
             {"question": colour.text, "answer": "black", "spec": colour.to_json()},
             {"question": place.text, "answer": "beach", "spec": place.to_json()},
             {"question": "Anything else?", "answer": "a red frisbee"},
             {"question": "Is it sunny?", "answer": "yes"}]
    assert reformulate_with_answers("A dog runs.", turns) == "A dog runs, black dog, the beach, a red frisbee"
    # A person's extra words after yes/no are kept; a bare option word is not added twice.
    person = [{"question": ball.text, "answer": "No, it's a stick.", "spec": ball.to_json()},
              {"question": colour.text, "answer": "black", "spec": colour.to_json()}]
    assert reformulate_with_answers("A dog runs.", person) == "A dog runs, a stick, black dog"


def test_caption_user_answers_from_the_captions_only():
    user = CaptionUser(["A black dog runs on the beach .", "A dog carries a stick by the sea ."])
    ball = Question(text="Is there a ball in the photo?", kind="yes_no", key="ball")
    stick = Question(text="Is there a stick in the photo?", kind="yes_no", key="stick")
    colour = Question(text="What colour is the dog: brown or black?", kind="choice", key="colour of dog",
                      options=("brown dog", "black dog"), noun="dog")
    place = Question(text="Where is it: snow or park?", kind="choice", key="place", options=("snow", "park"))
    for question, expected in [(ball, "no"), (stick, "yes"), (colour, "black"), (place, "none of these")]:
        assert user(question.text, {"question_spec": question.to_json()}) == expected
    # Free questions (an LLM's): rules for yes/no, the closest caption otherwise.
    assert user("Is the dog carrying a stick?", {"description": "a dog"}) == "yes"
    assert user("Is there a cat?", {"description": "a dog"}) == "no"
    assert user("What is the dog carrying?", {}) == "A dog carries a stick by the sea ."
    # A thing named inside a compound is there too ("a tennis ball" has a ball), not the reverse.
    tennis = CaptionUser(["A dog catches a tennis ball ."])
    tennis_ball = Question(text="Is there a tennis ball in the photo?", kind="yes_no", key="tennis ball")
    assert tennis(ball.text, {"question_spec": ball.to_json()}) == "yes"
    assert user(tennis_ball.text, {"question_spec": tennis_ball.to_json()}) == "no"


class _NoLLM:
    def __call__(self, *args, **kwargs):
        raise AssertionError("the offline arm must not create a chat model")


def test_offline_arm_finds_the_target_without_any_language_model(monkeypatch):
    import pictrieve.tools.models.chat_models as chat_models

    monkeypatch.setattr(chat_models, "create_chat_model", _NoLLM())
    gallery = make_gallery()  # "a <colour> dog running in the <place>" x 6 colours x 5 places
    target = "a brown dog running in the beach"
    user = CaptionUser([target])
    graph = build_plugir_graph(gallery, answerer=user)
    result = graph.invoke({"description": "a dog running"},
                          context={"arm": "offline", "max_rounds": 3, "candidate_k": 30, "shown_k": 5})
    turns = result["dialogue"]
    assert len(turns) == 3 and all("spec" in t for t in turns)
    assert len({t["question"] for t in turns}) == 3  # never the same question twice
    final = result["queries"][-1]
    assert final.startswith("a dog running")  # the description is kept
    assert "beach" in final and "brown" in final  # what the user confirmed was added
    assert result["shown"][0]["captions"] == [target]


@pytest.mark.parametrize("named_model", [False, True])
def test_a_run_naming_no_questioner_asks_offline_questions_only_with_the_bundled_model(monkeypatch, named_model):
    """A served graph gets no context: with the bundled model it must not ask the 135M model's questions."""
    import pictrieve.tools.models.chat_models as chat_models
    from helpers.plugir_fakes import ScriptedChatModel

    gallery = FakeGallery([f"a {c} dog in the {p}" for c in ["red", "blue"] for p in ["snow", "park", "beach"]])
    if named_model:
        graph = build_plugir_graph(gallery, llm=ScriptedChatModel(questions=["Is the dog asleep?"]),
                                   checkpointer=InMemorySaver())
    else:
        monkeypatch.setattr(chat_models, "create_chat_model", _NoLLM())
        graph = build_plugir_graph(gallery, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}}
    asked = graph.invoke({"description": "a dog"}, cfg, context={"max_rounds": 1, "candidate_k": 6})
    payload = asked["__interrupt__"][0].value
    if named_model:
        assert payload["question"] == "Is the dog asleep?" and "options" not in payload
    else:
        assert payload["options"] == ["beach", "park", "snow", "none of these"]
        assert asked["retrieval_context"] == []  # RCE is skipped: the offline questioner reads none


def test_offline_question_options_reach_the_person_through_interrupt(monkeypatch):
    gallery = FakeGallery([f"a {c} dog in the {p}" for c in ["red", "blue"] for p in ["snow", "park", "beach"]])
    graph = build_plugir_graph(gallery, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}}
    context = {"arm": "offline", "max_rounds": 2, "candidate_k": 6}
    first = graph.invoke({"description": "a dog"}, cfg, context=context)["__interrupt__"][0].value
    assert first["question"].startswith("Where is it:")
    assert first["options"] == ["beach", "park", "snow", "none of these"]
    second = graph.invoke(Command(resume="snow"), cfg, context=context)
    assert second["queries"][-1] == "a dog, the snow"
    assert second["dialogue"][0]["spec"]["key"] == "place"
