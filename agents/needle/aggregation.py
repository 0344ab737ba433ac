"""Trust-weighted rank aggregation (NEEDLE, paper Eq. 4).

Every (embedder, guide image) pair ranks the gallery. An image's score is

    score(I) = sum over embedders i, guides j of  w_i * S(rank of I in R_j^i),   S(r) = 1/r for r <= depth

with ``w_i`` the embedder's trust weight for the query's topic. This is reciprocal rank without
RRF's damping constant, as in the paper and the authors' code. The paper's Eq. 4 leaves the guide
index unbound; like the authors' code we sum over every (embedder, guide) list.

Tiles are mapped to images *before* aggregation: within one list an image takes the rank of its
best tile (so "an image scores as its best tile" per list). The authors' code aggregates tiles first
and maps to images afterwards; both are readings of "max over tiles", ours lets every image appear
once per list.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

Id = TypeVar("Id", bound=Hashable)


def position_score(rank: int, depth: int | None = None) -> float:
    """The paper's S(r): ``1 / r`` for 1-based ``rank <= depth`` (any rank when ``depth`` is None), else 0."""
    if rank < 1:
        raise ValueError(f"ranks are 1-based, got {rank}")
    return 0.0 if depth is not None and rank > depth else 1.0 / rank


def dedupe(ranking: Sequence[Id]) -> list[Id]:
    """``ranking`` with repeats dropped (an item keeps its best position: tiles -> images)."""
    seen: set[Id] = set()
    return [item for item in ranking if not (item in seen or seen.add(item))]


def aggregate_rankings(
    rankings: Mapping[str, Sequence[Sequence[Id]]],
    weights: Mapping[str, float],
    *,
    depth: int | None = None,
) -> list[tuple[Id, float]]:
    """Fuse ``rankings[embedder] = [ranking per guide, ...]`` into ``[(id, score)]``, best first.

    ``weights[embedder]`` is the trust weight (missing embedders weigh 0). Ties keep the order in
    which ids were first seen, as Python's stable sort does in the authors' code.
    """
    scores: dict[Id, float] = {}
    for embedder, lists in rankings.items():
        weight = float(weights.get(embedder, 0.0))
        for ranking in lists:
            for rank, item in enumerate(dedupe(ranking), start=1):
                if depth is not None and rank > depth:
                    break
                scores[item] = scores.get(item, 0.0) + weight * position_score(rank)
    first_seen = {item: i for i, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda pair: (-pair[1], first_seen[pair[0]]))
