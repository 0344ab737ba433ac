"""Calibrating and measuring the relevance cutoff (:mod:`pictrieve.vectorstore.relevance`) on captioned photos.

Two kinds of queries:

- *present*: every caption of a captioned folder, whose photo is in the folder; its score against its
  own photo should reach the cutoff;
- *absent*: queries about things no photo of the folder shows, read from ``data/absent_queries.jsonl``
  beside this module (``{"query", "key_nouns", "split"}``: ``train`` rows calibrate, ``dev`` rows are
  held out for the report). A query whose key noun appears in any caption of the folder (as a word,
  plural or not) is dropped with a warning, so the set stays absent on any folder; the best score of
  each remaining query over all the folder's photos should stay below the cutoff.

Scores are exact cosines (numpy over the stored vectors), the same as a plain search's.
``pictrieve calibrate`` runs :func:`calibrate`; ``pictrieve eval relevance`` runs :func:`evaluate_cutoff`.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pictrieve.evaluation.datasets import CaptionedFolder
from pictrieve.evaluation.paired import paired_bootstrap

logger = logging.getLogger(__name__)

ABSENT_QUERIES_FILE = Path(__file__).with_name("data") / "absent_queries.jsonl"


@dataclass(frozen=True)
class AbsentQuery:
    query: str
    key_nouns: tuple[str, ...]
    split: str


def load_absent_queries(split: str | None = None, path: str | os.PathLike | None = None) -> list[AbsentQuery]:
    """The absent queries of ``path`` (default: the shipped set), only those of ``split`` when given."""
    rows = []
    with open(path or ABSENT_QUERIES_FILE, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                record = json.loads(line)
                rows.append(AbsentQuery(str(record["query"]), tuple(record["key_nouns"]), str(record.get("split", ""))))
    return [r for r in rows if split is None or r.split == split]


def present_in_captions(queries: Sequence[AbsentQuery], captions: Sequence[str]) -> dict[str, str]:
    """``{query: a caption naming one of its key nouns}`` for the queries that are not absent after all."""
    text = [c.lower() for c in captions]
    found: dict[str, str] = {}
    for query in queries:
        for noun in query.key_nouns:
            pattern = re.compile(r"\b" + re.escape(noun.lower()) + r"(s|es)?\b")
            hit = next((c for c in text if pattern.search(c)), None)
            if hit is not None:
                found[query.query] = hit
                break
    return found


def absent_for(folder: CaptionedFolder, split: str | None, path: str | os.PathLike | None = None) -> list[str]:
    """The absent queries of ``split`` that no caption of ``folder`` contradicts (the others logged and dropped)."""
    queries = load_absent_queries(split, path)
    clashes = present_in_captions(queries, [c for texts in folder.captions.values() for c in texts])
    for query, caption in clashes.items():
        logger.warning("absent query %r is left out: a caption of %s names it (%r)", query, folder.root, caption)
    kept = [q.query for q in queries if q.query not in clashes]
    if not kept:
        raise ValueError(f"no absent query of split {split!r} is absent from {folder.root}")
    return kept


@dataclass
class CutoffScores:
    """Exact cosines of a folder's caption queries and absent queries (see the module docstring)."""

    image_ids: list[str]
    caption_image: list[int]
    """For each caption query, the index of its own photo in ``image_ids``."""
    captions: list[str]
    own: np.ndarray
    """Each caption's score against its own photo."""
    own_rank: np.ndarray
    """Its own photo's 1-based rank among all the folder's photos (ties counted against it)."""
    absent: list[str]
    absent_best: np.ndarray
    """Each absent query's best score over the folder's photos."""
    absent_best_id: list[str]
    own_stat: np.ndarray | None = None
    """The relevance rule's statistic of each caption's own photo (the cosine for a ``cosine`` rule)."""
    absent_best_stat: np.ndarray | None = None
    """The rule's statistic of each absent query's best photo."""
    rule: str = "cosine"

    def __post_init__(self) -> None:
        if self.own_stat is None:
            self.own_stat = self.own
        if self.absent_best_stat is None:
            self.absent_best_stat = self.absent_best


def score_folder(folder: CaptionedFolder, gallery: Any, absent: Sequence[str], *, batch: int = 256,
                 rule: Any = None) -> CutoffScores:
    """Score ``folder``'s captions and the ``absent`` queries against its photos as stored in ``gallery``
    (a gallery holding them, e.g. :func:`~pictrieve.evaluation.datasets.eval_gallery`); with ``rule`` (a
    :class:`~pictrieve.vectorstore.relevance.RelevanceCutoff`), also its statistic of each score."""
    from pictrieve.vectorstore.chroma_store import path_id

    stored = set(gallery.ids())
    pairs = [(path_id(p), texts) for p, texts in folder.captions.items() if path_id(p) in stored]
    if not pairs:
        raise ValueError(f"none of the photos of {folder.root} is in gallery {gallery.location}")
    ids = [id_ for id_, _ in pairs]
    vectors = gallery.embeddings(ids)
    captions = [c for _, texts in pairs for c in texts]
    owners = [i for i, (_, texts) in enumerate(pairs) for _ in texts]
    embedder = gallery.embedder

    def embed(texts: Sequence[str]) -> np.ndarray:
        return np.concatenate([np.asarray(embedder.embed_texts(list(texts[i:i + batch])), dtype=np.float32)
                               for i in range(0, len(texts), batch)])

    caption_vectors = embed(captions)
    sims = caption_vectors @ vectors.T
    own = sims[np.arange(len(captions)), owners]
    own_rank = 1 + (sims > own[:, None]).sum(axis=1)
    absent_vectors = embed(list(absent))
    absent_sims = absent_vectors @ vectors.T
    best = absent_sims.argmax(axis=1)
    scores = CutoffScores(ids, owners, captions, own, own_rank, list(absent), absent_sims.max(axis=1),
                          [ids[i] for i in best])
    if rule is not None and rule.rule != "cosine":  # per-query rules are monotone in the cosine: best stays best
        scores.own_stat = rule.statistic(own, caption_vectors)
        scores.absent_best_stat = rule.statistic(scores.absent_best, absent_vectors)
        scores.rule = rule.rule
    return scores


def calibrate(folder: CaptionedFolder, gallery: Any, absent: Sequence[str]) -> tuple[float, dict[str, Any], CutoffScores]:
    """The cutoff for ``gallery``'s embedder chosen on ``folder`` (see
    :func:`~pictrieve.vectorstore.relevance.choose_threshold`), its statistics and the scores.

    An embedder that ships a per-query rule keeps the rule (and its reference photos) and gets its threshold
    chosen here; ``stats["cosine_threshold"]``, the plain cosine chosen on the same scores, is what applies
    where no query vector is at hand. Any other embedder gets a plain cosine cutoff."""
    from pictrieve.vectorstore.relevance import choose_threshold, cutoff_from_records

    shipped = cutoff_from_records(gallery.embedder_name, None)
    scores = score_folder(folder, gallery, absent, rule=shipped if shipped.per_query else None)
    threshold, stats = choose_threshold(scores.own_stat, scores.absent_best_stat)
    stats.update({"embedder": gallery.embedder_name, "folder": str(folder.root), "photos": len(scores.image_ids),
                  "rule": scores.rule})
    if scores.rule != "cosine":
        stats["cosine_threshold"] = round(choose_threshold(scores.own, scores.absent_best)[0], 4)
    return threshold, stats, scores


def evaluate_cutoff(scores: CutoffScores, threshold: float, *, k: int = 10, seed: int = 0) -> dict[str, Any]:
    """How well ``threshold`` separates on ``scores``: the share of caption queries whose own photo is
    marked relevant (and also found in the top ``k``), and the share of absent queries whose search
    returns nothing relevant, each with a 95 % bootstrap interval (caption queries resampled by photo,
    since a photo's captions are not independent; absent queries resampled one by one)."""
    marked = scores.own_stat >= threshold
    found = marked & (scores.own_rank <= k)
    owners = np.asarray(scores.caption_image)
    per_photo = lambda values: np.bincount(owners, weights=values.astype(float)) / np.bincount(owners)  # noqa: E731
    nothing = scores.absent_best_stat < threshold

    def interval(values: np.ndarray) -> dict[str, float]:
        mean, low, high = paired_bootstrap(values, seed=seed)
        return {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4)}

    return {
        "threshold": round(float(threshold), 4),
        "rule": scores.rule,
        "caption_queries": int(len(scores.own)),
        "photos": int(len(scores.image_ids)),
        "absent_queries": int(len(scores.absent)),
        "present_marked_relevant": interval(per_photo(marked)),
        f"present_in_top{k}_and_relevant": interval(per_photo(found)),
        "absent_nothing_relevant": interval(nothing),
    }


def per_query_rows(scores: CutoffScores, threshold: float) -> list[dict[str, Any]]:
    """One row per query (present, then absent) for ``benchmarks/results/``."""
    rows = [{"kind": "present", "query": q, "target": scores.image_ids[i], "own_score": round(float(s), 4),
             "own_statistic": round(float(st), 4), "own_rank": int(r), "relevant": bool(st >= threshold)}
            for q, i, s, st, r in zip(scores.captions, scores.caption_image, scores.own, scores.own_stat,
                                      scores.own_rank)]
    rows += [{"kind": "absent", "query": q, "best_id": b, "best_score": round(float(s), 4),
              "best_statistic": round(float(st), 4), "nothing_relevant": bool(st < threshold)}
             for q, b, s, st in zip(scores.absent, scores.absent_best_id, scores.absent_best, scores.absent_best_stat)]
    return rows
