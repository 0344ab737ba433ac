"""Does QC2 control the quality of what is retrieved? The paper's evaluation on your own photos.

A folder with images and ``captions.jsonl`` is indexed, annotated (caption relevance + a quality
scorer) and used to train two completion models: QC2 (true levels) and FT-random (the same captions
with random levels, the paper's "FT" baseline). Every short query (``"a dog"``) is then run under
every condition of the level grid (relevance x quality) by each method:

- ``prefix``: the short query as is (no completion; the same for every condition);
- ``pt``: the base LM completes the same instruction prompt without fine-tuning;
- ``ft_random``: the model fine-tuned with random levels;
- ``qc2``: the model fine-tuned with the gallery's levels;

and we report, per method and condition, the mean over queries (and samples) of the retrieved
images' annotated scores, over the top-1 and the top-5 results: relevance (mean caption relevance
``cos(f(I), g(T))`` of the image), quality (the scorer's raw value; for BRISQUE lower is better), the
similarity of the image to the *short* query, and ``subject`` (share of results whose captions
mention the query's noun: does the completion keep the subject right?). ``rerank`` is the paper's
post-filter baseline: retrieve the top-k (k = 1, 5, 10) for the short query, reorder by quality,
keep the best. Search here is exact (numpy over all vectors), not the approximate index.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pictrieve.agents.qc2.annotation import (
    RELEVANCE_KEY,
    annotate_gallery,
    build_training_data,
    item_captions,
    metadata_key,
)
from pictrieve.agents.qc2.bundle import QC2Model, load_qc2_model
from pictrieve.agents.qc2.completion import CompletionRequest, SamplingSettings, complete_queries
from pictrieve.agents.qc2.errors import QC2ModelError
from pictrieve.agents.qc2.pipeline import train_on_gallery
from pictrieve.agents.qc2.training import QC2TrainConfig, TrainReport
from pictrieve.evaluation.caption_retrieval import load_captioned_folder
from pictrieve.evaluation.datasets import CaptionedFolder, eval_gallery
from pictrieve.evaluation.ranking import ExactRanker
from pictrieve.tools.models.quality_scorers import QualityScorer, create_quality_scorer, default_quality_scorer_name
from pictrieve.vectorstore.gallery import Gallery

logger = logging.getLogger(__name__)

METHODS = ("prefix", "pt", "ft_random", "qc2")
RERANK_KS = (1, 5, 10)
TOP = (1, 5)
SHOWN_COMPLETIONS = 3

# Words that often follow "a"/"an" in captions but are not the subject noun.
_NOT_NOUNS = set(
    "black white brown red blue green yellow orange pink purple gray grey dark light small large big "
    "little young old tall long short two three four group couple man's woman's very wooden "
    "single crowded busy snowy grassy rocky sandy dirt city striped colorful blond blonde shirtless "
    "smiling brightly bright blurry skinny muddy fluffy baby other few lot pair tan wet picture".split()
)


def load_queries(path: str | os.PathLike) -> list[str]:
    """One query per non-empty line; ``#`` starts a comment."""
    queries = [line.split("#", 1)[0].strip() for line in Path(path).read_text(encoding="utf-8").splitlines()]
    queries = [q for q in queries if q]
    if not queries:
        raise ValueError(f"{path} holds no queries (one short query per line, e.g. 'a dog')")
    return queries


def frequent_noun_queries(captions: Sequence[str], n: int = 20) -> list[str]:
    """``"a <noun>"`` queries for the words most often introduced by a/an in ``captions`` (heuristic)."""
    counts: Counter[str] = Counter()
    for caption in captions:
        words = re.findall(r"[a-z']+", caption.lower())
        for article, word in zip(words, words[1:]):
            if article in ("a", "an") and word not in _NOT_NOUNS and len(word) > 2:
                counts[word] += 1
    return [f"{'an' if w[0] in 'aeiou' else 'a'} {w}" for w, _ in counts.most_common(n)]


def subject_word(query: str) -> str:
    return re.findall(r"[a-z]+", query.lower())[-1]


def _mentions(captions: Sequence[str], noun: str) -> bool:
    forms = {noun, noun + "s", noun + "es", noun[:-1] + "ies" if noun.endswith("y") else noun}
    if noun == "man":
        forms.add("men")
    if noun == "woman":
        forms.add("women")
    if noun == "child":
        forms.add("children")
    if noun == "person":
        forms.add("people")
    return any(forms & set(re.findall(r"[a-z]+", c.lower())) for c in captions)


class _ScoredGallery:
    """The gallery's vectors and annotations as arrays, for exact search and scoring."""

    def __init__(self, gallery: Gallery, quality_key: str, higher_is_better: bool) -> None:
        items = [i for i in gallery.items()
                 if isinstance(i.metadata.get(metadata_key(RELEVANCE_KEY)), list)
                 and i.metadata.get(metadata_key(quality_key)) is not None]
        if not items:
            raise QC2ModelError("no fully annotated images to evaluate on")
        self.ids = [i.id for i in items]
        self.ranker = ExactRanker(gallery, self.ids)
        self.vectors = self.ranker.vectors
        self.relevance = np.array([np.mean(i.metadata[metadata_key(RELEVANCE_KEY)]) for i in items])
        self.quality = np.array([float(i.metadata[metadata_key(quality_key)]) for i in items])
        self.captions = [item_captions(i) for i in items]
        self.higher_is_better = higher_is_better
        self.embedder = gallery.embedder

    def top(self, texts: Sequence[str], k: int) -> np.ndarray:
        """Indices ``(len(texts), k)`` of the best images (the exact ranker's)."""
        return self.ranker.top(texts, k)

    def measure(self, texts: Sequence[str], queries: Sequence[str]) -> dict[str, dict[str, float]]:
        """Mean scores of the top-1 and top-5 results of ``texts`` (``queries`` are their short forms)."""
        top = self.top(texts, max(TOP))
        short = self.embedder.embed_texts(list(queries))
        out = {}
        for k in TOP:
            idx = top[:, :k]
            out[f"top{k}"] = {
                "relevance": float(self.relevance[idx].mean()),
                "quality": float(self.quality[idx].mean()),
                "query_similarity": float(np.mean([short[r] @ self.vectors[idx[r]].T for r in range(len(texts))])),
                "subject": float(np.mean([[_mentions(self.captions[j], subject_word(q)) for j in row]
                                          for row, q in zip(idx, queries)])),
            }
        return out

    def rerank(self, queries: Sequence[str]) -> dict[str, dict[str, float]]:
        """Retrieve top-k by the short query, reorder by quality, keep the best (paper Table 6)."""
        top = self.top(queries, max(RERANK_KS))
        out = {}
        for k in RERANK_KS:
            sign = -1.0 if self.higher_is_better else 1.0
            best = [row[:k][np.argsort(sign * self.quality[row[:k]], kind="stable")][0] for row in top]
            out[f"k={k}"] = {
                "relevance": float(self.relevance[best].mean()),
                "quality": float(self.quality[best].mean()),
                "subject": float(np.mean([_mentions(self.captions[j], subject_word(q)) for j, q in zip(best, queries)])),
            }
        return out


def prepare_caption_galleries(
    folder: str | os.PathLike,
    work: str | os.PathLike,
    *,
    embedder: str | None = None,
    scorer: str | None = None,
    split: str | None = "train",
    images: int | None = None,
    heldout_split: str | None = "dev",
    heldout_images: int | None = 60,
    seed: int = 0,
    progress: bool = True,
    budget: Any = None,
) -> tuple[Gallery, Gallery | None, str]:
    """Index and annotate a captioned collection for training QC2 (resumable; re-runs reuse everything).

    ``split`` / ``images``: which rows to train on (the ``split`` field of captions.jsonl; ``None``:
    all rows) and a seeded sample of that many photos. ``heldout_split`` / ``heldout_images``: rows
    kept out of training for the level-usage check (``None`` or 0: no held-out check). The training
    gallery lives in ``work/train-gallery``, the held-out one in ``work/heldout-gallery``.
    Returns ``(training gallery, held-out gallery or None, quality score key)``. ``budget`` (a
    :class:`~pictrieve.tools.core.time_budget.TimeBudget`) may stop indexing or annotating part-way; then
    ``budget.should_stop()`` is true afterwards and the galleries are not complete yet.
    """
    work = Path(work)
    train_folder, held_folder = split_captioned_folder(folder, split=split, images=images,
                                                       heldout_split=heldout_split, heldout_images=heldout_images,
                                                       seed=seed)
    train = eval_gallery(train_folder, embedder, location=work / "train-gallery", progress=progress, budget=budget)
    quality_scorer = create_quality_scorer(scorer or default_quality_scorer_name(train.embedder_name))
    _annotate(train, quality_scorer, "training captions", progress, budget)
    heldout = None
    if held_folder is not None and not (budget is not None and budget.should_stop()):
        heldout = eval_gallery(held_folder, embedder, location=work / "heldout-gallery", progress=progress,
                               budget=budget)
        _annotate(heldout, quality_scorer, "held-out captions", progress, budget)
    return train, heldout, quality_scorer.key


HELDOUT_FRACTION = 0.15
"""The share of photos held out for the level-usage check when captions.jsonl marks no split (as
``pictrieve train-embedder --held-out`` does)."""


def split_captioned_folder(folder: str | os.PathLike, *, split: str | None = "train", images: int | None = None,
                           heldout_split: str | None = "dev", heldout_images: int | None = 60,
                           seed: int = 0) -> tuple[CaptionedFolder, CaptionedFolder | None]:
    """The training photos and the held-out ones (``None``: no held-out check) of a captioned folder.

    With a ``"split"`` field in captions.jsonl (flickr8k-train), the rows of ``split`` train and those of
    ``heldout_split`` are held out. A folder whose captions.jsonl marks no split at all (the README's format)
    holds out a seeded random :data:`HELDOUT_FRACTION` of its photos (at most ``heldout_images``) and trains
    on the rest, so the level check still runs on captions the model never saw. A split named but absent
    from a file that has splits is a :class:`QC2ModelError` naming the splits it has."""
    from pictrieve.evaluation.datasets import read_caption_splits
    from pictrieve.vectorstore.captions import CAPTIONS_FILE

    caption_file = Path(folder) / CAPTIONS_FILE
    marked = read_caption_splits(caption_file) if caption_file.is_file() else {}
    want_heldout = bool(heldout_split) and heldout_images != 0
    if not marked and (split is not None or want_heldout):
        every = CaptionedFolder.load(folder)
        held_count = 0
        if want_heldout and len(every.paths) >= 2:
            held_count = max(1, round(HELDOUT_FRACTION * len(every.paths)))
            held_count = min(held_count, heldout_images or held_count, len(every.paths) - 1)
        held = every.sample(held_count, seed=seed) if held_count else None
        kept = [p for p in every.paths if held is None or p not in held.captions]
        logger.info("%s marks no \"split\": training on %d photos, holding out a random %d for the level check",
                    caption_file, len(kept), held_count)
        train = CaptionedFolder(root=every.root, captions={p: every.captions[p] for p in kept})
        return train.sample(images, seed=seed), held
    names = sorted(set(marked.values()))
    for name, option, other in ((split, "--split", "all"), (heldout_split if want_heldout else None,
                                                             "--heldout-split", "none")):
        if name is not None and name not in names:
            raise QC2ModelError(f"{caption_file} has no rows with \"split\": \"{name}\" (its splits: "
                                f"{', '.join(names)}): choose one with {option}, or {option} {other}")
    train = CaptionedFolder.load(folder, split=split).sample(images, seed=seed)
    if not want_heldout:
        return train, None
    held = CaptionedFolder.load(folder, split=heldout_split).sample(heldout_images, seed=seed)
    overlap = set(held.paths) & set(train.paths)
    if overlap:
        raise QC2ModelError(f"{len(overlap)} held-out photos are also training photos: choose another "
                            f"--heldout-split than --split ({heldout_split!r} vs {split!r})")
    return train, held


def _annotate(gallery: Gallery, quality_scorer: QualityScorer, what: str, progress: bool, budget: Any = None) -> None:
    """Relevance and quality levels for every caption of ``gallery`` (resumes), logged as ``what``."""
    if budget is not None and budget.should_stop():
        return
    for report in annotate_gallery(gallery, [quality_scorer], progress=progress, budget=budget):
        logger.info("%s: %s", what, report)


def train_from_captions(
    folder: str | os.PathLike,
    out: str | os.PathLike,
    *,
    work: str | os.PathLike | None = None,
    embedder: str | None = None,
    scorer: str | None = None,
    split: str | None = "train",
    images: int | None = None,
    heldout_split: str | None = "dev",
    heldout_images: int | None = 60,
    base_model: str | None = None,
    config: QC2TrainConfig | None = None,
    random_levels: bool = False,
    checkpoint_every: int | None = 50,
    max_seconds: float | None = None,
    probe_size: int | None = 250,
    progress: bool = True,
    budget: Any = None,
):
    """Train a QC2 model on a captioned collection that is *not* the gallery it will search.

    Relevance is the embedder's caption-photo similarity, quality the scorer's score of the photo,
    and the levels are cut at the training captions' own quantiles (recorded in the model). The model
    is saved to ``out`` without a gallery fingerprint, so any gallery can use it. ``work`` (default
    ``<out>.work``) keeps the galleries and the checkpoint, so an interrupted run resumes.
    ``budget`` (a :class:`~pictrieve.tools.core.time_budget.TimeBudget`) or ``max_seconds`` covers the
    preparation (indexing and annotating stop part-way and resume) and the training; stopped while
    preparing, it returns ``(None, a report with stopped_early, None)``. Returns ``train_on_gallery``'s
    ``(model, report, directory)``.
    """
    from pictrieve.tools.core.time_budget import TimeBudget

    budget = budget if budget is not None else TimeBudget(max_seconds)
    work = Path(work) if work is not None else Path(f"{out}.work")
    train, heldout, key = prepare_caption_galleries(
        folder, work, embedder=embedder, scorer=scorer, split=split, images=images,
        heldout_split=heldout_split, heldout_images=heldout_images, seed=(config or QC2TrainConfig()).seed,
        progress=progress, budget=budget)
    if budget.should_stop():  # the galleries may be incomplete: train on the next run
        logger.warning("stopped while preparing the training galleries: the time budget (%.0f s) is spent; "
                       "run the same command again to resume", budget.seconds)
        return None, TrainReport(examples=0, steps=0, epochs=(config or QC2TrainConfig()).epochs,
                                 seconds=budget.elapsed(), cache_seconds=0.0, first_loss=float("nan"),
                                 final_loss=float("nan"), stopped_early=True), None
    return train_on_gallery(
        train, quality_keys=[key], base_model=base_model, config=config, out=out, random_levels=random_levels,
        progress=progress, portable=True, heldout=heldout, probe_size=probe_size,
        checkpoint_dir=work / ("checkpoint-random" if random_levels else "checkpoint"),
        checkpoint_every=checkpoint_every, budget=budget,
    )


def _reuse_or_train(gallery: Gallery, directory: Path, config: QC2TrainConfig, random_levels: bool,
                    base_model: str | None, quality_key: str, progress: bool) -> tuple[QC2Model, dict]:
    from pictrieve.agents.qc2.annotation import fingerprint_of

    wanted = {"config": vars(config), "random_levels": random_levels}
    try:
        model = load_qc2_model(directory, fingerprint=fingerprint_of(gallery), device="cpu")
        same = all(model.training.get(k) == v for k, v in wanted.items())
        if same and model.axes[1].score_key == quality_key and (base_model is None or model.base_model == base_model):
            logger.info("reusing the QC2 model in %s", directory)
            return model, {**model.training, "reused": True}
    except QC2ModelError:
        pass
    started = time.perf_counter()
    model, report, _ = train_on_gallery(gallery, quality_keys=[quality_key], base_model=base_model, config=config,
                                        out=directory, random_levels=random_levels, progress=progress)
    return model, {**model.training, "wall_seconds": time.perf_counter() - started, "reused": False}


def evaluate_quality_control(
    folder: str | os.PathLike,
    *,
    queries: Sequence[str] | None = None,
    embedder: str | None = None,
    gallery_location: str | os.PathLike | None = None,
    scorer: str | None = None,
    base_model: str | None = None,
    train_config: QC2TrainConfig | None = None,
    samples: int = 1,
    seed: int = 0,
    methods: Sequence[str] = METHODS,
    progress: bool = True,
    qc2_model: str | os.PathLike | None = None,
    train_captions: str | os.PathLike | None = None,
    train_images: int | None = None,
) -> dict[str, Any]:
    """Run the evaluation described in the module docstring; returns a JSON-ready dict.

    By default QC2 and FT-random are trained on the searched folder's own captions. With
    ``train_captions`` (another captioned folder, e.g. flickr8k-train; ``train_images``: a seeded
    sample of that many of its ``train`` rows) they are trained there instead
    (:func:`train_from_captions`), so the searched gallery is never trained on. ``qc2_model``: use
    this already trained QC2 model (e.g. from ``pictrieve quality train --captions-from``) as is.
    """
    from pictrieve.tools.models.causal_lm import OFFLINE_DEFAULT_LM, load_causal_lm

    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    captions = load_captioned_folder(folder)
    queries = list(queries) if queries else frequent_noun_queries([c for cs in captions.values() for c in cs])
    config = train_config or QC2TrainConfig()
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="pictrieve-qc2-eval-") as scratch:
        started = time.perf_counter()
        gallery = eval_gallery(CaptionedFolder.load(folder), embedder, location=gallery_location or scratch,
                               progress=progress)
        timings["index_seconds"] = time.perf_counter() - started
        scorer_name = scorer or default_quality_scorer_name(gallery.embedder_name)
        quality_scorer = create_quality_scorer(scorer_name)
        started = time.perf_counter()
        annotation = annotate_gallery(gallery, [quality_scorer], progress=progress)
        timings["annotate_seconds"] = time.perf_counter() - started
        scored = _ScoredGallery(gallery, quality_scorer.key, quality_scorer.higher_is_better)

        models: dict[str, QC2Model] = {}
        training: dict[str, Any] = {}
        root = Path(gallery.location) if not str(gallery.location).startswith("http") else Path(scratch)
        for method, random_levels in (("qc2", False), ("ft_random", True)):
            if method not in methods:
                continue
            if method == "qc2" and qc2_model is not None:
                models[method] = load_qc2_model(qc2_model, device="cpu")
                if models[method].axes[1].score_key != quality_scorer.key:
                    raise QC2ModelError(f"the QC2 model in {qc2_model} conditions on "
                                        f"{models[method].axes[1].score_key!r}, not on {quality_scorer.key!r}")
                training[method] = {**models[method].training, "model": str(qc2_model),
                                    "trained_on": models[method].gallery, "reused": True}
            elif train_captions is not None:
                started = time.perf_counter()
                name = "qc2" if not random_levels else "qc2-random"
                models[method], _, _ = train_from_captions(
                    train_captions, root / f"{name}-from-captions", work=root / "train-captions",
                    embedder=gallery.embedder_name, scorer=quality_scorer.key, images=train_images,
                    base_model=base_model, config=config, random_levels=random_levels, progress=progress)
                training[method] = {**models[method].training, "trained_on": models[method].gallery,
                                    "wall_seconds": time.perf_counter() - started}
            else:
                models[method], training[method] = _reuse_or_train(
                    gallery, root / ("qc2" if not random_levels else "qc2-random"), config, random_levels,
                    base_model, quality_scorer.key, progress)
        # The level names of the grid; the searched gallery's own thresholds only matter for reporting
        # (a model trained elsewhere carries its training captions' thresholds, in "training").
        axes = build_training_data(list(gallery.items()), [quality_scorer.key], n_levels=3)[1]
        axis_names = [a.axis for a in axes]
        grid = [(r, q) for r in axes[0].levels for q in axes[1].levels]
        if "pt" in methods:
            pt_model, pt_tokenizer = load_causal_lm(base_model or OFFLINE_DEFAULT_LM, device="cpu")

        results: dict[str, dict[str, Any]] = {}
        examples: dict[str, dict[str, list[str]]] = {}
        started = time.perf_counter()
        for method in methods:
            results[method], examples[method] = {}, {}
            for rel_level, q_level in grid:
                condition = f"{axis_names[0]}={rel_level}, {axis_names[1]}={q_level}"
                if method == "prefix":
                    texts, shorts = list(queries), list(queries)
                else:
                    if method == "pt":
                        lm, tokenizer, allowed = pt_model, pt_tokenizer, None
                    else:
                        lm, tokenizer, allowed = models[method].model, models[method].tokenizer, models[method].allowed_token_ids
                    completed = complete_queries(
                        lm, tokenizer, [CompletionRequest(q, (rel_level, q_level)) for q in queries], axis_names,
                        samples=samples, settings=SamplingSettings(), allowed_token_ids=allowed, seed=seed,
                    )
                    texts = [t for per_query in completed for t in per_query]
                    shorts = [q for q in queries for _ in range(samples)]
                results[method][condition] = scored.measure(texts, shorts)
                examples[method][condition] = texts[: SHOWN_COMPLETIONS * samples : samples]
                logger.info("%s %s: %s", method, condition, results[method][condition]["top5"])
        timings["complete_and_retrieve_seconds"] = time.perf_counter() - started
        return {
            "folder": str(folder),
            "embedder": gallery.embedder_name,
            "images": len(scored.ids),
            "scorer": {"name": quality_scorer.key, "axis": axis_names[1], "description": quality_scorer.description,
                       "higher_is_better": quality_scorer.higher_is_better},
            "queries": list(queries),
            "samples": samples,
            "axes": [a.to_dict() for a in axes],
            "annotation": [vars(r) | {"failed": len(r.failed)} for r in annotation],
            "training": training,
            "timings": timings,
            "methods": results,
            "rerank": scored.rerank(queries),
            "monotonic": monotonicity(results, axes),
            "examples": examples,
            "model_axes": {m: [a.to_dict() for a in models[m].axes] for m in models},
        }


def monotonicity(results: dict[str, dict[str, Any]], axes: Sequence[Any], top: str = "top5") -> dict[str, Any]:
    """Per method and axis: the score averaged over the other axis's levels, for each requested level.

    ``increasing`` is true when the requested level orders the measured score Low < Medium < High
    (for a lower-is-better quality score, "better" means a lower raw value, so we compare the
    oriented value).
    """
    out: dict[str, Any] = {}
    for method, by_condition in results.items():
        out[method] = {}
        for position, (axis, metric) in enumerate(((axes[0], "relevance"), (axes[1], "quality"))):
            means = []
            for level in axis.levels:
                values = [v[top][metric] for cond, v in by_condition.items()
                          if cond.split(", ")[position].split("=")[1] == level]
                means.append(float(np.mean(values)))
            oriented = means if axis.higher_is_better else [-m for m in means]
            out[method][axis.axis] = {
                "levels": list(axis.levels),
                "mean": means,
                "increasing": bool(all(a < b for a, b in zip(oriented, oriented[1:]))),
            }
    return out
