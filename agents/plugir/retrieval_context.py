"""Retrieval context extraction (RCE), Algorithm 1 of PlugIR, on plain numpy arrays.

Given the top-n candidates of the current query, cluster them into ``m`` groups (K-means on unit
vectors, i.e. cosine geometry) and keep from each group its most *distinctive* member: the one
whose similarity distribution over all candidates, ``softmax(sim(probe_i, candidates))``, has the
lowest entropy. A peaked distribution means the member's content singles out a few candidates
(a concrete, discriminative caption such as "a desk with two monitors and a keyboard") rather
than matching everything alike ("home office"). The captions of these representatives become the
"retrieval candidates" the questioner reads.

The probe of a candidate is its caption's text embedding when it has one (as in the authors'
code), else its own image embedding. Softmax uses raw cosine similarities, as in the paper.
"""

from __future__ import annotations

import numpy as np

DEFAULT_CLUSTERS = 10


def softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis`` (float64)."""
    scores = np.asarray(scores, dtype=np.float64)
    shifted = scores - scores.max(axis=axis, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=axis, keepdims=True)


def entropy(probabilities: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy (nats) along ``axis``."""
    p = np.asarray(probabilities, dtype=np.float64)
    return -(p * np.log(np.clip(p, 1e-300, None))).sum(axis=axis)


def similarity_entropies(probes: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Entropy of ``softmax(probes @ candidates.T)`` per probe row."""
    return entropy(softmax(np.asarray(probes) @ np.asarray(candidates).T, axis=1), axis=1)


def cluster_candidates(candidates: np.ndarray, clusters: int = DEFAULT_CLUSTERS,
                       seed: int = 0) -> np.ndarray:
    """K-means labels of unit ``candidates`` (cosine K-means); ``min(clusters, n)`` groups."""
    from sklearn.cluster import KMeans

    vectors = _unit_rows(candidates)
    n = len(vectors)
    k = max(1, min(int(clusters), n))
    if k == 1:
        return np.zeros(n, dtype=int)
    return KMeans(n_clusters=k, n_init=4, random_state=seed).fit_predict(vectors)


def select_representatives(
    candidates: np.ndarray,
    probes: np.ndarray | None = None,
    *,
    clusters: int = DEFAULT_CLUSTERS,
    seed: int = 0,
) -> list[int]:
    """Indices (into ``candidates``) of the lowest-entropy member of each cluster.

    ``candidates`` are the top-n image embeddings in rank order; ``probes`` (same length) the
    vectors whose similarity distributions are compared, by default the candidates themselves.
    The result is in candidate rank order, one index per non-empty cluster.
    """
    candidates = _unit_rows(candidates)
    if len(candidates) == 0:
        return []
    probes = candidates if probes is None else _unit_rows(probes)
    if probes.shape != candidates.shape:
        raise ValueError(f"probes {probes.shape} must match candidates {candidates.shape}")
    labels = cluster_candidates(candidates, clusters, seed)
    entropies = similarity_entropies(probes, candidates)
    chosen = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        chosen.append(int(members[np.argmin(entropies[members])]))
    return sorted(chosen)


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2:
        raise ValueError(f"expected a 2-D array of row vectors, got shape {vectors.shape}")
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
