"""A session of a method that asks a person (PlugIR), as every front end sees it: one view of a paused thread.

A session is a thread of a compiled graph with a checkpointer, paused by ``interrupt()`` at each question. The
web page's Chat tab (:mod:`pictrieve.ui.chat`), MCP's ``find_photo`` / ``answer_question``
(:mod:`pictrieve.mcp_server.sessions`) and ``pictrieve chat`` read it here:

- :func:`session_view`: the pending question (its round, options, the photos shown with it) or the outcome (the
  photo picked, stopped, out of questions), and whether a round stopped half-way (``unfinished``: the process
  went away between steps; running the thread on with no input finishes it);
- :func:`run_session`: run the thread to its next pause, each finished node reported as it happens;
- each front end words a finished node from the method's own table of step names
  (:meth:`~pictrieve.agents.method.Method.step_table`, :func:`pictrieve.agents.steps.step_line`).

The interrupt's payload is the contract: ``question``, ``round``, ``query``, ``shown`` (hits) and ``options``
(choices, possibly empty); the state has ``round``, ``query``, ``shown``, ``found``, ``stopped``, ``description``
and ``dialogue``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pictrieve.vectorstore.hits import ImageHit, as_hit


def thread_config(thread: str) -> dict[str, Any]:
    """The config that names session ``thread``."""
    return {"configurable": {"thread_id": thread}}


@dataclass(frozen=True)
class SessionView:
    """What a session shows now (module docstring)."""

    thread: str
    done: bool
    """The graph has ended: the photo was picked, the person stopped, or the questions ran out."""
    unfinished: bool
    """A round stopped between steps (not at a question): run it on with no input (:func:`run_session`)."""
    round: int
    """Answers received so far (after a pick or a stop, the round it ended in): the state's ``round``."""
    query: str
    question: str = ""
    """The pending question; ``""`` when done or unfinished."""
    question_number: int = 0
    """The pending question's number (``round + 1``); 0 when nothing is asked."""
    options: tuple[str, ...] = ()
    shown: tuple[ImageHit, ...] = ()
    """The photos shown with the question, or the last ones shown (the final results when done)."""
    found: ImageHit | None = None
    stopped: bool = False
    description: str = ""
    dialogue: tuple[dict[str, str], ...] = ()
    """Each round's ``{"question", "answer"}``."""
    pending: Mapping[str, Any] | None = field(default=None, repr=False)
    """The interrupt's payload as the graph gave it (``None``: nothing is asked)."""

    @property
    def outcome(self) -> str:
        """How an ended session ended, in words (``""`` while it goes on)."""
        if not self.done:
            return ""
        if self.found is not None:
            return "the photo was picked"
        return "stopped" if self.stopped else "no questions left: these are the final results"


def session_view(graph: Any, thread: str) -> SessionView | None:
    """The view of session ``thread`` of ``graph``; ``None`` when no such session was ever started."""
    snapshot = graph.get_state(thread_config(thread))
    values = snapshot.values or {}
    if not values:
        return None
    pending = next((i.value for task in snapshot.tasks for i in task.interrupts), None)
    found = values.get("found")
    view = SessionView(
        thread=thread, done=not snapshot.next, unfinished=bool(snapshot.next) and pending is None,
        round=int(values.get("round", 0)), query=str(values.get("query") or ""),
        shown=tuple(as_hit(h) for h in values.get("shown") or []),
        found=as_hit(found) if found is not None else None, stopped=bool(values.get("stopped")),
        description=str(values.get("description") or ""), dialogue=tuple(_turns(values.get("dialogue") or [])))
    if pending is None:
        return view
    return SessionView(**{**vars(view), "question_number": int(pending.get("round", view.round + 1)),
                          "query": str(pending.get("query") or ""), "question": str(pending.get("question") or ""),
                          "options": tuple(str(o) for o in pending.get("options") or ()),
                          "shown": tuple(as_hit(h) for h in pending.get("shown") or ()), "pending": pending})


def run_session(graph: Any, inputs: Any, thread: str, context: Any, on_step: Callable[[str, Any], None], *,
                stream: Callable[..., Iterable[dict[str, Any]]] | None = None) -> SessionView:
    """Run session ``thread`` from ``inputs`` (the first input, a ``Command(resume=...)``, or ``None`` to run on a
    round that stopped half-way) to its next pause or its end; ``on_step(node, update)`` after each node.

    ``stream``: how to stream the graph (``stream(graph, inputs, config, context=...)`` yielding LangGraph
    ``updates``; a web job's is cancellable between steps); default ``graph.stream``."""
    config = thread_config(thread)
    updates: Iterator[dict[str, Any]] | Iterable[dict[str, Any]]
    if stream is None:
        updates = graph.stream(inputs, config, context=context, stream_mode="updates")
    else:
        updates = stream(graph, inputs, config, context=context)
    for update in updates:
        for node, change in update.items():
            if node != "__interrupt__":
                on_step(node, change)
    view = session_view(graph, thread)
    assert view is not None  # it has just run
    return view


def _turns(dialogue: Iterable[Any]) -> Iterator[dict[str, str]]:
    for turn in dialogue:
        data = turn if isinstance(turn, Mapping) else getattr(turn, "model_dump", lambda: dict(turn))()
        yield {"question": str(data.get("question", "")), "answer": str(data.get("answer", ""))}
