"""A 64-bit perceptual hash of a photo, for finding near-identical copies (resized, recompressed, cropped a little).

:func:`perceptual_hash` is the DCT hash ("pHash"): the photo in grey at 32x32, its 2-D DCT, and one bit per
coefficient of the 8x8 lowest frequencies saying whether it is above their median. Resizing and JPEG
recompression move it by a few bits, a slight crop by some more, while unrelated photos differ in about 32 of
64 bits. Indexing computes it from the decoded, upright image (so an EXIF-rotated copy hashes like the
original) and stores it on each record as 16 hex digits (``phash``); :mod:`~pictrieve.vectorstore.duplicates`
groups records by it. A few lines of numpy: no dependency for it.
"""

from __future__ import annotations

import functools

import numpy as np
from PIL import Image

HASH_SIDE = 8
"""Bits per side of the hash: 8x8 = 64 bits."""
SAMPLE_SIDE = 32
"""The grey image the DCT is taken of."""


@functools.lru_cache(maxsize=1)
def _dct_matrix(n: int = SAMPLE_SIDE) -> np.ndarray:
    """The orthonormal DCT-II matrix ``D`` (``D @ x`` is the DCT of ``x``)."""
    k = np.arange(n)[:, None]
    d = np.cos(np.pi * (2 * np.arange(n)[None, :] + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    d[0] /= np.sqrt(2.0)
    return d


def perceptual_hash(image: Image.Image | np.ndarray) -> str:
    """The photo's 64-bit DCT hash as 16 hex digits (pass the upright image: orientation counts), of a PIL image
    or of its ``(h, w, 3)`` uint8 RGB pixels (the same hash)."""
    if isinstance(image, np.ndarray):
        image = Image.fromarray(image)  # one copy (0.2 ms at 384x288): what Pillow's grey conversion reads
    grey = image.convert("L").resize((SAMPLE_SIDE, SAMPLE_SIDE), Image.Resampling.BOX if min(image.size) >= SAMPLE_SIDE
                                     else Image.Resampling.BILINEAR)
    pixels = np.asarray(grey, dtype=np.float64)
    d = _dct_matrix()
    low = (d @ pixels @ d.T)[:HASH_SIDE, :HASH_SIDE].reshape(-1)
    bits = low > _median(low[1:])  # the DC term (overall brightness) is left out of the median
    return np.packbits(bits).tobytes().hex()  # the first coefficient is the highest bit, as 16 hex digits


def _median(values: np.ndarray) -> float:
    """``np.median`` of a 1-D array (the same value), by one partial sort: np.median's own checks cost more than the
    sort on 63 numbers, in every indexed photo."""
    middle = values.size // 2
    if values.size % 2:
        return float(np.partition(values, middle)[middle])
    part = np.partition(values, (middle - 1, middle))
    return float((part[middle - 1] + part[middle]) / 2)


def hash_to_int(value: str) -> int:
    """A stored hash (16 hex digits) as an unsigned 64-bit integer."""
    return int(value, 16)


def hamming(a: str | int, b: str | int) -> int:
    """How many of the 64 bits two hashes differ in."""
    x = (hash_to_int(a) if isinstance(a, str) else a) ^ (hash_to_int(b) if isinstance(b, str) else b)
    return int(x).bit_count()
