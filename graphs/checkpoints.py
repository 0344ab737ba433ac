"""Checkpointers whose serializer knows the types our graph states hold.

LangGraph warns when a checkpoint holds a type it was not told about (and future versions refuse
it); our states hold :class:`~pictrieve.vectorstore.hits.ImageHit`, so every checkpointer we build
names it.
"""

from __future__ import annotations

from typing import Any

from pictrieve.vectorstore.hits import ImageHit


def state_serde() -> Any:
    """LangGraph's JSON+msgpack serializer, allowed to read back :class:`ImageHit`."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer(allowed_msgpack_modules=[ImageHit])


def memory_checkpointer() -> Any:
    """An in-memory checkpointer for one process (CLI sessions, tests)."""
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver(serde=state_serde())
