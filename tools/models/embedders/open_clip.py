"""OpenCLIP embedders: any open_clip architecture with pretrained tags, local checkpoints or random weights.

Name forms (after ``open_clip:``):

- ``ViT-B-32/laion2b_s34b_b79k``: architecture and pretrained tag (downloaded on first use where
  the network allows, then served from the Hugging Face cache);
- ``ViT-B-32//models/vit-b-32.bin``: architecture and a local checkpoint file;
- ``ViT-B-32/random``: random weights (same compute as the real model: benchmarks and tests);
- ``/path/to/tiny-clip.json/random``: an open_clip model-config file registered on the fly;
- ``hf-hub:org/repo`` and ``local-dir:/path``: open_clip's own schemas, passed through.

Runs on CUDA in fp16 when a GPU is present, else on the CPU in fp32.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.devices import pick_device
from pictrieve.tools.core.seeding import torch_seeded
from pictrieve.tools.models.embedders.base import EmbedderBase

logger = logging.getLogger(__name__)

RANDOM_WEIGHTS = "random"


class EmbedderWeightsUnavailableError(PictrieveError, RuntimeError):
    """Pretrained weights could not be found locally nor downloaded."""


class OpenCLIPEmbedder(EmbedderBase):
    """An open_clip model behind the :class:`~pictrieve.tools.models.embedders.base.Embedder` protocol."""

    def __init__(
        self,
        arch: str,
        pretrained: str | None = None,
        *,
        device: str | None = None,
        precision: str | None = None,
        batch_size: int = 64,
    ) -> None:
        import open_clip

        self.arch, self.pretrained = _register_config_file(arch), pretrained
        self.device = pick_device(device)
        self.precision = precision or ("fp16" if self.device.startswith("cuda") else "fp32")
        self.batch_size = batch_size
        weights = None if pretrained in (None, "", RANDOM_WEIGHTS) else _expand(pretrained)
        if weights is None and not self.arch.startswith(("hf-hub:", "local-dir:")):
            logger.warning("open_clip %s with RANDOM weights: fine for tests, useless for search", arch)
        try:
            # Random weights are seeded, so a gallery built with them reopens with the same model.
            with torch_seeded(0):
                model, _, preprocess = open_clip.create_model_and_transforms(
                    self.arch, pretrained=weights, device=self.device, precision=self.precision
                )
        except RuntimeError as exc:
            if "Unknown model" in str(exc) or "not found" in str(exc).lower():
                raise EmbedderWeightsUnavailableError(
                    f"open_clip: {exc}. See `open_clip.list_models()` and "
                    "`open_clip.list_pretrained()` for valid names."
                ) from exc
            raise _offline_hint(arch, pretrained, exc) from exc
        except (OSError, ValueError) as exc:
            raise _offline_hint(arch, pretrained, exc) from exc
        self.model = model.eval()
        self._preprocess = preprocess
        self._tokenizer = open_clip.get_tokenizer(self.arch)
        self.dim = int(_output_dim(model))
        self.name = f"open_clip:{arch}/{pretrained or RANDOM_WEIGHTS}"

    def preprocess(self, image: Image.Image) -> Any:
        return self._preprocess(image.convert("RGB"))

    def embed_preprocessed(self, batch: Sequence[Any]) -> np.ndarray:
        import torch

        pixels = torch.stack(list(batch)).to(self.device, dtype=self._dtype())
        with torch.inference_mode():
            features = self.model.encode_image(pixels, normalize=True)
        return features.float().cpu().numpy()

    def _embed_text_batch(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        tokens = self._tokenizer(list(texts)).to(self.device)
        with torch.inference_mode():
            features = self.model.encode_text(tokens, normalize=True)
        return features.float().cpu().numpy()

    def _dtype(self) -> Any:
        import torch

        return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.precision, torch.float32)


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


def _register_config_file(arch: str) -> str:
    """Register an open_clip model-config JSON file and return its model name (the file stem)."""
    if not arch.endswith(".json"):
        return arch
    import open_clip

    path = _expand(arch)
    if not Path(path).is_file():
        raise FileNotFoundError(f"open_clip model config {path} does not exist")
    open_clip.add_model_config(path)
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
