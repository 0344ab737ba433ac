"""Pixels for an image tower on a GPU: byte batches through pinned memory, scaled on the device, JPEGs decoded there.

On a CPU the offline default and an exported open_clip tower take float32 arrays made in the decode threads. On a
GPU (issue 40, items 1 and 2) the host does less and copies less:

- :func:`recipe_bytes`: the decode threads resize and crop (:class:`PixelRecipe`'s PIL calls) and stop at
  ``(H, W, 3)`` uint8, a quarter of the float32 bytes;
- :class:`PinnedUpload`: a batch of those is stacked straight into page-locked (pinned) host memory and copied to
  the device with ``non_blocking=True`` (an asynchronous DMA the next batch's stacking overlaps); the scaling and
  normalising (:func:`normalized_on_device`) run on the device, in the tower's precision;
- :func:`decode_on_device`: with the GPU decoding JPEGs (torchvision's ``decode_jpeg(device="cuda")``, nvJPEG), the
  host only reads the files' bytes (:class:`EncodedJpeg`); decoding, EXIF orientation, resizing (antialiased
  bicubic, as torchvision's transform on a tensor) and normalising run on the device. Its pixels differ from PIL's
  by rounding (another IDCT, another resize kernel), as any two JPEG decoders do.

torchvision is chosen over nvImageCodec or DALI because open_clip already brings it (no new dependency) and its
batched ``decode_jpeg`` is nvJPEG; torchvision 0.29 marks its decoders deprecated in favour of TorchCodec, which
this module would switch to once that ships image decoding on CUDA in our pinned versions. Every function here also
runs on ``device="cpu"`` (no pinning), which is how the tests and ``benchmarks/gpu_indexing.py --dry-run`` run it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from PIL import Image

if TYPE_CHECKING:
    import torch

    from pictrieve.tools.models.embedders.clip_pixels import PixelRecipe

JPEG_MAGIC = b"\xff\xd8\xff"


@dataclass(frozen=True)
class EncodedJpeg:
    """A JPEG file's bytes and its EXIF orientation, for the model to decode on its device."""

    data: bytes
    orientation: int = 1
    path: str = ""


def recipe_bytes(recipe: "PixelRecipe", image: Image.Image) -> np.ndarray:
    """``image`` resized and cropped by ``recipe`` (its PIL calls), stopped before scaling: ``(H, W, 3)`` uint8."""
    return np.asarray(recipe.resized(image if image.mode == "RGB" else image.convert("RGB")), dtype=np.uint8)


def normalized_on_device(pixels: "torch.Tensor", recipe: "PixelRecipe", dtype: Any) -> "torch.Tensor":
    """``(n, H, W, 3)`` or ``(n, 3, H, W)`` pixels in [0, 255] (uint8, or float from :func:`resized_on_device`) on the
    device -> ``(n, 3, H, W)`` in ``dtype``, scaled to [0, 1]
    and normalised by the recipe's mean and std (computed in float32, then cast)."""
    import torch

    if pixels.shape[-1] == 3 and pixels.shape[1] != 3:
        pixels = pixels.permute(0, 3, 1, 2)
    mean = torch.tensor(recipe.mean, dtype=torch.float32, device=pixels.device).view(1, 3, 1, 1)
    std = torch.tensor(recipe.std, dtype=torch.float32, device=pixels.device).view(1, 3, 1, 1)
    return ((pixels.float() / 255.0 - mean) / std).to(dtype).contiguous()


class PinnedUpload:
    """Copies batches of host arrays to a device through reused page-locked buffers, without waiting.

    Each call stacks the arrays into a pinned buffer of their shape (allocated once per shape and slot) and starts
    an asynchronous copy (``non_blocking=True``). Two slots alternate; before a slot is written again, the copy out
    of it is waited for (a CUDA event), so a buffer is never overwritten while the DMA still reads it. On a CPU
    device it is a plain ``torch.from_numpy`` of the stacked batch."""

    SLOTS = 2

    def __init__(self, device: str) -> None:
        self.device = device
        self._pinned = str(device).startswith("cuda")
        self._buffers: dict[tuple[int, tuple[int, ...], str], Any] = {}
        self._events: dict[int, Any] = {}
        self._next = 0
        self._lock = threading.Lock()

    def to_device(self, arrays: Sequence[np.ndarray]) -> "torch.Tensor":
        import torch

        first = np.asarray(arrays[0])
        shape = (len(arrays), *first.shape)
        if not self._pinned:
            return torch.from_numpy(np.stack([np.asarray(a) for a in arrays]))
        with self._lock:
            slot, self._next = self._next, (self._next + 1) % self.SLOTS
            key = (slot, shape, str(first.dtype))
            event = self._events.get(slot)
            if event is not None:
                event.synchronize()  # the copy that last read this slot's buffer has finished
            buffer = self._buffers.get(key)
            if buffer is None:
                buffer = torch.empty(shape, dtype=torch.from_numpy(first[:0]).dtype, pin_memory=True)
                self._buffers[key] = buffer
            np.stack([np.asarray(a) for a in arrays], out=buffer.numpy())
            on_device = buffer.to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self._events[slot] = event
            return on_device


_TORCH_STEPS = {
    Image.Transpose.FLIP_LEFT_RIGHT: lambda x: x.flip(-1),
    Image.Transpose.FLIP_TOP_BOTTOM: lambda x: x.flip(-2),
    Image.Transpose.ROTATE_90: lambda x: x.rot90(1, dims=(-2, -1)),
    Image.Transpose.ROTATE_180: lambda x: x.rot90(2, dims=(-2, -1)),
    Image.Transpose.ROTATE_270: lambda x: x.rot90(3, dims=(-2, -1)),
    Image.Transpose.TRANSPOSE: lambda x: x.transpose(-2, -1),
    Image.Transpose.TRANSVERSE: lambda x: x.rot90(2, dims=(-2, -1)).transpose(-2, -1),
}
"""PIL's transposes as tensor operations on ``(C, H, W)`` (tests compare them with PIL for every orientation)."""


def upright_tensor(pixels: "torch.Tensor", orientation: int) -> "torch.Tensor":
    """``(C, H, W)`` pixels turned as EXIF ``orientation`` says (what :func:`~pictrieve.tools.core.images.upright`
    does to a PIL image)."""
    from pictrieve.tools.core.images import _TRANSPOSE

    for step in _TRANSPOSE.get(orientation, ()):
        pixels = _TORCH_STEPS[step](pixels)
    return pixels


def resized_on_device(pixels: "torch.Tensor", recipe: "PixelRecipe") -> "torch.Tensor":
    """``(3, h, w)`` uint8 resized and cropped as ``recipe`` says, on the tensor's device: ``(3, H, W)`` float32 in
    [0, 255] (resized in float: antialiased bicubic on uint8 is a CPU-only kernel in torchvision)."""
    import torchvision.transforms.v2.functional as F
    from torchvision.transforms import InterpolationMode

    height, width = recipe.size
    mode = InterpolationMode.BICUBIC if recipe.interpolation == "bicubic" else InterpolationMode.BILINEAR
    pixels = pixels.float()
    if recipe.resize_mode == "squash":
        resized = F.resize(pixels, [height, width], interpolation=mode, antialias=True)
    else:  # the short side, as torchvision's Resize(int), then the centre
        resized = F.center_crop(F.resize(pixels, [height], interpolation=mode, antialias=True), [height, width])
    return resized.clamp_(0, 255)


def decode_on_device(items: Sequence[EncodedJpeg], recipe: "PixelRecipe", device: str, dtype: Any) -> "torch.Tensor":
    """Decode JPEGs on ``device`` (one batched nvJPEG call on CUDA), turn them upright, resize, crop and normalise
    them there: ``(n, 3, H, W)`` in ``dtype``. Raises ``RuntimeError`` naming the first file the decoder refused."""
    import warnings

    import torch

    with warnings.catch_warnings():  # torchvision 0.29 deprecates its decoders for TorchCodec (see the module's text)
        warnings.simplefilter("ignore", DeprecationWarning)
        from torchvision.io import ImageReadMode, decode_jpeg

    encoded = [torch.frombuffer(bytearray(item.data), dtype=torch.uint8) for item in items]
    try:
        decoded = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
    except RuntimeError as exc:
        raise RuntimeError(f"decoding {len(items)} JPEGs on {device} failed (first: {items[0].path}): {exc}") from exc
    pixels = torch.stack([resized_on_device(upright_tensor(image, item.orientation), recipe)
                          for image, item in zip(decoded, items)])
    return normalized_on_device(pixels, recipe, dtype)


def is_jpeg(data: bytes) -> bool:
    return data[:3] == JPEG_MAGIC
