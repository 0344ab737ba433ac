"""PlugIR over MCP: ``find_photo`` starts a session, ``answer_question`` answers its questions.

A session is a thread of the PlugIR graph, paused by ``interrupt()`` at each question and run by the one session
runner every front end uses (:class:`~pictrieve.graphs.sessions.MethodSessions`, as ``start_method`` runs any
method): an answer is PlugIR's declared reply (``{"answer": text}``, where ``found N`` and ``stop`` are read as a
pick and a stop). Its checkpoints live in a SQLite file, so a session survives a server restart (a new server over
the same gallery and state folder continues it, with the server's run settings). A round cut short by a restart
(the answer was given, the next question not yet asked) is finished when the session is next answered. What is
PlugIR's own here is the view: the question's number, the current photos and how the session ended
(:func:`photo_view`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pictrieve.agents.steps import step_line
from pictrieve.graphs.sessions import MethodRun, MethodSessions, SessionError
from pictrieve.vectorstore.hits import as_hit

SESSION_ID = re.compile(r"[0-9a-f]{32}\Z")

RESTARTED = ("the server restarted while it was working on the last answer; it has finished that round: answer "
             "this question")
"""The note of an answer that finished a round a restart cut short (the answer itself is not read)."""


class PhotoSessions:
    """PlugIR's sessions (``sessions``: the runner over its graph, built with a SQLite checkpointer and the server's
    run settings) as ``find_photo`` and ``answer_question`` show them; each step's progress worded from the method's
    step table (:meth:`~pictrieve.agents.method.Method.step_table`)."""

    def __init__(self, sessions: MethodSessions) -> None:
        self.sessions = sessions
        self.steps = dict(sessions.method.step_table())

    def start(self, description: str, progress: Callable[[str], None]) -> dict[str, Any]:
        """A new session for ``description``, run to its first question; its view (:func:`photo_view`)."""
        return photo_view(self.sessions.start({"description": description}, on_step=self._on_step(progress)))

    def answer(self, session: str, answer: str, progress: Callable[[str], None]) -> dict[str, Any]:
        """Answer the pending question of ``session`` (text, ``found N``, or ``stop``); the new view."""
        current = self._run_of(session)
        if current.done:
            raise _ended(session)
        if current.unfinished:  # a restart cut its last round short: finish it, then the answer waits
            return {**photo_view(self.sessions.run_on(session, on_step=self._on_step(progress))), "note": RESTARTED}
        return photo_view(self.sessions.reply(session, {"answer": answer}, on_step=self._on_step(progress)))

    def view(self, session: str) -> dict[str, Any]:
        """What a session shows (:func:`photo_view`)."""
        return photo_view(self._run_of(session))

    def _run_of(self, session: str) -> MethodRun:
        if not SESSION_ID.match(str(session)):
            raise SessionError(f"unknown session {str(session)[:64]!r}: session ids come from find_photo")
        if self.sessions.ended(session):
            raise _ended(session)
        try:
            return self.sessions.view(session)
        except SessionError:
            raise SessionError(f"unknown session {session}: it was never started on this server's state folder; "
                               "start one with find_photo") from None

    def _on_step(self, progress: Callable[[str], None]) -> Callable[[str, Any], None]:
        return lambda node, update: progress(step_line(self.steps, node, update))


def photo_view(run: MethodRun) -> dict[str, Any]:
    """A PlugIR session as ``find_photo`` shows it: ``session``, ``done``, ``unfinished`` (a round stopped between
    steps: the server went away; :meth:`PhotoSessions.answer` finishes it), ``round`` (the pending question's
    number, or, once ended, the round it ended in), ``query``, ``question`` and ``options`` (``""`` and none when
    nothing is asked), ``results`` (the photos shown with the question, or the last ones shown), ``found`` (the photo
    picked, or ``None``) and ``note`` (how an ended session ended, in words)."""
    values, pending = run.values, run.pending
    answered = int(values.get("round", 0))
    found = as_hit(values["found"]) if values.get("found") is not None else None
    view = {"session": run.session, "done": run.done, "unfinished": run.unfinished, "round": answered,
            "query": str(values.get("query") or ""), "found": found, "question": "", "options": [],
            "results": [as_hit(hit) for hit in values.get("shown") or []], "note": ""}
    if pending is not None:
        view.update(round=int(pending.payload.get("round", answered + 1)) or answered,
                    query=str(pending.payload.get("query") or ""), question=pending.question,
                    options=pending.options, results=pending.shown_hits())
    if run.done:
        view["note"] = ("the photo was picked" if found is not None else
                        "stopped" if values.get("stopped") else "no questions left: these are the final results")
    return view


def _ended(session: str) -> SessionError:
    return SessionError(f"session {session} has ended; start a new one with find_photo")
