"""Text-to-image visualizers: real generators behind the ``Visualizer`` protocol.

- ``diffusers:<model id or local folder>``: any diffusers text-to-image pipeline through
  ``AutoPipelineForText2Image`` (SD 1.5, SDXL-Turbo, FLUX-schnell, ...), fp16 on CUDA, fp32 on CPU.
  Steps and guidance default per model family: distilled "turbo" models want 1-2 steps and no
  guidance, "schnell" 4 steps and none (NEEDLE's research code ran SDXL-Turbo with the pipeline's
  default 50 steps and guidance, a known mistake its later generator service fixed).
- ``openai:<model>``: the images API through the ``openai`` SDK (``base_url`` for compatible servers;
  the key from ``api_key`` or ``$OPENAI_API_KEY``). The API takes no seed, so repeated calls differ;
  :mod:`pictrieve.tools.models.guide_images` keeps the first answer on disk.
- ``tiny-random``: a real Stable Diffusion pipeline (UNet, VAE, CLIP text encoder, tokenizer,
  scheduler) built locally from tiny configs with random weights. Its pictures are noise and mean
  nothing; it exists so tests and cost benchmarks run the real diffusers code path offline.

Pictures come back as PIL images; a generator that fails raises, and callers use fewer guides
(never placeholder images).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from PIL import Image

from pictrieve.tools.core.devices import pick_device
from pictrieve.tools.core.seeding import torch_seeded
from pictrieve.tools.models.visualizers import VisualizerUnavailableError

logger = logging.getLogger(__name__)

_GENERATION_EXTRA = "pip install 'pictrieve[generation]'"
MAX_IMAGE_BYTES = 32 * 1024 * 1024


def _family_defaults(model: str) -> tuple[int | None, float | None]:
    """(steps, guidance) suited to a model id; ``None`` keeps the pipeline's own default."""
    lowered = model.lower()
    if "sdxl-turbo" in lowered:
        return 2, 0.0
    if "turbo" in lowered:
        return 1, 0.0
    if "schnell" in lowered:
        return 4, 0.0
    return None, None


class DiffusersVisualizer:
    """Generate guide pictures with a diffusers text-to-image pipeline."""

    generates = True

    def __init__(self, model: str = "", *, pipeline: Any = None, steps: int | None = None,
                 guidance: float | None = None, size: int | None = None, device: str | None = None,
                 name: str | None = None) -> None:
        self.model = model
        self.name = name or f"diffusers:{model}"
        family_steps, family_guidance = _family_defaults(model)
        self.steps = steps if steps is not None else family_steps
        self.guidance = guidance if guidance is not None else family_guidance
        self.size = size
        self.device = pick_device(device)
        self._pipeline = pipeline

    def settings_key(self) -> str:
        """What changes the pictures besides prompt and seed (part of the disk cache key)."""
        return json.dumps({"steps": self.steps, "guidance": self.guidance, "size": self.size})

    @property
    def pipeline(self) -> Any:
        if self._pipeline is None:
            self._pipeline = self._load()
        return self._pipeline

    def _load(self) -> Any:
        try:
            import torch
            from diffusers import AutoPipelineForText2Image
        except ImportError as exc:
            raise VisualizerUnavailableError(f"the diffusers visualizer needs diffusers: {_GENERATION_EXTRA}") from exc
        dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
        try:
            pipeline = AutoPipelineForText2Image.from_pretrained(self.model, **_dtype_option(dtype))
        except (OSError, ValueError) as exc:
            raise VisualizerUnavailableError(
                f"could not load the diffusers pipeline {self.model!r} ({exc}); give a Hugging Face model id "
                "reachable from here or a local folder saved with pipeline.save_pretrained(...)"
            ) from exc
        pipeline.set_progress_bar_config(disable=True)
        return pipeline.to(self.device)

    def visualize(self, prompt: str, *, n: int = 1, seed: int | None = None) -> list[Image.Image]:
        import torch

        options: dict[str, Any] = {"num_images_per_prompt": int(n)}
        if self.steps is not None:
            options["num_inference_steps"] = self.steps
        if self.guidance is not None:
            options["guidance_scale"] = self.guidance
        if self.size is not None:
            options["height"] = options["width"] = self.size
        if seed is not None:
            options["generator"] = torch.Generator(device="cpu").manual_seed(int(seed))
        with torch.inference_mode():
            return list(self.pipeline(prompt, **options).images)


def _dtype_option(dtype: Any) -> dict[str, Any]:
    """The load-time dtype keyword of the installed diffusers: ``dtype`` where it replaced the deprecated
    ``torch_dtype`` (following transformers), ``torch_dtype`` for earlier versions, which ignore ``dtype``."""
    from diffusers.utils import deprecation_utils

    return {"dtype": dtype} if hasattr(deprecation_utils, "_resolve_dtype") else {"torch_dtype": dtype}


def tiny_random_pipeline(seed: int = 0) -> Any:
    """A Stable Diffusion pipeline with tiny layers and random weights, built without any download."""
    try:
        from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
        from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer
    except ImportError as exc:
        raise VisualizerUnavailableError(f"the tiny-random visualizer needs diffusers: {_GENERATION_EXTRA}") from exc

    # The random weights come from the seed alone, and the caller's torch generator is left as it was.
    with torch_seeded(seed):
        unet = UNet2DConditionModel(
            sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16, attention_head_dim=4, norm_num_groups=8,
        )
        vae = AutoencoderKL(
            in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 16), layers_per_block=1,
            down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
            up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"), norm_num_groups=8, sample_size=32,
        )
        text_encoder = CLIPTextModel(CLIPTextConfig(
            vocab_size=_TINY_VOCAB_SIZE, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=2, max_position_embeddings=77, bos_token_id=_TINY_VOCAB_SIZE - 2,
            eos_token_id=_TINY_VOCAB_SIZE - 1, pad_token_id=_TINY_VOCAB_SIZE - 1,
        ))
    folder = Path(tempfile.mkdtemp(prefix="pictrieve-tiny-tokenizer-"))
    _write_character_vocab(folder)
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=77)
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              steps_offset=1)
    pipeline = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                       scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                       requires_safety_checker=False)
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's reversible byte -> printable character map."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


_TINY_VOCAB_SIZE = 256 * 2 + 2


def _write_character_vocab(folder: Path) -> None:
    """A character-level BPE vocabulary (no merges): every byte, with and without end-of-word."""
    symbols = list(_bytes_to_unicode().values())
    tokens = symbols + [s + "</w>" for s in symbols] + ["<|startoftext|>", "<|endoftext|>"]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")


class OpenAIImagesVisualizer:
    """Generate guide pictures with an OpenAI-compatible images endpoint."""

    generates = True

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 size: str = "1024x1024", quality: str | None = None, timeout: float = 120.0) -> None:
        if not model:
            raise VisualizerUnavailableError("name the images model: openai:gpt-image-1 (or openai:dall-e-3)")
        try:
            import openai
        except ImportError as exc:
            raise VisualizerUnavailableError("the openai visualizer needs the openai package: pip install openai") from exc
        key = api_key or os.environ.get("OPENAI_API_KEY") or ("not-needed" if base_url else None)
        if key is None:
            raise VisualizerUnavailableError(
                "the openai visualizer needs an API key: set OPENAI_API_KEY, or give base_url for a "
                "compatible server that needs none"
            )
        self.model, self.size, self.quality = model, size, quality
        self.name = f"openai:{model}" + (f"@{base_url}" if base_url else "")
        self.client = openai.OpenAI(api_key=key, base_url=base_url, timeout=timeout)

    def settings_key(self) -> str:
        return json.dumps({"size": self.size, "quality": self.quality})

    def visualize(self, prompt: str, *, n: int = 1, seed: int | None = None) -> list[Image.Image]:
        del seed  # the images API takes none
        per_call = 1 if self.model.startswith("dall-e-3") else int(n)  # DALL-E 3 makes one picture per call
        images: list[Image.Image] = []
        while len(images) < n:
            options: dict[str, Any] = {"model": self.model, "prompt": prompt, "n": min(per_call, n - len(images)),
                                       "size": self.size}
            if self.quality:
                options["quality"] = self.quality
            if self.model.startswith("dall-e"):
                options["response_format"] = "b64_json"
            response = self.client.images.generate(**options)
            for item in response.data or []:
                images.append(_decode(item))
            if not response.data:
                break
        return images[:n]


def _decode(item: Any) -> Image.Image:
    if getattr(item, "b64_json", None):
        return Image.open(io.BytesIO(base64.b64decode(item.b64_json))).convert("RGB")
    url = getattr(item, "url", None)
    if url:  # a link the provider itself just gave us (not a page from the web)
        import requests

        with requests.get(url, timeout=60, stream=True) as response:
            response.raise_for_status()
            data = response.raw.read(MAX_IMAGE_BYTES + 1, decode_content=True)
        if len(data) > MAX_IMAGE_BYTES:
            raise VisualizerUnavailableError(f"the generated image at {url} is over {MAX_IMAGE_BYTES} bytes")
        return Image.open(io.BytesIO(data)).convert("RGB")
    raise VisualizerUnavailableError("the images endpoint answered without b64_json or url")


def build_diffusers(spec: str, **kwargs: Any) -> DiffusersVisualizer:
    if not spec:
        raise VisualizerUnavailableError("name the pipeline: diffusers:stabilityai/sdxl-turbo (or a local folder)")
    return DiffusersVisualizer(spec, **kwargs)


def build_tiny_random(spec: str, **kwargs: Any) -> DiffusersVisualizer:
    size = int(spec) if spec.strip() else 32
    return DiffusersVisualizer("tiny-random", pipeline=tiny_random_pipeline(), steps=kwargs.pop("steps", 2),
                               guidance=kwargs.pop("guidance", 1.0), size=size, name="tiny-random", **kwargs)


def build_openai(spec: str, **kwargs: Any) -> OpenAIImagesVisualizer:
    return OpenAIImagesVisualizer(spec, **kwargs)
