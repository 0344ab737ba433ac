"""Guide-image anomaly detection (NEEDLE §5.2): drop generated guides that do not look like the rest.

A text-to-image model sometimes draws the wrong thing; one bad guide then pulls its neighbours into
the results. For each embedder the guides' vectors are reduced to a few dimensions (UMAP, as in the
paper), each guide gets a Local Outlier Factor (about 1 for an inlier, larger when its neighbourhood
is sparser than its neighbours'), the factors are summed with the embedders' trust weights, and
guides scoring above ``tau`` are dropped.

The paper gives neither the UMAP dimension nor the neighbourhood sizes, and both UMAP (15
neighbours by default) and LOF (20) are degenerate with the paper's 4 guides. Our choices:
LOF neighbours = max(1, min(m - 2, m // 2 + 1)) (2 for 4 guides: an outlier's neighbours are
inliers while the inliers' neighbours are each other); nothing is screened below 3 guides; at least
one guide (the least outlying) is always kept. The reduction defaults to **PCA**, not UMAP: on
planted outliers (7 clustered guides + 1 random, and 15 + 1) LOF after PCA flagged the outlier
every time, while UMAP (2-5 neighbours) spread the inliers apart or pulled the outlier in and hid
it; UMAP models a manifold from many points, and a query has a handful. ``reducer="umap"`` keeps
the paper's choice available (needs ``pip install 'pictrieve[needle]'``). Three dimensions, not
two: with 8 guides, 2 PCA dimensions made one inlier look outlying in one of three seeds.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)

DEFAULT_TAU = 1.5


@dataclass(frozen=True)
class Screening:
    """The outcome for ``m`` guides: which are kept and each one's weighted outlier score."""

    kept: list[int]
    dropped: list[int]
    scores: list[float]
    reducer: str


REDUCERS = ("pca", "umap", "none")


def reduce(vectors: np.ndarray, dims: int = 2, *, reducer: str = "pca", seed: int = 0) -> np.ndarray:
    """``vectors`` (m, d) in at most ``dims`` dimensions by ``reducer`` (``"none"``: unchanged)."""
    if reducer not in REDUCERS:
        raise ValueError(f"reducer must be one of {', '.join(REDUCERS)}, got {reducer!r}")
    m = len(vectors)
    dims = max(1, min(dims, m - 1, vectors.shape[1]))
    if reducer == "none":
        return vectors
    if reducer == "umap":
        try:
            import umap
        except ImportError as exc:
            raise ImportError("reducer='umap' needs umap-learn: pip install 'pictrieve[needle]'") from exc
        model = umap.UMAP(n_components=dims, n_neighbors=max(2, min(15, m - 1)), random_state=seed, init="random")
        return np.asarray(model.fit_transform(vectors), dtype=np.float64)
    centred = vectors - vectors.mean(axis=0, keepdims=True)
    _, _, basis = np.linalg.svd(centred, full_matrices=False)
    return centred @ basis[:dims].T


def outlier_factors(points: np.ndarray, neighbours: int | None = None) -> np.ndarray:
    """Local Outlier Factor of each point (about 1 = inlier, larger = outlier)."""
    from sklearn.neighbors import LocalOutlierFactor

    m = len(points)
    neighbours = max(1, min(m - 2, m // 2 + 1)) if neighbours is None else max(1, min(neighbours, m - 1))
    lof = LocalOutlierFactor(n_neighbors=neighbours)
    lof.fit(points)
    return -lof.negative_outlier_factor_  # sklearn stores the negated factor


def screen_guides(
    vectors: Mapping[str, np.ndarray],
    weights: Mapping[str, float],
    *,
    tau: float = DEFAULT_TAU,
    dims: int = 3,
    neighbours: int | None = None,
    reducer: str = "pca",
    seed: int = 0,
) -> Screening:
    """Screen ``m`` guides given ``vectors[embedder] = (m, dim)`` and trust ``weights[embedder]``."""
    sizes = {len(v) for v in vectors.values()}
    if len(sizes) != 1:
        raise ValueError(f"every embedder must embed the same guides, got counts {sorted(sizes)}")
    m = sizes.pop()
    if m < 3:  # LOF needs neighbours that have neighbours
        return Screening(kept=list(range(m)), dropped=[], scores=[1.0] * m, reducer="none")
    total = sum(weights.get(name, 0.0) for name in vectors) or 1.0
    scores = np.zeros(m)
    for name, matrix in vectors.items():
        points = reduce(np.asarray(matrix, dtype=np.float64), dims, reducer=reducer, seed=seed)
        scores += weights.get(name, 0.0) / total * outlier_factors(points, neighbours)
    dropped = [j for j in range(m) if scores[j] > tau]
    if len(dropped) == m:  # never drop every guide: keep the least outlying
        dropped.remove(int(np.argmin(scores)))
    if dropped:
        logger.info("dropping outlying guides %s (scores %s, tau %.2f)", dropped, np.round(scores, 2).tolist(), tau)
    kept = [j for j in range(m) if j not in dropped]
    return Screening(kept=kept, dropped=dropped, scores=[float(s) for s in scores], reducer=reducer)
