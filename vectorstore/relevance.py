"""Whether a search hit matches its query well: each embedder's calibrated score cutoff.

A plain search always returns ``k`` photos, whether or not any shows what was asked. Each hit
therefore carries ``relevant``: ``score >= threshold``, where ``threshold`` is a cosine similarity
chosen for the embedder on captioned photos (:func:`choose_threshold`):

- *present* scores: each caption as a query, scored against its own photo (a photo that is there
  and should be found);
- *absent* scores: queries about things no photo of the folder shows (``evaluation/data/
  absent_queries.jsonl``, each checked against every caption), each query's *best* score over the
  folder's photos (the score that would make the search claim a match).

The threshold maximises balanced accuracy: (share of present scores at or above it + share of absent
best scores below it) / 2, the midpoint between the two neighbouring scores at the optimum.

Where the cutoff comes from, first found wins:

1. the gallery's own record (``relevance-cutoff:EMBEDDER`` in its JSON record store), written by
   ``pictrieve calibrate`` (:func:`store_cutoff`);
2. the cutoffs shipped with the package (``relevance_cutoffs.json`` beside this module; the offline
   default embedder's, computed on flickr8k-train by that command);
3. for an embedder with neither, the *relative* fallback: a hit is relevant when its score is within
   :data:`RELATIVE_MARGIN` of the best score of the same search. It never says "nothing matches"
   (no absolute floor is known for an uncalibrated model): run ``pictrieve calibrate`` for that.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from pictrieve.vectorstore.errors import GalleryError
from pictrieve.vectorstore.hits import ImageHit

logger = logging.getLogger(__name__)

RECORD_PREFIX = "relevance-cutoff:"
"""Key prefix of the per-embedder cutoff records in a gallery's JSON record store."""

SHIPPED_FILE = Path(__file__).with_name("relevance_cutoffs.json")

RELATIVE_MARGIN = 0.05
"""Fallback for an uncalibrated embedder: hits within this cosine of the search's best are relevant."""

CRITERION = "max balanced accuracy (present: caption -> own photo; absent: best score of an absent query)"


@dataclass(frozen=True)
class RelevanceCutoff:
    """How one embedder's hits are judged: ``threshold`` (a cosine) or, when ``None``, the relative rule."""

    embedder: str
    threshold: float | None
    source: str
    """``gallery`` (calibrated for this gallery), ``shipped`` (with the package) or ``relative`` (fallback)."""
    stats: dict[str, Any] = field(default_factory=dict)

    def judge(self, scores: Sequence[float]) -> list[bool]:
        """``relevant`` for each score of one search (best first or in any order)."""
        if not len(scores):
            return []
        if self.threshold is None:
            best = max(scores)
            return [float(s) >= best - RELATIVE_MARGIN for s in scores]
        return [float(s) >= self.threshold for s in scores]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def record_key(embedder: str) -> str:
    return RECORD_PREFIX + embedder


@lru_cache(maxsize=1)
def shipped_cutoffs() -> dict[str, dict[str, Any]]:
    """The cutoffs that ship with the package, by embedder name (empty when the file is missing)."""
    try:
        return dict(json.loads(SHIPPED_FILE.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}


def cutoff_from_records(embedder: str, stored: dict[str, Any] | None) -> RelevanceCutoff:
    """The cutoff for ``embedder`` given its gallery record (``None``: none stored)."""
    if stored and stored.get("threshold") is not None:
        return RelevanceCutoff(embedder, float(stored["threshold"]), "gallery", dict(stored.get("stats") or {}))
    shipped = shipped_cutoffs().get(embedder)
    if shipped and shipped.get("threshold") is not None:
        return RelevanceCutoff(embedder, float(shipped["threshold"]), "shipped", dict(shipped.get("stats") or {}))
    return RelevanceCutoff(embedder, None, "relative", {"margin": RELATIVE_MARGIN})


def cutoff_of(gallery: Any) -> RelevanceCutoff:
    """The cutoff that applies to ``gallery``'s embedder (see the module docstring for the order)."""
    try:
        stored = gallery.get_json(record_key(gallery.embedder_name))
    except GalleryError as exc:  # a gallery that cannot hold records yet (not created): no stored cutoff
        logger.debug("no relevance record read from %s: %s", getattr(gallery, "location", gallery), exc)
        stored = None
    return cutoff_from_records(gallery.embedder_name, stored)


def store_cutoff(gallery: Any, threshold: float, stats: dict[str, Any]) -> RelevanceCutoff:
    """Record ``threshold`` as ``gallery``'s cutoff for its embedder (what ``pictrieve calibrate`` does)."""
    gallery.put_json(record_key(gallery.embedder_name), {"threshold": float(threshold), "stats": dict(stats)})
    return RelevanceCutoff(gallery.embedder_name, float(threshold), "gallery", dict(stats))


def mark(hits: Sequence[ImageHit], cutoff: RelevanceCutoff) -> list[ImageHit]:
    """The hits with ``relevant`` set by ``cutoff`` (new objects; hits are frozen)."""
    verdicts = cutoff.judge([h.score for h in hits])
    return [h.model_copy(update={"relevant": v}) for h, v in zip(hits, verdicts)]


def only_relevant(hits: Sequence[ImageHit]) -> list[ImageHit]:
    """The hits marked relevant (those not judged, ``relevant is None``, are kept)."""
    return [h for h in hits if h.relevant is not False]


def none_relevant(hits: Sequence[ImageHit]) -> bool:
    """Whether a non-empty result has no hit marked relevant (the "no photo matches well" case)."""
    return bool(hits) and all(h.relevant is False for h in hits)


NO_MATCH_HEADER = "no photo matches well; the closest are:"
"""What the CLI and the web page print above the hits when none is relevant."""


def agent_summary(query: str | None, hits: Sequence[ImageHit]) -> str:
    """One or two sentences an agent can pass on as they are: how many photos match, or that none does."""
    what = f" {query!r}" if query else " the given photo"
    if not hits:
        return f"No photo in the gallery matches{what}."
    if none_relevant(hits):
        closest = "; ".join(f"{h.id}" + (f" ({h.caption})" if h.caption else "") for h in hits[:3])
        return f"No photo in the gallery matches{what} well; the closest are: {closest}."
    if all(h.relevant is None for h in hits):
        return f"{len(hits)} photos found for{what}, best first (how well they match was not judged)."
    good = sum(1 for h in hits if h.relevant)
    return f"{good} of the {len(hits)} photos shown match{what} well; the others are only the closest."


def choose_threshold(present: Sequence[float], absent: Sequence[float]) -> tuple[float, dict[str, Any]]:
    """The cosine cutoff that maximises balanced accuracy between ``present`` scores (caption -> its own
    photo; should be at or above) and ``absent`` best scores (should be below); ties go to the
    candidate closest to the middle of the optimal run. Returns ``(threshold, stats)``."""
    pos = np.sort(np.asarray(present, dtype=np.float64))
    neg = np.sort(np.asarray(absent, dtype=np.float64))
    if not len(pos) or not len(neg):
        raise ValueError("calibration needs both present (caption) scores and absent-query scores")
    values = np.unique(np.concatenate([pos, neg]))
    # Candidates: midpoints between consecutive distinct scores, plus one below and one above all.
    candidates = np.concatenate([[values[0] - 1e-6], (values[:-1] + values[1:]) / 2, [values[-1] + 1e-6]])
    tpr = 1.0 - np.searchsorted(pos, candidates, side="left") / len(pos)  # share of present >= t
    tnr = np.searchsorted(neg, candidates, side="left") / len(neg)  # share of absent < t
    balanced = (tpr + tnr) / 2
    best = np.flatnonzero(balanced >= balanced.max() - 1e-12)
    pick = int(best[len(best) // 2])
    threshold = float(candidates[pick])
    return threshold, {
        "criterion": CRITERION,
        "balanced_accuracy": round(float(balanced[pick]), 4),
        "present_marked_relevant": round(float(tpr[pick]), 4),
        "absent_marked_irrelevant": round(float(tnr[pick]), 4),
        "present_queries": int(len(pos)),
        "absent_queries": int(len(neg)),
    }


def judge_by_text(gallery: Any, query: str, hits: Sequence[ImageHit]) -> list[ImageHit]:
    """Mark ``hits`` of any method (fused scores) by the cosine of ``query`` to each hit's stored vector in
    ``gallery``, against the gallery's cutoff; scores are kept. Hits already judged, and ids the
    gallery's collection does not hold (tiles, other embedders), are left as they are."""
    todo = [h for h in hits if h.relevant is None]
    if not todo or not (query or "").strip():
        return list(hits)
    try:
        vectors = gallery.embeddings([h.id for h in todo])
    except (KeyError, ValueError) as exc:  # an id this collection does not hold
        logger.debug("relevance not judged for some hits: %s", exc)
        return list(hits)
    text = np.asarray(gallery.embedder.embed_texts([query])[0], dtype=np.float32)
    cosines = np.asarray(vectors, dtype=np.float32) @ text
    cutoff = cutoff_of(gallery)
    if cutoff.threshold is None:  # the relative rule compares with the best cosine of these hits
        verdicts = cutoff.judge(cosines.tolist())
    else:
        verdicts = [float(c) >= cutoff.threshold for c in cosines]
    judged = {h.id: v for h, v in zip(todo, verdicts)}
    return [h.model_copy(update={"relevant": judged[h.id]}) if h.id in judged else h for h in hits]
