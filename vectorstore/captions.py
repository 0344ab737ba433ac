"""Human captions that travel with images, read from sidecar files.

Two sidecar forms are understood:

- ``captions.jsonl`` (the flickr8k-dev format): one JSON object per line,
  ``{"image": "images/NAME.jpg", "captions": ["...", ...]}``, paths relative to the file's folder;
- ``NAME.txt`` beside ``NAME.jpg``: one caption per non-empty line.

Captions are stored as gallery metadata; the interactive and quality-controlled graphs show them to
LLMs, and ``pictrieve eval retrieval`` uses them as queries.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from typing import Iterable

logger = logging.getLogger(__name__)

CAPTIONS_FILE = "captions.jsonl"


def read_captions_jsonl(path: str | os.PathLike) -> dict[Path, list[str]]:
    """Map absolute image paths to their captions from one ``captions.jsonl`` file.

    Malformed lines are logged and skipped, never fatal: a caption file should not stop indexing.
    """
    path = Path(path)
    captions: dict[Path, list[str]] = {}
    real_folders: dict[str, str] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                image = _resolved(path.parent / record["image"], real_folders)
                texts = [str(c).strip() for c in record["captions"] if str(c).strip()]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                logger.warning("%s:%d: skipping malformed caption line (%s)", path, number, exc)
                continue
            captions[image] = texts
    return captions


def _resolved(path: Path, real_folders: dict[str, str]) -> Path:
    """``path.resolve()``, each folder resolved once (``real_folders``): one ``lstat`` a line where the image is no
    link (resolving every line's whole path took 0.2 s of flickr8k-dev's 2,500-caption file before indexing began)."""
    folder, name = os.path.split(path)
    try:
        plain = name not in ("", ".", "..") and not os.path.islink(path)
    except OSError:
        plain = False
    if not plain:
        return path.resolve()
    real = real_folders.get(folder)
    if real is None:
        real = real_folders[folder] = os.path.realpath(folder)
    return Path(real, name)


class CaptionIndex:
    """Captions for the images under some sources, looked up by absolute path."""

    def __init__(self, sources: Iterable[str | os.PathLike] = ()) -> None:
        self._jsonl: dict[Path, list[str]] = {}
        for caption_file in _caption_files(sources):
            self._jsonl.update(read_captions_jsonl(caption_file))

    def __len__(self) -> int:
        return len(self._jsonl)

    def captions_for(self, image_path: Path) -> list[str]:
        """Captions for ``image_path`` from ``captions.jsonl``, else from ``NAME.txt``, else ``[]``."""
        if image_path in self._jsonl:
            return self._jsonl[image_path]
        sidecar = image_path.with_suffix(".txt")
        if sidecar.is_file():
            try:
                lines = sidecar.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError as exc:
                logger.warning("%s: cannot read captions (%s)", sidecar, exc)
                return []
            return [line.strip() for line in lines if line.strip()]
        return []


def _caption_files(sources: Iterable[str | os.PathLike]) -> list[Path]:
    """``captions.jsonl`` files inside source folders, and beside or just above any source."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    found: dict[Path, None] = {}
    looked: set[Path] = set()  # folders whose own and parent's caption file were looked for (files share them)
    for source in sources:
        path = Path(source).expanduser()
        try:
            is_dir = stat.S_ISDIR(path.stat().st_mode)
        except OSError:  # missing or unreadable: listing reports it
            continue
        folder = path if is_dir else path.parent
        if folder not in looked:
            looked.add(folder)
            for candidate in (folder / CAPTIONS_FILE, folder.parent / CAPTIONS_FILE):
                if candidate.is_file():
                    found[candidate.resolve()] = None
        if is_dir:
            for candidate in sorted(path.rglob(CAPTIONS_FILE)):
                found[candidate.resolve()] = None
    return list(found)
