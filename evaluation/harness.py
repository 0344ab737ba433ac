"""One evaluation harness for every registered method.

``evaluate_method(method, folder)`` indexes a captioned folder (:mod:`.datasets`), turns each caption
into a query whose one correct answer is its own image, and measures how often the method finds it:

- a method whose ranking is the gallery's own (``Method.exact_ranking``: plain ``search``) is scored
  with the exact, tie-aware ranker over every stored vector (:mod:`.ranking`): Recall@1/5/10, median
  and mean rank (what ``pictrieve eval retrieval`` prints);
- any other registered method whose input takes a ``query`` (plugins too) is run as a graph, one query
  at a time, with its run settings as context: Recall@K and MRR over the ``hits`` it returns, and
  seconds per query. What it needs besides the gallery (``Method.needs``: a language model, a QC2
  model, a visualizer) is passed by need name through ``builder_kwargs``.

Methods are found in the registry (:mod:`pictrieve.graphs.registry`); none is named here.

Interactive methods (PlugIR) need a simulated user and have their own driver
(:mod:`.interactive`), built on the same datasets and ranker.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Sequence

import numpy as np

from pictrieve.evaluation.datasets import CaptionedFolder, eval_gallery
from pictrieve.evaluation.ranking import ExactRanker
from pictrieve.evaluation.retrieval import median_rank, recall_at

logger = logging.getLogger(__name__)


def caption_queries(folder: CaptionedFolder, gallery: Any, limit: int | None = None,
                    seed: int = 0) -> tuple[list[str], list[str]]:
    """``(queries, target_ids)``: every caption of every indexed image, or a seeded sample of ``limit``."""
    from pictrieve.vectorstore.chroma_store import path_id

    stored = set(gallery.ids())
    pairs = [(text, path_id(path)) for path, texts in folder.captions.items() for text in texts
             if path_id(path) in stored]
    if limit is not None and limit < len(pairs):
        chosen = np.random.default_rng(seed).choice(len(pairs), size=limit, replace=False)
        pairs = [pairs[i] for i in sorted(chosen)]
    return [q for q, _ in pairs], [t for _, t in pairs]


def evaluate_method(
    method: str,
    folder: CaptionedFolder | str | os.PathLike,
    *,
    embedders: Sequence[Any] | Any = None,
    gallery_location: str | os.PathLike | None = None,
    queries: int | None = None,
    settings: dict[str, Any] | None = None,
    seed: int = 0,
    batch_size: int = 32,
    progress: bool = True,
    **builder_kwargs: Any,
) -> dict[str, Any]:
    """Evaluate a registered method on a captioned folder (see the module docstring).

    ``embedders``: the gallery's embedder(s) (default: the default embedder); ``queries``: evaluate a
    seeded sample of that many captions instead of all; ``settings``: the method's run settings.
    """
    from pictrieve.graphs.registry import get_method

    spec = get_method(method)
    if not spec.exact_ranking and not spec.takes("query"):
        raise ValueError(f"{method} takes no text query (its input: "
                         f"{', '.join(f['name'] for f in spec.input_fields())}): it has its own evaluation")
    folder = folder if isinstance(folder, CaptionedFolder) else CaptionedFolder.load(folder)
    gallery = eval_gallery(folder, embedders, location=gallery_location, batch_size=batch_size, progress=progress)
    texts, targets = caption_queries(folder, gallery, queries, seed)
    base = {"method": method, "images": gallery.count(), "embedder": gallery.embedder_name}
    if spec.exact_ranking:
        stats = ExactRanker(gallery).ranks(texts, targets)
        metrics: dict[str, Any] = {f"recall@{k}": recall_at(stats, k) for k in (1, 5, 10)}
        metrics.update(median_rank=median_rank(stats), mean_rank=float(stats["ranks"].mean()),
                       queries=len(texts))
        return metrics | base
    return _run_graph(spec, gallery, texts, targets, settings or {}, progress, builder_kwargs) | base


def _run_graph(spec: Any, gallery: Any, texts: Sequence[str], targets: Sequence[str], settings: dict[str, Any],
               progress: bool, builder_kwargs: dict[str, Any]) -> dict[str, Any]:
    from tqdm.auto import tqdm

    context = spec.settings_class().coerce(settings)
    k = int(getattr(context, "k", 10))
    graph = spec.build(gallery, **builder_kwargs)
    # The queries are the gallery's own captions: a method that also ranks by the photos' words (hybrid search)
    # would find each target by its caption, a leak, so the harness asks for the vectors alone.
    extra = {"hybrid": False} if spec.takes("hybrid") else {}
    found_at: list[int] = []
    seconds = 0.0
    for text, target in tqdm(list(zip(texts, targets)), desc=f"eval {spec.name}", disable=not progress):
        started = time.perf_counter()
        hits = graph.invoke({"query": text, **extra}, context=context)["hits"]
        seconds += time.perf_counter() - started
        ids = [hit.id for hit in hits]
        found_at.append(ids.index(target) + 1 if target in ids else 0)
    found = np.array(found_at)
    return {
        f"recall@{k}": float((found > 0).mean()) if len(found) else float("nan"),
        "mrr": float(np.where(found > 0, 1.0 / np.maximum(found, 1), 0.0).mean()) if len(found) else float("nan"),
        "queries": len(texts),
        "seconds_per_query": seconds / max(len(texts), 1),
        "settings": context.to_dict(),
    }
