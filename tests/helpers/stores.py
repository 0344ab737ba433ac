"""The stores behind :class:`~pictrieve.vectorstore.store.ImageStore`, opened the same way, so that one test
runs its assertions on each (``@pytest.fixture(params=STORES)``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

STORES = ["chroma", "memory", "third"]
"""The stores every contract test runs on: Chroma (:class:`Gallery`), the exact in-memory one, and a third written
as a store core alone in the tests (:class:`helpers.third_store.DictStore`): the service above the core needs no
more from a backend."""


def open_store(kind: str, folder: Path, embedder: Any) -> Any:
    """A new, empty gallery of store ``kind`` seen through ``embedder`` (``folder`` is where Chroma keeps it)."""
    if kind == "chroma":
        from pictrieve.vectorstore.gallery import Gallery

        return Gallery.open(folder, embedder)
    if kind == "memory":
        from pictrieve.vectorstore.memory_store import MemoryStore

        return MemoryStore(embedder, location=f"memory:{Path(folder).name}")
    if kind == "third":
        from helpers.third_store import DictStore

        return DictStore(embedder, location=f"dict:{Path(folder).name}")
    raise ValueError(f"unknown store {kind!r}")
