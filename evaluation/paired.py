"""Paired bootstrap intervals for per-query differences (the same queries measured two ways).

Every claim that a method helps is a paired comparison on the same queries: resample the queries
with replacement, take the mean difference each time, and report the 2.5th and 97.5th percentiles.
"""

from __future__ import annotations

import numpy as np


def paired_bootstrap(differences: np.ndarray, *, samples: int = 10_000, seed: int = 0,
                     level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the mean of per-query ``differences`` with a percentile interval."""
    values = np.asarray(differences, dtype=np.float64).reshape(-1)
    if values.size == 0:
        raise ValueError("no paired differences to bootstrap")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, (samples, values.size))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(values.mean()), float(low), float(high)
