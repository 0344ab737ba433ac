"""Zero-shot image tags: the words nearest an image vector, written so caption_terms reads them back."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.plugir_fakes import FakeGallery

from pictrieve.agents.plugir.caption_terms import caption_terms
from pictrieve.tools.models.captioner_base import CaptionerUnavailableError
from pictrieve.tools.models.captioners import create_captioner
from pictrieve.tools.models.image_tags import TagVocabulary, ZeroShotTagger, default_vocabulary


class WordSpace:
    """A toy text-image space: one axis per word; a text is the sum of its words' axes."""

    name = "word-space"

    def __init__(self, words):
        self.axis = {w: i for i, w in enumerate(words)}
        self.calls = 0

    def embed_texts(self, texts):
        self.calls += 1
        out = np.zeros((len(texts), len(self.axis)), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.split():
                if word in self.axis:
                    out[row, self.axis[word]] = 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


VOCAB = TagVocabulary(things=("dog", "grass", "bench", "sunglasses"), actions=("running", "sitting"),
                      mass_nouns=frozenset({"grass", "sunglasses"}), phrase="{a} {word}",
                      action_phrase="someone {word}", prefix="a photo that may show ")


def test_tags_are_the_nearest_words_and_read_back_as_caption_terms():
    space = WordSpace(VOCAB.words)
    tagger = ZeroShotTagger(space, k=3, vocabulary=VOCAB)
    image = np.array([[0.8, 0.1, 0.0, 0.0, 0.5, 0.3]], dtype=np.float32)  # dog, running, sitting, grass
    assert tagger.tags_of_vectors(image) == [["dog", "running", "sitting"]]
    line = tagger.describe_vectors(image)[0]
    assert line == "a photo that may show a dog; someone running, someone sitting"
    assert caption_terms(line).keys == {"dog", "running", "sitting"}
    other = np.array([[0.0, 0.9, 0.0, 0.7, 0.0, 0.2]], dtype=np.float32)
    assert tagger.describe_vectors(other)[0] == "a photo that may show some grass, some sunglasses; someone sitting"
    assert caption_terms(tagger.describe_vectors(other)[0]).things == {"grass", "sunglasses"}
    tagger.describe_vectors(other)
    assert space.calls == 1  # the vocabulary is embedded once


def test_the_packaged_vocabulary_reads_back_word_for_word():
    vocab = default_vocabulary()
    assert len(vocab.things) > 100 and len(vocab.actions) > 30 and not set(vocab.things) & set(vocab.actions)
    tagger = ZeroShotTagger(WordSpace(vocab.words), vocabulary=vocab)
    from pictrieve.agents.plugir.caption_terms import singular

    for word in vocab.words:  # every tag becomes the term a human caption with that word gives
        assert singular(word) in caption_terms(tagger.line([word])).keys, word


def test_the_tags_captioner_needs_an_embedder_and_rebuilds_from_its_name():
    with pytest.raises(CaptionerUnavailableError, match="embedder="):
        create_captioner("tags")
    with pytest.raises(CaptionerUnavailableError, match="number of tags"):
        create_captioner("tags:many", embedder=WordSpace(["dog"]))
    tagger = create_captioner("tags:2", embedder=WordSpace(["dog"]))
    assert isinstance(tagger, ZeroShotTagger) and tagger.k == 2 and tagger.name == "tags:2"


def test_plugir_describes_uncaptioned_candidates_from_their_stored_vectors():
    """The graph hands the tagger the gallery's vectors (no image file is opened: the paths do not
    exist), so the offline questioner asks about what tells uncaptioned photos apart."""
    from langgraph.checkpoint.memory import InMemorySaver

    from pictrieve.evaluation.interactive import WithoutCaptions
    from pictrieve.graphs.plugir import build_plugir_graph

    gallery = FakeGallery(["a dog on some grass", "a dog on a bench", "a dog on some grass", "a dog on a bench"])
    gallery.embedder = WordSpace(VOCAB.words)
    gallery.vectors = gallery.embedder.embed_texts(gallery.captions)
    photos = WithoutCaptions(gallery)
    assert all(not hit.captions for hit in photos.search_vector(gallery.vectors[0], k=4))
    tagger = ZeroShotTagger(photos.embedder, k=2, vocabulary=VOCAB)
    graph = build_plugir_graph(photos, captioner=tagger, checkpointer=InMemorySaver())
    state = graph.invoke({"description": "a dog"}, {"configurable": {"thread_id": "t"}},
                         context={"arm": "offline", "max_rounds": 1, "candidate_k": 4})
    question = state["__interrupt__"][0].value["question"]
    assert question in {"Is there a bench in the photo?", "Is there grass in the photo?"}, question
