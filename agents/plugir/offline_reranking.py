"""How the answers to offline PlugIR questions re-score the ranking.

Answers change the ranking both ways (:func:`answer_adjustments`): candidates whose description
implies a confirmed term gain ``confirm_weight``, those implying a denied one lose ``deny_weight``
(the graph scales both by the candidates' score spread; a "no" was what most answers were, and before
this it changed nothing). :func:`vector_evidence` is the same evidence read off the photos' own
vectors, for photos without a description (measured, off by default).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from pictrieve.agents.plugir.caption_terms import CaptionTerms, is_action, settled_by
from pictrieve.agents.plugir.offline_questions import with_article


def implies(terms: CaptionTerms, key: str) -> bool:
    """Whether a description's terms say ``key`` or something narrower ("a puppy" implies "dog" and
    "animal"; "a tennis ball" implies "ball")."""
    return key in settled_by(terms.keys)


def answer_adjustments(candidate_terms: Sequence[CaptionTerms | None], confirmed: Iterable[str],
                       denied: Iterable[str], *, confirm_weight: float, deny_weight: float,
                       trust: Sequence[float] | None = None) -> np.ndarray:
    """What the answers add to each candidate's score: ``+confirm_weight`` per confirmed term its
    description implies, ``-deny_weight`` per denied one, times the description's ``trust`` (1 for a
    stored caption, less for a captioner's guess). ``None`` terms (no description) get 0."""
    confirmed, denied = list(confirmed), list(denied)
    adjustments = np.zeros(len(candidate_terms))
    for i, terms in enumerate(candidate_terms):
        if terms is None:
            continue
        settled = settled_by(terms.keys)
        gain = confirm_weight * sum(k in settled for k in confirmed) - deny_weight * sum(k in settled for k in denied)
        adjustments[i] = gain * (1.0 if trust is None else trust[i])
    return adjustments


def term_phrase(key: str) -> str:
    """A term as a short phrase to embed: "a dog", "some grass", "someone jumping", "black dog"."""
    if " " not in key and is_action(key):
        return f"someone {key}"
    return with_article(key) if " " not in key else key


def vector_evidence(term_vectors: np.ndarray, image_vectors: np.ndarray) -> np.ndarray:
    """``(terms, images)``: each term's text-image similarity to each image, standardised over the
    images (how much more than the others an image looks like the term). Evidence that needs no
    description: the images' own vectors in the embedder's text-image space."""
    similarities = np.asarray(term_vectors, dtype=np.float64) @ np.asarray(image_vectors, dtype=np.float64).T
    spread = np.maximum(similarities.std(axis=1, keepdims=True), 1e-6)
    return (similarities - similarities.mean(axis=1, keepdims=True)) / spread
