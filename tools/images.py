"""Finding and decoding image files safely.

``iter_image_files`` expands what a user types (folders, globs, files) into image paths;
``load_image`` decodes one file fully, so that truncated or corrupt files fail here, with a clear
message, rather than later inside a model.
"""

from __future__ import annotations

import glob
import hashlib
import os
from pathlib import Path
from typing import Iterable, Iterator

from PIL import Image, UnidentifiedImageError

from pictrieve.errors import PictrieveError

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".ppm", ".pgm"}
)

Image.MAX_IMAGE_PIXELS = 20_000 * 20_000  # refuse decompression bombs beyond 400 MP


class ImageDecodeError(PictrieveError, ValueError):
    """A file could not be decoded as an image."""


def is_image_path(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_EXTENSIONS


def iter_image_files(sources: str | os.PathLike | Iterable[str | os.PathLike]) -> Iterator[Path]:
    """Yield absolute image paths from folders (recursive), glob patterns and files, de-duplicated.

    Explicitly named files are yielded whatever their extension (so a bad file named by the user is
    reported rather than silently ignored); files found by walking a folder or a glob must have an
    image extension. Hidden files and folders are skipped while walking.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    seen: set[Path] = set()
    for source in sources:
        for path in _expand_source(str(source)):
            path = path.resolve()
            if path not in seen:
                seen.add(path)
                yield path


def _expand_source(source: str) -> Iterator[Path]:
    path = Path(source).expanduser()
    if path.is_dir():
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                candidate = Path(root) / name
                if not name.startswith(".") and is_image_path(candidate):
                    yield candidate
    elif path.exists():
        yield path
    elif glob.has_magic(source):
        for match in sorted(glob.glob(os.path.expanduser(source), recursive=True)):
            candidate = Path(match)
            if candidate.is_file() and is_image_path(candidate):
                yield candidate
    else:
        raise FileNotFoundError(f"{source}: no such file, folder or glob match")


def load_image(path: str | os.PathLike) -> Image.Image:
    """Decode ``path`` completely into an RGB image, or raise :class:`ImageDecodeError`."""
    try:
        with Image.open(path) as image:
            image.load()
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageDecodeError(f"{path}: not a readable image ({exc})") from exc


def file_sha256(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()
