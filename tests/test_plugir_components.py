"""PlugIR building blocks on small, hand-made inputs: RCE, KL selection, parsing, prompts."""

import numpy as np
import pytest

from pictrieve import prompts
from pictrieve.agents.plugir.chat_prompts import render_prompt
from pictrieve.agents.plugir.question_filter import (
    is_uncertain,
    kl_divergence,
    select_least_disruptive,
)
from pictrieve.agents.plugir.questioner import extract_question, format_dialogue
from pictrieve.agents.plugir.reformulator import clean_caption, concatenate_dialogue
from pictrieve.agents.plugir.retrieval_context import (
    entropy,
    select_representatives,
    softmax,
)
from pictrieve.agents.plugir.simulated_user import clean_answer


def unit(rows):
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_entropy_is_lowest_for_the_peaked_distribution():
    assert entropy(softmax(np.zeros(4))) == pytest.approx(np.log(4))
    assert entropy(softmax(np.array([10.0, 0, 0, 0]))) < entropy(softmax(np.array([1.0, 0, 0, 0])))


def test_rce_picks_one_distinctive_member_per_cluster():
    # Two well separated groups of candidates (around e1 and around e2).
    candidates = unit([[1, 0.05, 0], [1, -0.05, 0.02], [1, 0, -0.04],
                       [0.02, 1, 0], [-0.03, 1, 0.05], [0, 1, -0.02]])
    # Probes: in each group one probe points straight at a single candidate (peaked, low
    # entropy); the others sit between the groups and match everything alike.
    probes = np.array(candidates, copy=True)
    probes[[0, 2, 3, 5]] = unit([[1, 1, 0]] * 4)
    chosen = select_representatives(candidates, probes, clusters=2, seed=0)
    # Candidates 1 and 4 are the ones whose own probe points at them alone.
    assert chosen == [1, 4]


def test_rce_low_entropy_means_concrete_content():
    # A probe aligned with one candidate beats one halfway between all of them.
    candidates = unit(np.eye(4) * 5 + 0.1)
    probes = unit([candidates[0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]])
    assert select_representatives(candidates * 1.0, probes, clusters=1) == [0]


def test_rce_handles_fewer_candidates_than_clusters_and_bad_shapes():
    candidates = unit(np.random.default_rng(0).standard_normal((3, 5)))
    assert select_representatives(candidates, clusters=10) == [0, 1, 2]
    assert select_representatives(np.zeros((0, 5))) == []
    with pytest.raises(ValueError):
        select_representatives(candidates, probes=candidates[:2])


def test_kl_selection_prefers_the_question_that_keeps_the_distribution():
    context = np.array([0.9, 0.8, 0.3, 0.1])
    extended = np.array([
        [0.1, 0.2, 0.9, 0.9],  # flips the ranking: abrupt change
        [0.88, 0.79, 0.32, 0.1],  # nearly the same distribution
        [0.5, 0.5, 0.5, 0.5],
    ])
    assert select_least_disruptive(context, extended) == 1
    p = softmax(context)
    assert kl_divergence(p, p) == pytest.approx(0.0)
    assert kl_divergence(p, softmax(extended[0])) > kl_divergence(p, softmax(extended[2])) > 0


@pytest.mark.parametrize("reply, question", [
    ("What color is the dog?", "What color is the dog?"),
    ("what color is the dog? Explanation: candidates 0 and 3 ...", "What color is the dog?"),
    ("Question: is the dog running?\nExplanation: ...", "Is the dog running?"),
    ("1. Where is the dog playing?", "Where is the dog playing?"),
    ('"How many dogs are there?"', "How many dogs are there?"),
    ("Is the dog wearing a collar", "Is the dog wearing a collar?"),
    ("", None),
    ("The dog in the snow is a classic image.", None),
    ("Why?", None),
    ("Explanation: I used the candidates.", None),
    # what a real model returns: generation stops at "?" and the stop string is cut off
    ("Sure! Here is my question:\nWhat color is the dog", "What color is the dog?"),
    ("In what season was the photo taken", "In what season was the photo taken?"),
    ("Any other animals in the photo", "Any other animals in the photo?"),
])
def test_extract_question(reply, question):
    assert extract_question(reply) == question


def test_text_helpers():
    dialogue = [{"question": "Is it sunny?", "answer": "yes"}]
    assert format_dialogue(dialogue) == "Question: Is it sunny?\nAnswer: yes\n"
    assert concatenate_dialogue("a dog", dialogue) == "a dog, Is it sunny? yes"
    assert clean_caption('[New Caption]: "a dog on grass"\nmore text') == "a dog on grass"
    assert clean_answer("Answer: brown\nextra") == "brown" and clean_answer("  ") == "unknown"
    assert is_uncertain("Uncertain.") and not is_uncertain("In the snow")


@pytest.mark.parametrize("name", ["questioner_baseline", "questioner_grounded", "filter", "reformulate",
                                  "paraphrase", "simulated_user"])
def test_prompts_load_and_fill_every_placeholder(name):
    turns = prompts.chat_turns("plugir", name)
    assert turns[0][0] == "system" and turns[-1][0] == "user"
    keys = ["description", "dialogue", "candidates", "context", "question", "caption", "text",
            "captions"]
    messages = render_prompt(name, **{k: f"<{k}>" for k in keys})
    text = "\n".join(m.content for m in messages)
    assert "{" not in text and "}" not in text
    assert not any(m.content.startswith("#") for m in messages)


def test_captioned_candidates_are_probed_but_file_names_are_not():
    from pictrieve.agents.plugir.candidates import fill_captions
    from pictrieve.vectorstore.hits import ImageHit

    hits = [
        ImageHit(id="a", path="/p/dog_on_grass.jpg", score=0.9, rank=1, captions=["a dog on grass"]),
        ImageHit(id="b", path="/p/IMG_0042.jpg", score=0.8, rank=2),
        ImageHit(id="c", path="/p/beach_day.jpg", score=0.7, rank=3),
    ]
    captions, described = fill_captions(hits, lambda paths: ["a photo of a beach" if "beach" in p else "" for p in paths])
    assert captions == ["a dog on grass", "IMG 0042", "a photo of a beach"]
    assert described == [0, 2]
    assert fill_captions(hits, None) == (["a dog on grass", "IMG 0042", "beach day"], [0])


def test_each_photo_is_described_once_however_often_it_is_read():
    from pictrieve.agents.plugir.candidates import DescriptionMemo, fill_captions
    from pictrieve.vectorstore.hits import ImageHit

    asked: list[str] = []

    def captioner(paths):
        asked.extend(paths)
        return [f"a photo of {p}" for p in paths]

    memo = DescriptionMemo(keep=2)
    first = [ImageHit(id=i, path=f"/p/{i}.jpg", score=0.5, rank=1) for i in ("a", "b")]
    assert fill_captions(first, captioner, memo=memo)[0] == ["a photo of /p/a.jpg", "a photo of /p/b.jpg"]
    again = first + [ImageHit(id="c", path="/p/c.jpg", score=0.4, rank=3)]
    assert fill_captions(again, captioner, memo=memo)[0][2] == "a photo of /p/c.jpg"
    assert asked == ["/p/a.jpg", "/p/b.jpg", "/p/c.jpg"]  # a and b were not described again
    assert list(memo) == ["b", "c"]  # the oldest is forgotten past `keep`
