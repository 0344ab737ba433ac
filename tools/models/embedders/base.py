"""The one interface every image-text embedder in pictrieve implements.

An embedder maps images and texts into one shared vector space, so that a text query can be
compared with images by cosine similarity. Galleries, retrievers and every graph only ever talk
to this protocol, so a user can swap OpenCLIP for the offline default (or their own model)
without touching anything else.

Contract:
- outputs are ``float32`` arrays of shape ``(n, dim)``, each row L2-normalised;
- ``name`` is the string the factory accepts to rebuild the same embedder, and is what a gallery
  records so that it can reopen itself with the right model;
- ``preprocess`` turns one decoded PIL image into whatever ``embed_preprocessed`` batches; it must be
  thread-safe and cheap relative to the model, because the indexer runs it in worker threads while
  the model works on the previous batch;
- ``preprocess_pixels`` (optional, ``None`` when not offered) makes the same kind of input from the photo's
  ``(h, w, 3)`` uint8 RGB pixels, upright (the offline default's on a GPU resizes with torch's kernel, within a level
  of ``preprocess``'s Pillow resize); the indexer calls it when an embedder offers it, and so skips making a PIL
  image of pixels it decoded as an array.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np
from PIL import Image


@runtime_checkable
class Embedder(Protocol):
    """Image-text embedder: see the module docstring for the contract."""

    name: str
    dim: int

    def preprocess(self, image: Image.Image) -> Any:
        """Turn one decoded RGB image into a model input (thread-safe)."""

    def embed_preprocessed(self, batch: Sequence[Any]) -> np.ndarray:
        """Embed a batch of ``preprocess`` outputs: ``(len(batch), dim)`` float32, unit rows."""

    def embed_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """Embed decoded images: ``(len(images), dim)`` float32, unit rows."""

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts: ``(len(texts), dim)`` float32, unit rows."""


class EmbedderBase:
    """Shared plumbing for concrete embedders: batching and normalisation.

    Subclasses set ``name`` and ``dim`` and implement ``preprocess``, ``embed_preprocessed`` and
    ``_embed_text_batch``; this class supplies ``embed_images`` and ``embed_texts`` in batches of
    ``batch_size``.
    """

    name: str = ""
    dim: int = 0
    batch_size: int = 32

    def preprocess(self, image: Image.Image) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def embed_preprocessed(self, batch: Sequence[Any]) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def _embed_text_batch(self, texts: Sequence[str]) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def embed_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        rows = [
            self.embed_preprocessed([self.preprocess(im) for im in images[i : i + self.batch_size]])
            for i in range(0, len(images), self.batch_size)
        ]
        return _stack(rows, self.dim)

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed_texts takes a list of strings; wrap a single query in [ ]")
        rows = [
            self._embed_text_batch(list(texts[i : i + self.batch_size]))
            for i in range(0, len(texts), self.batch_size)
        ]
        return _stack(rows, self.dim)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim})"


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Return ``vectors`` as float32 with unit L2 rows (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def _stack(rows: list[np.ndarray], dim: int) -> np.ndarray:
    if not rows:
        return np.zeros((0, dim), dtype=np.float32)
    return l2_normalize(np.concatenate(rows, axis=0))
