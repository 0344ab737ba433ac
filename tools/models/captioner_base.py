"""What every captioner shares: :class:`CaptionerBase` (paths or images in, one caption per image
out) and :class:`CaptionerUnavailableError`.

Kept apart from the registry (:mod:`pictrieve.tools.models.captioners`) so that captioners living in
their own modules (:mod:`pictrieve.tools.models.image_tags`) build on it while the registry imports
them: the imports go one way.
"""

from __future__ import annotations

from typing import Sequence

from PIL import Image

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.images import load_image
from pictrieve.tools.models.protocols import ImageInput


class CaptionerUnavailableError(PictrieveError, RuntimeError):
    """The requested captioner cannot be loaded here."""


class CaptionerBase:
    """Shared plumbing: decode paths, call ``_caption_images``; ``captioner(items)`` == ``caption``.

    Subclass it for a new captioner and implement ``_caption_images(images, prompt)``."""

    name: str = ""

    def caption(self, images: Sequence[ImageInput], *, prompt: str | None = None) -> list[str]:
        if isinstance(images, (str, Image.Image)) or not isinstance(images, Sequence):
            images = [images]  # type: ignore[list-item]
        if not images:
            return []
        return self._caption_images([_as_image(item) for item in images], prompt)

    def __call__(self, images: Sequence[ImageInput]) -> list[str]:
        return self.caption(images)

    def _caption_images(self, images: list[Image.Image], prompt: str | None) -> list[str]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _as_image(item: ImageInput) -> Image.Image:
    if isinstance(item, Image.Image):
        return item
    return load_image(item)
