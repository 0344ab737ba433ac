"""What the methods that search with guide pictures share (VisRet, NEEDLE).

- :class:`Guide`: one guide picture in a graph's state. Guides travel as file paths
  (:mod:`pictrieve.tools.models.guide_images` keeps generated pictures on disk; found ones are used where they
  are), so the state stays JSON and a checkpointer can resume a run in another process;
- :func:`as_visualizers`: the builders' ``visualizers`` argument (one visualizer or several, objects or
  names such as ``exemplar:DIR``) as a list of visualizer objects;
- :func:`guides_from`: a visualizer's pictures of a prompt as :class:`Guide` records;
- :class:`GalleryViews`: the gallery seen through each of its embedders, one view per name.

Both methods call the count of pictures asked of each visualizer ``guides`` (a run setting) and return
the guide records as ``guides`` (an output field).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any, Literal

from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12 (server schemas)
from pictrieve.vectorstore.store import ImageStore

GuideStatus = Literal["new", "approved", "rejected", "discarded", "outlier", "used"]


class Guide(TypedDict):
    """One guide picture in the state."""

    id: str
    path: str
    visualizer: str
    generated: bool
    seed: int | None
    status: GuideStatus
    """new (not reviewed yet), approved, rejected (by a person; to be replaced), discarded (rejected
    and replaced), outlier (dropped by screening), used (searched with)."""
    outlier_score: NotRequired[float]
    replaces: NotRequired[str]


def as_visualizers(value: Any) -> list[Any]:
    """``value`` (``None``, one visualizer or a list; objects or names) as a list of visualizer objects."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        value = [value]
    from pictrieve.tools.models.visualizers import create_visualizer

    return [create_visualizer(v) if isinstance(v, str) else v for v in value]


def guides_from(visualizer: Any, prompt: str, n: int, *, seed: int, start: int = 1, exclude: Collection[str] = (),
                cache_dir: str | os.PathLike | None = None) -> list[Guide]:
    """Up to ``n`` pictures of ``prompt`` by ``visualizer`` (none of the paths in ``exclude``), as new
    guides numbered ``g<start>``, ``g<start+1>``, ... A failing visualizer raises: the caller decides
    whether the search goes on without it."""
    from pictrieve.tools.models.guide_images import guide_paths

    paths = guide_paths(visualizer, prompt, n, seed=seed, exclude=exclude, cache_dir=cache_dir)
    return [
        Guide(id=f"g{start + i}", path=str(path), visualizer=visualizer.name,
              generated=bool(getattr(visualizer, "generates", True)), seed=seed, status="new")
        for i, path in enumerate(paths)
    ]


class GalleryViews:
    """``index`` seen through each embedder: one view per name, so each embedder's model loads once."""

    def __init__(self, index: ImageStore) -> None:
        self.index = index
        self._views: dict[str, Any] = {}

    def view(self, embedder: str | None) -> Any:
        """The gallery through ``embedder`` (``None`` or the gallery's own: the gallery itself)."""
        if embedder in (None, self.index.embedder_name):
            return self.index
        if embedder not in self._views:
            self._views[embedder] = self.index.with_embedder(embedder)
        return self._views[embedder]
