"""Trunk rows shared between embedders for a block of work: the same pixels through the same trunk, computed once.

``pictrieve tile`` runs ``efficientnet-lite0`` and ``offline-labels:detect`` over the same tiles, and both put each
tile's classifier centre crop (the same pixels, :func:`~pictrieve.tools.models.imagenet_classifier.preprocess_image`)
through the same EfficientNet-Lite0 trunk: one pass of the seven a tile takes over the three embedders of README's
NEEDLE example. Inside :func:`sharing_trunk_rows`, :func:`trunk_outputs` looks each row up by its pixels' digest:
whichever embedder (thread) gets to a row first computes it, the other takes it. Only the ONNX Runtime trunk shares:
it gives a row the same bits whatever batch the row is in (``tests/test_needle.py`` checks the vectors), so a shared
row is exactly the row an unshared call would have computed; torch on a GPU picks kernels by batch size, so it never
shares.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pictrieve.tools.models.embedders.backbone import PackagedBackbone

SHARED_ROWS = 2048
"""Rows kept (about 9 KB each, features and logits): a few batches of tiles between the embedder ahead and the one
behind."""


class _Rows:
    """The rows computed in a :func:`sharing_trunk_rows` block, by digest, the oldest dropped first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.rows: OrderedDict[tuple[int, bytes], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.lock = threading.Lock()
        self.computed = 0
        """Rows that went through the trunk (the others were shared)."""

    def take(self, keys: list[tuple[int, bytes]]) -> list[tuple[np.ndarray, np.ndarray] | None]:
        with self.lock:
            return [self.rows.get(key) for key in keys]

    def keep(self, keys: list[tuple[int, bytes]], features: np.ndarray, logits: np.ndarray) -> None:
        with self.lock:
            self.computed += len(keys)
            for key, feature, logit in zip(keys, features, logits):
                self.rows[key] = (feature.copy(), logit.copy())  # a caller may change what it got
            while len(self.rows) > self.capacity:
                self.rows.popitem(last=False)


_active: _Rows | None = None
_active_lock = threading.Lock()


@contextmanager
def sharing_trunk_rows(capacity: int = SHARED_ROWS) -> Iterator[_Rows]:
    """Within the block (in every thread), :func:`trunk_outputs` computes a row of pixels once for all embedders.
    Blocks do not nest: an inner one shares the outer one's rows."""
    global _active
    with _active_lock:
        outer = _active
        if outer is None:
            _active = _Rows(capacity)
        rows = _active
    try:
        yield rows
    finally:
        if outer is None:
            with _active_lock:
                _active = None


def trunk_outputs(model: "PackagedBackbone", pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``model.trunk_outputs(pixels)``, taking the rows another embedder already computed inside
    :func:`sharing_trunk_rows` (on ONNX Runtime; anything else computes every row)."""
    rows = _active
    session = model.trunk_runtime if rows is not None else None
    if rows is None or session is None:
        return model.trunk_outputs(pixels)
    pixels = np.ascontiguousarray(pixels, dtype=np.float32)
    keys = [(id(session), hashlib.sha1(row).digest()) for row in pixels]  # sha1: 0.4 ms a row, a pass is ~20
    found = rows.take(keys)
    missing = [i for i, row in enumerate(found) if row is None]
    if len(missing) == len(keys):
        features, logits = model.trunk_outputs(pixels)
        rows.keep(keys, features, logits)
        return features, logits
    if missing:
        computed = model.trunk_outputs(pixels[missing])
        rows.keep([keys[i] for i in missing], *computed)
        for n, i in enumerate(missing):
            found[i] = (computed[0][n], computed[1][n])
    return np.stack([f for f, _ in found]), np.stack([lg for _, lg in found])
