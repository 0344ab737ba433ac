"""A session of a method that asks a person, as every front end sees it: one runner and one view of a paused thread.

A session is a thread of a compiled graph with a checkpointer, paused by ``interrupt()`` at each question the
method declares (:attr:`~pictrieve.agents.method.Method.asks`). :class:`MethodSessions` is the one runner: start a
session, read its pending question (:class:`Pending`), resume it with a reply checked against the declared shape
(:meth:`~pictrieve.agents.asks.Ask.read_reply`), read what it found (:class:`MethodRun`, whose
:meth:`~MethodRun.to_json` is the generic view). The page's generic tabs (:mod:`pictrieve.ui.methods`), MCP's ``start_method`` /
``answer_method`` (:mod:`pictrieve.mcp_server.session_tools`) and ``pictrieve search --method``
(:mod:`pictrieve.cli.method_search`) run every method that asks through it, a plugin's as NEEDLE's.

PlugIR's own views (the page's Chat tab, :mod:`pictrieve.ui.chat`; MCP's ``find_photo`` / ``answer_question``,
:mod:`pictrieve.mcp_server.sessions`; ``pictrieve chat``) add what is PlugIR's (its rounds, dialogue and pick) over
the same reading of the pause:

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

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pictrieve.agents.asks import Ask, ask_for
from pictrieve.errors import PictrieveError
from pictrieve.vectorstore.hits import ImageHit, as_hit

Stream = Callable[..., Iterable[dict[str, Any]]]
"""How a front end streams a graph: ``stream(graph, inputs, config, context=...)`` yielding LangGraph ``updates``."""


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


def pending_payload(snapshot: Any) -> Any:
    """The payload of the question a thread's state ``snapshot`` (``graph.get_state``) waits on; ``None``: none."""
    return next((i.value for task in snapshot.tasks for i in task.interrupts), None)


def session_view(graph: Any, thread: str) -> SessionView | None:
    """The view of session ``thread`` of ``graph``; ``None`` when no such session was ever started."""
    snapshot = graph.get_state(thread_config(thread))
    values = snapshot.values or {}
    if not values:
        return None
    pending = pending_payload(snapshot)
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
                stream: Stream | None = None) -> SessionView:
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


# --- any method that asks: one runner, one view ---------------------------------------------------------------

class SessionError(PictrieveError, ValueError):
    """An unknown, ended or busy session, or a reply it cannot take now (one line for the person)."""


@dataclass(frozen=True)
class Pending:
    """The question a paused session waits on, read by its method's declaration
    (:class:`~pictrieve.agents.asks.Ask`)."""

    ask: Ask
    payload: Mapping[str, Any]

    @property
    def question(self) -> str:
        return str(self.payload.get("question") or "")

    @property
    def options(self) -> list[str]:
        return [str(option) for option in self.payload.get("options") or ()]

    def shown(self) -> list[dict[str, Any]]:
        """The items shown with the question as JSON (photos as hits; other items, such as guide pictures, as the
        method gave them, without their files' paths: a front end shows those by id)."""
        return [_item_json(item) for item in self.ask.shown(self.payload)]

    def shown_hits(self) -> list[ImageHit]:
        """The gallery photos among the items shown (hits), for a front end that shows photos."""
        return [as_hit(item) for item in self.ask.shown(self.payload) if _is_hit(item)]

    def to_json(self) -> dict[str, Any]:
        """``kind``, ``question``, ``options``, ``shown`` and ``reply`` (the reply's fields: what to answer with)."""
        return {"kind": self.ask.kind, "question": self.question, "options": self.options, "shown": self.shown(),
                "reply": self.ask.reply_fields()}


@dataclass(frozen=True)
class MethodRun:
    """What a session of a method shows now: the question it waits on, or what it found."""

    session: str
    method: str
    done: bool
    """The graph has ended."""
    unfinished: bool
    """It stopped between steps (its process went away), not at a question: :meth:`MethodSessions.run_on` ends it."""
    pending: Pending | None
    values: Mapping[str, Any] = field(repr=False)
    """The thread's state."""
    outputs: tuple[str, ...] = ()
    """The method's output fields: what :meth:`to_json` shows of :attr:`values`."""

    @property
    def hits(self) -> list[ImageHit]:
        return [as_hit(hit) for hit in self.values.get("hits") or []]

    def output(self) -> dict[str, Any]:
        """The method's other output values that are plain text, numbers or lists of them (shown as text)."""
        return {key: value for key, value in self.values.items()
                if key in self.outputs and key != "hits" and _plain(value)}

    def to_json(self) -> dict[str, Any]:
        """The generic view every front end renders: ``session``, ``method``, ``done``, ``unfinished``, ``question``
        (:meth:`Pending.to_json`, or ``None``), ``hits`` (JSON) and ``output``."""
        return {"session": self.session, "method": self.method, "done": self.done, "unfinished": self.unfinished,
                "question": self.pending.to_json() if self.pending is not None else None,
                "hits": [hit.to_json() for hit in self.hits], "output": self.output()}


class MethodSessions:
    """The sessions of one method over its graph (compiled with a checkpointer): the one runner every front end uses.

    Each session is one thread; its run settings are ``context`` (every session's, e.g. a server's) updated by
    those given at its start, kept in this object for its later steps (a session continued by a new process runs on
    with ``context`` alone). One call at a time per session: a second one meanwhile is refused, not queued. At most
    ``keep`` sessions are remembered (the oldest is forgotten, its checkpoints deleted when the checkpointer can), so
    a long-running page or server does not grow; an ended session's checkpoints are deleted at once, its id kept
    (among the last ``keep``) so a later reply to it is told it has ended.
    """

    def __init__(self, method: Any, graph: Any, *, keep: int = 256, context: Mapping[str, Any] | None = None) -> None:
        self.method, self.graph, self.keep = method, graph, keep
        self.context = dict(context or {})
        self._contexts: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    def new_session(self) -> str:
        return uuid.uuid4().hex

    def busy(self, session: str) -> bool:
        """Whether a step of ``session`` is running now."""
        with self._lock:
            return session in self._busy

    def start(self, inputs: Mapping[str, Any], context: Mapping[str, Any] | None = None, *, session: str | None = None,
              on_step: Callable[[str, Any], None] = lambda node, update: None,
              stream: Stream | None = None) -> MethodRun:
        """A new session (``session``: its id, default a new one) run from ``inputs`` to its first question or its
        end."""
        session = session or self.new_session()
        with self._lock:
            self._contexts[session] = {**self.context, **(context or {})}
            while len(self._contexts) > self.keep:
                self._forget(next(iter(self._contexts)))
        with self._working(session):
            return self._run(dict(inputs), session, on_step, stream)

    def ended(self, session: str) -> bool:
        """Whether ``session`` ran to its end here (one of the last ``keep`` to end; its thread is not kept)."""
        with self._lock:
            return session in self._ended

    def view(self, session: str) -> MethodRun:
        """What ``session`` shows now; :class:`SessionError` for one that has ended here, or was never started (or
        forgotten)."""
        snapshot = self.graph.get_state(thread_config(session))
        if not snapshot.values and not snapshot.next:
            if self.ended(session):
                raise SessionError(f"this {self.method.name} session has ended; start a new one")
            raise SessionError(f"no such {self.method.name} session (it was never started here, or was forgotten); "
                               "start a new one")
        payload = pending_payload(snapshot)
        pending = (Pending(ask_for(self.method.asks, payload, self.method.name), payload)
                   if payload is not None else None)
        outputs = tuple(f["name"] for f in self.method.output_fields())
        return MethodRun(session=session, method=self.method.name, done=not snapshot.next,
                         unfinished=bool(snapshot.next) and payload is None, pending=pending,
                         values=dict(snapshot.values or {}), outputs=outputs)

    def check_reply(self, session: str, reply: Any) -> tuple[MethodRun, dict[str, Any]]:
        """The session's view and ``reply`` as its pending question declares it; :class:`SessionError` when it waits
        on nothing, :class:`~pictrieve.agents.asks.ReplyError` for a reply of another shape (both before any work)."""
        run = self.view(session)
        if run.pending is None:
            raise SessionError(f"this {self.method.name} session " + ("has ended; start a new one" if run.done else
                               "stopped between steps; run it on before answering"))
        return run, run.pending.ask.read_reply(reply, run.pending.payload)

    def reply(self, session: str, reply: Any, *, on_step: Callable[[str, Any], None] = lambda node, update: None,
              stream: Stream | None = None) -> MethodRun:
        """Resume ``session`` with ``reply`` (checked first: :meth:`check_reply`) to its next question or its end."""
        from langgraph.types import Command

        with self._working(session):
            _, checked = self.check_reply(session, reply)
            return self._run(Command(resume=checked), session, on_step, stream)

    def run_on(self, session: str, *, on_step: Callable[[str, Any], None] = lambda node, update: None,
               stream: Stream | None = None) -> MethodRun:
        """Finish a step a session stopped between (:attr:`MethodRun.unfinished`), to its next question or its end."""
        with self._working(session):
            if not self.view(session).unfinished:
                raise SessionError(f"this {self.method.name} session did not stop between steps")
            return self._run(None, session, on_step, stream)

    def _run(self, inputs: Any, session: str, on_step: Callable[[str, Any], None], stream: Stream | None) -> MethodRun:
        with self._lock:
            context = dict(self._contexts.get(session, self.context))
        run_session(self.graph, inputs, session, context, on_step, stream=stream)
        run = self.view(session)
        if run.done:  # nothing more to ask: what it found is in ``run``, the thread is not kept
            with self._lock:
                self._forget(session, busy_too=True)
                self._ended[session] = None
                while len(self._ended) > self.keep:
                    self._ended.popitem(last=False)
        return run

    def _forget(self, session: str, *, busy_too: bool = False) -> None:
        """Drop ``session`` (the lock held): its settings, and its checkpoints when the checkpointer can delete them
        (not a session working now, unless ``busy_too``: its own run forgetting it)."""
        self._contexts.pop(session, None)
        if (busy_too or session not in self._busy) and hasattr(getattr(self.graph, "checkpointer", None),
                                                               "delete_thread"):
            self.graph.checkpointer.delete_thread(session)

    @contextmanager
    def _working(self, session: str) -> Iterator[None]:
        with self._lock:
            if session in self._busy:
                raise SessionError(f"this {self.method.name} session is still working on its last step; wait for it")
            self._busy.add(session)
        try:
            yield
        finally:
            with self._lock:
                self._busy.discard(session)


def _plain(value: Any) -> bool:
    """Text, a number, or a list/dict of them (JSON without objects): what a generic view shows as text."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, (str, int, float, bool)) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and isinstance(v, (str, int, float, bool)) for k, v in value.items())
    return False


def _is_hit(item: Any) -> bool:
    return isinstance(item, ImageHit) or isinstance(item, Mapping) and {"id", "path", "score"} <= set(item)


def _item_json(item: Any) -> dict[str, Any]:
    """An item shown with a question as JSON: a hit's :meth:`~ImageHit.to_json`; another item's plain fields but
    ``path`` (a file on the server, shown by id)."""
    if _is_hit(item):
        return as_hit(item).to_json()
    data = dict(item) if isinstance(item, Mapping) else {"id": str(item)}
    return {key: value for key, value in data.items() if key != "path" and _plain(value)}
