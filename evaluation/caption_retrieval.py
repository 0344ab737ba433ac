"""Text-to-image retrieval quality on your own captioned photos (``pictrieve eval retrieval``).

A folder with images and ``captions.jsonl`` (the flickr8k-dev format) is indexed into a gallery;
every caption becomes a query whose only correct answer is its own image. Ranks are exact (numpy
over all stored vectors, not the approximate HNSW index) and tie-aware (see
:mod:`pictrieve.evaluation.retrieval`), so embedders can be compared fairly. This is the harness's
``search`` method (:func:`pictrieve.evaluation.harness.evaluate_method`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from pictrieve.evaluation.datasets import CaptionedFolder
from pictrieve.tools.models.embedders.base import Embedder


def load_captioned_folder(folder: str | os.PathLike) -> dict[Path, list[str]]:
    """``{image path: captions}`` from ``folder/captions.jsonl``, keeping images that exist."""
    return CaptionedFolder.load(folder).captions


def evaluate_caption_retrieval(
    folder: str | os.PathLike,
    embedder: Embedder | str | None = None,
    *,
    gallery_location: str | os.PathLike | None = None,
    batch_size: int = 32,
    progress: bool = True,
) -> dict[str, Any]:
    """Index ``folder`` and score every caption as a query for its own image.

    Returns ``{"recall@1", "recall@5", "recall@10", "median_rank", "mean_rank", "queries", "images",
    "embedder", "method"}``. The gallery is kept at ``gallery_location`` when given (re-runs skip
    indexing), else it is temporary. ``batch_size`` is the number of images per model call while indexing.
    """
    from pictrieve.evaluation.harness import evaluate_method

    with tempfile.TemporaryDirectory(prefix="pictrieve-eval-") as scratch:
        return evaluate_method("search", folder, embedders=embedder, gallery_location=gallery_location or scratch,
                               batch_size=batch_size, progress=progress)
