"""Discretise continuous quality scores into levels by percentiles of the gallery's distribution.

QC2 (Sec. 3.3, Eq. 4-5) maps each score ``r_i`` to Low when ``r_i <= perc(r, 33)``, High when
``r_i > perc(r, 66)``, Medium otherwise, where ``perc`` is the linear-interpolation percentile on the
sorted scores (``xi = p / 100 * (n - 1)``). With five levels we cut at the 20th/40th/60th/80th
percentiles in the same way. In general a score's level index is the number of thresholds it
exceeds, which reduces to Eq. 4 for three levels.

Some scorers are "lower is better" (BRISQUE); their scores are negated before discretising so that
High always means better.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

THREE_LEVELS = ("Low", "Medium", "High")
FIVE_LEVELS = ("Very Low", "Low", "Medium", "High", "Very High")
LEVEL_NAMES = {3: THREE_LEVELS, 5: FIVE_LEVELS}
# Paper: p1 = 33, p2 = 66 for three levels; evenly spaced cuts for five.
DEFAULT_PERCENTILES = {3: (33.0, 66.0), 5: (20.0, 40.0, 60.0, 80.0)}

_ALIASES = {
    "very low": "Very Low", "very-low": "Very Low", "very_low": "Very Low", "verylow": "Very Low",
    "vl": "Very Low",
    "low": "Low", "l": "Low",
    "medium": "Medium", "median": "Medium", "med": "Medium", "mid": "Medium", "m": "Medium",
    "high": "High", "h": "High",
    "very high": "Very High", "very-high": "Very High", "very_high": "Very High",
    "veryhigh": "Very High", "vh": "Very High",
}


def percentile(values: Sequence[float] | np.ndarray, p: float) -> float:
    """The ``p``-th percentile of ``values`` by linear interpolation between sorted neighbours (Eq. 5)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if ordered.size == 0:
        raise ValueError("cannot take a percentile of no scores")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {p}")
    xi = p / 100.0 * (ordered.size - 1)
    lower = math.floor(xi)
    if lower + 1 >= ordered.size:
        return float(ordered[lower])
    return float(ordered[lower] + (xi - lower) * (ordered[lower + 1] - ordered[lower]))


def normalize_level(name: str, levels: Sequence[str] = THREE_LEVELS) -> str:
    """Map a user spelling (``high``, ``H``, ``very-low``, ``VL``) to one of ``levels``."""
    canonical = _ALIASES.get(" ".join(str(name).strip().lower().split()))
    if canonical is None or canonical not in levels:
        raise ValueError(f"unknown level {name!r}; choose one of: {', '.join(levels)}")
    return canonical


@dataclass(frozen=True)
class AxisLevels:
    """Level thresholds of one quality axis, fitted on a gallery's scores.

    ``axis`` is the name used in the prompt ("Relevance", "Aesthetic", "Quality"); ``score_key`` the
    metadata key the scores come from; ``thresholds`` are on the oriented score (negated when
    ``higher_is_better`` is false), one fewer than ``levels``.
    """

    axis: str
    score_key: str
    levels: tuple[str, ...]
    percentiles: tuple[float, ...]
    thresholds: tuple[float, ...]
    higher_is_better: bool = True

    @classmethod
    def fit(
        cls,
        axis: str,
        scores: Sequence[float] | np.ndarray,
        *,
        score_key: str | None = None,
        n_levels: int = 3,
        percentiles: Sequence[float] | None = None,
        higher_is_better: bool = True,
    ) -> "AxisLevels":
        """Fit thresholds on ``scores`` (the whole gallery's distribution)."""
        if n_levels not in LEVEL_NAMES:
            raise ValueError(f"n_levels must be one of {sorted(LEVEL_NAMES)}, got {n_levels}")
        cuts = tuple(float(p) for p in (percentiles or DEFAULT_PERCENTILES[n_levels]))
        if len(cuts) != n_levels - 1 or list(cuts) != sorted(cuts):
            raise ValueError(f"need {n_levels - 1} increasing percentiles for {n_levels} levels, got {cuts}")
        oriented = _orient(scores, higher_is_better)
        if not np.all(np.isfinite(oriented)):
            raise ValueError(f"{axis}: scores contain NaN or infinity")
        return cls(
            axis=axis,
            score_key=score_key or axis.lower(),
            levels=LEVEL_NAMES[n_levels],
            percentiles=cuts,
            thresholds=tuple(percentile(oriented, p) for p in cuts),
            higher_is_better=higher_is_better,
        )

    def level_indices(self, scores: Sequence[float] | np.ndarray) -> np.ndarray:
        """Level index per score: how many thresholds the (oriented) score strictly exceeds."""
        oriented = _orient(scores, self.higher_is_better)
        return np.searchsorted(np.asarray(self.thresholds), oriented, side="left")

    def assign(self, scores: Sequence[float] | np.ndarray) -> list[str]:
        """Level name per score."""
        return [self.levels[i] for i in self.level_indices(scores)]

    def normalize(self, name: str) -> str:
        return normalize_level(name, self.levels)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "AxisLevels":
        fields = dict(data)
        for key in ("levels", "percentiles", "thresholds"):
            fields[key] = tuple(fields[key])
        return cls(**fields)


def _orient(scores: Sequence[float] | np.ndarray, higher_is_better: bool) -> np.ndarray:
    values = np.asarray(scores, dtype=np.float64).ravel()
    return values if higher_is_better else -values
