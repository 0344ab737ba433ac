"""Text-to-image retrieval quality on your own captioned photos.

A folder with images and ``captions.jsonl`` (the flickr8k-dev format) is indexed into a gallery;
every caption becomes a query whose only correct answer is its own image. Ranks are exact (numpy
over all stored vectors, not the approximate HNSW index) and tie-aware (see
:mod:`pictrieve.evaluation.retrieval`), so embedders can be compared fairly.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from pictrieve.evaluation.retrieval import retrieval_metrics
from pictrieve.tools.embedders.base import Embedder
from pictrieve.vectorstore.captions import CAPTIONS_FILE, read_captions_jsonl
from pictrieve.vectorstore.gallery import Gallery, path_id

logger = logging.getLogger(__name__)


def load_captioned_folder(folder: str | os.PathLike) -> dict[Path, list[str]]:
    """``{image path: captions}`` from ``folder/captions.jsonl``, keeping images that exist."""
    caption_file = Path(folder) / CAPTIONS_FILE
    if not caption_file.is_file():
        raise FileNotFoundError(
            f"{caption_file} not found: the folder needs a captions.jsonl with lines like "
            '{"image": "images/NAME.jpg", "captions": ["...", "..."]}'
        )
    captions = {path: texts for path, texts in read_captions_jsonl(caption_file).items() if texts}
    missing = [path for path in captions if not path.is_file()]
    for path in missing:
        logger.warning("%s lists %s, which does not exist; skipping it", caption_file, path)
        del captions[path]
    if not captions:
        raise ValueError(f"{caption_file} lists no existing images with captions")
    return captions


def evaluate_caption_retrieval(
    folder: str | os.PathLike,
    embedder: Embedder | str | None = None,
    *,
    gallery_location: str | os.PathLike | None = None,
    batch_size: int = 32,
    progress: bool = True,
) -> dict[str, Any]:
    """Index ``folder`` and score every caption as a query for its own image.

    Returns ``{"recall@1", "recall@5", "recall@10", "median_rank", "queries", "images", "embedder"}``.
    The gallery is kept at ``gallery_location`` when given (re-runs skip indexing), else temporary.
    """
    captions = load_captioned_folder(folder)
    with tempfile.TemporaryDirectory(prefix="pictrieve-eval-") as scratch:
        gallery = Gallery.open(gallery_location or scratch, embedder)
        report = gallery.add(list(captions), batch_size=batch_size, progress=progress)
        if report.failed:
            logger.warning("%d images could not be indexed and are left out", len(report.failed))
        indexed = {path_id(path): path for path in captions}
        stored_ids = [id_ for id_ in gallery.ids() if id_ in indexed]
        image_vectors = gallery.embeddings(stored_ids)
        column = {id_: i for i, id_ in enumerate(stored_ids)}
        queries, targets = [], []
        for id_ in stored_ids:
            for text in captions[indexed[id_]]:
                queries.append(text)
                targets.append(column[id_])
        text_vectors = gallery.embedder.embed_texts(queries)
        metrics = retrieval_metrics(text_vectors @ image_vectors.T, np.asarray(targets))
        metrics.update(images=len(stored_ids), embedder=gallery.embedder_name)
        return metrics
