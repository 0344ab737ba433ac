"""Small JPEG copies of photos, for showing found photos to a model that sees images (MCP tools, LangChain
tool messages).

Each photo is a gallery photo opened as the file that was indexed
(:func:`pictrieve.tools.core.gallery_photos.open_gallery_photo`: no link followed, a regular file), decoded within
a server's picture budget (:func:`pictrieve.tools.core.images.load_service_image`: JPEG draft decoding at the size
needed), scaled so its longest side is at most ``max_side`` pixels and encoded as JPEG. Recent results are kept
in memory, keyed by the opened file's path, device, inode, size and modification time, so showing the same photos
again costs nothing and a changed file is read afresh.
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict

from PIL import Image

from pictrieve.tools.core.gallery_photos import MAX_PHOTO_BYTES, open_gallery_photo
from pictrieve.tools.core.images import load_service_image, shown_by_browsers

MAX_SIDE = 512
"""Longest side of a thumbnail, in pixels."""
JPEG_QUALITY = 85
VIEW_SIDE = 1600
"""Longest side of the JPEG a photo in a format browsers cannot show (HEIC, TIFF) is sent as."""
CACHED = 256
"""Thumbnails kept in memory (about 30 KB each)."""

_cache: OrderedDict[tuple, bytes] = OrderedDict()
_lock = threading.Lock()


def jpeg_thumbnail(path: str | os.PathLike, *, max_side: int = MAX_SIDE, quality: int = JPEG_QUALITY,
                   name: str | None = None) -> bytes:
    """JPEG bytes of the gallery photo at ``path``, its longest side at most ``max_side`` pixels (never enlarged);
    ``name``: how the caller knows the photo, for the one-line refusals.

    Raises :class:`~pictrieve.tools.core.gallery_photos.ChangedPhotoError` for a file that is no longer the one
    indexed (a link, not a regular file), :class:`~pictrieve.tools.core.images.ImageDecodeError` (one line) for
    one that does not decode, ``OSError`` for one that cannot be read.
    """
    with open_gallery_photo(path, name=name) as photo:
        key = (*photo.key, max_side, quality)
        with _lock:
            if key in _cache:
                _cache.move_to_end(key)
                return _cache[key]
        image = load_service_image(photo.image(), side=max_side)
    data = encode_jpeg(image, max_side=max_side, quality=quality)
    with _lock:
        _cache[key] = data
        while len(_cache) > CACHED:
            _cache.popitem(last=False)
    return data


def viewable_photo(path: str | os.PathLike, *, name: str | None = None, max_side: int = VIEW_SIDE,
                   max_bytes: int = MAX_PHOTO_BYTES) -> tuple[bytes, str]:
    """``(bytes, media type)`` of a gallery photo as a viewer (the page, an MCP client) is sent it: the file as it
    is when browsers show its format and it still decodes as an image, else a JPEG of it (HEIC, TIFF), upright,
    its longest side at most ``max_side``. Both read the file through
    :func:`~pictrieve.tools.core.gallery_photos.open_gallery_photo` (so a photo replaced by a link, or by a file
    that is no image, is refused: :class:`~pictrieve.tools.core.gallery_photos.ChangedPhotoError`)."""
    if not shown_by_browsers(path):
        return jpeg_thumbnail(path, max_side=max_side, name=name), "image/jpeg"
    with open_gallery_photo(path, name=name, max_bytes=max_bytes) as photo:
        data = photo.checked()
    suffix = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    return data, "image/" + {"jpg": "jpeg"}.get(suffix, suffix)


def encode_jpeg(image: Image.Image, *, max_side: int = MAX_SIDE, quality: int = JPEG_QUALITY) -> bytes:
    """``image`` scaled to fit ``max_side`` (aspect kept) as JPEG bytes."""
    image = image.convert("RGB")
    if max(image.size) > max_side:
        image = image.copy()
        image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality, optimize=True)
    return out.getvalue()
