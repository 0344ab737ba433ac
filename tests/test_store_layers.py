"""The store is a small core and one service above it (issue 39 item 3).

A backend implements :class:`~pictrieve.vectorstore.core.StoreCore` and nothing of the service; the service
(:class:`~pictrieve.vectorstore.service.StoreService`: search, filters, relevance, duplicates, records, indexing)
implements nothing of the core, so a third store is the core alone (``helpers.third_store.DictStore``, on which the
contract tests run too). What a backend adds beyond the core is listed here with why, so the list stays exact.
"""

from __future__ import annotations

import pytest

from helpers.third_store import DictStore

from pictrieve.vectorstore.core import StoreCore
from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.memory_store import MemoryStore
from pictrieve.vectorstore.service import CORE_MEMBERS, StoreService

BACKEND_EXTRAS: dict[type, dict[str, str]] = {
    Gallery: {
        "open": "opening a folder or a server, with the recorded default embedder",
        "create": "making the Chroma database and collection before writers in other processes open it",
        "set_ef_search": "Chroma's HNSW search setting",
        "database": "the shared Chroma connection the tiles (Chroma's own code) use",
    },
    MemoryStore: {},
    DictStore: {},
}
"""Public names a backend defines beyond the core, with why."""

ATTRIBUTES = {"writes_from_another_thread"}
"""Core members that are plain attributes (the others are methods and properties, :data:`CORE_MEMBERS`)."""


def defined_here(cls: type) -> set[str]:
    """The public names ``cls``'s own body defines."""
    return {name for name in vars(cls) if not name.startswith("_")}


def test_the_core_is_small():
    assert len(CORE_MEMBERS) <= 22, CORE_MEMBERS
    assert {"upsert", "delete", "get_where", "nearest", "count", "change_feed"} <= set(CORE_MEMBERS)


@pytest.mark.parametrize("backend", list(BACKEND_EXTRAS), ids=lambda cls: cls.__name__)
def test_a_backend_is_the_core_and_nothing_of_the_service(backend):
    own = defined_here(backend)
    assert set(CORE_MEMBERS) <= own, f"{backend.__name__} leaves core members to others"
    beyond = own - set(CORE_MEMBERS) - ATTRIBUTES - set(BACKEND_EXTRAS[backend])
    assert not beyond, f"{backend.__name__} defines {sorted(beyond)} beyond the core: write it once in StoreService"
    unused = set(BACKEND_EXTRAS[backend]) - own
    assert not unused, f"listed extras {sorted(unused)} are no longer defined: remove them from BACKEND_EXTRAS"


def test_the_service_implements_nothing_of_the_core():
    assert not defined_here(StoreService) & set(CORE_MEMBERS)
    assert {"search", "search_text", "search_image", "search_vector", "relevance_cutoff", "metadata_where",
            "add", "sync", "views"} <= defined_here(StoreService)


def test_only_chroma_writes_from_the_indexing_writer_thread():
    """Gallery's write turn is shared with indexing's writer thread; the in-memory store's turn is a thread's lock, so
    it is written from the indexing thread itself (a writer thread deadlocked on it)."""
    assert Gallery.writes_from_another_thread is True
    assert MemoryStore.writes_from_another_thread is False and StoreService.writes_from_another_thread is False


def test_a_store_without_a_core_member_is_refused_when_defined():
    body = {name: (lambda self, *args, **kwargs: None) for name in CORE_MEMBERS if name != "nearest"}
    with pytest.raises(TypeError, match="without nearest"):
        type("HalfStore", (StoreService,), body)
    whole = type("WholeStore", (StoreService,), {**body, "nearest": lambda self, *args, **kwargs: []})
    assert StoreCore in whole.__mro__ and "nearest" in vars(whole)
