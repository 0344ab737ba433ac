"""NEEDLE's retrieval step: every (embedder, guide) pair ranks the gallery, then trust-weighted fusion."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pictrieve.agents.needle.aggregation import aggregate_rankings


def guide_rankings(
    views: Mapping[str, Any],
    guide_vectors: Mapping[str, np.ndarray],
    *,
    depth: int,
    tiles: bool = False,
    tiles_per_image: int = 4,
    tile_indexes: Mapping[str, Any] | None = None,
) -> dict[str, list[list[str]]]:
    """``{embedder: [image ids ranked for guide 1, guide 2, ...]}``, each ``depth`` long at most.

    ``views[embedder]`` is the gallery seen through that embedder and ``guide_vectors[embedder]`` the
    guides embedded by it, ``(m, dim)``. With ``tiles`` the embedder's tiles are searched too and an
    image ranks by its best tile or its whole image, whichever matches better, so images not tiled
    yet (an interrupted `pictrieve tile`) still take part. ``tile_indexes[embedder]`` reuses
    :class:`~pictrieve.vectorstore.tiles.TileIndex` objects across queries (each new one looks its
    collection up again).
    """
    from concurrent.futures import ThreadPoolExecutor

    # One batched k-NN query per collection, run concurrently: 158 -> 69 ms p50 for 4 guides x 3
    # embedders with tiles (BENCHMARKS.md), so Chroma's searches overlap.
    tile_indexes = tile_indexes or {}
    jobs = {(name, "images"): (views[name].rank_ids, (vectors, depth)) for name, vectors in guide_vectors.items()}
    if tiles:
        jobs.update({(name, "tiles"): ((tile_indexes.get(name) or views[name].tiles()).rank_ids,
                                        (vectors, depth, tiles_per_image))
                     for name, vectors in guide_vectors.items()})
    with ThreadPoolExecutor(max_workers=min(8, len(jobs)) or 1) as pool:
        futures = {key: pool.submit(function, *args) for key, (function, args) in jobs.items()}
        found = {key: future.result() for key, future in futures.items()}
    rankings: dict[str, list[list[str]]] = {}
    for name in guide_vectors:
        whole = found[(name, "images")]
        if not tiles:
            rankings[name] = [[id_ for id_, _ in ranking] for ranking in whole]
        else:
            rankings[name] = [_best_of(a, b, depth) for a, b in zip(whole, found[(name, "tiles")])]
    return rankings


def _best_of(first: list[tuple[str, float]], second: list[tuple[str, float]], depth: int) -> list[str]:
    """Ids of two scored lists merged by each id's best score, best first (ties: first list first)."""
    best: dict[str, float] = {}
    for id_, score in first + second:
        best[id_] = max(score, best.get(id_, score))
    order = {id_: i for i, id_ in enumerate(best)}
    return sorted(best, key=lambda id_: (-best[id_], order[id_]))[:depth]


def fuse(rankings: Mapping[str, list[list[str]]], weights: Mapping[str, float], k: int,
         exclude: set[str] | None = None) -> list[tuple[str, float]]:
    """The ``k`` best ``(image id, score)`` by Eq. 4, leaving out ``exclude``."""
    fused = aggregate_rankings(rankings, weights)
    if exclude:
        fused = [pair for pair in fused if pair[0] not in exclude]
    return fused[:k]
