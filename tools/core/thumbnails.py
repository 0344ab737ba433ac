"""Small JPEG copies of photos, for showing found photos to a model that sees images (MCP tools, LangChain
tool messages).

Each photo is decoded by the guarded loader (:func:`pictrieve.tools.core.images.load_image`: the pixel cap, JPEG
draft decoding at the size needed), scaled so its longest side is at most ``max_side`` pixels and encoded as
JPEG. Recent results are kept in memory, keyed by the file's path, size and modification time, so showing the
same photos again costs nothing and a changed file is read afresh.
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict

from PIL import Image

from pictrieve.tools.core.images import load_image

MAX_SIDE = 512
"""Longest side of a thumbnail, in pixels."""
JPEG_QUALITY = 85
CACHED = 256
"""Thumbnails kept in memory (about 30 KB each)."""

_cache: OrderedDict[tuple, bytes] = OrderedDict()
_lock = threading.Lock()


def jpeg_thumbnail(path: str | os.PathLike, *, max_side: int = MAX_SIDE, quality: int = JPEG_QUALITY) -> bytes:
    """JPEG bytes of the photo at ``path``, its longest side at most ``max_side`` pixels (never enlarged).

    Raises :class:`~pictrieve.tools.core.images.ImageDecodeError` (one line) for a file that does not decode,
    ``OSError`` for one that cannot be read.
    """
    stat = os.stat(path)
    key = (os.fspath(path), stat.st_size, stat.st_mtime_ns, max_side, quality)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    image = load_image(path, draft_size=(max_side, max_side))
    data = encode_jpeg(image, max_side=max_side, quality=quality)
    with _lock:
        _cache[key] = data
        while len(_cache) > CACHED:
            _cache.popitem(last=False)
    return data


def encode_jpeg(image: Image.Image, *, max_side: int = MAX_SIDE, quality: int = JPEG_QUALITY) -> bytes:
    """``image`` scaled to fit ``max_side`` (aspect kept) as JPEG bytes."""
    image = image.convert("RGB")
    if max(image.size) > max_side:
        image = image.copy()
        image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality, optimize=True)
    return out.getvalue()
