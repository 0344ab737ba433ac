"""Captioned folders as evaluation sets, and the one policy for where their galleries live.

A captioned folder is images plus ``captions.jsonl`` (``{"image": "images/NAME.jpg", "captions": [...]}``
per line, the flickr8k-dev format). Every evaluation (plain retrieval, PlugIR, QC2, and the methods
that follow) indexes it the same way, into a gallery cached under ``$PICTRIEVE_CACHE/eval-galleries``
and keyed by the folder's content *and the embedder's content*: an embedder whose weights changed
under the same name gets a fresh gallery instead of stale vectors.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pictrieve.vectorstore.captions import CAPTIONS_FILE, read_captions_jsonl

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CaptionedFolder:
    """The images of a folder that have captions, in a stable (sorted) order."""

    root: Path
    captions: dict[Path, list[str]]

    @classmethod
    def load(cls, root: str | os.PathLike, limit: int | None = None,
             split: str | None = None) -> "CaptionedFolder":
        """Read ``root/captions.jsonl``; images that do not exist are skipped with a warning.

        ``limit`` keeps the first ``limit`` images (sorted by path). ``split`` keeps only the lines
        whose ``"split"`` field equals it (flickr8k-train marks rows ``train`` / ``dev`` / ``none``).
        """
        root = Path(root)
        caption_file = root / CAPTIONS_FILE
        if not caption_file.is_file():
            raise FileNotFoundError(
                f"{caption_file} not found: the folder needs a captions.jsonl with lines like "
                '{"image": "images/NAME.jpg", "captions": ["...", "..."]}'
            )
        captions = {path: texts for path, texts in read_captions_jsonl(caption_file).items() if texts}
        if split is not None:
            splits = read_caption_splits(caption_file)
            captions = {path: texts for path, texts in captions.items() if splits.get(path) == split}
            if not captions:
                raise ValueError(f"{caption_file} has no images with \"split\": \"{split}\"")
        for path in [p for p in captions if not p.is_file()]:
            logger.warning("%s lists %s, which does not exist; skipping it", caption_file, path)
            del captions[path]
        if not captions:
            raise ValueError(f"{caption_file} lists no existing images with captions")
        paths = sorted(captions)[:limit] if limit else sorted(captions)
        return cls(root=root, captions={p: captions[p] for p in paths})

    @property
    def paths(self) -> list[Path]:
        return list(self.captions)

    def sample(self, n: int | None, seed: int = 0) -> "CaptionedFolder":
        """A seeded random subset of ``n`` images (all of them when ``n`` is None or too large)."""
        if n is None or n >= len(self.captions):
            return self
        if n < 1:
            raise ValueError(f"cannot sample {n} images; ask for at least 1")
        import random

        chosen = sorted(random.Random(seed).sample(sorted(self.captions), n))
        return CaptionedFolder(root=self.root, captions={p: self.captions[p] for p in chosen})

    def fingerprint(self) -> str:
        """A key that changes when an image file or a caption changes."""
        digest = hashlib.sha1()
        for path, texts in self.captions.items():
            stat = path.stat()
            digest.update(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{texts}".encode())
        return digest.hexdigest()[:16]


def read_caption_splits(caption_file: str | os.PathLike) -> dict[Path, str]:
    """The ``"split"`` field of each line of a captions.jsonl, by absolute image path (lines without one are left out)."""
    import json

    caption_file = Path(caption_file)
    splits: dict[Path, str] = {}
    with open(caption_file, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
                if "split" in record:
                    splits[(caption_file.parent / record["image"]).resolve()] = str(record["split"])
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # read_captions_jsonl already warns about malformed lines
    return splits


def embedder_fingerprint(embedder: Any) -> str:
    """A key for what an embedder computes, not just its name: its vectors for a fixed image and text.

    Two embedders with the same name but different weights get different keys.
    """
    from PIL import Image

    probe = Image.fromarray(np.arange(32 * 32 * 3, dtype=np.uint8).reshape(32, 32, 3))
    digest = hashlib.sha1(str(getattr(embedder, "name", type(embedder).__name__)).encode())
    rows = [np.asarray(embedder.embed_images([probe]), dtype=np.float32)]
    try:
        rows.append(np.asarray(embedder.embed_texts(["a photo"]), dtype=np.float32))
    except Exception:  # image-only embedders have no text side
        pass
    for row in rows:
        digest.update(np.round(row, 4).tobytes())
    return digest.hexdigest()[:16]


def eval_gallery(
    folder: CaptionedFolder | str | os.PathLike,
    embedders: Sequence[Any] | Any = None,
    *,
    location: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    batch_size: int = 32,
    progress: bool = False,
    budget: Any = None,
) -> Any:
    """The gallery of ``folder`` indexed with ``embedders`` (names or objects; the first is the view
    returned), cached per folder and embedder content unless ``location`` is given. Re-runs resume.

    ``cache_dir``: the folder holding cached evaluation galleries (default: ``eval-galleries`` under
    the pictrieve cache, ``PICTRIEVE_CACHE``); the gallery inside it is still keyed by content.
    ``location``: an exact gallery folder instead (no keying; the caller owns it). ``budget``: a
    :class:`~pictrieve.tools.core.time_budget.TimeBudget` that may stop indexing part-way (see ``Gallery.add``)."""
    from pictrieve.tools.core.pypi_assets import cache_root
    from pictrieve.tools.models.embedders.factory import create_embedder, default_embedder_name
    from pictrieve.vectorstore.gallery import Gallery

    folder = folder if isinstance(folder, CaptionedFolder) else CaptionedFolder.load(folder)
    if embedders is None or isinstance(embedders, str) or not isinstance(embedders, Sequence):
        embedders = [embedders if embedders is not None else default_embedder_name()]
    models = [create_embedder(e) if isinstance(e, str) else e for e in embedders]
    if location is None:
        key = "__".join([folder.fingerprint(), *(embedder_fingerprint(m) for m in models)])
        location = Path(cache_dir if cache_dir is not None else cache_root() / "eval-galleries") / key
    gallery = Gallery.open(location, models[0])
    report = gallery.add(folder.paths, embedders=models if len(models) > 1 else None, batch_size=batch_size,
                         progress=progress, budget=budget)
    if report.failed:
        logger.warning("%d images could not be indexed and are left out", len(report.failed))
    return gallery
