"""Metrics for interactive retrieval: best rank, BRI, Hits@K and Recall@K per round.

Input everywhere is a ``(queries, rounds)`` array of the target's 1-based rank at rounds
``0..T`` (round 0 = the initial description alone).

- Best rank (PlugIR, Definition 1): ``pi_t = min(R_0, ..., R_t)``, the best the user has seen.
- BRI, Best log Rank Integral (Definition 2), lower is better::

      BRI = mean_q [ (log pi_0 + log pi_T) / (2T) + (1/T) * sum_{t=1}^{T-1} log pi_t ]

  the trapezoidal area under the ``log pi_t`` curve over ``t in [0, T]``, divided by ``T``
  (natural log, as the paper's Appendix B examples show: ranks 100,10,10 give 2.9).
- Hits@K at round t: the target was in the top K at *some* round ``<= t``.
- Recall@K at round t: the target is in the top K *at* round t.

Ranks may be non-integer expected ranks (tie-aware, see :mod:`pictrieve.evaluation.retrieval`).
With ties, pass the ``greater``/``ties`` counts to :func:`hits_at_k` and :func:`recall_at_k`: each
round's chance of being in the top K is then the tie-aware probability, and Hits@K takes the best
round so far, so at round 0 Hits@K and Recall@K are the same number.
"""

from __future__ import annotations

import numpy as np


def _rank_matrix(ranks: np.ndarray) -> np.ndarray:
    ranks = np.asarray(ranks, dtype=np.float64)
    if ranks.ndim == 1:
        ranks = ranks[None, :]
    if ranks.ndim != 2 or ranks.shape[1] < 1:
        raise ValueError(f"expected ranks shaped (queries, rounds), got {ranks.shape}")
    if np.any(ranks < 1) or np.isnan(ranks).any():
        raise ValueError("ranks are 1-based: every rank must be >= 1")
    return ranks


def best_ranks(ranks: np.ndarray) -> np.ndarray:
    """``pi_t``: running minimum of the ranks over rounds, per query."""
    return np.minimum.accumulate(_rank_matrix(ranks), axis=1)


def bri_per_query(ranks: np.ndarray) -> np.ndarray:
    """BRI of each query (``rounds >= 2``, i.e. a budget ``T >= 1``)."""
    log_best = np.log(best_ranks(ranks))
    budget = log_best.shape[1] - 1
    if budget < 1:
        raise ValueError("BRI needs round 0 and at least one more round (T >= 1)")
    ends = (log_best[:, 0] + log_best[:, -1]) / (2 * budget)
    middle = log_best[:, 1:-1].sum(axis=1) / budget
    return ends + middle


def bri(ranks: np.ndarray) -> float:
    """Best log Rank Integral over all queries (lower is better)."""
    return float(bri_per_query(ranks).mean())


def in_top_k(greater: np.ndarray, ties: np.ndarray, k: int = 10) -> np.ndarray:
    """Per query and round, the probability that the target is in the top ``k`` under random
    tie-breaking: ``clip((k - greater) / (ties + 1), 0, 1)`` (1 or 0 when there are no ties)."""
    greater = np.asarray(greater, dtype=np.float64)
    ties = np.asarray(ties, dtype=np.float64)
    return np.clip((k - greater) / (ties + 1.0), 0.0, 1.0)


def hits_at_k(ranks: np.ndarray, k: int = 10, *, greater: np.ndarray | None = None,
              ties: np.ndarray | None = None) -> np.ndarray:
    """Hits@K per round: fraction of queries in the top ``k`` at some round so far.

    Without tie counts a query counts when its best rank so far is within ``k``; with ``greater``
    and ``ties`` (same shape as ``ranks``) it counts with its best round's tie-aware probability.
    """
    if greater is None or ties is None:
        return (best_ranks(ranks) <= k).mean(axis=0)
    return np.maximum.accumulate(in_top_k(greater, ties, k), axis=1).mean(axis=0)


def recall_at_k(ranks: np.ndarray, k: int = 10, *, greater: np.ndarray | None = None,
                ties: np.ndarray | None = None) -> np.ndarray:
    """Recall@K per round: fraction of queries in the top ``k`` at that round (tie-aware with counts)."""
    if greater is None or ties is None:
        return (_rank_matrix(ranks) <= k).mean(axis=0)
    return in_top_k(greater, ties, k).mean(axis=0)
