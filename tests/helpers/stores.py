"""Both stores behind :class:`~pictrieve.vectorstore.store.ImageStore`, opened the same way, so that one test
runs its assertions on each (``@pytest.fixture(params=STORES)``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

STORES = ["chroma", "memory"]
"""The stores every contract test runs on: Chroma (:class:`Gallery`) and the exact in-memory one."""


def open_store(kind: str, folder: Path, embedder: Any) -> Any:
    """A new, empty gallery of store ``kind`` seen through ``embedder`` (``folder`` is where Chroma keeps it)."""
    if kind == "chroma":
        from pictrieve.vectorstore.gallery import Gallery

        return Gallery.open(folder, embedder)
    if kind == "memory":
        from pictrieve.vectorstore.memory_store import MemoryStore

        return MemoryStore(embedder, location=f"memory:{Path(folder).name}")
    raise ValueError(f"unknown store {kind!r}")
