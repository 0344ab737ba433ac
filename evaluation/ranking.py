"""The one exact ranker every evaluation uses: queries against every stored vector, with numpy.

Search in a gallery goes through Chroma's approximate HNSW index; evaluations instead score each
query against all stored image vectors (``gallery.embeddings()``), so a number never depends on the
index's recall. Ranks are tie-aware (:mod:`pictrieve.evaluation.retrieval`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from pictrieve.evaluation.retrieval import rank_statistics


class ExactRanker:
    """A gallery's vectors in memory (all, in ``gallery.ids()`` order, or those of ``ids``), for exact scoring."""

    def __init__(self, gallery: Any, ids: Sequence[str] | None = None) -> None:
        self.gallery = gallery
        self.ids: list[str] = list(ids) if ids is not None else gallery.ids()
        self.column = {id_: i for i, id_ in enumerate(self.ids)}
        self.vectors = gallery.embeddings(self.ids)

    def scores(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), n_images)`` cosine similarities of text queries to every image."""
        return self.gallery.embedder.embed_texts(list(texts)) @ self.vectors.T

    def top(self, texts: Sequence[str], k: int) -> np.ndarray:
        """Column indices of each query's ``k`` best images, best first (stable on ties)."""
        return np.argsort(-self.scores(texts), axis=1, kind="stable")[:, :k]

    def ranks(self, texts: Sequence[str], target_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Tie-aware ``ranks``, ``greater`` and ``ties`` of each query's target image."""
        targets = np.array([self.column[id_] for id_ in target_ids])
        return rank_statistics(self.scores(texts), targets)
