"""Rank fusion: merge several rankings of the same gallery into one.

Reciprocal Rank Fusion (Cormack, Clarke & Buettcher, SIGIR 2009) scores every id by
``sum over rankings of 1 / (k + rank)`` with 1-based ranks, so an id that several rankings place
near the top wins even when no single ranking agrees on it. ``k = 60`` is the value from that paper;
it damps the influence of the very first positions. QC2 fuses the retrievals of several sampled
query completions this way; VisRet fuses its per-visualisation rankings the same way.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

Id = TypeVar("Id", bound=Hashable)

RRF_K = 60


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Id]], k: int = RRF_K) -> list[tuple[Id, float]]:
    """Fuse ``rankings`` (each a list of ids, best first) into ``[(id, score), ...]``, best first.

    An id missing from a ranking contributes nothing for it; an id repeated within one ranking
    counts only at its best position. Ties keep the order in which ids were first seen, so the result
    is deterministic.
    """
    if k < 0:
        raise ValueError(f"RRF constant k must be >= 0, got {k}")
    scores: dict[Id, float] = {}
    for ranking in rankings:
        seen: set[Id] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    first_seen = {item: i for i, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda pair: (-pair[1], first_seen[pair[0]]))
