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
import uuid
from collections.abc import Collection, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from pictrieve.agents.steps import Step, step_line
from pictrieve.errors import PictrieveError
from pictrieve.graphs.registry import get_method
from pictrieve.graphs.sessions import SessionView, run_session, session_view
from pictrieve.ui.forms import UIError, k_value, text
from pictrieve.ui.jobs import Job
from pictrieve.ui.state import PageState, page_state, posted

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


# --- the routes ---------------------------------------------------------------------------------------------

router = APIRouter()


@posted(router, "/api/chat/start")
def chat_start_now(page: PageState, body: dict[str, Any]) -> dict[str, Any]:
    description = text(body.get("description"), "the description")
    if not description:
        raise UIError("describe the photo you are looking for first")
    context = chat_context(body, page.need_value("llm"))
    steps = get_method("plugir").step_table()

    def work(job: Any) -> dict[str, Any]:
        job.step("thinking of a question…")
        plugir = page.chat_graph()
        with page.chat_lock:
            busy = set(page.chats_working)
        prune_chats(plugir.checkpointer, keep=page.max_chats - 1, busy=busy)
        return run_chat(job, plugir, {"description": description}, uuid.uuid4().hex, context, steps)

    return page.jobs.start("chat", work).view()


@posted(router, "/api/chat/reply")
def chat_reply_now(page: PageState, body: dict[str, Any]) -> dict[str, Any]:
    """Answer the pending question, or ``continue`` a round that stopped half-way, as a job."""
    from langgraph.types import Command

    thread = thread_id(body.get("thread"))
    if body.get("found"):
        reply: Any = Command(resume={"found": str(body["found"])})
    elif body.get("stop"):
        reply = Command(resume={"stop": True})
    elif body.get("continue"):
        reply = None  # run on from the last finished step
    else:
        answer = text(body.get("answer"), "the answer")
        if not answer:
            raise UIError("type an answer, or click the photo if you see it")
        reply = Command(resume={"answer": answer})
    context = chat_context(body, page.need_value("llm"))
    plugir = page.chat_graph()
    steps = get_method("plugir").step_table()
    with page.chat_lock:
        view = chat_view(plugir, thread)
        if thread in page.chats_working:
            raise UIError("this chat is still working on its last step; wait for it")
        if view["done"]:
            raise UIError("this chat has ended; start a new one")
        if view["unfinished"] != (reply is None):
            raise UIError("this chat stopped half-way through a round; reload the page to continue it"
                          if view["unfinished"] else "this chat is waiting for your answer")
        page.chats_working.add(thread)
    try:
        job = page.jobs.start("chat", lambda job: run_chat(job, plugir, reply, thread, context, steps),
                              cleanup=lambda: page.chats_working.discard(thread))
    except BaseException:
        page.chats_working.discard(thread)
        raise
    return job.view()


@router.get("/api/chat/{thread}")
def chat_get(thread: str, page: Annotated[PageState, Depends(page_state)]) -> dict[str, Any]:
    thread = thread_id(thread)
    return {**chat_view(page.chat_graph(), thread), "working": thread in page.chats_working}


def chat_context(body: dict[str, Any], chat_model: Any = None) -> dict[str, Any]:
    """A chat's run settings from the page: ``shown_k`` and the ``arm`` (default: the chat model's)."""
    from pictrieve.agents.plugir.settings import ARMS, default_arm

    arm = body.get("arm") if body.get("arm") in ARMS else default_arm(chat_model)
    return {"shown_k": k_value(body.get("shown_k"), 10), "arm": arm}


def thread_id(value: Any) -> str:
    """A chat's thread id as the page sends it (letters and digits, at most 64)."""
    given = str(value or "")
    if not given or len(given) > 64 or not given.isalnum():
        raise UIError("no such chat; start a new one")
    return given
