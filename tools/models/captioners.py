"""Captioners: models that describe images in words, for galleries without human captions.

Every captioner implements :class:`pictrieve.tools.models.protocols.Captioner`:
``captioner.caption(images_or_paths, prompt=None) -> list[str]`` (decoded images and file paths may
be mixed) and has a ``name`` that :func:`create_captioner` rebuilds it from. Calling the captioner
(``captioner(images_or_paths)``) is the same as ``caption`` without a prompt. PlugIR shows captions
of retrieval candidates to its questioner, QC2 trains on captions, and the Vision Search Assistant
describes regions, so all need one when a gallery has no ``captions.jsonl`` or ``NAME.txt`` sidecars.

Names, resolved by the :data:`CAPTIONERS` :class:`~pictrieve.tools.core.registry.Registry`:

- ``offline``: what the offline embedder's vision models say ("a photo of a golden retriever (0.62)
  or a Labrador retriever (0.20)"). Works without internet, but names ImageNet classes, not scenes
  or actions. Needs ``embedder=`` (an embedder with ``describe``: ``offline``, ``offline-labels`` or
  ``offline-labels:detect``).
- ``tags`` (``tags:<k>``): the everyday words (things, actions) whose text embeddings are closest
  to the image in a text-image embedder's space ("a photo that may show a bench, some grass;
  someone sitting"); works offline with any text-image embedder, see
  :mod:`pictrieve.tools.models.image_tags`. Needs ``embedder=``.
- ``blip:<hub id or local folder>`` (``blip`` alone: :data:`DEFAULT_BLIP`): a BLIP captioning
  model through transformers, downloaded once where the network allows. A bare hub id or folder
  (``Salesforce/blip-image-captioning-base``, ``./my-blip``) means the same.

Register more with ``CAPTIONERS.register(family, builder)``; builders are called as
``builder(spec, **kwargs)``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PIL import Image

from pictrieve.tools.core.registry import Registry, UnknownNameError
from pictrieve.tools.models.captioner_base import CaptionerBase, CaptionerUnavailableError
from pictrieve.tools.models.image_tags import DEFAULT_TAGS_PER_IMAGE, ZeroShotTagger
from pictrieve.tools.models.protocols import Captioner

logger = logging.getLogger(__name__)

__all__ = [
    "CAPTIONERS", "BlipCaptioner", "Captioner", "CaptionerBase", "CaptionerUnavailableError", "OfflineCaptioner",
    "UnknownCaptionerError", "caption_files", "create_captioner",
]

DEFAULT_BLIP = "Salesforce/blip-image-captioning-base"
OFFLINE = "offline"


class UnknownCaptionerError(UnknownNameError):
    """The captioner name names no registered family."""


CAPTIONERS: Registry[Captioner] = Registry(
    "captioner", example=f"'offline' or 'blip:{DEFAULT_BLIP}'", error=UnknownCaptionerError
)


class OfflineCaptioner(CaptionerBase):
    """Captions from an embedder that can say what it sees (``embedder.describe(image)``).

    ``prompt`` is ignored: the offline vision models cannot follow instructions.
    """

    name = OFFLINE

    def __init__(self, embedder: Any) -> None:
        if embedder is None or not hasattr(embedder, "describe"):
            raise CaptionerUnavailableError(
                "the 'offline' captioner describes images with the offline embedder: pass "
                "embedder=create_embedder('offline') (or the gallery's embedder when it is 'offline' "
                "or 'offline-labels[:detect]'), or use a BLIP captioner ('blip:<hub id or folder>')"
            )
        self.embedder = embedder

    def _caption_images(self, images: list[Image.Image], prompt: str | None) -> list[str]:
        return [self.embedder.describe(image) for image in images]


class BlipCaptioner(CaptionerBase):
    """A BLIP captioning model (hub id or local folder), shared per process and device.

    BLIP is not instruction-following, so ``prompt`` is ignored (feeding an instruction as BLIP's
    caption prefix would make it complete the instruction instead of describing the image).
    """

    def __init__(self, model_id: str = DEFAULT_BLIP, *, device: str | None = None,
                 max_new_tokens: int = 30) -> None:
        from pictrieve.tools.core.devices import pick_device
        from pictrieve.tools.core.model_cache import shared_model

        self.model_id = model_id or DEFAULT_BLIP
        self.device = pick_device(device)
        self.max_new_tokens = max_new_tokens
        self.name = f"blip:{self.model_id}"
        self.processor, self.model = shared_model(
            ("blip-captioner", self.model_id, self.device), lambda: _load_blip(self.model_id, self.device)
        )

    def _caption_images(self, images: list[Image.Image], prompt: str | None) -> list[str]:
        import torch

        inputs = self.processor(images=[im.convert("RGB") for im in images], return_tensors="pt")
        with torch.inference_mode():
            ids = self.model.generate(**inputs.to(self.device), max_new_tokens=self.max_new_tokens)
        return [text.strip() for text in self.processor.batch_decode(ids, skip_special_tokens=True)]


def _load_blip(model_id: str, device: str) -> tuple[Any, Any]:
    from transformers import BlipForConditionalGeneration, BlipProcessor

    from pictrieve.tools.core.loading import quiet_model_loading

    try:
        with quiet_model_loading():
            processor = BlipProcessor.from_pretrained(model_id)
            model = BlipForConditionalGeneration.from_pretrained(model_id)
    except (OSError, ValueError) as exc:  # missing files, or a name the hub rejects
        raise CaptionerUnavailableError(
            f"could not load captioner {model_id!r} ({exc}); add captions.jsonl or NAME.txt sidecars "
            "to your photos instead, pass a local BLIP checkpoint folder, or use the 'offline' captioner"
        ) from exc
    return processor, model.to(device).eval()


def build_offline_captioner(spec: str = "", *, embedder: Any = None, **_: Any) -> OfflineCaptioner:
    """Registry builder for ``offline``."""
    return OfflineCaptioner(embedder)


def build_blip_captioner(spec: str = "", *, device: str | None = None, max_new_tokens: int = 30,
                         **_: Any) -> BlipCaptioner:
    """Registry builder for ``blip`` / ``blip:<hub id or folder>`` (``embedder`` is ignored)."""
    return BlipCaptioner(spec or DEFAULT_BLIP, device=device, max_new_tokens=max_new_tokens)


def build_tags_captioner(spec: str = "", *, embedder: Any = None, **_: Any) -> Any:
    """Registry builder for ``tags`` / ``tags:<k>`` (:class:`pictrieve.tools.models.image_tags.ZeroShotTagger`)."""
    if spec and not spec.isdigit():
        raise CaptionerUnavailableError(f"'tags:{spec}': the part after 'tags:' is a number of tags, e.g. 'tags:4'")
    return ZeroShotTagger(embedder, k=int(spec) if spec else DEFAULT_TAGS_PER_IMAGE)


CAPTIONERS.register("tags", build_tags_captioner,
                    "the everyday words closest to the image in the embedder's text-image space (needs embedder=)")
CAPTIONERS.register(OFFLINE, build_offline_captioner,
                    "what the offline embedder's ImageNet/COCO models see (needs embedder=)")
CAPTIONERS.register("blip", build_blip_captioner, f"BLIP through transformers (default {DEFAULT_BLIP})")


def create_captioner(name: str, **kwargs: Any) -> Captioner:
    """Build the captioner ``name`` (see the module docstring); ``kwargs`` go to its builder.

    ``embedder=`` is what ``offline`` describes with; ``device=`` places model-based captioners.
    A bare hub id or folder (``org/model``, ``./folder``) is a BLIP model.
    """
    name = (name or "").strip()
    if name not in CAPTIONERS and ("/" in name or Path(name).expanduser().is_dir()):
        name = f"blip:{name}"
    return CAPTIONERS.create(name, **kwargs)


def caption_files(captioner: Any):
    """A ``paths -> captions`` callable for ``captioner`` (kept for callers written before
    captioners took paths themselves: a :class:`Captioner` can be passed directly)."""
    if hasattr(captioner, "caption"):
        return lambda paths: captioner.caption(list(paths))
    from pictrieve.tools.core.images import load_image

    return lambda paths: captioner([load_image(path) for path in paths])
