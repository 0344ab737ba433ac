"""NEEDLE on the Visualize tab: guide review, result feedback and the embedders' trust weights.

A NEEDLE session is one thread of the NEEDLE graph, compiled once per app with an in-memory
checkpointer. Each step (start, an answer about the guides, an answer about the results) runs as a
background job (:mod:`pictrieve.ui.jobs`) whose result is :func:`session_view`: what the graph is
waiting for (``stage``: ``guides``, ``results`` or ``done``), every guide with its status, the hits
and the topic's trust weights per embedder.

Guide pictures are files whose paths live in the graph's state; the page fetches them by session id
and guide id only (:func:`guide_path`), never by a path from the request. Ids the person sends back
are checked against what the graph is waiting for before it is resumed, so a bad request never
breaks a session.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from pictrieve.errors import PictrieveError
from pictrieve.ui.jobs import Job
from pictrieve.vectorstore.hits import as_hit

FEEDBACK = "both"
"""The page always asks about the guides and the results (the person may answer "all fine")."""


class SessionNotFound(PictrieveError, LookupError):
    """An unknown NEEDLE session, guide or result id (answered with 404)."""


class NeedleSessions:
    """The NEEDLE sessions of one app: one graph thread each, one step at a time."""

    def __init__(self, gallery: Any, graph: Any) -> None:
        self.gallery, self.graph = gallery, graph
        self._busy: dict[str, bool] = {}
        self._contexts: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def config(self, session: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": session}}

    def known(self, session: Any) -> str:
        text = str(session or "")
        with self._lock:
            if text not in self._busy:
                raise SessionNotFound("no such NEEDLE session (the server restarted or forgot it); start a new search")
        return text

    def open(self, context: dict[str, Any]) -> str:
        """A new session id (busy until :meth:`start` pauses); ``context`` is kept for its later steps."""
        session = uuid.uuid4().hex
        with self._lock:
            self._busy[session] = True
            self._contexts[session] = dict(context)
        return session

    def start(self, job: Job, session: str, query: str, topic: str | None) -> dict[str, Any]:
        """Run a new session up to its first pause."""
        inputs = {"query": query, **({"topic": topic} if topic else {})}
        return self._run(job, session, inputs, "writing the prompt and finding guide images…")

    def resume(self, job: Job, session: str, answer: dict[str, list[str]]) -> dict[str, Any]:
        from langgraph.types import Command

        return self._run(job, session, Command(resume=answer), "continuing…")

    def claim(self, session: str, stage: str, key: str, ids: Any) -> dict[str, list[str]]:
        """The resume value for ``session`` waiting at ``stage``; refuses ids it is not waiting about.

        Marks the session busy (one step at a time); the job that resumes it frees it.
        """
        session = self.known(session)
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError(f"send {{'{key}': [ids]}} (a list of ids)")
        with self._lock:
            if self._busy[session]:
                raise ValueError("this NEEDLE session is still working; wait for its step to finish")
            pending = self.pending(session)
            if pending is None or pending.get("kind") != stage:
                raise ValueError(f"this NEEDLE session is not waiting for feedback on its {stage}")
            shown = {item["id"] for item in pending["guides" if stage == "guides" else "hits"]}
            unknown = sorted(set(ids) - shown)
            if unknown:
                raise SessionNotFound(f"unknown {stage[:-1]} id(s) {', '.join(unknown)[:200]}; "
                                      f"choose among {', '.join(sorted(shown))}")
            self._busy[session] = True
        return {key: list(dict.fromkeys(ids))}

    def pending(self, session: str) -> dict[str, Any] | None:
        """The question the session waits on (one of NEEDLE's declared :attr:`~pictrieve.agents.method.Method.asks`),
        read as every front end reads a pause (:func:`~pictrieve.graphs.sessions.pending_payload`)."""
        from pictrieve.graphs.sessions import pending_payload

        return pending_payload(self.graph.get_state(self.config(session)))

    def guide_path(self, session: str, guide_id: str) -> str:
        """The file of guide ``guide_id`` of ``session``, from the graph's state (ids only)."""
        session = self.known(session)
        guides = self.graph.get_state(self.config(session)).values.get("guides") or []
        for guide in guides:
            if guide["id"] == guide_id:
                return guide["path"]
        raise SessionNotFound("no such guide picture in this NEEDLE session")

    def _run(self, job: Job, session: str, inputs: Any, first_step: str) -> dict[str, Any]:
        job.step(first_step)
        try:
            for update in job.stream(self.graph, inputs, self.config(session), context=self._contexts[session]):
                for node, change in update.items():
                    job.step(_step_text(node, change))
        finally:
            with self._lock:
                self._busy[session] = False
        return session_view(self, session)


def _step_text(node: str, change: Any) -> str:
    change = change if isinstance(change, dict) else {}
    if node == "refine":
        return f"prompt: {change.get('prompt', '')!r}"
    if node in ("visualize", "regenerate"):
        from pictrieve.ui.visualize import guides_made

        made = guides_made([g for g in change.get("guides") or [] if g["status"] == "new"])
        return ("replacements: " if node == "regenerate" else "") + (made or "no new guide pictures")
    if node == "__interrupt__":
        kind = change[0].value.get("kind") if isinstance(change, (list, tuple)) and change else ""
        return "waiting for you: approve or reject the guides" if kind == "guides" else \
            "waiting for you: mark the results that are not what you want"
    if node == "review_guides":
        return "guides reviewed"
    if node == "screen_guides":
        return "guides screened for outliers"
    if node == "rank":
        return f"searched with every approved guide x every embedder: {len(change.get('hits') or [])} results"
    if node == "review_results":
        marked = len(change.get("irrelevant") or [])
        return f"{marked} result{'s' * (marked != 1)} marked as not wanted"
    if node == "learn":
        return "trust weights updated; results ranked again without the unwanted ones" if change else "nothing to learn"
    return node


def session_view(sessions: NeedleSessions, session: str) -> dict[str, Any]:
    """What the page shows of a NEEDLE session (no file paths: guides are fetched by id)."""
    from pictrieve.agents.needle.trust import DEFAULT_TOPIC, load_trust

    snapshot = sessions.graph.get_state(sessions.config(session))
    values = snapshot.values or {}
    pending = sessions.pending(session)
    stage = pending["kind"] if pending else "done"
    topic = values.get("topic") or DEFAULT_TOPIC
    weights = values.get("weights")
    if not weights:  # the run stopped before reading them: what the gallery has learned for this topic
        gallery = sessions.gallery
        names = list(getattr(gallery, "embedder_names", None) or [gallery.embedder_name])
        weights = load_trust(gallery).for_topic(topic, names)
    reviewing = {g["id"] for g in pending["guides"]} if stage == "guides" else set()
    guides = [
        {"id": g["id"], "url": f"/api/needle/{session}/guide/{g['id']}", "visualizer": g["visualizer"],
         "generated": bool(g["generated"]), "status": g["status"], "replaces": g.get("replaces"),
         "reviewing": g["id"] in reviewing}
        for g in values.get("guides") or []
    ]
    hits = pending["hits"] if stage == "results" else [as_hit(h).to_json() for h in values.get("hits") or []]
    return {"session": session, "stage": stage, "prompt": str(values.get("prompt", "")), "topic": topic,
            "guides": guides, "hits": hits, "irrelevant": list(values.get("irrelevant") or []),
            "weights": {name: round(float(w), 4) for name, w in weights.items()}}
