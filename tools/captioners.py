"""Captioners: functions that describe images in words, for galleries without human captions.

A captioner takes a batch of decoded images and returns one caption each. PlugIR shows captions of
retrieval candidates to its questioner, and QC² trains on captions, so both need one when a gallery
has no ``captions.jsonl`` or ``NAME.txt`` sidecars.

- ``create_captioner("offline", embedder=...)``: what the offline embedder's vision models say
  ("a photo of a golden retriever (0.62) or a Labrador retriever (0.20)"). Works without internet,
  but names ImageNet classes, not scenes or actions.
- ``create_captioner("<BLIP model id or local folder>")``: a BLIP captioning model through
  transformers, e.g. ``Salesforce/blip-image-captioning-base`` (downloaded once where the network
  allows).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from PIL import Image

from pictrieve.errors import PictrieveError
from pictrieve.tools.images import load_image

Captioner = Callable[[Sequence[Image.Image]], list[str]]
"""``captions = captioner(images)``: one caption per decoded image."""

DEFAULT_BLIP = "Salesforce/blip-image-captioning-base"
OFFLINE = "offline"


class CaptionerUnavailableError(PictrieveError, RuntimeError):
    """The requested captioner cannot be loaded here."""


def create_captioner(name: str, *, embedder: Any = None) -> Captioner:
    """``offline`` (needs an ``embedder`` with ``describe``) or a BLIP model id / folder."""
    if name == OFFLINE:
        if embedder is None or not hasattr(embedder, "describe"):
            raise CaptionerUnavailableError(
                "the 'offline' captioner describes images with the offline embedder; use it with a "
                "gallery built with --embedder offline (or offline:detect), or name a BLIP model"
            )
        return describing_captioner(embedder)
    return blip_captioner(name)


def describing_captioner(embedder: Any) -> Captioner:
    """Captions from an embedder that can say what it sees (``embedder.describe(image)``)."""

    def caption(images: Sequence[Image.Image]) -> list[str]:
        return [embedder.describe(image) for image in images]

    return caption


def blip_captioner(model_id: str = DEFAULT_BLIP, *, max_new_tokens: int = 30) -> Captioner:
    """A BLIP captioner (hub id or local folder; downloaded once where the network allows)."""
    import torch
    from transformers import BlipForConditionalGeneration, BlipProcessor

    try:
        processor = BlipProcessor.from_pretrained(model_id)
        model = BlipForConditionalGeneration.from_pretrained(model_id).eval()
    except (OSError, ValueError) as exc:  # missing files, or a name the hub rejects
        raise CaptionerUnavailableError(
            f"could not load captioner {model_id!r} ({exc}); add captions.jsonl or NAME.txt sidecars "
            "to your photos instead, pass a local BLIP checkpoint folder, or use 'offline'"
        ) from exc

    def caption(images: Sequence[Image.Image]) -> list[str]:
        inputs = processor(images=list(images), return_tensors="pt")
        with torch.no_grad():
            ids = model.generate(**inputs, max_new_tokens=max_new_tokens)
        return [text.strip() for text in processor.batch_decode(ids, skip_special_tokens=True)]

    return caption


def caption_files(captioner: Captioner) -> Callable[[Sequence[str | os.PathLike]], list[str]]:
    """Adapt an image captioner to take file paths (what the PlugIR graph passes)."""

    def caption(paths: Sequence[str | os.PathLike]) -> list[str]:
        return captioner([load_image(path) for path in paths])

    return caption
