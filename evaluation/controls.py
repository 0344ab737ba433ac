"""Planted controls for evaluations: embedders that are bad on purpose, so a method's claim can be checked.

``random-projection:SEED`` is **not a model** and never belongs in a user's gallery. It turns a photo
into an 8x8 colour thumbnail (192 numbers, its mean removed) and projects that through a fixed
Gaussian matrix drawn from ``SEED`` into 64 dimensions; a text becomes a random unit vector drawn from
the text and ``SEED``. So its image-to-image similarity is only rough colour layout, and its text side
is pure noise. NEEDLE's evaluation plants it next to the real embedders: learned trust must push its
weight down (:mod:`pictrieve.evaluation.needle_trust`).

The family is registered in the embedder registry when :mod:`pictrieve.evaluation` is imported (every
``pictrieve eval`` command does), so evaluation galleries can index and reopen it by name, while the
factory's own list of models (:mod:`pictrieve.tools.models.embedders.factory`) does not advertise it.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np
from PIL import Image

from pictrieve.tools.models.embedders.base import EmbedderBase, l2_normalize

RANDOM_PROJECTION = "random-projection"
THUMBNAIL_SIDE = 8
PROJECTED_DIM = 64


class RandomProjectionEmbedder(EmbedderBase):
    """``random-projection:SEED``: a planted bad embedder (see the module docstring). Deterministic."""

    dim = PROJECTED_DIM

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)
        self.name = f"{RANDOM_PROJECTION}:{self.seed}"
        features = THUMBNAIL_SIDE * THUMBNAIL_SIDE * 3
        self.matrix = np.random.default_rng(self.seed).standard_normal((features, self.dim)).astype(np.float32)

    def preprocess(self, image: Image.Image) -> np.ndarray:
        """The cheap feature: an 8x8 RGB thumbnail in [0, 1], its mean removed (so brightness alone says nothing)."""
        small = image.convert("RGB").resize((THUMBNAIL_SIDE, THUMBNAIL_SIDE), Image.BILINEAR)
        pixels = np.asarray(small, dtype=np.float32).reshape(-1) / 255.0
        return pixels - pixels.mean()

    def embed_preprocessed(self, batch: Sequence[np.ndarray]) -> np.ndarray:
        if not len(batch):
            return np.zeros((0, self.dim), dtype=np.float32)
        return l2_normalize(np.stack(list(batch)) @ self.matrix)

    def _embed_text_batch(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:
            key = hashlib.sha256(f"{self.seed}|{text}".encode("utf-8")).digest()
            rows.append(np.random.default_rng(int.from_bytes(key[:8], "little")).standard_normal(self.dim))
        return l2_normalize(np.asarray(rows, dtype=np.float32))


def build_random_projection(spec: str, device: str | None = None) -> RandomProjectionEmbedder:
    """Registry hook: ``random-projection`` (seed 0) or ``random-projection:SEED``; ``device`` is ignored."""
    del device
    spec = spec.strip() or "0"
    try:
        return RandomProjectionEmbedder(int(spec))
    except ValueError:
        raise ValueError(f"random-projection takes an integer seed, e.g. 'random-projection:0'; got {spec!r}") from None


def register_controls() -> None:
    """Make ``random-projection:SEED`` buildable by name (idempotent)."""
    from pictrieve.tools.models.embedders.factory import EMBEDDERS

    if RANDOM_PROJECTION not in EMBEDDERS:
        EMBEDDERS.register(RANDOM_PROJECTION, build_random_projection,
                           "PLANTED CONTROL for evaluations, not a model: random projection of an 8x8 thumbnail")
