"""The Chat tab: PlugIR rounds run as jobs (:mod:`pictrieve.ui.jobs`), and what the page shows of a session.

Starting a chat and answering a question each run the graph up to its next question, which takes
minutes with a language model on a CPU; as a job this runs off the server's event loop, shows each
step (worded by the method's step table), and stops between steps when the page goes away. The session lives
in the app's SQLite checkpointer: a round stopped half-way keeps the steps it finished, and ``continue`` runs it
on to the next question (:func:`chat_view` marks such a session ``unfinished``). What a session shows is
:func:`pictrieve.graphs.sessions.session_view`, the view MCP and ``pictrieve chat`` read too.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from pictrieve.agents.steps import Step, step_line
from pictrieve.errors import PictrieveError
from pictrieve.graphs.sessions import SessionView, run_session, session_view
from pictrieve.ui.jobs import Job

log = logging.getLogger(__name__)


class ChatNotFound(PictrieveError, ValueError):
    """No session under this thread id (shown on the page as one line)."""


def run_chat(job: Job, graph: Any, inputs: Any, thread: str, context: dict[str, Any],
             steps: Mapping[str, Step]) -> dict[str, Any]:
    """Run the session ``thread`` from ``inputs`` (a description, a resume command, or ``None`` to
    continue a round that stopped half-way) to its next question, each finished step a line worded by the
    method's ``steps`` with what it found; the page's view of it."""
    view = run_session(graph, inputs, thread, context,
                       lambda node, change: job.step(step_line(steps, node, change, detail=True)), stream=job.stream)
    return chat_json(view)


def chat_view(plugir: Any, thread: str) -> dict[str, Any]:
    """What the page shows of session ``thread`` (:func:`chat_json`); :class:`ChatNotFound` for none."""
    view = session_view(plugir, thread)
    if view is None:
        raise ChatNotFound("no such chat (it may have been started on another server); start a new one")
    return chat_json(view)


def chat_json(view: SessionView) -> dict[str, Any]:
    """The page's JSON of a session: ``thread``, ``round``, ``query``, ``dialogue``, ``done``, ``unfinished``
    (a round stopped between steps, its page went away: it waits for ``continue``), ``found``, and the pending
    ``question`` with its ``options`` and the photos ``shown`` (the last ones shown when nothing is asked)."""
    return {"thread": view.thread, "round": view.round, "query": view.query, "dialogue": list(view.dialogue),
            "done": view.done, "unfinished": view.unfinished,
            "found": view.found.to_json() if view.found is not None else None,
            "question": view.question, "shown": [hit.to_json() for hit in view.shown], "options": list(view.options)}


def prune_chats(checkpointer: Any, *, keep: int, busy: Collection[str] = ()) -> list[str]:
    """Delete the stored sessions touched longest ago until at most ``keep`` remain; the deleted threads.

    The page keeps its sessions in a SQLite file that would otherwise grow with every chat ever started.
    Pruning the oldest (rather than refusing a new chat) keeps the page usable without a person cleaning
    files by hand; a session nobody has touched for the longest is the one least likely to be resumed.
    Sessions in ``busy`` (a round running) are kept. A checkpointer other than LangGraph's ``SqliteSaver``
    (in memory: a test's) is left as it is.
    """
    cursor = getattr(checkpointer, "cursor", None)
    if cursor is None or not hasattr(checkpointer, "delete_thread") or keep < 0:
        return []
    # LangGraph's checkpoint ids are time-ordered (uuid6), so a thread's largest is its last update.
    with cursor(transaction=False) as cur:
        rows = cur.execute("SELECT thread_id, MAX(checkpoint_id) AS last FROM checkpoints "
                           "GROUP BY thread_id ORDER BY last").fetchall()
    threads = [row[0] for row in rows]
    gone = [t for t in threads if t not in busy][: max(0, len(threads) - keep)]
    for thread in gone:
        checkpointer.delete_thread(thread)
    if gone:
        log.info("ui chat: deleted %d oldest sessions (keeping %d)", len(gone), keep)
    return gone
