"""What a method's graph steps are called where people watch them run: one :class:`Step` per node.

A method declares its table once (``STEPS`` in its folder, named by :attr:`~pictrieve.agents.method.Method.steps`)
and every front end words a finished node from it: the web page with what the step found
(``searched the gallery: 40 candidates``), MCP progress with what it did (``searched the gallery``), the command
line with its short name, its time and what starts next (``[retrieval 1.2 s] reading the candidates...``). A node
the table does not name is ``<node>: done``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Step:
    """One graph node as people see it run."""

    name: str
    """A short name (``retrieval``): the command line's ``[retrieval 1.2 s]``."""
    done: str
    """What it did, as a line of progress (``searched the gallery``)."""
    then: str = ""
    """What starts after it, for a front end that says what it is waiting for (``reading the candidates``)."""
    found: Callable[[Mapping[str, Any]], str] | None = None
    """What it found, from the node's state update (``40 candidates``); ``""``: nothing worth saying."""

    def line(self, update: Mapping[str, Any] | None = None, *, detail: bool = False) -> str:
        """``done``, and with ``detail`` what the step found (``searched the gallery: 40 candidates``)."""
        found = self.found(update or {}) if detail and self.found is not None else ""
        return f"{self.done}: {found}" if found else self.done


def step_line(steps: Mapping[str, Step], node: str, update: Any = None, *, detail: bool = False) -> str:
    """The line for a finished ``node`` (``update``: its state update, a dict or anything else)."""
    step = steps.get(node)
    if step is None:
        return f"{node}: done"
    return step.line(update if isinstance(update, Mapping) else None, detail=detail)
