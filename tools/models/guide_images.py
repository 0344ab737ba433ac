"""Guide images on disk: a visualizer's pictures for a prompt, made once and kept.

Generating a picture costs seconds to minutes; searching with it costs milliseconds. Every method
that searches with pictures (VisRet, NEEDLE) therefore asks for them through :func:`guide_paths`,
which keys them by visualizer name, prompt, seed and count under ``$PICTRIEVE_CACHE/guides/`` and
returns file paths, so a repeated query never pays twice and graph state holds only small strings
(a checkpointer can save it; a resumed session finds the same pictures).

Visualizers that *find* pictures instead of making them (``exemplar:``) expose ``source_paths``;
their photos are used where they are, nothing is copied.

A visualizer that fails, or returns fewer pictures than asked, yields fewer guides: never a black
placeholder image (the authors' VisRet code searched with black images after a failed generation).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pictrieve.tools.core.files import atomic_write_bytes, atomic_write_text

logger = logging.getLogger(__name__)


def guide_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    from pictrieve.tools.core.pypi_assets import cache_root

    return Path(cache_dir) if cache_dir is not None else cache_root() / "guides"


def guide_key(visualizer: Any, prompt: str, n: int, seed: int | None) -> str:
    """The cache key of ``n`` pictures of ``prompt`` by ``visualizer`` with ``seed``."""
    settings = getattr(visualizer, "settings_key", "")
    text = json.dumps([str(visualizer.name), settings() if callable(settings) else settings, prompt, seed, n])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def guide_paths(
    visualizer: Any,
    prompt: str,
    n: int,
    *,
    seed: int | None = 0,
    exclude: Collection[str] = (),
    cache_dir: str | os.PathLike | None = None,
) -> list[Path]:
    """Up to ``n`` picture files of ``prompt`` from ``visualizer``, none of them in ``exclude``."""
    if n < 1:
        return []
    exclude = {str(p) for p in exclude}
    find = getattr(visualizer, "source_paths", None)
    if callable(find):  # found, not made: the photos themselves, skipping ones already shown
        found = find(prompt, n + len(exclude))
        return [path for path in map(Path, found) if str(path) not in exclude][:n]
    folder = guide_cache_dir(cache_dir) / guide_key(visualizer, prompt, n, seed)
    manifest = folder / "guides.json"
    if manifest.is_file():
        paths = [folder / name for name in json.loads(manifest.read_text(encoding="utf-8"))["files"]]
        if all(path.is_file() for path in paths):
            return [path for path in paths if str(path) not in exclude][:n]
    images = visualizer.visualize(prompt, n=n, seed=seed)
    if len(images) < n:
        logger.warning("%s made %d of %d pictures for %r", visualizer.name, len(images), n, prompt)
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for index, image in enumerate(images):
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="PNG")
        names.append(f"{index}.png")
        atomic_write_bytes(folder / names[-1], buffer.getvalue())
    # The manifest is written last: a crash mid-way leaves no manifest, so the next call remakes all.
    atomic_write_text(manifest, json.dumps({"visualizer": visualizer.name, "prompt": prompt, "seed": seed,
                                            "files": names}))
    return [folder / name for name in names if str(folder / name) not in exclude]
