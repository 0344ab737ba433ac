"""Intervals for paired comparisons: two systems measured on the same queries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def paired_bootstrap(baseline: Sequence[float], candidate: Sequence[float], *, samples: int = 10_000,
                     confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """Mean of ``candidate - baseline`` over paired queries, with a percentile bootstrap interval.

    Queries are resampled with replacement ``samples`` times (seeded); ``low``/``high`` bound the
    ``confidence`` interval of the mean difference. ``better``/``worse`` count the queries where the
    candidate scored higher/lower.
    """
    a = np.asarray(baseline, dtype=float)
    b = np.asarray(candidate, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError(f"paired scores need two equally long, non-empty lists; got {a.shape} and {b.shape}")
    diff = b - a
    picks = np.random.default_rng(seed).integers(0, len(diff), size=(samples, len(diff)))
    means = diff[picks].mean(axis=1)
    tail = (1.0 - confidence) / 2
    return {"baseline_mean": float(a.mean()), "candidate_mean": float(b.mean()), "difference": float(diff.mean()),
            "low": float(np.quantile(means, tail)), "high": float(np.quantile(means, 1 - tail)),
            "confidence": confidence, "queries": int(len(diff)),
            "better": int((diff > 0).sum()), "worse": int((diff < 0).sum())}
