"""OpenCLIP embedders: any open_clip architecture with pretrained tags, local checkpoints or random weights.

Name forms (after ``open_clip:``):

- ``ViT-B-32/laion2b_s34b_b79k``: architecture and pretrained tag (downloaded on first use where
  the network allows, then served from the Hugging Face cache);
- ``ViT-B-32//models/vit-b-32.bin``: architecture and a local checkpoint file;
- ``ViT-B-32/random``: random weights (same compute as the real model: benchmarks and tests);
- ``/path/to/tiny-clip.json/random``: an open_clip model-config file registered on the fly;
- ``hf-hub:org/repo`` and ``local-dir:/path``: open_clip's own schemas, passed through.

Runs on CUDA in fp16 when a GPU is present, else on the CPU in fp32. On a CPU the image tower runs on
ONNX Runtime where that measured faster (:data:`IMAGE_RUNTIME`; ``--runtime``/``$PICTRIEVE_RUNTIME``
overrides, see :mod:`pictrieve.tools.models.onnx_runtime`): exported once per model at first use, cached
by the model's fingerprint (:func:`image_tower_fingerprint`), with the same vectors as torch to 1e-4, so a
gallery indexed with one runtime is searched with the other. The file carries its input transform
(:class:`~pictrieve.tools.models.embedders.clip_pixels.PixelRecipe`), so once it exists images are embedded
without importing torch or open_clip; the torch model is built on first need (a text, the torch runtime, an
export). ``--quantize int8`` opts in to a dynamically quantised tower; it is never the default here, because its recall cannot be checked without real weights
(README, "Runtimes"). The text tower stays on torch.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from PIL import Image

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.devices import GPU_DECODE_ENV, pick_device
from pictrieve.tools.core.pypi_assets import files_fingerprint
from pictrieve.tools.core.seeding import torch_seeded
from pictrieve.tools.models.embedders.base import EmbedderBase
from pictrieve.tools.models.embedders.clip_pixels import PixelRecipe, side_pair
from pictrieve.tools.models.embedders.device_pixels import (
    EncodedJpeg,
    PinnedUpload,
    decode_on_device,
    is_jpeg,
    normalized_on_device,
    recipe_bytes,
)
from pictrieve.tools.models.onnx_runtime import (
    OnnxExport, OnnxExportError, OnnxModel, TransformerFusion, cached_metadata, choose_runtime, package_version,
    requested_quantization, try_onnx_model,
)

logger = logging.getLogger(__name__)

RANDOM_WEIGHTS = "random"

IMAGE_RUNTIME = "onnx"
"""The image tower's runtime on a CPU unless told otherwise. With the fused export (:func:`export_tower`,
:func:`tower_fusion`) and a process that needs no torch once it is exported, ONNX Runtime ran ViT-B-32's
``pictrieve index`` of 500 photos at 1.37-1.44x torch's images/s on the quiet 2-core machine (1.24x without the
start-up; 1.16x through ``Gallery.add`` on a quiet 16-core Xeon), with the same vectors, and an image query started
in 1.8-2.4 s instead of 6.9-8.6 (``BENCHMARKS.md``, "No torch once exported")."""
IMAGE_QUANTIZE = "none"
"""int8 (``--quantize int8``) is opt-in only: no real weights here to check that recall holds."""
TOWER_FORMAT = 4
"""Bump when the exported tower changes (invalidates cached files). 3: the file carries its :class:`PixelRecipe`;
4: the last block runs for the class token alone (:func:`export_tower`)."""
EXPORT_MIN_BATCH = 2
"""A batch this big may start the one-time export (12-80 s for ViT-B-32 on a CPU); a query's single image runs
on the export when it exists and on torch otherwise, so a search never waits for an export indexing can make."""


class EmbedderWeightsUnavailableError(PictrieveError, RuntimeError):
    """Pretrained weights could not be found locally nor downloaded."""


class OpenCLIPEmbedder(EmbedderBase):
    """An open_clip model behind the :class:`~pictrieve.tools.models.embedders.base.Embedder` protocol.

    The torch model is built when something needs it: the text tower, the torch runtime, or the one-time
    export. When the image tower runs on ONNX Runtime from a cached export (the usual case on a CPU once a
    gallery was indexed), indexing and image queries never import torch or open_clip: the architecture's
    config is read from its JSON file, and the input transform (:class:`PixelRecipe`) from beside the exported
    file. Without a stored recipe the torch model is built at once, as before, so a wrong name or missing weights
    fail here and not once per photo.
    """

    def __init__(
        self,
        arch: str,
        pretrained: str | None = None,
        *,
        device: str | None = None,
        precision: str | None = None,
        batch_size: int = 64,
        decode_on_device: bool | None = None,
    ) -> None:
        # a built-in name, a .json file (resolved now: the working directory may change), hf-hub:/local-dir:
        self._config_source = _expand(arch) if arch.endswith(".json") else arch
        self.arch, self.pretrained = _model_name(arch), pretrained
        self.device = pick_device(device)
        self.precision = precision or ("fp16" if self.device.startswith("cuda") else "fp32")
        self.batch_size = batch_size
        self._weights = None if pretrained in (None, "", RANDOM_WEIGHTS) else _expand(pretrained)
        self.name = f"open_clip:{arch}/{pretrained or RANDOM_WEIGHTS}"
        if self._weights is None and not arch.startswith(("hf-hub:", "local-dir:")):
            logger.warning("open_clip %s with RANDOM weights: fine for tests, useless for search", arch)
        self._config = model_config(arch)  # None where only open_clip can tell (hf-hub:, local-dir:, unknown)
        self._torch: _TorchParts | None = None
        self._torch_lock = threading.Lock()
        self._towers: dict[str | None, OnnxModel | None] = {}
        self._towers_lock = threading.Lock()
        self._export: OnnxExport | None = None
        self._recipes: dict[str | None, PixelRecipe | None] = {}  # per quantization, once its file exists
        self._export_paths: dict[str | None, Path] = {}
        self.pixels_on_device = self.device.startswith("cuda")
        """Preprocessing stops at resized bytes (:func:`recipe_bytes`), copied to the device through pinned memory and
        scaled there (on CUDA; settable on a CPU to run the same code, as the dry runs do)."""
        if decode_on_device is None:  # the operator's choice for `pictrieve index` on a GPU
            decode_on_device = self.device.startswith("cuda") and os.environ.get(GPU_DECODE_ENV, "").strip() == "1"
        self.decode_on_device = bool(decode_on_device)
        """Indexing hands this embedder JPEG files' bytes (:meth:`encoded_input`), decoded on its device (nvJPEG on
        CUDA); on by :data:`GPU_DECODE_ENV` ``=1`` on a CUDA device."""
        self._device_recipe_checked: PixelRecipe | None | bool = False
        self._upload: PinnedUpload | None = None
        if self._config is not None and self._stored_recipe() is not None:
            self.dim = int(self._config["embed_dim"])  # the torch model waits for a text (or an export)
        else:
            self.dim = int(_output_dim(self._torch_parts().model))  # as before: names and weights checked now

    @property
    def model(self) -> Any:
        """The torch model (``open_clip.CLIP``), built on first use."""
        return self._torch_parts().model

    def _torch_parts(self) -> "_TorchParts":
        with self._torch_lock:
            if self._torch is None:
                self._torch = _load_torch_parts(self._config_source, self.arch, self.pretrained, self._weights,
                                                self.device, self.precision)
            return self._torch

    def preprocess(self, image: Image.Image) -> Any:
        """A ``(3, H, W)`` array from :class:`PixelRecipe` when an exported tower with a recipe will run it (no
        torch needed), else open_clip's own transform (a tensor); the two are equal to float rounding."""
        recipe = self._stored_recipe()
        if recipe is not None:
            return recipe(image)
        recipe = self._device_recipe()
        if recipe is not None:
            return recipe_bytes(recipe, image)  # (H, W, 3) uint8: scaled on the device (embed_preprocessed)
        return self._torch_parts().preprocess(image.convert("RGB"))

    def _torch_pixels(self) -> bool:
        """Whether images go to torch through the device paths (:attr:`pixels_on_device`, :attr:`decode_on_device`),
        which ONNX Runtime's CPU tower does not take."""
        return getattr(self, "pixels_on_device", False) or getattr(self, "decode_on_device", False)

    def _device_recipe(self) -> PixelRecipe | None:
        """With :attr:`pixels_on_device`, the model's transform as a :class:`PixelRecipe` (checked once against
        torch's own); ``None`` when it is not one the recipe reproduces (then torch's transform is used)."""
        return self._device_recipe_or_check() if self.pixels_on_device else None

    def encoded_input(self, path: str | Path, orientation: int = 1) -> EncodedJpeg | None:
        """With :attr:`decode_on_device`, a JPEG file's bytes for :meth:`embed_preprocessed` to decode on the device;
        ``None`` for any other file (decoded on the CPU as usual) or when the transform is not reproduced."""
        if not self.decode_on_device or self._device_recipe_or_check() is None:
            return None
        data = Path(path).read_bytes()
        return EncodedJpeg(data, orientation, str(path)) if is_jpeg(data) else None

    def _device_recipe_or_check(self) -> PixelRecipe | None:
        if self._device_recipe_checked is False:
            parts = self._torch_parts()
            self._device_recipe_checked = checked_recipe(parts.model, parts.preprocess, _model_image_size(parts.model))
        return self._device_recipe_checked or None

    def _stored_recipe(self) -> PixelRecipe | None:
        """The input recipe kept beside the exported tower that runs images here, when ONNX Runtime is the runtime
        and that file exists already; ``None`` otherwise (then torch's transform is used). It never starts an
        export: preprocessing runs in decoding threads and for single query images. Until the file exists each call
        looks again (a stat: it may be exported meanwhile); once it exists its answer is kept (the recipe is written
        before the model file, so it never changes after)."""
        if self._torch_pixels() or choose_runtime(IMAGE_RUNTIME, self.device) != "onnx" or self.precision != "fp32":
            return None
        quantize = requested_quantization(default=IMAGE_QUANTIZE)
        if quantize in self._recipes:
            return self._recipes[quantize]
        if quantize not in self._export_paths:
            self._export_paths[quantize] = self.image_export().path(quantize)
        if not self._export_paths[quantize].is_file():
            return None  # not exported yet
        text = (cached_metadata(self._export_paths[quantize]) or {}).get(PIXEL_RECIPE_KEY)
        self._recipes[quantize] = _parsed_recipe(text) if text else None
        return self._recipes[quantize]

    @property
    def image_runtime(self) -> OnnxModel | None:
        """The image tower on ONNX Runtime when that is the runtime chosen here (:data:`IMAGE_RUNTIME`,
        ``--runtime``) and it could be exported, else ``None``: torch runs it. A failed export was said in
        one warning line and is not tried again by this embedder."""
        return self._tower_for(EXPORT_MIN_BATCH)

    def _tower_for(self, batch_size: int) -> OnnxModel | None:
        """:attr:`image_runtime` for a batch of ``batch_size`` images (see :data:`EXPORT_MIN_BATCH`)."""
        if self._torch_pixels() or choose_runtime(IMAGE_RUNTIME, self.device) != "onnx" or self.precision != "fp32":
            return None
        quantize = requested_quantization(default=IMAGE_QUANTIZE)
        with self._towers_lock:
            if quantize not in self._towers:
                export = self.image_export()
                if batch_size < EXPORT_MIN_BATCH and not export.path(quantize).is_file():
                    return None
                self._towers[quantize] = try_onnx_model(export, quantize)
            return self._towers[quantize]

    def image_export(self) -> OnnxExport:
        """How to export this model's image tower (pixels -> unit vectors), keyed by its fingerprint
        (made once per embedder: a local checkpoint's content is hashed). Everything in the key comes from the
        architecture's config when it can be read without open_clip, so a cached file is found without torch."""
        if self._export is None:
            self._export = self._make_export()
        return self._export

    def _make_export(self) -> OnnxExport:
        config = self._config
        size = _image_size(config) if config is not None else _model_image_size(self.model)
        fusion = tower_fusion(config) if config is not None else model_tower_fusion(self.model)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.arch).strip("-")[:40] or "model"

        def example() -> tuple[Any, ...]:
            import torch

            return (torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0)),)

        def metadata() -> dict[str, str]:
            recipe = checked_recipe(self.model, self._torch_parts().preprocess, size)
            return {PIXEL_RECIPE_KEY: recipe.to_json()} if recipe is not None else {}

        def build() -> Any:
            if config is not None:
                import open_clip

                if open_clip.get_model_config(self.arch) != config:  # the name was re-registered in this process
                    raise OnnxExportError(f"open_clip's config for {self.arch!r} is not the file {self._config_source}")
            return export_tower(self.model)

        return OnnxExport(
            name=f"open_clip-{slug}-image",
            fingerprint=image_tower_fingerprint(self.arch, self._weights, config),
            build=build, example_inputs=example,
            input_names=("pixels",), output_names=("embedding",), extra={"image_size": size},
            fusion=fusion, metadata=metadata,
        )

    def embed_preprocessed(self, batch: Sequence[Any]) -> np.ndarray:
        tower = self._tower_for(len(batch))
        if tower is not None:
            pixels = np.stack([np.asarray(item, dtype=np.float32) for item in batch])
            return tower.run(pixels)[0]
        import torch

        with torch.inference_mode():
            pixels = self._pixels_on_device(batch)
            features = self.model.encode_image(pixels, normalize=True)
        return features.float().cpu().numpy()

    def _pixels_on_device(self, batch: Sequence[Any]) -> Any:
        """The batch as the tower's input on its device: JPEG bytes decoded there, resized bytes copied through
        pinned memory and scaled there, or open_clip's float tensors (pinned and copied without waiting on CUDA)."""
        import torch

        if isinstance(batch[0], EncodedJpeg) or isinstance(batch[-1], EncodedJpeg):
            encoded = [item for item in batch if isinstance(item, EncodedJpeg)]
            if len(encoded) == len(batch):
                return decode_on_device(encoded, self._device_recipe_or_check(), self.device, self._dtype())
            # a batch mixing device-decoded JPEGs and photos decoded here (PNG, HEIC): each part its own way
            parts = [self._pixels_on_device([item]) for item in batch]
            return torch.cat(parts)
        if isinstance(batch[0], np.ndarray) and batch[0].dtype == np.uint8:
            if self._upload is None:
                self._upload = PinnedUpload(self.device)
            uploaded = self._upload.to_device(batch)
            return normalized_on_device(uploaded, self._device_recipe_or_check(), self._dtype())
        pixels = torch.stack([torch.as_tensor(item) for item in batch])
        if self.device.startswith("cuda"):
            pixels = pixels.pin_memory()
        return pixels.to(self.device, dtype=self._dtype(), non_blocking=True)

    def _embed_text_batch(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        parts = self._torch_parts()
        tokens = parts.tokenizer(list(texts)).to(self.device)
        with torch.inference_mode():
            features = parts.model.encode_text(tokens, normalize=True)
        return features.float().cpu().numpy()

    def _dtype(self) -> Any:
        import torch

        return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.precision, torch.float32)


PIXEL_RECIPE_KEY = "pixel_recipe"
"""The exported tower's metadata entry holding its :class:`PixelRecipe` (JSON)."""


@functools.lru_cache(maxsize=16)
def _parsed_recipe(text: str) -> PixelRecipe | None:
    """A stored recipe, or ``None`` (said once) when it cannot be read: torch's transform is never wrong."""
    try:
        return PixelRecipe.from_json(text)
    except ValueError as exc:
        logger.warning("ignoring a stored open_clip input recipe (%s): images use open_clip's own transform", exc)
        return None


def checked_recipe(model: Any, preprocess: Any, size: tuple[int, int]) -> PixelRecipe | None:
    """The :class:`PixelRecipe` of ``model``'s transform, when it gives ``preprocess``'s pixels (to 1e-5) on a test
    picture; ``None`` when this transform is not one :class:`PixelRecipe` reproduces (or a future open_clip reads its
    config otherwise): then every process keeps open_clip's transform and builds the torch model."""
    recipe = PixelRecipe.from_preprocess_cfg(getattr(model.visual, "preprocess_cfg", None) or {})
    if recipe is None or recipe.size != size:
        return None
    ramp = np.linspace(0, 255, 97 * 61 * 3, dtype=np.float32).reshape(61, 97, 3)
    picture = Image.fromarray(((ramp * 7) % 256).astype(np.uint8))  # not square, not a multiple of the crop
    expected = np.asarray(preprocess(picture), dtype=np.float32)
    got = recipe(picture)
    if got.shape != expected.shape or float(np.abs(got - expected).max()) > 1e-5:
        logger.warning("open_clip's input transform is not reproduced without torch (%s); images keep it", recipe)
        return None
    return recipe


@dataclass(frozen=True)
class _TorchParts:
    model: Any
    preprocess: Any
    tokenizer: Any


def _load_torch_parts(source: str, arch: str, pretrained: str | None, weights: str | None, device: str,
                      precision: str) -> _TorchParts:
    """Build the open_clip model (imports torch and open_clip: seconds), its transform and its tokenizer."""
    import open_clip

    if source.endswith(".json"):
        open_clip.add_model_config(source)
    try:
        # Random weights are seeded, so a gallery built with them reopens with the same model.
        with torch_seeded(0):
            model, _, preprocess = open_clip.create_model_and_transforms(
                arch, pretrained=weights, device=device, precision=precision
            )
    except RuntimeError as exc:
        if "Unknown model" in str(exc) or "not found" in str(exc).lower():
            raise EmbedderWeightsUnavailableError(
                f"open_clip: {exc}. See `open_clip.list_models()` and "
                "`open_clip.list_pretrained()` for valid names."
            ) from exc
        raise _offline_hint(source, pretrained, exc) from exc
    except (OSError, ValueError) as exc:
        raise _offline_hint(source, pretrained, exc) from exc
    return _TorchParts(model.eval(), preprocess, open_clip.get_tokenizer(arch))


def _tower_module() -> type:
    import torch

    class _ImageTower(torch.nn.Module):
        """``model.encode_image(pixels, normalize=True)`` as a module of its own, for the exporter."""

        def __init__(self, model: Any) -> None:
            super().__init__()
            self.visual = model.visual

        def forward(self, pixels: "torch.Tensor") -> "torch.Tensor":
            return torch.nn.functional.normalize(self.visual(pixels), dim=-1)

    return _ImageTower


def image_tower(model: Any) -> Any:
    """The image tower of an open_clip ``model``: pixels ``(n, 3, H, W)`` -> unit vectors ``(n, dim)``."""
    return _tower_module()(model).eval()


def export_tower(model: Any, first_token_only: bool = True) -> Any:
    """:func:`image_tower` with each self-attention written the way ONNX Runtime's transformer optimizer fuses it.

    ``torch.nn.MultiheadAttention`` exports as one q/k/v product followed by some 150 shape operators per block,
    which no fusion recognises; :class:`_SplitAttention` computes the same thing as separate q, k and v
    projections (the pattern of Hugging Face's CLIP). The model itself is untouched: the copy shares its
    parameters. Blocks of other kinds (timm towers, cross-attention, ResNets) are left as they are.

    When the tower's vector is its class token's (``pool_type="tok"``, no attention pooling), the last block is
    computed for that token alone (:class:`_FirstTokenBlock`): every token's keys and values, but one query, one
    output projection and one MLP row instead of 50. That is exact (each token's LayerNorm, MLP and residual are
    its own) and saves about 6.6% of ViT-B-32's multiply-adds; the earlier blocks still fuse as before
    (``first_token_only=False`` keeps every token, for comparison).
    """
    import copy

    visual = model.visual
    shared = {id(t): t for t in (*visual.parameters(), *visual.buffers())}
    copied = copy.deepcopy(visual, memo=shared)  # new modules, the same weight tensors
    blocks = _attention_blocks(copied)
    for block in blocks:
        block.attn = _split_attention_module()(block.attn)
    if first_token_only and len(blocks) >= 2 and _pools_first_token(copied):  # one block alone: nothing to fuse
        copied.transformer.resblocks[-1] = _first_token_block_module()(blocks[-1])
    tower = _tower_module()(model)
    tower.visual = copied
    return tower.eval()


def tower_fusion(config: Mapping[str, Any]) -> TransformerFusion | None:
    """How ONNX Runtime's optimizer should fuse the tower :func:`export_tower` makes, read from the architecture's
    config (open_clip's ``VisionTransformer``: ``width // head_width`` heads); ``None`` for towers with no such
    self-attention blocks (timm trunks, ResNets). A config that promises blocks the model lacks costs one warning
    line at export time: the optimizer finds nothing to fuse and the plain export is kept."""
    vision = config.get("vision_cfg") or {}
    if vision.get("timm_model_name") or isinstance(vision.get("layers"), (list, tuple)):
        return None
    if vision.get("block_type") not in (None, "default") or any(vision.get(option) for option in CUSTOM_BLOCK_OPTIONS):
        return None  # open_clip's CustomResidualAttentionBlock: no nn.MultiheadAttention to rewrite
    width, head_width = int(vision.get("width", 768)), int(vision.get("head_width", 64))
    return TransformerFusion("clip", num_heads=width // head_width, hidden_size=width)


CUSTOM_BLOCK_OPTIONS = ("qk_norm", "scaled_cosine_attn", "scale_heads", "scale_attn_inner", "scale_attn", "scale_fc")
"""Vision-config options that make open_clip build its custom attention blocks instead of ``nn.MultiheadAttention``."""


def model_tower_fusion(model: Any) -> TransformerFusion | None:
    """:func:`tower_fusion` read from a built model, for architectures whose config only open_clip can fetch."""
    blocks = _attention_blocks(model.visual)
    if not blocks:
        return None
    attn = blocks[0].attn
    return TransformerFusion("clip", num_heads=int(attn.num_heads), hidden_size=int(attn.embed_dim))


def _attention_blocks(visual: Any) -> list[Any]:
    """The residual blocks of a ViT tower whose attention :class:`_SplitAttention` can stand in for, or ``[]``
    when any block cannot (then nothing is rewritten: a half-fused graph gains little)."""
    import torch

    blocks = list(getattr(getattr(visual, "transformer", None), "resblocks", None) or [])
    fits = [
        block for block in blocks
        if isinstance(getattr(block, "attn", None), torch.nn.MultiheadAttention) and block.attn.batch_first
        and block.attn._qkv_same_embed_dim and block.attn.in_proj_bias is not None
        and block.attn.bias_k is None and not hasattr(block, "ln_1_kv")
    ]
    return blocks if blocks and len(fits) == len(blocks) else []


def _split_attention_module() -> type:
    import torch
    from torch.nn import functional as F

    class _SplitAttention(torch.nn.Module):
        """``nn.MultiheadAttention(batch_first=True)`` self-attention as q, k, v projections, scaled q, softmax of
        ``q k^T``, then the output projection: equal to the original (to float rounding) for any batch."""

        def __init__(self, attn: torch.nn.MultiheadAttention) -> None:
            super().__init__()
            self.attn = attn
            self.heads, self.width = attn.num_heads, attn.embed_dim
            self.scale = float((self.width // self.heads) ** -0.5)

        def forward(self, query: torch.Tensor, key: Any = None, value: Any = None, need_weights: bool = False,
                    attn_mask: Any = None) -> tuple[torch.Tensor, None]:
            if attn_mask is not None or (key is not None and key is not query):  # never in a CLIP image tower
                return self.attn(query, key, value, need_weights=need_weights, attn_mask=attn_mask)
            batch, length, width = query.shape
            heads, size = self.heads, width // self.heads
            w_q, w_k, w_v = self.attn.in_proj_weight.chunk(3)
            b_q, b_k, b_v = self.attn.in_proj_bias.chunk(3)

            def split(x: torch.Tensor) -> torch.Tensor:  # (batch, length, width) -> (batch * heads, length, size)
                return x.reshape(batch, length, heads, size).transpose(1, 2).reshape(batch * heads, length, size)

            q = split(F.linear(query, w_q, b_q) * self.scale)
            k = split(F.linear(query, w_k, b_k))
            v = split(F.linear(query, w_v, b_v))
            weights = torch.softmax(torch.matmul(q, k.transpose(1, 2)), dim=-1)
            out = torch.matmul(weights, v).reshape(batch, heads, length, size).transpose(1, 2).reshape(batch, length, width)
            return self.attn.out_proj(out), None

        def first_token(self, x: torch.Tensor) -> torch.Tensor:
            """The first token's row of :meth:`forward` on ``x``, ``(batch, 1, width)``: its query against every
            token's key and value."""
            batch, length, width = x.shape
            heads, size = self.heads, width // self.heads
            w_q, w_k, w_v = self.attn.in_proj_weight.chunk(3)
            b_q, b_k, b_v = self.attn.in_proj_bias.chunk(3)

            def split(x: torch.Tensor, length: int) -> torch.Tensor:  # -> (batch, heads, length, size)
                return x.reshape(batch, length, heads, size).transpose(1, 2)

            q = split(F.linear(x[:, :1], w_q, b_q) * self.scale, 1)
            k, v = split(F.linear(x, w_k, b_k), length), split(F.linear(x, w_v, b_v), length)
            weights = torch.softmax(torch.matmul(q, k.transpose(2, 3)), dim=-1)
            return self.attn.out_proj(torch.matmul(weights, v).transpose(1, 2).reshape(batch, 1, width))

    return _SplitAttention


def _pools_first_token(visual: Any) -> bool:
    """Whether an open_clip ``VisionTransformer``'s vector comes from its first (class) token alone."""
    transformer = getattr(visual, "transformer", None)
    return (getattr(visual, "pool_type", None) == "tok" and getattr(visual, "attn_pool", None) is None
            and not getattr(visual, "output_tokens", False) and getattr(transformer, "batch_first", False))


def _first_token_block_module() -> type:
    import torch

    class _FirstTokenBlock(torch.nn.Module):
        """A residual block (its attention a :class:`_SplitAttention`) that returns the first token's row alone,
        ``(batch, 1, width)``: equal to ``block(x)[:, :1]`` to float rounding, for a tower that pools that token."""

        def __init__(self, block: torch.nn.Module) -> None:
            super().__init__()
            self.block = block

        def forward(self, x: torch.Tensor, attn_mask: Any = None) -> torch.Tensor:
            if attn_mask is not None:  # never in a CLIP image tower
                return self.block(x, attn_mask=attn_mask)[:, :1]
            block = self.block
            first = x[:, :1] + block.ls_1(block.attn.first_token(block.ln_1(x)))
            return first + block.ls_2(block.mlp(block.ln_2(first)))

    return _FirstTokenBlock


def image_tower_fingerprint(arch: str, weights: str | None, config: Mapping[str, Any] | None = None) -> str:
    """What an exported image tower depends on: open_clip's version, the architecture's config, and the
    weights (a local file's or folder's content, else the pretrained tag or hub name; random weights are
    seeded, so their name is enough). Computed without importing open_clip where the config file can be read."""
    if config is None and not arch.startswith(("hf-hub:", "local-dir:")):
        config = model_config(arch)
        if config is None:  # a config open_clip holds but no file of ours names (added with add_model_config)
            import open_clip

            config = open_clip.get_model_config(arch)
    elif arch.startswith(("hf-hub:", "local-dir:")):
        config = None
    config_hash = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
    if weights is None:
        source = arch[len("local-dir:"):] if arch.startswith("local-dir:") else None
        weights_id = files_fingerprint(source)[:24] if source and Path(source).exists() else f"{RANDOM_WEIGHTS}-seed0"
        if arch.startswith("hf-hub:"):
            weights_id = arch
    elif Path(weights).exists():
        weights_id = files_fingerprint(weights)[:24]
    else:
        weights_id = f"tag={weights}"
    return (f"open_clip={package_version('open_clip_torch')}/arch={arch}/config={config_hash}/"
            f"weights={weights_id}/tower={TOWER_FORMAT}")


def model_config(arch: str) -> dict[str, Any] | None:
    """open_clip's config of ``arch`` (a built-in name or a ``.json`` file), read from its JSON file without
    importing open_clip (equal to ``open_clip.get_model_config``); ``None`` for ``hf-hub:``/``local-dir:`` names,
    unknown names, and files that are not model configs."""
    if arch.startswith(("hf-hub:", "local-dir:")):
        return None
    if arch.endswith(".json"):
        path = Path(_expand(arch))
    else:
        spec = importlib.util.find_spec("open_clip")  # finds the package without running it
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        if not folders or not re.fullmatch(r"[A-Za-z0-9_.@-]+", arch):
            return None
        path = Path(folders[0]) / "model_configs" / f"{arch}.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) and {"embed_dim", "vision_cfg", "text_cfg"} <= config.keys() else None


def _image_size(config: Mapping[str, Any]) -> tuple[int, int]:
    return side_pair((config.get("vision_cfg") or {}).get("image_size", 224))


def _model_image_size(model: Any) -> tuple[int, int]:
    return side_pair(getattr(model.visual, "image_size", 224))


def build_open_clip_embedder(spec: str, device: str | None = None) -> OpenCLIPEmbedder:
    """Factory entry point for ``open_clip:<spec>`` names (see the module docstring)."""
    arch, pretrained = parse_open_clip_spec(spec)
    return OpenCLIPEmbedder(arch, pretrained, device=device)


def parse_open_clip_spec(spec: str) -> tuple[str, str | None]:
    """Split ``<arch>/<pretrained>`` where ``arch`` may be a schema name or a ``.json`` config path."""
    if not spec:
        raise ValueError("open_clip needs an architecture, e.g. 'open_clip:ViT-B-32/laion2b_s34b_b79k'")
    if spec.startswith(("hf-hub:", "local-dir:")):
        return spec, None
    config = re.match(r"^(.+?\.json)(?:/(.*))?$", spec)
    if config:
        return config.group(1), config.group(2) or None
    arch, _, pretrained = spec.partition("/")
    return arch, pretrained or None


def _model_name(arch: str) -> str:
    """The name open_clip knows ``arch`` by: a ``.json`` config file's stem (registered when the model is built)."""
    if not arch.endswith(".json"):
        return arch
    path = _expand(arch)
    if not Path(path).is_file():
        raise FileNotFoundError(f"open_clip model config {path} does not exist")
    return Path(path).stem


def _expand(path_or_tag: str) -> str:
    candidate = Path(path_or_tag).expanduser()
    return str(candidate.resolve()) if candidate.exists() else path_or_tag


def _output_dim(model: Any) -> int:
    for attr in ("embed_dim", "output_dim"):
        if hasattr(model, attr):
            return getattr(model, attr)
    return model.text_projection.shape[1]


def _offline_hint(arch: str, pretrained: str | None, exc: Exception) -> EmbedderWeightsUnavailableError:
    return EmbedderWeightsUnavailableError(
        f"could not load open_clip weights {arch}/{pretrained} ({type(exc).__name__}: {exc}). "
        "Without internet, download the checkpoint elsewhere and pass its path, e.g. "
        f"'open_clip:{arch}//path/to/open_clip_model.safetensors', or use the 'offline' embedder."
    )
