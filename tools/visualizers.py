"""Visualizers: turn a text prompt into guide images, chosen by name like embedders.

``VISUALIZERS.create("exemplar:/path/to/captioned/folder")`` builds the offline visualizer. It does
NOT generate anything: it returns the photos of a reference captioned collection whose captions best
match the prompt (text-to-text cosine with all-MiniLM-L6-v2). Its images are *exemplars*, never
generations, and ``generates`` is ``False`` so reports can say so.

Text-to-image backends live in :mod:`pictrieve.tools.text_to_image`: ``diffusers:<model>``,
``openai:<model>`` and ``tiny-random`` (a real diffusers pipeline with random weights, for tests and
cost measurements). A backend that cannot be built raises :class:`VisualizerUnavailableError`
saying what to install or pass.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from pictrieve.errors import PictrieveError
from pictrieve.tools.registry import Registry, UnknownNameError

logger = logging.getLogger(__name__)


class UnknownVisualizerError(UnknownNameError):
    """A visualizer name whose family is not registered."""


class VisualizerUnavailableError(PictrieveError):
    """A visualizer that cannot be built here (missing backend or bad reference folder)."""


VISUALIZERS: Registry[Any] = Registry(
    "visualizer", example="exemplar:/path/to/captioned-folder", error=UnknownVisualizerError
)


def read_captioned_folder(root: str | os.PathLike) -> list[tuple[Path, list[str]]]:
    """``(image path, captions)`` pairs from ``root/captions.jsonl`` (lines ``{"image", "captions"}``)."""
    folder = Path(root).expanduser()
    index = folder / "captions.jsonl"
    if not index.is_file():
        raise VisualizerUnavailableError(
            f"{folder} has no captions.jsonl: the exemplar visualizer needs a captioned folder "
            '(one JSON line per photo: {"image": "relative/path.jpg", "captions": ["...", ...]})'
        )
    items: list[tuple[Path, list[str]]] = []
    for line in index.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        captions = [c for c in record.get("captions", []) if isinstance(c, str) and c.strip()]
        if captions:
            items.append((folder / record["image"], captions))
    if not items:
        raise VisualizerUnavailableError(f"{index} lists no captioned photos")
    return items


class ExemplarVisualizer:
    """The offline visualizer: the reference photos whose captions best match the prompt.

    An image scores as its best-matching caption. Caption vectors are cached on disk under
    ``$PICTRIEVE_CACHE/exemplar/`` keyed by the caption file's content, so only the first use of a
    reference collection pays for encoding. ``seed`` is accepted for the protocol and ignored: the
    choice is deterministic.
    """

    generates = False

    def __init__(self, folder: str | os.PathLike, *, encoder: Any = None, cache_dir: str | os.PathLike | None = None) -> None:
        self.folder = Path(folder).expanduser()
        self.name = f"exemplar:{self.folder}"
        self.items = read_captioned_folder(self.folder)
        counts = np.array([len(caps) for _, caps in self.items], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)[:-1]])  # each photo's first caption row
        if encoder is None:
            from pictrieve.tools.sentence_encoder import SentenceEncoder

            encoder = SentenceEncoder()
        self.encoder = encoder
        self.caption_vectors = self._caption_vectors(cache_dir)

    def _caption_vectors(self, cache_dir: str | os.PathLike | None) -> np.ndarray:
        from pictrieve.tools.pypi_assets import cache_root

        texts = [c for _, caps in self.items for c in caps]
        key = hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:20]
        path = Path(cache_dir or cache_root() / "exemplar") / f"{key}.npy"
        if path.is_file():
            vectors = np.load(path)
            if vectors.shape[0] == len(texts):
                return vectors
        logger.info("encoding %d reference captions of %s (cached in %s)", len(texts), self.folder, path)
        vectors = np.asarray(self.encoder.encode(texts), dtype=np.float32)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, vectors)
        os.replace(tmp, path)
        return vectors

    def best_matches(self, prompt: str, n: int = 1) -> list[tuple[Path, float]]:
        """The ``n`` reference photos best matching ``prompt``: ``[(path, cosine), ...]``, best first."""
        if not prompt or not prompt.strip():
            raise VisualizerUnavailableError("empty prompt: say what the guide images should show")
        query = np.asarray(self.encoder.encode([prompt]), dtype=np.float32)[0]
        sims = self.caption_vectors @ query
        best = np.maximum.reduceat(sims, self._starts)  # a photo scores as its best caption
        n = max(1, min(int(n), len(self.items)))
        top = np.argpartition(-best, n - 1)[:n]
        top = top[np.lexsort((top, -best[top]))]
        return [(self.items[i][0], float(best[i])) for i in top]

    def source_paths(self, prompt: str, n: int = 1) -> list[Path]:
        """The files of the ``n`` best-matching reference photos (see :mod:`pictrieve.tools.guide_images`)."""
        return [path for path, _ in self.best_matches(prompt, n)]

    def visualize(self, prompt: str, *, n: int = 1, seed: int | None = None) -> list[Image.Image]:
        del seed
        images = []
        for path, _ in self.best_matches(prompt, n):
            with Image.open(path) as image:
                images.append(image.convert("RGB"))
        return images


def _build_exemplar(spec: str, **kwargs: Any) -> ExemplarVisualizer:
    if not spec:
        raise VisualizerUnavailableError("name the reference collection: exemplar:/path/to/captioned-folder")
    return ExemplarVisualizer(spec, **kwargs)


VISUALIZERS.register("exemplar", _build_exemplar, "offline: reference photos whose captions match the prompt (not generated)")
VISUALIZERS.register("diffusers", "pictrieve.tools.text_to_image:build_diffusers",
                     "a diffusers text-to-image pipeline: diffusers:<model id or local folder>")
VISUALIZERS.register("openai", "pictrieve.tools.text_to_image:build_openai",
                     "an OpenAI-compatible images endpoint: openai:<model> (base_url=... for others)")
VISUALIZERS.register("tiny-random", "pictrieve.tools.text_to_image:build_tiny_random",
                     "a tiny random-weight diffusers pipeline: real code path, meaningless pictures (tests, cost)")


def create_visualizer(name: str, **kwargs: Any) -> Any:
    """Build a visualizer from its name, e.g. ``exemplar:/data/flickr8k-train``."""
    return VISUALIZERS.create(name, **kwargs)
