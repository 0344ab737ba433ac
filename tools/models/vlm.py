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


MIN_GUESS = 0.3
"""The offline describer names the classifier's best ImageNet class only at this probability or more: below
it the guess is usually wrong (a person crop is "a patas monkey (0.07)"), and is not shown as a fact."""
MIN_GROUP = 0.4
"""A whole photo is said to show a dog (or a cat, a bird) when the classifier's classes of that group add
up to this much probability (the 118 dog breeds share it out: no single breed may reach ``MIN_GUESS``)."""

IMAGENET_GROUPS: dict[str, tuple[range, ...]] = {
    "dog": (range(151, 269),), "cat": (range(281, 286),), "bird": (range(7, 25), range(80, 101), range(127, 147)),
}
"""Coarse kinds as ranges of ImageNet-1k class indices (the classifier's output order)."""


def offline_describer() -> Any:
    """The offline embedder the describer asks (the process's shared one: loaded once, not per run)."""
    from pictrieve.tools.core.model_cache import shared_model
    from pictrieve.tools.models.embedders.factory import create_embedder

    return shared_model(("region-describer-embedder", "offline"), lambda: create_embedder("offline"),
                        label="the region describer (the offline embedder)")


class OfflineRegionCaptioner:
    """The offline describer: the offline embedder's account of what it sees (prompt ignored).

    :meth:`describe_region` is what the Vision Search Assistant calls: it knows the detector's label, so a
    person region is "a person" (ImageNet has no person class and calls people monkeys and dogs), and a
    photo the detector found nothing in is described whole, naming its kind when the classifier is sure.
    """

    name = "offline"

    def __init__(self, embedder: Any = None) -> None:
        self.embedder = embedder  # loaded on first use, so building a graph stays cheap

    def _embedder(self) -> Any:
        if self.embedder is None:
            self.embedder = offline_describer()
        return self.embedder

    def caption(self, images: Sequence[ImageInput], *, prompt: str | None = None) -> list[str]:
        pictures = [im if isinstance(im, Image.Image) else load_image(os.fspath(im)) for im in images]
        return [self._embedder().describe(p.convert("RGB")) for p in pictures]

    def _classes(self, image: Image.Image) -> list[tuple[int, float]]:
        """ImageNet ``(index, probability)`` for the centre crop, best first (all 1,000).

        The logits come from the embedder's trunk on its runtime (ONNX Runtime on a CPU): asking the torch
        classifier imported torch and timm on every ``ask``, 8 s of CPU (20 s on a busy machine)."""
        import numpy as np

        from pictrieve.tools.models.embedders.backbone import center_crop_array

        labels = getattr(self._embedder(), "labels", self._embedder())  # the trained head's label half
        _, logits = labels.trunk_outputs(center_crop_array(image)[None])
        z = np.asarray(logits[0], dtype=np.float64)
        probs = np.exp(z - z.max())
        probs /= probs.sum()
        return [(int(i), float(probs[i])) for i in np.argsort(-probs)]

    def describe_region(self, image: Image.Image, label: str) -> dict[str, Any]:
        """``{"description", "subject"}`` of a region the detector labelled ``label`` (``"image"``: the whole
        photo, nothing detected). ``subject`` is the noun the photo is about (None when unsure)."""
        from pictrieve.tools.models.imagenet_names import imagenet_readable_names

        if label == "person":
            return {"description": "a person", "subject": "person"}
        names = imagenet_readable_names()
        classes = self._classes(image)
        best, p = classes[0]
        groups = {g: sum(q for i, q in classes if any(i in r for r in ranges)) for g, ranges in IMAGENET_GROUPS.items()}
        group, mass = max(groups.items(), key=lambda kv: kv[1])
        if label != "image":
            guess = names[best]
            agrees = label not in IMAGENET_GROUPS or any(best in r for r in IMAGENET_GROUPS[label])
            hint = f", perhaps {_article(guess)} ({p:.2f})" if p >= MIN_GUESS and agrees else ""
            return {"description": f"{_article(label)}{hint}", "subject": label}
        if mass >= MIN_GROUP:
            hint = f", perhaps {_article(names[best])} ({p:.2f})" if p >= MIN_GUESS else ""
            return {"description": f"{_article(group)} ({mass:.2f}){hint}", "subject": group}
        if p >= MIN_GUESS:
            return {"description": f"perhaps {_article(names[best])} ({p:.2f})", "subject": names[best]}
        unsure = ", ".join(f"{names[i]} ({q:.2f})" for i, q in classes[:3])
        return {"description": f"unclear (the classifier is unsure: {unsure})", "subject": None}


def _article(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def create_region_captioner(name: str | Any = "offline", *, base_url: str | None = None) -> Any:
    """``offline`` (no network) or ``openai:<model>`` at ``base_url``; a Captioner passes through."""
    if not isinstance(name, str):
        return name
    if name == "offline":
        return OfflineRegionCaptioner()
    family, _, spec = name.partition(":")
    if family == "openai" and spec:
        return create_vlm(spec, base_url=base_url)
    from pictrieve.tools.models.captioner_base import CaptionerUnavailableError

    raise CaptionerUnavailableError(f"unknown VLM {name!r}: use 'offline' or 'openai:<model>' with --vlm-base-url")
