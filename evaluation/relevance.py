"""A simulated person who judges search results by what the photos show, read from their captions.

NEEDLE learns its embedder trust from the results a person marks irrelevant (paper §5.1.2). Marking
"every shown photo but the one the caption was written for" is not what a person does: a photo of
another dog on another beach *is* what "a dog runs on the beach" asks for, and charging every
embedder for it punishes them all alike. :class:`CaptionJudge` marks a shown photo irrelevant when its
own captions (written by flickr8k's annotators) do not match the query: the best MiniLM cosine between
the query and any of the photo's captions is below ``threshold``.

The threshold is chosen on flickr8k-train, never on the evaluated photos, by :func:`choose_threshold`:
a caption should match the *other* captions of its own photo (other people describing what it shows)
and not the captions of a random other photo; the threshold maximises Youden's J (true-positive rate
minus false-positive rate) over those pairs. ``pictrieve eval needle-threshold`` runs it;
:data:`MATCH_THRESHOLD` is its result on flickr8k-train's "dev" rows (BENCHMARKS.md).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

MATCH_THRESHOLD = 0.448
"""Chosen on flickr8k-train "dev" rows by :func:`choose_threshold` (see the module docstring)."""


class CaptionJudge:
    """Marks shown photos irrelevant when none of their captions matches the query (MiniLM cosine).

    ``captions[image id]`` are each photo's captions. A photo whose captions include the query itself
    (the photo a caption query was written for) matches at cosine 1, so it is never marked.
    """

    def __init__(self, captions: Mapping[str, Sequence[str]], threshold: float = MATCH_THRESHOLD,
                 encoder: Any = None) -> None:
        if encoder is None:
            from pictrieve.tools.models.sentence_encoder import SentenceEncoder

            encoder = SentenceEncoder()
        self.captions = {id_: list(texts) for id_, texts in captions.items()}
        self.threshold = float(threshold)
        self.encoder = encoder
        self._vectors: dict[str, np.ndarray] = {}

    def _caption_vectors(self, image_id: str) -> np.ndarray:
        if image_id not in self._vectors:
            texts = self.captions.get(image_id)
            if not texts:
                raise KeyError(f"no captions for image {image_id!r}: the judge can only read captioned photos")
            self._vectors[image_id] = np.asarray(self.encoder.encode(texts), dtype=np.float32)
        return self._vectors[image_id]

    def match(self, query: str, image_ids: Sequence[str]) -> dict[str, float]:
        """``{image id: best cosine between the query and one of its captions}``."""
        if not image_ids:
            return {}
        todo = [id_ for id_ in dict.fromkeys(image_ids) if id_ not in self._vectors]
        if todo:  # one encoder call for every photo not seen yet
            texts = [t for id_ in todo for t in self.captions.get(id_) or []]
            if any(not self.captions.get(id_) for id_ in todo):
                missing = next(id_ for id_ in todo if not self.captions.get(id_))
                raise KeyError(f"no captions for image {missing!r}: the judge can only read captioned photos")
            vectors = np.asarray(self.encoder.encode(texts), dtype=np.float32)
            start = 0
            for id_ in todo:
                n = len(self.captions[id_])
                self._vectors[id_] = vectors[start:start + n]
                start += n
        q = np.asarray(self.encoder.encode([query]), dtype=np.float32)[0]
        return {id_: float(np.max(self._caption_vectors(id_) @ q)) for id_ in image_ids}

    def irrelevant(self, query: str, shown: Sequence[str]) -> list[str]:
        """The ids among ``shown`` (in their order) whose captions do not match ``query``."""
        scores = self.match(query, shown)
        return [id_ for id_ in shown if scores[id_] < self.threshold]


def choose_threshold(captions: Sequence[Sequence[str]], encoder: Any = None) -> dict[str, Any]:
    """The match threshold maximising Youden's J on ``captions`` (one list per photo, >= 2 each).

    For each photo its first caption is the query; the positive is the best cosine with its *other*
    captions, the negatives the best cosine with all captions of every other photo (the situation of a
    shown photo). Returns ``threshold``, ``tpr``, ``fpr``, ``j`` and the pair counts.
    """
    if encoder is None:
        from pictrieve.tools.models.sentence_encoder import SentenceEncoder

        encoder = SentenceEncoder()
    photos = [list(texts) for texts in captions if len(texts) >= 2]
    if len(photos) < 2:
        raise ValueError("choosing a threshold needs at least two photos with two captions or more")
    flat = [t for texts in photos for t in texts]
    vectors = np.asarray(encoder.encode(flat), dtype=np.float32)
    counts = np.array([len(texts) for texts in photos])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    queries = vectors[starts]
    sims = queries @ vectors.T  # (photos, captions)
    positives = np.array([sims[i, start + 1:start + n].max() for i, (start, n) in enumerate(zip(starts, counts))])
    best = np.maximum.reduceat(sims, starts, axis=1)  # (photos, photos): best caption of each photo
    negatives = best[~np.eye(len(photos), dtype=bool)]
    # The best cut sits at some positive's score (matching means score >= threshold).
    candidates = np.unique(positives)
    positives_sorted, negatives_sorted = np.sort(positives), np.sort(negatives)

    def rates(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (1.0 - np.searchsorted(positives_sorted, t, side="left") / len(positives),
                1.0 - np.searchsorted(negatives_sorted, t, side="left") / len(negatives))

    tpr, fpr = rates(candidates)
    # Rounded down to 3 decimals, so every pair matched at the best cut still matches.
    threshold = math.floor(float(candidates[int(np.argmax(tpr - fpr))]) * 1000) / 1000
    tpr, fpr = (float(r[0]) for r in rates(np.array([threshold])))
    return {"threshold": threshold, "tpr": tpr, "fpr": fpr, "j": tpr - fpr, "photos": len(photos),
            "positive_pairs": int(len(positives)), "negative_pairs": int(len(negatives)),
            "positive_median": float(np.median(positives)), "negative_median": float(np.median(negatives))}
