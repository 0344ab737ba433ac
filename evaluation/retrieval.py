"""Tie-aware retrieval metrics: Recall@K and median rank from a query-by-item similarity matrix.

Each query has exactly one target item. When several items score exactly the same as the target
(common for embedders that give identical vectors to images with identical descriptions), the
target's rank is not defined by the scores alone; counting ties in the target's favour would reward
a model for saying nothing. We instead use the *expected* value under random tie-breaking:

- ``greater``: items scoring strictly higher than the target; ``ties``: other items scoring equal;
- expected rank ``1 + greater + ties / 2``;
- Recall@K is the probability that the target lands in the top K,
  ``clip((K - greater) / (ties + 1), 0, 1)``, averaged over queries.

Without ties these are the usual rank and Recall@K.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

RankStats = Mapping[str, np.ndarray]


def rank_statistics(similarities: np.ndarray, targets: np.ndarray) -> dict[str, np.ndarray]:
    """Per-query ``greater``, ``ties`` and expected ``ranks`` (1-based) of each target.

    ``similarities`` is ``(n_queries, n_items)`` (higher = more similar); ``targets`` holds the
    index of each query's target item.
    """
    scores = np.asarray(similarities)
    targets = np.asarray(targets, dtype=np.int64)
    if scores.ndim != 2 or targets.shape != (scores.shape[0],):
        raise ValueError(
            f"expected similarities (n_queries, n_items) and targets (n_queries,), "
            f"got {scores.shape} and {targets.shape}"
        )
    if targets.size and (targets.min() < 0 or targets.max() >= scores.shape[1]):
        raise ValueError(f"targets must index items 0..{scores.shape[1] - 1}")
    if np.isnan(scores).any():
        raise ValueError("similarities contain NaN; check the embeddings")
    target_scores = np.take_along_axis(scores, targets[:, None], axis=1)
    greater = (scores > target_scores).sum(axis=1)
    ties = (scores == target_scores).sum(axis=1) - 1  # the target itself is not a tie
    return {"greater": greater, "ties": ties, "ranks": 1.0 + greater + ties / 2.0}


def recall_at(stats: RankStats | np.ndarray, k: int) -> float:
    """Mean probability that the target is in the top ``k``.

    Takes :func:`rank_statistics` output (tie-aware) or a plain array of integer ranks.
    """
    if isinstance(stats, Mapping):
        greater = np.asarray(stats["greater"], dtype=np.float64)
        ties = np.asarray(stats["ties"], dtype=np.float64)
        hit = np.clip((k - greater) / (ties + 1.0), 0.0, 1.0)
    else:
        hit = (np.asarray(stats) <= k).astype(np.float64)
    return float(hit.mean()) if hit.size else float("nan")


def median_rank(stats: RankStats | np.ndarray) -> float:
    """Median of the (expected) target ranks."""
    ranks = stats["ranks"] if isinstance(stats, Mapping) else np.asarray(stats)
    return float(np.median(ranks)) if len(ranks) else float("nan")


def retrieval_metrics(
    similarities: np.ndarray, targets: np.ndarray, ks: Iterable[int] = (1, 5, 10)
) -> dict[str, float]:
    """``{"recall@1": ..., "recall@5": ..., "recall@10": ..., "median_rank": ..., "mean_rank": ...,
    "queries": n}`` for one-target-per-query retrieval, with ties handled as expected values."""
    stats = rank_statistics(similarities, targets)
    metrics: dict[str, float] = {f"recall@{k}": recall_at(stats, k) for k in ks}
    metrics["median_rank"] = median_rank(stats)
    metrics["mean_rank"] = float(stats["ranks"].mean()) if len(stats["ranks"]) else float("nan")
    metrics["queries"] = int(len(stats["ranks"]))
    return metrics
