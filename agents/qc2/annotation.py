"""Annotate a gallery for QC2 and turn the annotations into training examples (Sec. 3.2).

For every image we need a caption ``T_i`` (the gallery's own captions; otherwise one from a
captioner, stored as ``qc2_caption``), a relevance score per caption, ``s_r = cos(f(I_i), g(T_i))``
with the gallery's embedder (stored as the list ``qc2_relevance``, one value per caption), and one
score per quality scorer (stored as ``qc2_<scorer key>``, e.g. ``qc2_brisque``). Scores are written
batch by batch, and images that already hold a score are skipped, so an interrupted run resumes.

Levels are fitted on the gallery's distributions: relevance over all (image, caption) pairs, a
quality score over images; every caption becomes one example with its own relevance level and its
image's quality level.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image

from pictrieve.agents.qc2.bundle import gallery_fingerprint
from pictrieve.agents.qc2.errors import QC2ModelError
from pictrieve.agents.qc2.levels import AxisLevels
from pictrieve.agents.qc2.prompt_format import QC2Example
from pictrieve.tools.core.time_budget import TimeBudget
from pictrieve.tools.models.protocols import Captioner
from pictrieve.tools.models.quality_scorers import QUALITY_SCORERS, BrisqueScorer, LaionAestheticScorer, QualityScorer

logger = logging.getLogger(__name__)

RELEVANCE_AXIS = "Relevance"
RELEVANCE_KEY = "relevance"
METADATA_PREFIX = "qc2_"
CAPTION_KEY = "qc2_caption"

def metadata_key(score_key: str) -> str:
    return METADATA_PREFIX + score_key


@dataclass
class AnnotationReport:
    """What one annotation pass did for one score."""

    score: str
    scored: int = 0
    already: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def __str__(self) -> str:
        per = f", {self.seconds / self.scored:.2f} s/image" if self.scored else ""
        return (f"{self.score}: {self.scored} scored, {self.already} already had it, "
                f"{len(self.failed)} failed ({self.seconds:.0f} s{per})")


def item_captions(item: Any) -> list[str]:
    """The gallery captions of an item, else its generated ``qc2_caption``."""
    captions = list(item.captions)
    if not captions and item.metadata.get(CAPTION_KEY):
        captions = [item.metadata[CAPTION_KEY]]
    return [c for c in captions if c and c.strip()]


def annotate_gallery(
    gallery: Any,
    scorers: Sequence[QualityScorer],
    *,
    captioner: Captioner | None = None,
    batch_size: int = 16,
    progress: bool = True,
    budget: TimeBudget | None = None,
) -> list[AnnotationReport]:
    """Add missing captions, relevance and quality scores to ``gallery``'s metadata (resumable).

    ``budget``: checked after every batch; when it says stop, what is stored so far stays and the
    remaining passes are skipped (a re-run goes on from there).
    """
    items = list(gallery.items())
    if not items:
        raise QC2ModelError(f"gallery {gallery.location} is empty: index photos first (`pictrieve index`)")
    reports = []
    if captioner is not None:
        reports.append(_caption_missing(gallery, items, captioner, batch_size, progress, budget))
        items = list(gallery.items())
    else:
        missing = sum(1 for item in items if not item_captions(item))
        if missing:
            logger.warning("%d of %d images have no caption; they get quality scores but no training "
                           "examples (add captions.jsonl/.txt sidecars or pass a captioner)", missing, len(items))
    def time_left() -> bool:
        return budget is None or not budget.should_stop()

    if time_left():
        reports.append(_annotate_relevance(gallery, items, batch_size * 4, progress, budget))
    for scorer in scorers:
        if time_left():
            reports.append(_annotate_quality(gallery, items, scorer, batch_size, progress, budget))
    return reports


def _batches(items: Sequence[Any], size: int, desc: str, progress: bool, budget: TimeBudget | None = None):
    """Chunks of ``items`` with a progress bar; none after ``budget`` says stop (checked once each is stored)."""
    from tqdm.auto import tqdm

    with tqdm(total=len(items), desc=desc, unit="img", disable=not progress or not items) as bar:
        for start in range(0, len(items), size):
            chunk = items[start : start + size]
            yield chunk
            bar.update(len(chunk))
            if budget is not None:
                budget.progressed()
                if budget.should_stop():
                    return


def _load_images(items: Sequence[Any], report: AnnotationReport) -> tuple[list[Any], list[Image.Image]]:
    from pictrieve.tools.core.images import load_image

    kept, images = [], []
    for item in items:
        try:
            images.append(load_image(item.path).convert("RGB"))
            kept.append(item)
        except Exception as exc:  # unreadable or vanished file: report, keep going
            report.failed.append(item.path)
            logger.warning("cannot read %s for scoring: %s", item.path, exc)
    return kept, images


def _caption_missing(gallery, items, captioner: Captioner, batch_size: int, progress: bool,
                     budget: TimeBudget | None = None) -> AnnotationReport:
    report = AnnotationReport("caption")
    todo = [item for item in items if not item_captions(item)]
    report.already = len(items) - len(todo)
    start = time.perf_counter()
    for chunk in _batches(todo, batch_size, "captioning", progress, budget):
        kept, images = _load_images(chunk, report)
        if kept:
            texts = [str(t).strip() for t in captioner(images)]
            gallery.update_metadata([i.id for i in kept], [{CAPTION_KEY: t} for t in texts])
            report.scored += len(kept)
    report.seconds = time.perf_counter() - start
    return report


def _annotate_relevance(gallery, items, batch_size: int, progress: bool,
                        budget: TimeBudget | None = None) -> AnnotationReport:
    """``cos(f(I), g(T))`` for every caption, from the stored image vectors and the embedder."""
    report = AnnotationReport(RELEVANCE_KEY)
    key = metadata_key(RELEVANCE_KEY)
    todo = []
    for item in items:
        captions = item_captions(item)
        stored = item.metadata.get(key)
        if not captions:
            continue
        if isinstance(stored, list) and len(stored) == len(captions):
            report.already += 1
        else:
            todo.append(item)
    start = time.perf_counter()
    for chunk in _batches(todo, batch_size, "relevance", progress, budget):
        images = gallery.embeddings([item.id for item in chunk])
        captions = [item_captions(item) for item in chunk]
        texts = gallery.embedder.embed_texts([c for cs in captions for c in cs])
        metadatas, offset = [], 0
        for row, cs in enumerate(captions):
            scores = texts[offset : offset + len(cs)] @ images[row]
            offset += len(cs)
            metadatas.append({key: [round(float(s), 6) for s in scores]})
        gallery.update_metadata([item.id for item in chunk], metadatas)
        report.scored += len(chunk)
    report.seconds = time.perf_counter() - start
    return report


def _annotate_quality(gallery, items, scorer: QualityScorer, batch_size: int, progress: bool,
                      budget: TimeBudget | None = None) -> AnnotationReport:
    report = AnnotationReport(scorer.key)
    key = metadata_key(scorer.key)
    todo = [item for item in items if item.metadata.get(key) is None]
    report.already = len(items) - len(todo)
    reuse = isinstance(scorer, LaionAestheticScorer) and scorer.accepts_embedder(gallery.embedder_name)
    start = time.perf_counter()
    for chunk in _batches(todo, batch_size, scorer.key, progress, budget):
        if reuse:  # the gallery already stores ViT-L/14 OpenAI CLIP vectors: no need to decode images
            kept, scores = chunk, scorer.score_embeddings(gallery.embeddings([i.id for i in chunk]))
        else:
            kept, images = _load_images(chunk, report)
            scores = _score_each(scorer, kept, images, report) if kept else []
        good = [(item, float(s)) for item, s in zip(kept, scores) if s is not None and np.isfinite(s)]
        if good:
            gallery.update_metadata([item.id for item, _ in good], [{key: s} for _, s in good])
        report.scored += len(good)
    report.seconds = time.perf_counter() - start
    return report


def _score_each(scorer, items, images, report) -> list[float | None]:
    try:
        return list(scorer.score_images(images))
    except Exception:  # one bad image should not lose the batch: retry one by one
        scores: list[float | None] = []
        for item, image in zip(items, images):
            try:
                scores.append(float(scorer.score_images([image])[0]))
            except Exception as exc:
                report.failed.append(item.path)
                logger.warning("%s failed on %s: %s", scorer.key, item.path, exc)
                scores.append(None)
        return scores


# --------------------------------------------------------------------------- training data


def scorer_axis(score_key: str) -> tuple[str, bool]:
    """``(prompt axis name, higher_is_better)`` of a registered scorer, without building it."""
    # The built-in scorers' classes carry axis and orientation; a scorer registered by name is
    # asked through the builder it was registered with (if that carries them).
    factory: Any = {cls.key: cls for cls in (BrisqueScorer, LaionAestheticScorer)}.get(score_key)
    if factory is None and score_key in QUALITY_SCORERS:
        factory = QUALITY_SCORERS.builder_for(score_key)[0]
    axis = getattr(factory, "axis", None) or score_key.replace("_", " ").title()
    return axis, bool(getattr(factory, "higher_is_better", True))


def annotated_score_keys(items: Sequence[Any]) -> list[str]:
    """Quality score keys present on at least one item (``relevance`` and captions excluded)."""
    keys = {k[len(METADATA_PREFIX):] for item in items for k in item.metadata if k.startswith(METADATA_PREFIX)}
    return sorted(keys - {RELEVANCE_KEY, CAPTION_KEY[len(METADATA_PREFIX):]})


def build_training_data(
    gallery_items: Sequence[Any],
    quality_keys: Sequence[str],
    *,
    n_levels: int = 3,
    random_levels: bool = False,
    seed: int = 0,
    axes: Sequence[AxisLevels] | None = None,
) -> tuple[list[QC2Example], list[AxisLevels]]:
    """Examples (one per caption) and fitted axes (relevance first, then ``quality_keys``).

    With ``random_levels`` the levels are drawn uniformly at random instead: the paper's "FT"
    baseline, a model fine-tuned on the same captions whose conditions carry no information.
    With ``axes`` (fitted on other data, e.g. a model's training captions) the levels are assigned
    with those thresholds instead of thresholds fitted on these items: held-out captions.
    """
    items = list(gallery_items)
    if not quality_keys:
        raise QC2ModelError("choose at least one quality score; annotate one with `pictrieve quality annotate`")
    for score_key in quality_keys:
        if not any(item.metadata.get(metadata_key(score_key)) is not None for item in items):
            raise QC2ModelError(
                f"no image in this gallery has a {score_key!r} score; annotate it first: "
                f"`pictrieve quality annotate --gallery GALLERY --scorer {score_key}`"
            )
    usable = [
        item for item in items
        if item_captions(item)
        and isinstance(item.metadata.get(metadata_key(RELEVANCE_KEY)), list)
        and all(item.metadata.get(metadata_key(k)) is not None for k in quality_keys)
    ]
    if not usable:
        if not any(item_captions(item) for item in items):  # annotating again would not help: nothing to learn from
            raise QC2ModelError(
                "no photo in this gallery has a caption, and QC2 learns from captions: caption them with "
                "`pictrieve quality annotate --gallery GALLERY --captioner offline` (or a BLIP model), or train on "
                "a captioned folder: `pictrieve quality train --captions-from DIR --out MODEL_DIR`")
        raise QC2ModelError("no image has captions, relevance and all requested scores: run `pictrieve quality annotate`")
    if len(usable) < len(items):
        logger.info("%d of %d images are fully annotated and used for training", len(usable), len(items))
    relevance = [np.asarray(item.metadata[metadata_key(RELEVANCE_KEY)], dtype=np.float64) for item in usable]
    given = list(axes) if axes is not None else None
    if given is not None and [a.score_key for a in given] != [RELEVANCE_KEY, *quality_keys]:
        raise QC2ModelError(f"the given axes {[a.score_key for a in given]} do not match "
                            f"{[RELEVANCE_KEY, *quality_keys]}")
    axes = [given[0] if given else
            AxisLevels.fit(RELEVANCE_AXIS, np.concatenate(relevance), score_key=RELEVANCE_KEY, n_levels=n_levels)]
    quality_scores = []
    for position, score_key in enumerate(quality_keys, 1):
        name, higher = scorer_axis(score_key)
        scores = np.array([float(item.metadata[metadata_key(score_key)]) for item in usable])
        axes.append(given[position] if given else
                    AxisLevels.fit(name, scores, score_key=score_key, n_levels=n_levels, higher_is_better=higher))
        quality_scores.append(axes[-1].assign(scores))
    rng = np.random.default_rng(seed)
    examples = []
    for row, item in enumerate(usable):
        relevance_levels = axes[0].assign(relevance[row])
        for caption, rel_level in zip(item_captions(item), relevance_levels):
            levels = (rel_level, *(q[row] for q in quality_scores))
            if random_levels:
                levels = tuple(axis.levels[rng.integers(len(axis.levels))] for axis in axes)
            examples.append(QC2Example(caption, levels))
    return examples, axes


def fingerprint_of(gallery: Any) -> str:
    """:func:`gallery_fingerprint` of an open gallery."""
    return gallery_fingerprint(gallery.collection_name, gallery.ids())
