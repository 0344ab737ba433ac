"""PlugIR's offline chat hears what a person says (issue 28): the words of an answer beyond yes, no or
the offered choices become facts that join the query and re-rank; a thing mentioned only in passing is
no yes; what the description already says (counting a phrase's words) and words that name no thing are
never asked; a later answer overrides an earlier one. Real answer text from the issue's chats, and the
free-text simulated person who answers with the target's captions."""

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from helpers.plugir_fakes import FakeGallery

from pictrieve.agents.plugir.caption_terms import caption_terms
from pictrieve.agents.plugir.offline_answers import (
    answer_facts,
    answered_facts,
    fold_facts,
    is_valid_answer,
    read_answer,
    reformulate_with_answers,
    turn_facts,
)
from pictrieve.agents.plugir.offline_questions import Question, candidate_questions
from pictrieve.agents.plugir.offline_reranking import answer_adjustments
from pictrieve.agents.plugir.simulated_user import FreeTextCaptionUser
from pictrieve.graphs.plugir import build_plugir_graph
from pictrieve.vectorstore.hits import as_hit

DOG_COLOUR = Question(text="What colour is the dog: black, brown or white?", kind="choice", key="colour of dog",
                      options=("black dog", "brown dog", "white dog"), noun="dog")
PLACE = Question(text="Where is it: beach, grass or snow?", kind="choice", key="place",
                 options=("beach", "grass", "snow"))
FOOD = Question(text="Is there food in the photo?", kind="yes_no", key="food", phrase="food")
BALL = Question(text="Is there a ball in the photo?", kind="yes_no", key="ball", phrase="a ball")
ANIMAL = Question(text="Is there an animal in the photo?", kind="yes_no", key="animal", phrase="an animal")


def turn(question: Question, answer: str) -> dict:
    return {"question": question.text, "answer": answer, "spec": question.to_json()}


def test_both_colours_of_one_answer_are_kept():
    """Issue 28: "one is black and one is brown" kept only "black"."""
    said = [turn(DOG_COLOUR, "one is black and one is brown")]
    confirmed, denied = answered_facts(said)
    assert confirmed == {"black dog", "brown dog"} and denied == {"white dog"}
    assert reformulate_with_answers("two dogs", said) == "two dogs, black dog, brown dog"
    # and the re-ranking raises both: a black dog and a brown dog over a white one
    terms = [caption_terms(c) for c in ["a black dog on grass", "a brown dog on grass", "a white dog on grass"]]
    adjust = answer_adjustments(terms, confirmed, denied, confirm_weight=1.0, deny_weight=3.0)
    assert adjust.tolist() == [1.0, 1.0, -3.0]


def test_words_beyond_none_of_these_become_facts():
    """Issue 28: "none of these, indoors on a carpet next to brick steps" left the query unchanged."""
    answer = "none of these, indoors on a carpet next to brick steps"
    assert is_valid_answer(PLACE, answer)
    facts = answer_facts(PLACE, answer)
    assert {"indoors", "carpet", "brick steps"} <= facts.confirmed
    assert facts.denied == {"beach", "grass", "snow"}
    query = reformulate_with_answers("a little girl", [turn(PLACE, answer)])
    assert query == "a little girl, indoors on a carpet next to brick steps"
    # an answer that names no option but tells where is heard too, and never a bare unrelated word
    assert is_valid_answer(PLACE, "on a carpet") and not is_valid_answer(PLACE, "black")


def test_what_an_answer_says_after_there_is_or_its_is_kept():
    """Issue 37: "yes, and there is snow" lost the snow and "none of these, it's outside" lost outside: a
    person names a thing after "there is" or "it's", where a caption would put an article."""
    facts = answer_facts(BALL, "yes, and there is snow")
    assert {"ball", "snow"} <= facts.confirmed and any("snow" in phrase for phrase in facts.phrases)
    outside = answer_facts(PLACE, "none of these, it's outside")
    assert "outside" in outside.confirmed and outside.denied == {"beach", "grass", "snow"}
    assert reformulate_with_answers("a dog", [turn(PLACE, "none of these, it's outside")]) == "a dog, outside"
    assert "dog" in answer_facts(None, "there are two dogs").confirmed | answer_facts(None, "they're dogs").confirmed
    # a negated one is denied, not confirmed
    assert answer_facts(None, "there is no snow").denied == {"snow"}
    assert "outside" in answer_facts(None, "it's not outside").denied


def test_free_words_re_rank_the_photos_even_when_not_appended_to_the_text():
    captions = ["a girl on the beach", "a girl in the snow", "a girl on the grass", "a girl in a park",
                "a girl sitting on a carpet by brick steps", "a girl on a sofa"]
    graph = build_plugir_graph(FakeGallery(captions), checkpointer=InMemorySaver())
    # confirmed words only re-rank here (append_answers false): the query text stays the description
    context = {"arm": "offline", "max_rounds": 2, "candidate_k": 6, "shown_k": 6, "append_answers": False}

    def carpet_position(answer: str) -> int:
        cfg = {"configurable": {"thread_id": answer}}
        first = graph.invoke({"description": "a girl"}, cfg, context=context)["__interrupt__"][0].value
        assert first["question"].startswith("Where is it:")
        after = graph.invoke(Command(resume=answer), cfg, context=context)["__interrupt__"][0].value
        assert after["query"] == "a girl"
        return [as_hit(h).caption for h in after["shown"]].index("a girl sitting on a carpet by brick steps")

    # the same denials either way; the words after them raise the photo they describe
    assert carpet_position("none of these, indoors on a carpet next to brick steps") < carpet_position("none of these")


def test_a_thing_mentioned_only_in_passing_is_not_a_yes():
    """Issue 28: "only a jar of pasta behind the toaster" was taken as a yes to "Is there food?"."""
    passing = "only a jar of pasta behind the toaster"
    assert read_answer(FOOD, passing) is None
    assert answer_facts(FOOD, passing).confirmed == set()
    assert reformulate_with_answers("a kitchen counter", [turn(FOOD, passing)]) == "a kitchen counter"
    confirmed, _ = answered_facts([turn(FOOD, passing)])
    pizza = answer_adjustments([caption_terms("a pizza on a table")], confirmed, set(), confirm_weight=1.0,
                               deny_weight=3.0)
    assert pizza.tolist() == [0.0]  # pizza photos are not pulled up
    # not vacuous: the same words said plainly are a yes, and so are they in the background markers' absence
    assert read_answer(FOOD, "a jar of pasta behind the toaster") == 1
    assert read_answer(FOOD, "some pizza in the background") is None
    # size words are no markers: a little girl is a girl, and her dress is heard
    girl = Question(text="Is there a girl in the photo?", kind="yes_no", key="girl", phrase="a girl")
    assert read_answer(girl, "a little girl on the grass") == 1
    assert "pink dress" in answer_facts(girl, "yes, a little girl in a pink dress").confirmed
    # "just" about something else than what was asked still tells of it
    cat = Question(text="Is there a cat in the photo?", kind="yes_no", key="cat", phrase="a cat")
    facts = answer_facts(cat, "no, just a dog")
    assert "dog" in facts.confirmed and "cat" in facts.denied


def test_nothing_the_description_says_is_asked_counting_a_phrases_words():
    """Issue 28: "Is there a sandy beach in the photo?" after "a girl on a beach"."""
    terms = [caption_terms(c) for c in ["a girl on a sandy beach with a tennis ball", "a girl on a beach",
                                        "a girl by brick steps", "a boy on a rocky beach with a red ball"]]
    known = "a girl on a beach with a ball by the steps"
    keys = {q.key for q in candidate_questions(terms, known=known)}
    texts = " ".join(q.text for q in candidate_questions(terms, known=known))
    assert not keys & {"sandy beach", "beach", "tennis ball", "ball", "brick steps", "rocky beach"}, keys
    assert "beach" not in texts and "tennis" not in texts
    assert {"boy", "red ball"} <= keys  # what the description does not say is still asked


def test_no_question_about_a_word_that_is_no_thing_colour_action_or_place():
    """Issue 28: "Is there a piece in the photo?"."""
    captions = ["a man eating a piece of cake", "a boy doing a trick in the air", "a long haired dog",
                "an older man on a grassy field", "a group of people at a race"]
    questions = candidate_questions([caption_terms(c) for c in captions], known="a photo")
    keys = {q.key for q in questions}
    for word in ["piece", "trick", "air", "long", "haired", "older", "grassy", "group", "race"]:
        assert not any(word in key.split() for key in keys), (word, keys)
    assert {"cake", "dog", "man", "boy", "person"} <= keys | {o for q in questions for o in q.options}


def test_the_colour_of_several_things_is_asked_of_them_all():
    """Issue 28: "What colour is the dog?" after "two dogs"."""
    terms = [caption_terms(c) for c in ["a black dog and a brown dog", "a white dog", "a brown dog"]]
    colour = next(q for q in candidate_questions(terms, known="two dogs") if q.key == "colour of dog")
    assert colour.text.startswith("What colour are the dogs:")


def test_what_a_clause_negates_is_denied_never_confirmed():
    """"not on snow" cuts its clause: what follows the negation is denied, and never said or asked for."""
    snow = Question(text="Is there snow in the photo?", kind="yes_no", key="snow", phrase="snow")
    for question, answer in [(None, "a dog on grass, not on snow"), (snow, "the dog is not on snow"),
                             (snow, "a dog on grass, not on snow"), (PLACE, "on grass, not on snow")]:
        facts = answer_facts(question, answer)
        assert "snow" in facts.denied and "snow" not in facts.confirmed, (answer, facts)
        assert not any("snow" in phrase for phrase in facts.phrases), (answer, facts.phrases)
    assert read_answer(snow, "the dog is not on snow") == 0
    assert read_answer(PLACE, "on grass, not on snow") == 1  # grass
    assert "grass" in answer_facts(PLACE, "on grass, not on snow").confirmed
    assert "snow" not in reformulate_with_answers("a dog", [turn(snow, "a dog on grass, not on snow")])


def test_a_later_answer_overrides_an_earlier_one():
    """Issue 28 (audit of offline_questioner.py:280): a contradicted answer kept both confirmed and denied."""
    no_then_yes = [turn(BALL, "no"), turn(DOG_COLOUR, "black, with a ball in its mouth")]
    confirmed, denied = answered_facts(no_then_yes)
    assert "ball" in confirmed and "ball" not in denied
    assert reformulate_with_answers("a dog", no_then_yes) == "a dog, black dog, with a ball in its mouth"
    yes_then_no = [turn(BALL, "yes"), turn(DOG_COLOUR, "black, and there is no ball after all")]
    confirmed, denied = answered_facts(yes_then_no)
    assert "ball" in denied and "ball" not in confirmed
    assert "ball" not in reformulate_with_answers("a dog", yes_then_no)  # its "a ball" leaves the text
    # what a fact implies goes with it: "a puppy" now voids an earlier "no" to "animal"
    confirmed, denied = answered_facts([turn(ANIMAL, "no"), turn(BALL, "yes, and a puppy")])
    assert "animal" not in denied and {"puppy", "ball"} <= confirmed
    for said in (no_then_yes, yes_then_no):
        confirmed, denied = answered_facts(said)
        assert not confirmed & denied


def test_the_free_text_person_answers_with_the_targets_captions():
    user = FreeTextCaptionUser(["A black dog and a brown dog play in the snow .", "Two dogs run .",
                                "Two dogs chase a ball in the snow ."])
    ask = lambda q: user(q.text, {"question_spec": q.to_json()})  # noqa: E731
    assert ask(DOG_COLOUR) == "black and brown, a black dog and a brown dog play in the snow"
    assert ask(BALL) == "yes, two dogs chase a ball in the snow"
    assert ask(FOOD) == "no, two dogs run"  # the shortest caption not yet told
    assert ask(PLACE) == "snow"  # every caption told: the short answer alone
    facts = answer_facts(DOG_COLOUR, "black and brown, a black dog and a brown dog play in the snow")
    assert {"black dog", "brown dog", "snow"} <= facts.confirmed and "white dog" in facts.denied


def test_fuse_answers_searches_with_the_mean_of_the_description_and_each_phrase():
    import numpy as np

    from pictrieve.agents.plugir.questioners import OfflineQuestioner, QuestionerParts
    from pictrieve.agents.plugir.settings import PlugIRSettings

    embedder = FakeGallery(["a dog"]).embedder
    dialogue = [turn(PLACE, "none of these, indoors on a carpet"), turn(BALL, "yes, a red one")]
    state = {"description": "a girl", "query": reformulate_with_answers("a girl", dialogue), "dialogue": dialogue}
    parts = embedder.embed_texts(["a girl", "indoors on a carpet", "a red ball"]).astype(np.float64)
    mean = (parts / np.linalg.norm(parts, axis=1, keepdims=True)).mean(axis=0)
    offline = OfflineQuestioner(QuestionerParts(chat=None, embedder=embedder, captions=None, vectors=None,
                                                caption_vectors=None))
    fused = offline.query_vector(state, PlugIRSettings(fuse_answers=True))
    np.testing.assert_allclose(fused, mean / np.linalg.norm(mean), rtol=1e-5, atol=1e-6)
    whole = offline.query_vector(state, PlugIRSettings())  # the default: the whole text
    np.testing.assert_allclose(whole, embedder.embed_texts([state["query"]])[0], rtol=1e-6)


def test_each_answer_is_read_once_and_its_meaning_kept_in_the_state(monkeypatch):
    """Issue 29: the offline questioner re-read every raw answer four times a round. Now ``ask`` reads an
    answer once and the state's reducer folds it into ``facts``, which every later step uses."""
    from helpers.plugir_fakes import make_gallery

    from pictrieve.agents.plugir import offline_answers

    reads = []
    real = offline_answers.answer_facts
    monkeypatch.setattr(offline_answers, "answer_facts", lambda q, a: reads.append(a) or real(q, a))
    replies = iter(["no, it is brown", "in the snow, not the park", "yes"])
    from pictrieve.tools.models.chat_models import create_chat_model

    graph = build_plugir_graph(make_gallery(), llm=create_chat_model("offline"), checkpointer=InMemorySaver(),
                               answerer=lambda question, state: next(replies))
    result = graph.invoke({"description": "a dog running"}, {"configurable": {"thread_id": "once"}},
                          context={"max_rounds": 3, "candidate_k": 20})
    assert result["round"] == 3
    assert reads == ["no, it is brown", "in the snow, not the park", "yes"]  # once each, in order
    state = graph.get_state({"configurable": {"thread_id": "once"}}).values
    expected = offline_answers.dialogue_facts(result["dialogue"])
    assert state["facts"] == expected and expected["confirmed"] and expected["denied"]
    assert result["query"] == offline_answers.reformulate_with_answers("a dog running", result["dialogue"])


def test_folding_answers_one_at_a_time_is_reading_the_whole_dialogue():
    dialogue = [turn(ANIMAL, "no"), turn(BALL, "yes, and a puppy"), turn(PLACE, "none of these, indoors on a carpet")]
    folded = {}
    for each in dialogue:
        folded = fold_facts(folded, turn_facts(each))
    confirmed, denied = answered_facts(dialogue)
    assert set(folded["confirmed"]) == confirmed and set(folded["denied"]) == denied
    assert "puppy" in confirmed and "animal" not in denied  # the puppy voided the earlier "no" to animal
    assert reformulate_with_answers("a girl", folded) == reformulate_with_answers("a girl", dialogue)
