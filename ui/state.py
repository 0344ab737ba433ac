"""What the page's server holds between requests, on one object: :class:`PageState` (``app.state.page``).

:func:`pictrieve.ui.app.create_app` makes it from what ``pictrieve ui`` was started with; each tab's router reads
it with :func:`page_state` (a FastAPI dependency). It builds every graph from its method's needs, resolved as
every front end does (:func:`pictrieve.agents.needs.resolve_needs`), once, on first use: a page that only
searches never loads a language model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from pictrieve.agents.needs import missing_needs, resolve_needs
from pictrieve.graphs.registry import get_method
from pictrieve.ui.forms import UIError, form_or_json
from pictrieve.ui.jobs import Jobs


@dataclass
class PageState:
    """The app's gallery, what it was started with, its jobs, and the graphs and models made so far."""

    gallery: Any
    jobs: Jobs
    state_dir: Path
    """Holds the chat sessions' SQLite checkpointer."""
    given_needs: dict[str, Any] = field(default_factory=dict)
    """What the app was started with, by need (and endpoint) name, a name or a ready object each: every graph's
    needs are resolved from it; a need it does not name gets its default."""
    method_extras: dict[str, dict[str, Any]] = field(default_factory=dict)
    """More builder arguments by method name (they win over the needs)."""
    method_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Run settings by method name that every run of it on the page starts from."""
    max_upload_bytes: int = 0
    max_chats: int = 0
    graphs: dict[str, Any] = field(default_factory=dict)
    made: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    lock: Any = field(default_factory=threading.RLock)
    """Building a graph may build its visualizer, under the same lock."""
    chats_working: set[str] = field(default_factory=set)
    """Chat threads with a job running: one step at a time each."""
    chat_lock: Any = field(default_factory=threading.Lock)
    described: dict[str, Any] = field(default_factory=lambda: {"methods": None, "views": {}})
    """The registered methods' descriptions, kept while the registry stays the same (:mod:`pictrieve.ui.methods`)."""

    def make(self, key: tuple[Any, ...], factory: Any) -> Any:
        """Each model or visualizer once per app (the exemplar visualizer loads a sentence model and encodes
        captions), shared by the graphs that need it."""
        with self.lock:
            if key not in self.made:
                self.made[key] = factory()
            return self.made[key]

    def build_graph(self, name: str, **overrides: Any) -> Any:
        """``name``'s graph over the gallery: its needs resolved from the app's, then its extras, then ``overrides``."""
        method = get_method(name)
        given = {**self.method_extras.get(name, {}), **overrides}
        kwargs = resolve_needs(method, self.given_needs, gallery=self.gallery, make=self.make, skip=given)
        kwargs.update(given)
        return method.build(self.gallery, **kwargs)

    def graph(self, name: str, **overrides: Any) -> Any:
        """``name``'s graph, built on first use and then kept (a name is always asked for with the same overrides)."""
        with self.lock:
            if name not in self.graphs:
                self.graphs[name] = self.build_graph(name, **overrides)
            return self.graphs[name]

    def chat_graph(self) -> Any:
        """PlugIR with its sessions in a SQLite file, so a chat survives a reload and a restart."""
        from pictrieve.graphs.checkpoints import sqlite_checkpointer

        with self.lock:
            if "plugir" not in self.graphs:
                saver = sqlite_checkpointer(self.state_dir / "chat.sqlite")
                self.graphs["plugir"] = self.build_graph("plugir", checkpointer=saver)
            return self.graphs["plugir"]

    def missing_need(self, method: Any) -> None:
        """A method needing what the app was not started with: one line saying how to start it, before any job."""
        for need in missing_needs(method, self.given_needs):
            raise UIError(f"{method.name} needs {need.description}: restart with `pictrieve ui --gallery "
                          f"{self.gallery.location} {need.cli_option} {need.example or 'VALUE'}`")

    def need_value(self, name: str) -> Any:
        """What the app was started with for the need ``name`` (a name or an object; else its default, or ``None``)."""
        from pictrieve.agents.needs import all_needs
        from pictrieve.graphs.registry import methods

        need = all_needs(methods()).get(name)
        return None if need is None else need.value(self.given_needs.get(name))

    def settings_of(self, name: str) -> dict[str, Any]:
        """The run settings every run of method ``name`` on the page starts from."""
        return dict(self.method_settings.get(name) or {})

    def needle_sessions(self) -> Any:
        """NEEDLE's sessions: one graph (and one in-memory checkpointer) per app, so they live across requests."""
        from pictrieve.ui.needle import NeedleSessions

        self.missing_need(get_method("needle"))
        with self.lock:
            if "needle" not in self.graphs:
                from pictrieve.graphs.checkpoints import memory_checkpointer

                # Its needs as every graph's: without a chosen chat model the query is visualized as written.
                built = self.build_graph("needle", checkpointer=memory_checkpointer())
                self.graphs["needle"] = NeedleSessions(self.gallery, built)
            return self.graphs["needle"]

    def method_sessions(self, name: str) -> Any:
        """The sessions of method ``name`` (a generic tab's): its graph built once with an in-memory checkpointer,
        run by the one session runner every front end uses (:class:`~pictrieve.graphs.sessions.MethodSessions`)."""
        from pictrieve.graphs.checkpoints import memory_checkpointer
        from pictrieve.graphs.sessions import MethodSessions

        with self.lock:
            key = f"sessions:{name}"
            if key not in self.graphs:
                built = self.build_graph(name, checkpointer=memory_checkpointer())
                self.graphs[key] = MethodSessions(get_method(name), built)
            return self.graphs[key]

    def gallery_photo(self, image_id: Any, folder: str | Path) -> str:
        """A private copy in ``folder`` of the gallery photo ``image_id`` (ids only: a path in the request is just
        an unknown id), read as the file that was indexed (a photo replaced by a link is refused in one line), so
        the graph reads what was checked (:func:`~pictrieve.tools.core.image_inputs.gallery_photo_copy`)."""
        from pictrieve.tools.core.image_inputs import ImageInputError, gallery_image_lookup, gallery_photo_copy

        try:
            return gallery_photo_copy(str(image_id), folder, gallery_image_lookup(self.gallery))
        except ImageInputError as exc:
            raise UIError(str(exc)) from None


def page_state(request: Request) -> PageState:
    """The app's :class:`PageState` (a FastAPI dependency of every tab's routes)."""
    return request.app.state.page


Work = Callable[[PageState, dict[str, Any]], Any]


def posted(router: APIRouter, path: str) -> Callable[[Work], Work]:
    """Route ``POST path`` to the decorated ``work(page, body)``: the body (JSON or form) is read on the event
    loop, the work runs in a worker thread, so a slow request never holds up another."""

    def register(work: Work) -> Work:
        async def handler(request: Request, page: Annotated[PageState, Depends(page_state)]) -> Any:
            return await run_in_threadpool(work, page, await form_or_json(request))

        handler.__name__ = handler.__qualname__ = work.__name__.removesuffix("_now")
        router.add_api_route(path, handler, methods=["POST"])
        return work

    return register
