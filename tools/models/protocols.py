"""The interfaces of the model families that graphs call, so any backend can stand behind a node.

Each family has one protocol here, one :class:`~pictrieve.tools.core.registry.Registry` of named builders
(in the family's own module), and a ``name`` attribute that rebuilds the same thing from its
registry. Embedders have their own protocol in :mod:`pictrieve.tools.models.embedders.base`; chat models
are LangChain ``BaseChatModel`` s.

- :class:`Detector`: regions of an image (Vision Search Assistant; NEEDLE tiling may use it).
- :class:`Captioner`: a description of each image, optionally steered by a prompt (PlugIR's
  candidate captions, QC2 annotation, the Vision Search Assistant's region descriptions).
- :class:`Visualizer`: images for a text prompt, generated or, offline, found (VisRet, NEEDLE).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

from PIL import Image

ImageInput = Image.Image | str | os.PathLike
"""A decoded image or the path of an image file."""

__all__ = ["Captioner", "Detection", "Detector", "ImageInput", "Visualizer"]


@dataclass(frozen=True)
class Detection:
    """One detected object: its ``label``, confidence ``score`` in [0, 1] and pixel ``box``.

    ``box`` is ``(x0, y0, x1, y1)`` in the coordinates of the image passed to ``detect``.
    """

    label: str
    score: float
    box: tuple[float, float, float, float]


@runtime_checkable
class Detector(Protocol):
    """Finds objects: ``detect(image, labels=None, min_score=...)`` -> :class:`Detection` list.

    Boxes are ``(x0, y0, x1, y1)`` in pixels of ``image``. ``labels`` are the phrases an
    open-vocabulary detector should look for (a closed-vocabulary one may ignore them).
    """

    name: str

    def detect(
        self, image: Image.Image, *, labels: Sequence[str] | None = None, min_score: float | None = None
    ) -> list[Detection]: ...


@runtime_checkable
class Captioner(Protocol):
    """Describes images: ``caption(images, prompt=None)`` -> one string per image.

    ``images`` may mix decoded images and file paths. ``prompt`` steers a model that can follow
    instructions (a VLM: "describe the car, the user asks which model it is"); others ignore it.
    """

    name: str

    def caption(self, images: Sequence[ImageInput], *, prompt: str | None = None) -> list[str]: ...


@runtime_checkable
class Visualizer(Protocol):
    """Turns a prompt into ``n`` images: ``visualize(prompt, n=3, seed=0)`` -> list of RGB images.

    ``generates`` says whether the images are new (a text-to-image model) or found (the offline
    exemplar visualizer): reports and the web page must not call found photos "generated".
    """

    name: str
    generates: bool

    def visualize(self, prompt: str, *, n: int = 1, seed: int | None = None) -> list[Image.Image]: ...
