"""Zero-shot image tags: words for photos that have no caption, from any text-image embedder.

A photo is tagged with the vocabulary words (``prompts/image_tags.yaml``: everyday things and
actions) whose text embeddings are closest to its image embedding, in the embedder's own space:
the zero-shot classification CLIP is known for, over short words instead of class prompts. The
tags are written as a caption-like line, ``"a photo that may show a bench, some grass; someone
sitting"``, that reads well to a person or an LLM and that
:func:`pictrieve.agents.plugir.caption_terms.caption_terms` reads back into the same terms as a
human caption would give.

Why: PlugIR's offline questioner asks about what tells candidates' captions apart. On a gallery
without captions the ImageNet describer (``offline`` captioner) names fine-grained classes
("a Staffordshire Bull Terrier (0.14)") that no person describes a photo by. With the trained
``offline`` embedder, 0.28 of a flickr8k-dev photo's 4 tags occur in its human captions (0.48 of
the first; a random vocabulary word 0.02; the ImageNet describer's terms 0.11): BENCHMARKS.md,
"PlugIR on photos without captions" (``benchmarks/image_tags_precision.py``).

With stored image vectors (a gallery's rows) tagging is one matrix product; given images or paths it
embeds them first, as any :class:`~pictrieve.tools.models.captioner_base.CaptionerBase` captioner.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from PIL import Image

from pictrieve import prompts
from pictrieve.tools.models.captioner_base import CaptionerBase, CaptionerUnavailableError

TAGS = "tags"
DEFAULT_TAGS_PER_IMAGE = 4  # fixed a priori, between the 3 and 5 looked at (not tuned on flickr8k-dev)


@dataclass(frozen=True)
class TagVocabulary:
    """The words images are tagged with and how each is phrased for the embedder and the caption."""

    things: tuple[str, ...]
    actions: tuple[str, ...]
    mass_nouns: frozenset[str]
    phrase: str
    action_phrase: str
    prefix: str

    @property
    def words(self) -> tuple[str, ...]:
        return self.things + self.actions

    def phrases(self) -> list[str]:
        """One short phrase per word, in :attr:`words` order ("a dog", "some grass", "someone running")."""
        return [self.phrase_of(word) for word in self.words]

    @functools.cached_property
    def action_set(self) -> frozenset[str]:
        return frozenset(self.actions)

    def phrase_of(self, word: str) -> str:
        if word in self.action_set:
            return self.action_phrase.format(word=word)
        article = "some" if word in self.mass_nouns else ("an" if word[0] in "aeiou" else "a")
        return self.phrase.format(a=article, word=word)


@functools.lru_cache(maxsize=1)
def default_vocabulary() -> TagVocabulary:
    """The packaged vocabulary (``prompts/image_tags.yaml``)."""
    data = prompts.data("image_tags")
    things = tuple(dict.fromkeys(data["things"]))
    actions = tuple(w for w in dict.fromkeys(data["actions"]) if w not in things)
    return TagVocabulary(things=things, actions=actions, mass_nouns=frozenset(data["mass_nouns"]),
                         phrase=data["phrase"], action_phrase=data["action_phrase"], prefix=data["prefix"])


class ZeroShotTagger(CaptionerBase):
    """Tags images with the vocabulary words closest to them in ``embedder``'s text-image space.

    ``embedder`` must embed both texts and images into one space (``offline``, ``open_clip:...``);
    ``k`` tags per image, things and actions ranked together.
    """

    def __init__(self, embedder: Any, *, k: int = DEFAULT_TAGS_PER_IMAGE,
                 vocabulary: TagVocabulary | None = None) -> None:
        if embedder is None:
            raise CaptionerUnavailableError(
                "the 'tags' captioner tags images in a text-image embedder's space: pass embedder= "
                "(the gallery's embedder, e.g. create_embedder('offline'))")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.embedder = embedder
        self.k = k
        self.name = TAGS if k == DEFAULT_TAGS_PER_IMAGE else f"{TAGS}:{k}"  # create_captioner rebuilds it
        self.vocabulary = vocabulary or default_vocabulary()
        self._word_vectors: np.ndarray | None = None

    @property
    def word_vectors(self) -> np.ndarray:
        """``(words, dim)`` unit text embeddings of the vocabulary's phrases (computed once)."""
        if self._word_vectors is None:
            self._word_vectors = np.asarray(self.embedder.embed_texts(self.vocabulary.phrases()), dtype=np.float32)
        return self._word_vectors

    def tags_of_vectors(self, vectors: np.ndarray) -> list[list[str]]:
        """The ``k`` best words for each row of ``vectors`` (image embeddings of ``embedder``), best first."""
        vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, self.word_vectors.shape[1])
        scores = vectors @ self.word_vectors.T
        k = min(self.k, scores.shape[1])
        best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        words = self.vocabulary.words
        return [[words[j] for j in row] for row in best]

    def describe_vectors(self, vectors: np.ndarray) -> list[str]:
        """One caption-like line per image vector, e.g. ``"a photo that may show a bench; someone sitting"``."""
        return [self.line(tags) for tags in self.tags_of_vectors(vectors)]

    def line(self, tags: Sequence[str]) -> str:
        actions = self.vocabulary.action_set
        things = ", ".join(self.vocabulary.phrase_of(t) for t in tags if t not in actions)
        doing = ", ".join(self.vocabulary.phrase_of(t) for t in tags if t in actions)
        return self.vocabulary.prefix + "; ".join(part for part in (things, doing) if part)

    def _caption_images(self, images: list[Image.Image], prompt: str | None) -> list[str]:
        del prompt  # tags follow no instruction
        return self.describe_vectors(self.embedder.embed_images(images))
