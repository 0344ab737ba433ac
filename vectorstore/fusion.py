"""Rank fusion: merge several rankings of the same gallery into one.

Reciprocal Rank Fusion (Cormack, Clarke & Buettcher, SIGIR 2009) scores every id by
``sum over rankings of w_r / (k + rank)`` with 1-based ranks and weight ``w_r = 1`` per ranking, so an
id that several rankings place near the top wins even when no single ranking agrees on it. ``k = 60``
is that paper's value; it damps the first positions. QC2 fuses the rankings of several sampled query
completions this way; VisRet fuses its per-image rankings (the authors' code uses ``k = 1``, see
:mod:`pictrieve.graphs.visret`); NEEDLE's aggregation (paper Eq. 4) is the weighted form, with a
learned trust weight per (embedder, guide image) ranking.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

from pictrieve.vectorstore.hits import ImageHit

Id = TypeVar("Id", bound=Hashable)

RRF_K = 60


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Id]], k: float = RRF_K, weights: Sequence[float] | None = None
) -> list[tuple[Id, float]]:
    """Fuse ``rankings`` (each a list of ids, best first) into ``[(id, score), ...]``, best first.

    ``weights`` (one per ranking, default 1) multiply each ranking's contributions. An id missing
    from a ranking contributes nothing for it; an id repeated within one ranking counts only at its
    best position. Ties keep the order in which ids were first seen, so the result is deterministic.
    """
    if k < 0:
        raise ValueError(f"RRF constant k must be >= 0, got {k}")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"got {len(weights)} weights for {len(rankings)} rankings")
    scores: dict[Id, float] = {}
    for ranking, weight in zip(rankings, weights):
        seen: set[Id] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + float(weight) / (k + rank)
    first_seen = {item: i for i, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda pair: (-pair[1], first_seen[pair[0]]))


def fuse_hits(
    rankings: Sequence[Sequence[ImageHit]],
    weights: Sequence[float] | None = None,
    *,
    k: int | None = None,
    rrf_k: float = RRF_K,
) -> list[ImageHit]:
    """Fuse rankings of hits by (weighted) reciprocal rank fusion into new hits, best first.

    Each returned hit is a copy of the first hit seen for its id, with ``score`` set to its fused
    score and ``rank`` to its new 1-based position; the input hits are never modified. ``k`` keeps
    the best ``k`` (all when ``None``); ``rrf_k`` is the RRF damping constant. Ranks are taken from
    each list's order, not from the hits' own ``rank`` fields.
    """
    first: dict[str, ImageHit] = {}
    for ranking in rankings:
        for hit in ranking:
            first.setdefault(hit.id, hit)
    fused = reciprocal_rank_fusion([[hit.id for hit in ranking] for ranking in rankings], k=rrf_k, weights=weights)
    if k is not None:
        fused = fused[: max(0, int(k))]
    # A fused score is no cosine: the inputs' relevance verdicts do not carry over (``None``: not judged).
    return [first[id_].model_copy(update={"score": score, "rank": rank, "relevant": None})
            for rank, (id_, score) in enumerate(fused, start=1)]
