"""Checkpointers whose serializer knows the types our graph states hold.

Checkpointers for a session in one process (:func:`memory_checkpointer`) or across restarts
(:func:`sqlite_checkpointer`, a SQLite file: PlugIR's chat sessions on the command line and the web page).
LangGraph warns when a checkpoint holds a type it was not told about (and future versions refuse
it); our states hold :class:`~pictrieve.vectorstore.hits.ImageHit`, so every checkpointer we build
names it.
"""

from __future__ import annotations

from pathlib import Path
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


def sqlite_checkpointer(path: str | Path) -> Any:
    """A ``SqliteSaver`` on ``path`` (created with its folder), so sessions survive restarts.

    Its serializer names the types our state holds (:class:`ImageHit`), so checkpoints read back
    without LangGraph's warning about unregistered types (which future versions will refuse).
    """
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return SqliteSaver(sqlite3.connect(str(path), check_same_thread=False), serde=state_serde())
