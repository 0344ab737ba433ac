"""open_clip's evaluation transform (pixels for an image tower) in PIL and numpy, without torch or torchvision.

An open_clip model's ``preprocess`` is a torchvision pipeline: resize, centre crop, convert to RGB, scale to
[0, 1], normalise. When the image tower runs on ONNX Runtime from a cached file, that pipeline is the only
reason left to import torch, torchvision and open_clip (about 4 s of a new process's start: ``BENCHMARKS.md``,
"Cold start"). :class:`PixelRecipe` does the same steps with the same PIL calls, so its arrays equal
torchvision's to float rounding (``tests/test_clip_pixels.py`` compares them on real photos).

Only the common cases are reproduced: square ``shortest`` resizing (torchvision's ``Resize(int)`` then
``CenterCrop``) and ``squash`` (``Resize((h, w))``), bicubic or bilinear, RGB. For anything else
:meth:`PixelRecipe.from_preprocess_cfg` answers ``None`` and the caller keeps open_clip's own transform.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np
from PIL import Image

RESAMPLING = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}


@dataclass(frozen=True)
class PixelRecipe:
    """How one image becomes a ``(3, height, width)`` float32 array for an open_clip image tower."""

    size: tuple[int, int]  # (height, width) of the tower's input
    resize_mode: str  # "shortest" (then a centre crop) or "squash"
    interpolation: str  # "bicubic" or "bilinear"
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    @classmethod
    def from_preprocess_cfg(cls, cfg: Mapping[str, Any]) -> "PixelRecipe | None":
        """The recipe for open_clip's ``model.visual.preprocess_cfg``, or ``None`` when this module does not
        reproduce it (``longest`` resizing, a non-square ``shortest`` crop, a mode other than RGB)."""
        height, width = side_pair(cfg.get("size", 224))
        mode = cfg.get("resize_mode") or "shortest"
        interpolation = cfg.get("interpolation") or "bicubic"
        interpolation = "bicubic" if interpolation == "random" else interpolation  # as open_clip does at inference
        mean, std = _triple(cfg.get("mean")), _triple(cfg.get("std"))
        if (cfg.get("mode", "RGB") != "RGB" or interpolation not in RESAMPLING or mean is None or std is None
                or mode not in ("shortest", "squash") or (mode == "shortest" and height != width)):
            return None
        return cls((height, width), mode, interpolation, mean, std)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "PixelRecipe":
        """The recipe :meth:`to_json` wrote; ``ValueError`` for anything else (a damaged or foreign file)."""
        try:
            data = json.loads(text)
            recipe = cls((int(data["size"][0]), int(data["size"][1])), str(data["resize_mode"]),
                         str(data["interpolation"]), _triple(data["mean"]), _triple(data["std"]))  # type: ignore[arg-type]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ValueError(f"not a pixel recipe: {text[:200]!r} ({exc})") from exc
        height, width = recipe.size
        if (min(height, width) < 1 or recipe.interpolation not in RESAMPLING or recipe.mean is None
                or recipe.std is None or min(recipe.std) <= 0 or recipe.resize_mode not in ("shortest", "squash")
                or (recipe.resize_mode == "shortest" and height != width)):
            raise ValueError(f"not a pixel recipe this version reproduces: {text[:200]!r}")
        return recipe

    def __call__(self, image: Image.Image) -> np.ndarray:
        """``image`` (converted to RGB) resized, cropped, scaled and normalised: ``(3, height, width)`` float32."""
        image = self.resized(image.convert("RGB"))
        pixels = np.asarray(image, dtype=np.uint8).astype(np.float32) / np.float32(255)
        mean, std = np.asarray(self.mean, np.float32), np.asarray(self.std, np.float32)
        return np.ascontiguousarray(((pixels - mean) / std).transpose(2, 0, 1))

    def resized(self, image: Image.Image) -> Image.Image:
        """torchvision's ``Resize`` (+ ``CenterCrop`` for ``shortest``) on a PIL image: the same sizes and calls."""
        height, width = self.size
        resample = RESAMPLING[self.interpolation]
        if self.resize_mode == "squash":
            return image if image.size == (width, height) else image.resize((width, height), resample)
        old_width, old_height = image.size
        short, long = sorted((old_width, old_height))
        new_short, new_long = height, int(height * long / short)  # torchvision's _compute_resized_output_size
        size = (new_short, new_long) if old_width <= old_height else (new_long, new_short)
        if size != image.size:
            image = image.resize(size, resample)
        return _center_crop(image, height, width)


def _center_crop(image: Image.Image, height: int, width: int) -> Image.Image:
    """torchvision's ``center_crop`` for an image at least as large as the crop (``shortest`` resizing makes it so)."""
    if image.size == (width, height):
        return image
    top = int(round((image.height - height) / 2.0))
    left = int(round((image.width - width) / 2.0))
    return image.crop((left, top, left + width, top + height))


def side_pair(size: Any) -> tuple[int, int]:
    """``(height, width)`` from open_clip's way of giving a size: one number for a square, or two."""
    return (int(size[0]), int(size[1])) if isinstance(size, (list, tuple)) else (int(size), int(size))


def _triple(values: Any) -> tuple[float, float, float] | None:
    if values is None:
        return None
    values = tuple(float(v) for v in (values if isinstance(values, (list, tuple)) else (values,) * 3))
    return values if len(values) == 3 else None  # type: ignore[return-value]
