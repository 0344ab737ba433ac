"""Whether a search hit matches its query well: each embedder's calibrated rule.

A plain search always returns ``k`` photos, whether or not any shows what was asked. Each hit
therefore carries ``relevant``, decided by a :class:`RelevanceCutoff`, one of two kinds of rule:

- ``cosine``: ``score >= threshold``, one cosine for every query (what ``pictrieve calibrate`` stores);
- a *per-query* rule (``over-q99``, ``z``, ...; :data:`QUERY_RULES`): each query first meets a fixed set
  of *reference photos* shipped as vectors (a few hundred flickr8k-train photos), and a hit is relevant
  when its cosine stands out from the query's own cosines over them by ``threshold``; e.g. ``over-q99``:
  ``cosine >= (the query's 99th-percentile cosine over the reference photos) + threshold``. A short query
  ("dog") meets every photo at lower cosines than a long caption, and a query nothing matches is no
  better on the gallery than on the reference; one global cosine cannot tell those apart.

Thresholds are chosen where the photos' vectors were never trained on: for the shipped ``offline`` head,
on flickr8k-train split into folds, each fold scored by a head trained on the others
(``benchmarks/relevance_rule_study.py``; BENCHMARKS.md "Relevance"). The criterion is
:func:`choose_threshold` on the rule's statistic:

- *present* scores: each caption as a query, scored against its own photo (a photo that is there
  and should be found);
- *absent* scores: queries about things no photo of the folder shows (``evaluation/data/
  absent_queries.jsonl``, each checked against every caption), each query's *best* score over the
  folder's photos (the score that would make the search claim a match).

The threshold maximises balanced accuracy: (share of present scores at or above it + share of absent
best scores below it) / 2, the midpoint between the two neighbouring scores at the optimum.

Where the rule comes from, first found wins:

1. the gallery's own record (``relevance-cutoff:EMBEDDER`` in its JSON record store), written by
   ``pictrieve calibrate`` (:func:`store_cutoff`);
2. the rules shipped with the package (``relevance_cutoffs.json`` beside this module, and the reference
   photos in ``relevance_reference/``);
3. for an embedder with neither, the *relative* fallback: a hit is relevant when its score is within
   :data:`RELATIVE_MARGIN` of the best score of the same search. It never says "nothing matches"
   (no absolute floor is known for an uncalibrated model): run ``pictrieve calibrate`` for that.

A hit that the photo's own words match (every word of the query in its folder, file name, place or
photo text; or every word some photo carries, when those are at least half the query's) is relevant whatever
the rule says: :func:`~pictrieve.vectorstore.keywords.hybrid_search`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
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
REFERENCE_DIR = Path(__file__).with_name("relevance_reference")
"""The shipped reference photos' vectors, one ``EMBEDDER.npy`` (float16 rows) per embedder with a per-query rule."""

RELATIVE_MARGIN = 0.05
"""Fallback for an uncalibrated embedder: hits within this cosine of the search's best are relevant."""

CRITERION = "max balanced accuracy (present: caption -> own photo; absent: best score of an absent query)"


def _quantile(q: float) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    return lambda sims: (np.quantile(sims, q, axis=1), np.ones(len(sims)))


QUERY_RULES: dict[str, Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]] = {
    "over-median": _quantile(0.5),
    "over-q90": _quantile(0.90),
    "over-q99": _quantile(0.99),
    "over-max": lambda sims: (sims.max(axis=1), np.ones(len(sims))),
    "z": lambda sims: (sims.mean(axis=1), sims.std(axis=1) + 1e-6),
    "robust": lambda sims: (np.median(sims, axis=1),
                            np.maximum(np.quantile(sims, 0.99, axis=1) - np.median(sims, axis=1), 1e-3)),
}
"""Per-query rules: from a query's cosines over the reference photos (one row per query), its ``(base,
scale)``; a hit is relevant when ``cosine >= base + threshold * scale``. ``over-median`` / ``over-q90`` /
``over-q99``: above the query's median / 90th / 99th percentile by ``threshold``; ``over-max``: above its best reference photo; ``z``: a z-score;
``robust``: ``(cosine - median) / (q99 - median)``."""

RULE_WORDS = {
    "cosine": "cosine >= {t:.4f}",
    "over-median": "cosine >= the query's median cosine over {n} reference photos {sign} {abs_t:.4f}",
    "over-q90": "cosine >= the query's 90th-percentile cosine over {n} reference photos {sign} {abs_t:.4f}",
    "over-q99": "cosine >= the query's 99th-percentile cosine over {n} reference photos {sign} {abs_t:.4f}",
    "over-max": "cosine >= the query's best cosine over {n} reference photos {sign} {abs_t:.4f}",
    "z": "cosine >= mean + {t:.2f} x std of the query's cosines over {n} reference photos",
    "robust": "(cosine - median) / (q99 - median) of the query's cosines over {n} reference photos >= {t:.3f}",
}


@dataclass(frozen=True)
class RelevanceCutoff:
    """How one embedder's hits are judged: ``rule`` with ``threshold``, or, when ``threshold`` is ``None``,
    the relative rule. A per-query rule (:data:`QUERY_RULES`) reads ``reference`` (unit vectors of the
    reference photos); :meth:`for_query` turns it into the plain cosine cutoff of one query."""

    embedder: str
    threshold: float | None
    source: str
    """``gallery`` (calibrated for this gallery), ``shipped`` (with the package) or ``relative`` (fallback)."""
    stats: dict[str, Any] = field(default_factory=dict)
    rule: str = "cosine"
    reference: np.ndarray | None = field(default=None, repr=False, compare=False)
    evidence: dict[str, Any] | None = None
    """Shipped with a per-query rule: ``{"threshold", "detector": {"confirm_score", "bonus", "penalty"}}``, the rule's
    threshold and shifts for a hit whose photo's objects were found at index time (``index --objects``;
    :mod:`~pictrieve.vectorstore.photo_evidence`); a photo not analysed is judged by ``threshold`` alone."""

    @property
    def per_query(self) -> bool:
        return self.rule in QUERY_RULES and self.reference is not None and self.threshold is not None

    def query_cosines(self, query_vectors: np.ndarray) -> np.ndarray:
        """The cosine each query (rows of unit vectors) must reach for a hit to be relevant."""
        queries = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))
        if not self.per_query:
            return np.full(len(queries), np.nan if self.threshold is None else self.threshold)
        base, scale = QUERY_RULES[self.rule](queries @ self.reference.T)
        return base + float(self.threshold) * scale

    def statistic(self, cosines: np.ndarray, query_vectors: np.ndarray) -> np.ndarray:
        """What the rule compares with ``threshold``: for each query (rows of ``query_vectors``) its cosines
        ``(queries, ...)`` as ``(cosine - base) / scale``; the cosines themselves for a ``cosine`` rule."""
        cosines = np.asarray(cosines, dtype=np.float32)
        if self.rule not in QUERY_RULES or self.reference is None:
            return cosines
        queries = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))
        base, scale = QUERY_RULES[self.rule](queries @ self.reference.T)
        shape = (len(queries),) + (1,) * (cosines.ndim - 1)
        return (cosines - base.reshape(shape)) / scale.reshape(shape)

    def for_query(self, query_vector: Any) -> "RelevanceCutoff":
        """The plain cosine cutoff this rule sets for one query's embedding; itself for a ``cosine`` rule or
        the relative fallback. Without a query vector, or with one of another size than the reference's (an
        embedder changed under the same name), a per-query rule falls back to ``cosine_threshold``: the one
        global cosine chosen beside it on the same held-out photos."""
        if not self.per_query:
            return self
        vector = None if query_vector is None else np.asarray(query_vector, dtype=np.float32).reshape(-1)
        if vector is None or vector.shape[0] != self.reference.shape[1]:
            fallback = self.stats.get("cosine_threshold")
            return replace(self, rule="cosine", threshold=None if fallback is None else float(fallback), reference=None)
        return replace(self, rule="cosine", threshold=float(self.query_cosines(vector)[0]), reference=None,
                       stats={**self.stats, "query_cutoff_from": self.rule})

    def judge(self, scores: Sequence[float], query_vector: Any = None, *, query: str | None = None,
              objects: Sequence[Any] | None = None) -> list[bool]:
        """``relevant`` for each score of one search (best first or in any order); a per-query rule reads
        the query's embedding (see :meth:`for_query`). With the ``query``'s text and each hit's stored ``objects``
        (``None`` for a photo not analysed), a rule shipped with :attr:`evidence` lets the photo's detected
        objects confirm or deny the things the query names."""
        if not len(scores):
            return []
        cutoff = self.for_query(query_vector)
        if cutoff.threshold is None:
            best = max(scores)
            return [float(s) >= best - RELATIVE_MARGIN for s in scores]
        if not (self.evidence and cutoff is not self and query and objects is not None):
            return [float(s) >= cutoff.threshold for s in scores]
        from pictrieve.vectorstore import photo_evidence

        named = photo_evidence.named_objects(query)
        analysed = cutoff.threshold + float(self.evidence["threshold"]) - float(self.threshold or 0.0)
        settings = dict(self.evidence.get("detector") or {})
        verdicts = []
        for score, stored in zip(scores, objects):
            found = photo_evidence.parse_objects(stored)
            if found is None:
                verdicts.append(float(score) >= cutoff.threshold)
            else:
                verdicts.append(float(score) + photo_evidence.adjustment(named, found, **settings) >= analysed)
        return verdicts

    def describe(self) -> str:
        """One line for people: the rule in force and where it came from."""
        if self.threshold is None:
            return (f"relative: a hit within {RELATIVE_MARGIN} of the best cosine of its search (no cutoff is known "
                    f"for {self.embedder}; `pictrieve calibrate` chooses one)")
        n = 0 if self.reference is None else len(self.reference)
        t = float(self.threshold)
        words = RULE_WORDS.get(self.rule, "{rule} >= {t}").format(t=t, abs_t=abs(t), sign="+" if t >= 0 else "-",
                                                                  n=n, rule=self.rule)
        if self.source == "gallery":
            where = f"calibrated on {self.stats.get('folder', 'a captioned folder')} by `pictrieve calibrate`"
        else:
            where = f"shipped, chosen on {self.stats.get('chosen_on') or self.stats.get('folder') or 'captioned photos'}"
        told = ""
        if self.evidence and self.per_query:
            detector = self.evidence.get("detector") or {}
            told = (f"; a photo whose objects were found at index time (index --objects) needs "
                    f"{float(self.evidence['threshold']):+.4f} instead, less {float(detector.get('bonus', 0)):.2f} when "
                    f"every COCO thing the query names was found in it (score >= "
                    f"{float(detector.get('confirm_score', 0)):.2f}), plus {float(detector.get('penalty', 0)):.2f} "
                    f"when one was not")
        return f"{words} ({where}){told}"

    def to_json(self) -> dict[str, Any]:
        body = {"embedder": self.embedder, "threshold": self.threshold, "source": self.source, "rule": self.rule,
                "stats": dict(self.stats), "description": self.describe()}
        if self.reference is not None:
            body["reference_photos"] = int(len(self.reference))
        return body


def record_key(embedder: str) -> str:
    return RECORD_PREFIX + embedder


@lru_cache(maxsize=1)
def shipped_cutoffs() -> dict[str, dict[str, Any]]:
    """The cutoffs that ship with the package, by embedder name (empty when the file is missing)."""
    try:
        return dict(json.loads(SHIPPED_FILE.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}


@lru_cache(maxsize=4)
def load_reference(name: str) -> np.ndarray:
    """The reference photos' unit vectors shipped as ``relevance_reference/NAME`` (float32 rows)."""
    vectors = np.load(REFERENCE_DIR / name).astype(np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def write_reference(path: Path, vectors: np.ndarray) -> None:
    """Write reference vectors (float16) so a half-written file never replaces a good one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        np.save(handle, np.asarray(vectors, dtype=np.float16))
    tmp.replace(path)
    load_reference.cache_clear()


def _cutoff(embedder: str, record: dict[str, Any], source: str) -> RelevanceCutoff:
    rule = str(record.get("rule") or "cosine")
    reference = None
    if rule != "cosine":
        if rule not in QUERY_RULES or not record.get("reference"):
            raise ValueError(f"relevance rule {rule!r} of {embedder!r} is unknown or has no reference photos")
        reference = load_reference(str(record["reference"]))
    return RelevanceCutoff(embedder, float(record["threshold"]), source, dict(record.get("stats") or {}), rule,
                           reference, record.get("evidence") if rule != "cosine" else None)


def cutoff_from_records(embedder: str, stored: dict[str, Any] | None) -> RelevanceCutoff:
    """The cutoff for ``embedder`` given its gallery record (``None``: none stored)."""
    if stored and stored.get("threshold") is not None:
        return _cutoff(embedder, stored, "gallery")
    shipped = shipped_cutoffs().get(embedder)
    if shipped and shipped.get("threshold") is not None:
        return _cutoff(embedder, shipped, "shipped")
    return RelevanceCutoff(embedder, None, "relative", {"margin": RELATIVE_MARGIN})


def cutoff_of(gallery: Any) -> RelevanceCutoff:
    """The cutoff that applies to ``gallery``'s embedder (see the module docstring for the order)."""
    try:
        stored = gallery.get_json(record_key(gallery.embedder_name))
    except GalleryError as exc:  # a gallery that cannot hold records yet (not created): no stored cutoff
        logger.debug("no relevance record read from %s: %s", getattr(gallery, "location", gallery), exc)
        stored = None
    return cutoff_from_records(gallery.embedder_name, stored)


def store_cutoff(gallery: Any, threshold: float, stats: dict[str, Any], rule: str = "cosine",
                 reference: str | None = None) -> RelevanceCutoff:
    """Record ``rule`` at ``threshold`` as ``gallery``'s cutoff for its embedder (what ``pictrieve calibrate``
    does); a per-query rule names its shipped ``reference`` photos."""
    record: dict[str, Any] = {"threshold": float(threshold), "stats": dict(stats)}
    if rule != "cosine":
        record.update(rule=rule, reference=reference)
    gallery.put_json(record_key(gallery.embedder_name), record)
    return _cutoff(gallery.embedder_name, record, "gallery")


def mark(hits: Sequence[ImageHit], cutoff: RelevanceCutoff, query_vector: Any = None,
         query: str | None = None) -> list[ImageHit]:
    """The hits with ``relevant`` set by ``cutoff`` for the query embedded as ``query_vector`` (new objects;
    hits are frozen); with the ``query``'s text, the photos' stored objects are read as evidence."""
    verdicts = cutoff.judge([h.score for h in hits], query_vector, query=query, objects=stored_objects(hits))
    return [h.model_copy(update={"relevant": v}) for h, v in zip(hits, verdicts)]


def stored_objects(hits: Sequence[ImageHit]) -> list[Any]:
    """Each hit's stored detected objects (``None``: its photo was not analysed)."""
    from pictrieve.vectorstore.photo_evidence import OBJECTS_KEY

    return [h.metadata.get(OBJECTS_KEY) for h in hits]


def only_relevant(hits: Sequence[ImageHit]) -> list[ImageHit]:
    """The hits marked relevant (those not judged, ``relevant is None``, are kept)."""
    return [h for h in hits if h.relevant is not False]


def none_relevant(hits: Sequence[ImageHit]) -> bool:
    """Whether a non-empty result has no hit marked relevant (the "no photo matches well" case)."""
    return bool(hits) and all(h.relevant is False for h in hits)


NO_MATCH_HEADER = "no photo matches well; the closest are:"
"""What the CLI and the web page print above the hits when none is relevant."""


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
    verdicts = cutoff_of(gallery).judge(cosines.tolist(), text, query=query, objects=stored_objects(todo))
    judged = {h.id: v for h, v in zip(todo, verdicts)}
    return [h.model_copy(update={"relevant": judged[h.id]}) if h.id in judged else h for h in hits]
