"""The Chat tab: PlugIR rounds run as jobs (:mod:`pictrieve.ui.jobs`), and what the page shows of a session.

Starting a chat and answering a question each run the graph up to its next question, which takes
minutes with a language model on a CPU; as a job this runs off the server's event loop, shows each
step, and stops between steps when the page goes away. The session lives in the app's SQLite
checkpointer: a round stopped half-way keeps the steps it finished, and ``continue`` runs it on to the
next question (:func:`chat_view` marks such a session ``unfinished``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from pictrieve.errors import PictrieveError
from pictrieve.ui.jobs import Job
from pictrieve.vectorstore.hits import as_hit

log = logging.getLogger(__name__)


class ChatNotFound(PictrieveError, ValueError):
    """No session under this thread id (shown on the page as one line)."""


def thread_config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def step_line(node: str, update: dict[str, Any]) -> str:
    """One line of progress for a streamed PlugIR update."""
    if node == "reformulate":
        return f"query: {update.get('query', '')!r}"
    if node == "retrieve":
        return f"searched the gallery: {len(update.get('candidates') or [])} candidates"
    if node == "extract_context":
        context = update.get("retrieval_context") or []
        return f"read the captions of {len(context)} distinct candidates" if context else "looked at the candidates"
    if node == "generate_questions":
        return f"wrote {len(update.get('questions') or [])} candidate questions"
    if node == "filter_and_select":
        return f"chose the question: {update.get('question', '')!r}"
    if node == "ask":
        return "noted your pick" if update.get("stopped") else "noted your answer"
    return node


def run_chat(job: Job, graph: Any, inputs: Any, thread: str, context: dict[str, Any]) -> dict[str, Any]:
    """Run the session ``thread`` from ``inputs`` (a description, a resume command, or ``None`` to
    continue a round that stopped half-way) to its next question; the page's view of it."""
    for update in job.stream(graph, inputs, thread_config(thread), context=context):
        for node, change in update.items():
            if node != "__interrupt__":
                job.step(step_line(node, change if isinstance(change, dict) else {}))
    return chat_view(graph, thread)


def chat_view(plugir: Any, thread: str) -> dict[str, Any]:
    """What the page shows of a session: the pending question and images, or the outcome.

    ``unfinished``: a round stopped between steps (its page went away) and waits for ``continue``.
    """
    snapshot = plugir.get_state(thread_config(thread))
    values = snapshot.values or {}
    if not values:
        raise ChatNotFound("no such chat (it may have been started on another server); start a new one")
    pending = [i.value for task in snapshot.tasks for i in task.interrupts]
    found = values.get("found")
    dialogue = [t if isinstance(t, dict) else getattr(t, "model_dump", lambda: dict(t))()
                for t in values.get("dialogue") or []]
    view: dict[str, Any] = {"thread": thread, "round": values.get("round", 0), "query": values.get("query", ""),
                            "dialogue": [{"question": str(t.get("question", "")), "answer": str(t.get("answer", ""))}
                                         for t in dialogue],
                            "done": not snapshot.next, "unfinished": bool(snapshot.next) and not pending,
                            "found": as_hit(found).to_json() if found is not None else None}
    if pending:
        view.update(question=pending[0]["question"], shown=pending[0]["shown"],
                    options=pending[0].get("options") or [])
    else:
        view.update(question="", shown=[as_hit(h).to_json() for h in values.get("shown") or []])
    return view


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
