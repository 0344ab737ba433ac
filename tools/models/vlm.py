"""A Captioner that asks a vision-language chat model about an image, steered by a prompt.

Any OpenAI-compatible chat endpoint that takes image content (vLLM, Ollama, LM Studio, OpenAI)
works through ``langchain-openai``: the image is sent inline as a base64 PNG data URL. The
authors' code uses LLaVA at temperature 0.2; so does the default here.
"""

from __future__ import annotations

import base64
import io
import os
from typing import Any, Sequence

from PIL import Image

from pictrieve.tools.core.images import load_image
from pictrieve.tools.models.protocols import ImageInput

DEFAULT_PROMPT = "Describe this image in two sentences."


def image_data_url(image: ImageInput, *, max_side: int = 768) -> str:
    """``image`` as a ``data:image/png;base64,...`` URL (downscaled so the longer side <= max_side)."""
    picture = image if isinstance(image, Image.Image) else load_image(os.fspath(image))  # EXIF-upright
    picture = picture.convert("RGB")
    picture.thumbnail((max_side, max_side))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


class ChatVLMCaptioner:
    """``caption(images, prompt=...)`` by a chat model that accepts ``image_url`` content parts."""

    def __init__(self, chat_model: Any, *, name: str = "vlm") -> None:
        self.chat_model = chat_model
        self.name = name

    def caption(self, images: Sequence[ImageInput], *, prompt: str | None = None) -> list[str]:
        from langchain_core.messages import HumanMessage

        from pictrieve.tools.models.llm_calls import complete

        out = []
        for image in images:
            message = HumanMessage(content=[
                {"type": "text", "text": prompt or DEFAULT_PROMPT},
                {"type": "image_url", "image_url": {"url": image_data_url(image)}},
            ])
            out.append(complete(self.chat_model, [message]))
        return out


def create_vlm(model: str, *, base_url: str | None = None, temperature: float = 0.2, **kwargs: Any) -> ChatVLMCaptioner:
    """A VLM captioner for ``model`` served at ``base_url`` (an OpenAI-compatible ``/v1`` endpoint)."""
    from pictrieve.tools.models.chat_models import create_chat_model

    chat = create_chat_model(f"openai:{model}", base_url=base_url, temperature=temperature, **kwargs)
    return ChatVLMCaptioner(chat, name=f"openai:{model}")


class OfflineRegionCaptioner:
    """The offline describer: the offline embedder's account of what it sees (prompt ignored)."""

    name = "offline"

    def __init__(self, embedder: Any = None) -> None:
        self.embedder = embedder  # loaded on first use, so building a graph stays cheap

    def caption(self, images: Sequence[ImageInput], *, prompt: str | None = None) -> list[str]:
        if self.embedder is None:
            from pictrieve.tools.models.embedders.factory import create_embedder

            self.embedder = create_embedder("offline")
        pictures = [im if isinstance(im, Image.Image) else load_image(os.fspath(im)) for im in images]
        return [self.embedder.describe(p.convert("RGB")) for p in pictures]


def create_region_captioner(name: str | Any = "offline", *, base_url: str | None = None) -> Any:
    """``offline`` (no network) or ``openai:<model>`` at ``base_url``; a Captioner passes through."""
    if not isinstance(name, str):
        return name
    if name == "offline":
        return OfflineRegionCaptioner()
    family, _, spec = name.partition(":")
    if family == "openai" and spec:
        return create_vlm(spec, base_url=base_url)
    from pictrieve.tools.models.captioners import CaptionerUnavailableError

    raise CaptionerUnavailableError(f"unknown VLM {name!r}: use 'offline' or 'openai:<model>' with --vlm-base-url")
