"""PlugIR over MCP: ``find_photo`` starts a session, ``answer_question`` answers its questions.

A session is a thread of the PlugIR graph, paused by ``interrupt()`` at each question; its checkpoints
live in a SQLite file, so a session survives a server restart (a new server over the same gallery and
state folder continues it). A round cut short by a restart (the answer was given, the next question not
yet asked) is finished when the session is next answered. What a session shows is
:func:`pictrieve.graphs.sessions.session_view`, the view the web page and ``pictrieve chat`` read too.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pictrieve.agents.steps import Step, step_line
from pictrieve.graphs.sessions import SessionError, run_session, session_view

SESSION_ID = re.compile(r"[0-9a-f]{32}\Z")

class PhotoSessions:
    """PlugIR sessions over one compiled graph (built with a SQLite checkpointer), its run settings, and the
    method's step table (:meth:`~pictrieve.agents.method.Method.step_table`) that words each step's progress."""

    def __init__(self, graph: Any, context: dict[str, Any], steps: Mapping[str, Step] | None = None) -> None:
        self.graph, self.context, self.steps = graph, dict(context), dict(steps or {})
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
        """What a session shows (:func:`pictrieve.graphs.sessions.session_view`): the pending question and the
        current photos, or the outcome; ``unfinished``: a round stopped between steps (the server went away),
        which :meth:`answer` finishes."""
        if not SESSION_ID.match(str(session)):
            raise SessionError(f"unknown session {str(session)[:64]!r}: session ids come from find_photo")
        view = session_view(self.graph, session)
        if view is None:
            raise SessionError(f"unknown session {session}: it was never started on this server's state "
                               "folder; start one with find_photo")
        return {"session": session, "done": view.done, "unfinished": view.unfinished,
                "round": view.question_number or view.round,
                "query": view.query, "found": view.found, "question": view.question, "options": list(view.options),
                "results": list(view.shown), "note": view.outcome}

    def _run(self, inputs: Any, session: str, progress: Callable[[str], None]) -> None:
        run_session(self.graph, inputs, session, self.context,
                    lambda node, update: progress(step_line(self.steps, node, update)))

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

