"""Tie-aware retrieval metrics (Recall@K, median rank): re-exported from :mod:`pictrieve.tools.retrieval_metrics`.

They moved below ``evaluation`` because training the offline embedder's head (a tool) measures its
held-out Recall@10 with them; ``from pictrieve.evaluation.retrieval import recall_at`` keeps working.
"""

from pictrieve.tools.retrieval_metrics import (  # noqa: F401  (re-exported)
    median_rank,
    rank_statistics,
    recall_at,
    retrieval_metrics,
)

__all__ = ["median_rank", "rank_statistics", "recall_at", "retrieval_metrics"]
