"""PlugIR over MCP: ``find_photo`` starts a session, ``answer_question`` answers its questions.

A session is a thread of the PlugIR graph, paused by ``interrupt()`` at each question; its checkpoints
live in a SQLite file, so a session survives a server restart (a new server over the same gallery and
state folder continues it). A round cut short by a restart (the answer was given, the next question not
yet asked) is finished when the session is next answered.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pictrieve.errors import PictrieveError
from pictrieve.vectorstore.hits import as_hit

SESSION_ID = re.compile(r"[0-9a-f]{32}\Z")

STEPS = {"reformulate": "wrote the search description", "retrieve": "searched the gallery",
         "extract_context": "read the candidates", "generate_questions": "wrote candidate questions",
         "filter_and_select": "chose a question", "ask": "read the answer"}
"""A line of progress for each PlugIR step as it finishes."""


class SessionError(PictrieveError, ValueError):
    """An unknown, ended or busy session (one line for the model)."""


class PhotoSessions:
    """PlugIR sessions over one compiled graph (built with a SQLite checkpointer) and its run settings."""

    def __init__(self, graph: Any, context: dict[str, Any]) -> None:
        self.graph, self.context = graph, dict(context)
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    def start(self, description: str, progress: Callable[[str], None]) -> dict[str, Any]:
        """A new session for ``description``, run to its first question; its view (:meth:`view`)."""
        session = uuid.uuid4().hex
        with self._working(session):
            self._run({"description": description}, session, progress)
            return self.view(session)

    def answer(self, session: str, answer: str, progress: Callable[[str], None]) -> dict[str, Any]:
        """Answer the pending question of ``session`` (text, ``found N``, or ``stop``); the new view."""
        from langgraph.types import Command

        with self._working(session):
            current = self.view(session)
            if current["done"]:
                raise SessionError(f"session {session} has ended; start a new one with find_photo")
            if current["unfinished"]:  # a restart cut its last round short: finish it, then the answer waits
                self._run(None, session, progress)
                return {**self.view(session), "note": "the server restarted while it was working on the last "
                                                      "answer; it has finished that round: answer this question"}
            self._run(Command(resume=answer), session, progress)
            return self.view(session)

    def view(self, session: str) -> dict[str, Any]:
        """What a session shows: the pending question and the current photos, or the outcome.

        ``unfinished``: a round stopped between steps (the server went away); :meth:`answer` finishes it.
        """
        if not SESSION_ID.match(str(session)):
            raise SessionError(f"unknown session {str(session)[:64]!r}: session ids come from find_photo")
        snapshot = self.graph.get_state(_config(session))
        values = snapshot.values or {}
        if not values:
            raise SessionError(f"unknown session {session}: it was never started on this server's state "
                               "folder; start one with find_photo")
        pending = [i.value for task in snapshot.tasks for i in task.interrupts]
        found = values.get("found")
        view: dict[str, Any] = {"session": session, "done": not snapshot.next,
                                "unfinished": bool(snapshot.next) and not pending,
                                "round": int(values.get("round", 0)), "query": str(values.get("query", "")),
                                "found": as_hit(found) if found is not None else None,
                                "question": "", "options": [], "note": ""}
        if pending:
            view.update(round=int(pending[0]["round"]), question=str(pending[0]["question"]),
                        options=list(pending[0].get("options") or []), query=str(pending[0].get("query") or ""),
                        results=[as_hit(h) for h in pending[0]["shown"]])
        else:
            view["results"] = [as_hit(h) for h in values.get("shown") or []]
            if view["done"]:
                view["note"] = ("the photo was picked" if found is not None else "stopped" if values.get("stopped")
                                else "no questions left: these are the final results")
        return view

    def _run(self, inputs: Any, session: str, progress: Callable[[str], None]) -> None:
        for update in self.graph.stream(inputs, _config(session), context=self.context, stream_mode="updates"):
            for node in update:
                if node in STEPS:
                    progress(STEPS[node])

    @contextmanager
    def _working(self, session: str) -> Iterator[None]:
        """One call at a time per session: a second one meanwhile is refused, not queued."""
        with self._lock:
            if session in self._busy:
                raise SessionError(f"session {session} is still working on its last answer; wait for it")
            self._busy.add(session)
        try:
            yield
        finally:
            with self._lock:
                self._busy.discard(session)


def _config(session: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": session}}
