"""The web app behind ``pictrieve ui``: a JSON API over the method registry plus one static page.

FastAPI serves a hand-written HTML/JS page (no build step, no CDN) and these endpoints:

- ``GET /api/status``: image count, embedders, which methods (tabs) are available.
- ``GET /api/image/{id}``: the bytes of a gallery image, looked up by id only (never a request path); a format
  browsers cannot show (HEIC, TIFF) comes as a JPEG of it, its longest side at most :data:`VIEW_SIDE`.
- ``POST /api/search``: text query, uploaded image, or ``like`` (an id: "more like this"), with the CLI's filters
  (``after``, ``before``, ``near``, ``radius_km``, ``place``, ``camera``, ``folder``) and ``hybrid`` (default on:
  the photos' own words count too).
- ``POST /api/chat/start`` / ``/api/chat/reply`` / ``GET /api/chat/{thread}``: PlugIR rounds, each run as
  a background job (:mod:`pictrieve.ui.chat`); the sessions live in a SQLite checkpointer so they survive
  a page reload and a server restart.
- ``POST /api/steer``: QC2 with relevance/quality levels.
- ``POST /api/ask``: the Vision Search Assistant about an uploaded photo, a gallery photo (by id) or the
  photo the gallery finds for the question; ``POST /api/visualize`` (``{"query", "guides", "k"}``): VisRet.
  Both start a background job (:mod:`pictrieve.ui.jobs`) that ``GET /api/jobs/{id}`` reports step by step,
  and whose images ``GET /api/jobs/{id}/image/{name}`` serves from memory. ``POST /api/jobs/{id}/cancel``
  stops a job between graph steps (the page sends it when it goes away); a job nobody polls stops by itself.
- ``GET /api/methods``: :meth:`~pictrieve.agents.method.Method.describe` of every registered method, with
  the page's tab for it; ``POST /api/methods/{name}/run`` (``{"input": {...}, "settings": {...}}``) runs a
  method without a view of its own (a plugin, say) as a job (:mod:`pictrieve.ui.methods`): its generic tab.
- ``POST /api/visualize`` with ``method: needle`` starts a NEEDLE session (:mod:`pictrieve.ui.needle`);
  ``POST /api/needle/{session}/guides`` (``{"rejected": [ids]}``) and ``/results``
  (``{"irrelevant": [ids]}``) answer its pauses (each a job); ``GET /api/needle/{session}/guide/{id}``
  serves a guide picture by session and guide id.

Every error reaches the page as ``{"error": "one readable line"}``; stack traces stay in the log.

Graphs are built from the registry: each method's needs (:attr:`~pictrieve.agents.method.Method.needs`)
are resolved from what the app was started with by :func:`pictrieve.agents.needs.resolve_needs` (the chat
model, the visualizer, any need by name; the rest their defaults), so a registered method runs here without
code of its own; the tabs below name the methods they show.

No handler blocks the event loop, so one visitor's slow request never holds up another's: handlers
read the request on the loop and do the rest in a worker thread (``run_in_threadpool``), and long work
(loading models, running a chat round, Ask, Visualize, NEEDLE) runs as a job.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import uuid
from pathlib import Path
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request, UploadFile
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from pictrieve.agents.needs import missing_needs, resolve_needs
from pictrieve.errors import PictrieveError
from pictrieve.tools.core.images import shown_by_browsers
from pictrieve.tools.core.thumbnails import jpeg_thumbnail
from pictrieve.graphs.registry import available_methods, get_method, method_origin
from pictrieve.ui.guard import BodyTooLarge, PageGuard
from pictrieve.ui.jobs import ABANDON_AFTER, MAX_RUNNING, Jobs, JobsBusy
from pictrieve.ui.visualize import PAGE_METHODS, visualize_methods

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
"""Uploads above this size are refused before decoding."""
MAX_K = 100
VIEW_SIDE = 1600
"""Longest side of the JPEG the page gets for a photo browsers cannot show (the larger view uses it too)."""
MAX_CHATS = 200
"""Chat sessions kept in ``chat.sqlite``; starting one more deletes the one touched longest ago (see
:func:`pictrieve.ui.chat.prune_chats`)."""
MAX_TEXT = 2000
"""Characters of a chat description or answer (each is stored with its session)."""
PAGE_TABS: dict[str, str] = {"search": "search", "plugir": "chat", "qc2": "steer", "vsa": "ask",
                             **{name: "visualize" for name in PAGE_METHODS}}
"""Methods with a view of their own on the page (``static/index.html``); every other registered method
that takes a line of text gets a generic tab (:mod:`pictrieve.ui.methods`)."""


class UIError(PictrieveError, ValueError):
    """A request the page made that cannot be served as given; the message is shown on the page."""


def create_app(
    gallery: Any,
    *,
    llm: Any = None,
    state_dir: str | Path | None = None,
    max_upload_bytes: int = MAX_UPLOAD_BYTES,
    plugir_extras: dict[str, Any] | None = None,
    ask_extras: dict[str, Any] | None = None,
    ask_context: dict[str, Any] | None = None,
    visualizer: Any = None,
    visualize_context: dict[str, Any] | None = None,
    needle_context: dict[str, Any] | None = None,
    abandon_after: float = ABANDON_AFTER,
    extras: dict[str, dict[str, Any]] | None = None,
    bound: str | None = None,
    allowed_hosts: Sequence[str] = (),
    max_running: int = MAX_RUNNING,
    max_chats: int = MAX_CHATS,
    needs: dict[str, Any] | None = None,
) -> FastAPI:
    """The app serving ``gallery``; ``llm`` is the chat model (name or object) for PlugIR and Ask.

    ``state_dir`` holds the chat sessions' SQLite checkpointer (default: a temporary folder).
    ``plugir_extras`` go to PlugIR's builder (e.g. ``captioner``); ``ask_extras`` to the Vision Search
    Assistant's (``search``, ``detector``, ``vlm``; an ``llm`` there replaces the shared one) and
    ``ask_context`` are its run settings. ``visualizer`` (an object or a name such as
    ``exemplar:DIR``) makes VisRet's guide images; without one the Visualize tab says how to add one.
    ``visualize_context`` are VisRet's run settings (e.g. ``image_embedder``), ``needle_context``
    NEEDLE's (e.g. ``embedders``, ``eta``); the page always reviews NEEDLE's guides and results.
    A job nobody polls for ``abandon_after`` seconds is cancelled; at most ``max_running`` jobs run at
    once (``429`` past that). The jobs are ``app.state.jobs``. At most ``max_chats`` chat sessions are kept.

    Every request passes :class:`~pictrieve.ui.guard.PageGuard` first: its ``Host`` must be a loopback
    name, ``bound`` (the address the server listens on, when it is a specific one) or one of
    ``allowed_hosts``; the API answers only the page's own origin; bodies are JSON (at most 1 MiB) or the
    page's own multipart upload (at most ``max_upload_bytes``); every answer carries the security headers.

    Every graph is built from its method's needs, resolved as every front end does
    (:func:`pictrieve.agents.needs.resolve_needs`): ``llm`` is the chat model, ``visualizer`` the visualizers
    need, ``needs`` gives any need by name (a name or an object: a plugin's own, say), and a need not given
    gets its default (``qc2_model``: the model trained for the gallery). ``extras`` maps a method's name to more
    builder arguments (``plugir_extras`` and ``ask_extras`` are PlugIR's and VSA's), which win over those.
    """
    needle_context_base = dict(needle_context or {})
    app = _GuardedApp(title="pictrieve", docs_url=None, redoc_url=None, openapi_url=None)
    app.guard = lambda inner: PageGuard(inner, bound=bound, allowed_hosts=allowed_hosts, upload_limit=max_upload_bytes)
    state_dir = Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="pictrieve-ui-"))
    graphs: dict[str, Any] = {}
    lock = threading.RLock()  # building a graph may build its visualizer, under the same lock
    jobs = Jobs(abandon_after=abandon_after, running=max_running)
    app.state.jobs = jobs
    made: dict[tuple[Any, ...], Any] = {}
    chats_working: set[str] = set()  # chat threads with a job running: one step at a time each
    chat_lock = threading.Lock()

    method_extras = {**({"plugir": dict(plugir_extras)} if plugir_extras else {}),
                     **({"vsa": dict(ask_extras)} if ask_extras else {}), **(extras or {})}
    given_needs: dict[str, Any] = {"llm": llm, "visualizers": visualizer, **(needs or {})}
    """What the app was started with, by need name (:data:`pictrieve.agents.needs.NEEDS`): every graph's needs
    are resolved from it by :func:`~pictrieve.agents.needs.resolve_needs`, the one way every front end does;
    a need it does not name gets its default (a method's ``extras`` win)."""

    def make(key: tuple[Any, ...], factory: Any) -> Any:
        # Each model or visualizer once per app (the exemplar visualizer loads a sentence model and encodes
        # captions), shared by the graphs that need it.
        with lock:
            if key not in made:
                made[key] = factory()
            return made[key]

    def build_graph(name: str, **overrides: Any) -> Any:
        """``name``'s graph over the gallery: its needs resolved from the app's, then ``extras``, then ``overrides``."""
        method = get_method(name)
        given = {**method_extras.get(name, {}), **overrides}
        kwargs = resolve_needs(method, given_needs, gallery=gallery, make=make, skip=given, defaults=False)
        kwargs.update(given)
        return method.build(gallery, **kwargs)

    def missing_need(method: Any) -> None:
        """A method needing what the app was not started with: one line saying how to start it, before any job."""
        for need in missing_needs(method, given_needs):
            raise UIError(f"{method.name} needs {need.description}: restart with `pictrieve ui --gallery "
                          f"{gallery.location} {need.cli_option} {need.example or 'VALUE'}`")

    def graph(name: str, **overrides: Any) -> Any:
        # Built on first use (a page that only searches never loads a language model), then kept (a
        # name is always asked for with the same overrides).
        with lock:
            if name not in graphs:
                graphs[name] = build_graph(name, **overrides)
            return graphs[name]

    def chat_graph() -> Any:
        """PlugIR with its sessions in a SQLite file, so a chat survives a reload and a restart."""
        from pictrieve.graphs.checkpoints import sqlite_checkpointer

        with lock:
            if "plugir" not in graphs:
                graphs["plugir"] = build_graph("plugir", checkpointer=sqlite_checkpointer(state_dir / "chat.sqlite"))
            return graphs["plugir"]

    async def refused(request: Request, exc: Exception) -> JSONResponse:
        """A request that cannot be served as given: 400 (404 for a NEEDLE session that is gone)."""
        from pictrieve.ui.needle import SessionNotFound

        if isinstance(exc, SessionNotFound):
            return JSONResponse({"error": str(exc)}, status_code=404)
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        return JSONResponse({"error": message or type(exc).__name__}, status_code=400)

    # Each refused kind by name: Starlette answers these and carries on. A handler registered only for
    # `Exception` answers too, but then re-raises every error to the server (its ServerErrorMiddleware),
    # so uvicorn logged a traceback for each empty query and closed the connection: a client reusing it
    # got a dropped connection (benchmarks/load_search.py, tests/test_load_search.py).
    for kind in (PictrieveError, KeyError, ValueError):
        app.add_exception_handler(kind, refused)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Starlette's own refusals (an unknown method, a malformed multipart body) as the page's one line.
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(JobsBusy)
    async def busy(request: Request, exc: JobsBusy) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=429, headers={"Retry-After": "10"})

    @app.exception_handler(BodyTooLarge)
    async def too_large(request: Request, exc: BodyTooLarge) -> JSONResponse:
        # A body without a length cut off at the limit while it was read (PageGuard); one with a length above
        # it never got this far. The connection is closed after this answer (the rest is never read).
        return JSONResponse({"error": str(exc)}, status_code=413, headers={"Connection": "close"})

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("ui request %s failed", request.url.path)
        return JSONResponse({"error": f"internal error ({type(exc).__name__}); see the server log"},
                            status_code=500)

    @app.get("/", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        # Its Content-Security-Policy (and the other security headers) come from PageGuard, as for every answer.
        return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))

    def require_visualizer() -> None:
        if visualizer is None:
            raise UIError("the Visualize tab needs a visualizer: restart with `pictrieve ui --gallery "
                          f"{gallery.location} --visualizer exemplar:DIR` (DIR: a folder with captions.jsonl)")

    def needle_sessions() -> Any:
        from pictrieve.ui.needle import NeedleSessions

        require_visualizer()
        with lock:  # one graph (and one in-memory checkpointer) per app: sessions live across requests
            if "needle" not in graphs:
                from pictrieve.graphs.checkpoints import memory_checkpointer

                # Its needs as every graph's: without a chosen chat model the query is visualized as written.
                built = build_graph("needle", checkpointer=memory_checkpointer())
                graphs["needle"] = NeedleSessions(gallery, built)
            return graphs["needle"]

    def gallery_item(image_id: Any) -> Any:
        """The gallery's record of ``image_id`` (ids only: a path in the request is just an unknown id)."""
        try:
            (item,) = gallery.get([str(image_id)])
        except Exception as exc:  # unknown id, or a malformed one Chroma refuses
            raise UIError("no such image in this gallery") from exc
        return item

    @app.get("/api/status")
    def status() -> dict[str, Any]:
        names = list(getattr(gallery, "embedder_names", None) or [gallery.embedder_name])
        default = getattr(gallery, "default_embedder", None) or gallery.embedder_name
        shown_visualizer = visualizer if isinstance(visualizer, str) else getattr(visualizer, "name", None)
        return {"count": gallery.count(), "embedder": gallery.embedder_name, "embedders": names,
                "default_embedder": default, "location": str(gallery.location), "methods": available_methods(),
                "index_command": f"pictrieve index PHOTOS --gallery {gallery.location}",
                "visualize": {"methods": visualize_methods(), "visualizer": shown_visualizer,
                              "about": _visualizer_about(visualizer)},
                "ask": {"search": _search_name((ask_extras or {}).get("search"))},
                "generic": generic_views()}

    described: dict[str, Any] = {"methods": None, "views": {}}

    def method_views(names: list[str] | None = None) -> list[dict[str, Any]]:
        """Registered methods (``names``: only those) described for the page, with their ``tab``
        (``generic``: one made from the description; ``none``: no line of text to start it from, so not on
        the page). Each is described once (that reads its schemas' source) while the registry stays the same."""
        registered = available_methods()
        with lock:
            if described["methods"] != registered:
                described.update(methods=registered, views={})
            views = described["views"]
            for name in registered if names is None else names:
                if name not in views:
                    view = get_method(name).describe()
                    tab = PAGE_TABS.get(name) or ("generic" if view["text_input"] else "none")
                    views[name] = {**view, "origin": method_origin(name), "tab": tab}
            return [views[name] for name in (registered if names is None else names)]

    def generic_views() -> list[dict[str, Any]]:
        # Only methods without a view of their own are described here: the built-ins' schemas (and the
        # graph modules that hold them) are not loaded for the page's frequent status requests.
        others = [name for name in available_methods() if name not in PAGE_TABS]
        return [v for v in method_views(others) if v["tab"] == "generic"] if others else []

    @app.get("/api/methods")
    def methods_view() -> list[dict[str, Any]]:
        return method_views()

    @app.post("/api/methods/{name}/run")
    async def method_run(name: str, request: Request) -> dict[str, Any]:
        return await run_in_threadpool(method_run_now, name, await _form_or_json(request))

    def method_run_now(name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Start a generic tab's run (a method without a view of its own) as a job."""
        from pictrieve.ui.methods import prepare_run, run_method

        if name not in available_methods() or name in PAGE_TABS:
            raise UIError(f"no generic tab for {name!r}" + (f"; it has its own: {PAGE_TABS[name]}" if name in PAGE_TABS else ""))
        method = get_method(name)
        inputs, context = prepare_run(method, body)
        missing_need(method)  # said at once, not by the job

        def work(job: Any) -> dict[str, Any]:
            job.step(f"building {name}…")
            pauses = "checkpointer" in method.needs
            from pictrieve.graphs.checkpoints import memory_checkpointer

            built = graph(name, **({"checkpointer": memory_checkpointer()} if pauses else {}))
            return run_method(job, method, built, inputs, context)

        return jobs.start(name, work).view()

    @app.get("/api/image/{image_id}")
    def image(image_id: str) -> FileResponse:
        # Only ids the gallery holds; the file path comes from the gallery, never from the request.
        try:
            (item,) = gallery.get([image_id])
        except Exception:  # unknown id, or a malformed one Chroma refuses
            return JSONResponse({"error": "no such image in this gallery"}, status_code=404)
        path = Path(item.path)
        if not path.is_file():
            return JSONResponse({"error": "the image file is gone (run `pictrieve sync`)"}, status_code=404)
        if shown_by_browsers(path):
            return FileResponse(path)
        try:  # HEIC, TIFF...: no browser shows them, so the page gets a JPEG (upright, as the models saw it)
            return Response(jpeg_thumbnail(path, max_side=VIEW_SIDE), media_type="image/jpeg")
        except (PictrieveError, OSError) as exc:
            log.info("cannot show %s: %s", path, exc)
            return JSONResponse({"error": "the image file cannot be read"}, status_code=404)

    @app.post("/api/search")
    async def search(request: Request) -> dict[str, Any]:
        return await run_in_threadpool(search_now, await _form_or_json(request))

    def search_now(form: dict[str, Any]) -> dict[str, Any]:
        k = _k(form.get("k"), 24)
        search_graph = graph("search")
        options = _search_options(form)
        if form.get("like"):
            item = gallery_item(form["like"])
            result = search_graph.invoke({"image": item.path, **options}, context={"k": k})
        elif isinstance(form.get("image"), UploadFile) or hasattr(form.get("image"), "read"):
            with _guarded_upload(form["image"], max_upload_bytes) as path:
                result = search_graph.invoke({"image": str(path), **options}, context={"k": k})
        elif str(form.get("query") or "").strip():
            result = search_graph.invoke({"query": str(form["query"]), **options}, context={"k": k})
        else:
            raise UIError("type what you are looking for, or drop a picture")
        return search_body(result["hits"], only=_checked(form.get("only_relevant")))

    @app.post("/api/chat/start")
    async def chat_start(request: Request) -> dict[str, Any]:
        return await run_in_threadpool(chat_start_now, await _form_or_json(request))

    def chat_start_now(body: dict[str, Any]) -> dict[str, Any]:
        description = _text(body.get("description"), "the description")
        if not description:
            raise UIError("describe the photo you are looking for first")
        context = _chat_context(body, llm)

        def work(job: Any) -> dict[str, Any]:
            from pictrieve.ui.chat import prune_chats, run_chat

            job.step("thinking of a question…")
            plugir = chat_graph()
            with chat_lock:
                busy = set(chats_working)
            prune_chats(plugir.checkpointer, keep=max_chats - 1, busy=busy)
            return run_chat(job, plugir, {"description": description}, uuid.uuid4().hex, context,
                            get_method("plugir").step_table())

        return jobs.start("chat", work).view()

    @app.post("/api/chat/reply")
    async def chat_reply(request: Request) -> dict[str, Any]:
        return await run_in_threadpool(chat_reply_now, await _form_or_json(request))

    def chat_reply_now(body: dict[str, Any]) -> dict[str, Any]:
        """Answer the pending question, or ``continue`` a round that stopped half-way, as a job."""
        from langgraph.types import Command

        from pictrieve.ui.chat import chat_view, run_chat

        thread = _thread(body.get("thread"))
        if body.get("found"):
            reply: Any = Command(resume={"found": str(body["found"])})
        elif body.get("stop"):
            reply = Command(resume={"stop": True})
        elif body.get("continue"):
            reply = None  # run on from the last finished step
        else:
            answer = _text(body.get("answer"), "the answer")
            if not answer:
                raise UIError("type an answer, or click the photo if you see it")
            reply = Command(resume={"answer": answer})
        context = _chat_context(body, llm)
        plugir = chat_graph()
        with chat_lock:
            view = chat_view(plugir, thread)
            if thread in chats_working:
                raise UIError("this chat is still working on its last step; wait for it")
            if view["done"]:
                raise UIError("this chat has ended; start a new one")
            if view["unfinished"] != (reply is None):
                raise UIError("this chat stopped half-way through a round; reload the page to continue it"
                              if view["unfinished"] else "this chat is waiting for your answer")
            chats_working.add(thread)
        try:
            steps = get_method("plugir").step_table()
            job = jobs.start("chat", lambda job: run_chat(job, plugir, reply, thread, context, steps),
                             cleanup=lambda: chats_working.discard(thread))
        except BaseException:
            chats_working.discard(thread)
            raise
        return job.view()

    @app.get("/api/chat/{thread}")
    def chat_get(thread: str) -> dict[str, Any]:
        from pictrieve.ui.chat import chat_view

        thread = _thread(thread)
        return {**chat_view(chat_graph(), thread), "working": thread in chats_working}

    @app.post("/api/steer")
    async def steer(request: Request) -> dict[str, Any]:
        return await run_in_threadpool(steer_now, await _form_or_json(request))

    def steer_now(body: dict[str, Any]) -> dict[str, Any]:
        query = str(body.get("query") or "").strip()
        if not query:
            raise UIError("type a short query to steer")
        levels = {axis: str(body[axis]) for axis in ("relevance", "quality") if body.get(axis)}
        try:
            qc2 = graph("qc2")
        except (PictrieveError, FileNotFoundError, OSError) as exc:
            raise UIError(f"QC2 needs a model trained for this gallery: run `pictrieve quality train "
                          f"--gallery {gallery.location}` first ({exc})") from exc
        result = qc2.invoke({"query": query, "levels": levels}, context={"k": _k(body.get("k"), 24)})
        return {"completions": list(result.get("completions") or []),
                "levels": dict(result.get("resolved_levels") or {}),
                "hits": [h.to_json() for h in result.get("hits") or []]}

    @app.post("/api/ask")
    async def ask(request: Request) -> dict[str, Any]:
        return await run_in_threadpool(ask_now, await _form_or_json(request))

    def ask_now(form: dict[str, Any]) -> dict[str, Any]:
        from pictrieve.ui.ask import run_ask

        question = str(form.get("question") or "").strip()
        if not question:
            raise UIError("type a question about the photo")
        folder = tempfile.TemporaryDirectory(prefix="pictrieve-ask-")
        try:
            if hasattr(form.get("image"), "read"):
                image: str | None = str(_save_upload(form["image"], max_upload_bytes, Path(folder.name)))
            elif form.get("photo"):
                image = gallery_item(form["photo"]).path
            else:
                image = None  # the graph finds the photo in the gallery (visual RAG)
        except BaseException:
            folder.cleanup()
            raise
        job = jobs.start("ask", lambda job: run_ask(job, graph("vsa"), question, image, dict(ask_context or {})),
                         cleanup=folder.cleanup)
        return job.view()

    @app.post("/api/visualize")
    async def visualize(request: Request) -> dict[str, Any]:
        return await run_in_threadpool(visualize_now, await _form_or_json(request))

    def visualize_now(body: dict[str, Any]) -> dict[str, Any]:
        from pictrieve.ui.needle import FEEDBACK
        from pictrieve.ui.visualize import PAGE_METHODS, run_visualize

        query = str(body.get("query") or "").strip()
        method = str(body.get("method") or "visret")
        if method not in PAGE_METHODS:
            raise UIError(f"{method} has no controls on this page yet; the Visualize tab runs: {', '.join(PAGE_METHODS)}")
        if not query:
            raise UIError("describe what you are looking for")
        guides = _count(body.get("guides"), 3, "guide images", 8)
        require_visualizer()  # building it (a model, caption vectors) is the job's first step
        if method == "needle":
            needle_context = {**needle_context_base, "k": _k(body.get("k"), 24), "guides": guides,
                              "feedback": FEEDBACK}
            topic = str(body.get("topic") or "").strip() or None

            def start_needle(job: Any) -> dict[str, Any]:
                sessions = needle_sessions()
                return sessions.start(job, sessions.open(needle_context), query, topic)

            return jobs.start("needle", start_needle).view()
        context = {**(visualize_context or {}), "k": _k(body.get("k"), 24), "guides": guides}

        def work(job: Any) -> dict[str, Any]:
            return run_visualize(job, graph(method), query, context)

        return jobs.start("visualize", work).view()

    @app.post("/api/needle/{session}/{stage}")
    async def needle_answer(session: str, stage: str, request: Request) -> dict[str, Any]:
        from pictrieve.ui.needle import SessionNotFound

        keys = {"guides": "rejected", "results": "irrelevant"}
        if stage not in keys:
            raise SessionNotFound("not found")
        body = await _form_or_json(request)

        def claim_and_start() -> dict[str, Any]:
            sessions = needle_sessions()
            answer = sessions.claim(session, stage, keys[stage], body.get(keys[stage], []))
            return jobs.start("needle", lambda job: sessions.resume(job, session, answer)).view()

        return await run_in_threadpool(claim_and_start)

    @app.get("/api/needle/{session}/guide/{guide_id}")
    def needle_guide(session: str, guide_id: str) -> Response:
        # The file comes from the session's state, found by guide id: no path from the request.
        path = Path(needle_sessions().guide_path(session, guide_id))
        if not path.is_file():
            return JSONResponse({"error": "the guide picture is gone (its cache was cleared)"}, status_code=404)
        return FileResponse(path)

    @app.get("/api/jobs/{job_id}")
    def job_view(job_id: str) -> Any:
        job = jobs.poll(job_id)
        if job is None:
            return JSONResponse({"error": "this job is gone (the server restarted or forgot it); run it again"},
                                status_code=404)
        return job.view()

    @app.post("/api/jobs/{job_id}/cancel")
    def job_cancel(job_id: str) -> Any:
        # Sent by the page (navigator.sendBeacon) when it goes away; the job stops between graph steps.
        if not jobs.cancel(job_id):
            return JSONResponse({"error": "this job is gone"}, status_code=404)
        return {"cancelled": True}

    @app.get("/api/jobs/{job_id}/image/{name}")
    def job_image(job_id: str, name: str) -> Response:
        # Bytes the job made, by job id and image name: no path from the request reaches the disk.
        job = jobs.get(job_id)
        entry = job.images.get(name) if job is not None else None
        if entry is None:
            return JSONResponse({"error": "no such image"}, status_code=404)
        return Response(entry["bytes"], media_type="image/png")

    @app.get("/{name}")
    def static_file(name: str) -> FileResponse:
        # Only the page's own files, by exact name.
        allowed = {p.name: p for p in STATIC.iterdir() if p.is_file()}
        if name not in allowed:
            return JSONResponse({"error": "not found"}, status_code=404)
        return FileResponse(allowed[name])

    return app


def _chat_context(body: dict[str, Any], llm: Any = None) -> dict[str, Any]:
    from pictrieve.graphs.plugir import ARMS, default_arm

    arm = body.get("arm") if body.get("arm") in ARMS else default_arm(llm)
    return {"shown_k": _k(body.get("shown_k"), 10), "arm": arm}


def _search_options(form: dict[str, Any]) -> dict[str, Any]:
    """The search graph's ``filters``, ``hybrid`` and ``collapse_duplicates`` from the search form (a JSON body or a multipart upload's
    fields); the graph checks the filters and answers a bad one in one line."""
    from pictrieve.agents.search.nodes import FILTER_WORDS

    filters: dict[str, Any] = {}
    for name in sorted(FILTER_WORDS):
        value = form.get(name)
        if value in (None, "") or hasattr(value, "read"):
            continue
        text = _text(value, name, 200)
        if name == "radius_km":
            try:
                filters[name] = float(text)
            except ValueError:
                raise UIError(f"the radius must be a number of kilometres, not {text!r}") from None
        elif text:
            filters[name] = text
    hybrid = form.get("hybrid", True)
    if not isinstance(hybrid, bool):
        hybrid = str(hybrid).strip().lower() not in {"0", "false", "off", "no"}
    collapse = {"collapse_duplicates": True} if _checked(form.get("collapse_duplicates")) else {}  # one of each
    return {**({"filters": filters} if filters else {}), "hybrid": hybrid, **collapse}  # near-duplicate group


def _thread(value: Any) -> str:
    text = str(value or "")
    if not text or len(text) > 64 or not text.isalnum():
        raise UIError("no such chat; start a new one")
    return text


def _text(value: Any, what: str, most: int = MAX_TEXT) -> str:
    text = str(value or "").strip()
    if len(text) > most:
        raise UIError(f"{what} is longer than {most} characters; say it in fewer words")
    return text


def _k(value: Any, default: int) -> int:
    return _count(value, default, "k", MAX_K)


def _count(value: Any, default: int, what: str, most: int) -> int:
    try:
        n = int(value) if value not in (None, "") else default
    except (TypeError, ValueError) as exc:
        raise UIError(f"{what} must be a whole number, not {value!r}") from exc
    if not 1 <= n <= most:
        raise UIError(f"{what} must be between 1 and {most}")
    return n


async def _form_or_json(request: Request) -> dict[str, Any]:
    if request.headers.get("content-type", "").startswith("application/json"):
        body = await request.json()
        if not isinstance(body, dict):
            raise UIError("expected a JSON object")
        return body
    return dict(await request.form(max_files=2, max_fields=32))


class _GuardedApp(FastAPI):
    """FastAPI whose whole middleware stack (Starlette's error middleware included) sits inside ``guard``,
    so a refused request never reaches a route and every answer, a 500 too, gets the security headers."""

    guard: Any = None

    def build_middleware_stack(self) -> Any:
        stack = super().build_middleware_stack()
        return self.guard(stack) if self.guard is not None else stack


def _visualizer_about(visualizer: Any) -> str:
    """What the configured visualizer's images are, said without building it (no model loads)."""
    if visualizer is None:
        return ""
    if not isinstance(visualizer, str):
        return "generated images" if getattr(visualizer, "generates", True) else "found photos, not generated"
    from pictrieve.tools.models.visualizers import VISUALIZERS

    family = visualizer.partition(":")[0]
    return next((e.description for e in VISUALIZERS.entries() if e.family == family), "")


def _checked(value: Any) -> bool:
    """A page checkbox's value, sent as JSON (true) or as a form field ("on", "true", "1")."""
    return value is True or str(value or "").lower() in {"1", "true", "on"}


def search_body(hits: list[Any], *, only: bool = False) -> dict[str, Any]:
    """``/api/search``'s answer: the hits (each with ``relevant``; with ``only`` just those) and ``notice``,
    "no photo matches well; the closest are:" when none is relevant (else empty)."""
    from pictrieve.vectorstore.relevance import NO_MATCH_HEADER, none_relevant, only_relevant

    notice = NO_MATCH_HEADER if none_relevant(hits) else ""
    if notice and only:
        notice = "no photo matches well"
    return {"hits": [h.to_json() for h in (only_relevant(hits) if only else hits)], "notice": notice}


def _search_name(search: Any) -> str | None:
    if search is None or isinstance(search, str):
        return search
    return str(getattr(search, "name", type(search).__name__))


def _save_upload(upload: Any, limit: int, folder: Path) -> Path:
    """Read an upload (at most ``limit`` bytes), decode it within a service's memory budget (a JPEG reduced,
    other formats above the pixel budget refused from the header), save a PNG."""
    from pictrieve.tools.core.images import load_service_image

    data = upload.file.read(limit + 1)
    if len(data) > limit:
        size = f"{limit / 2**20:g} MiB" if limit >= 2**20 else f"{limit / 1024:g} KiB"
        raise UIError(f"the picture is larger than {size}; use a smaller one")
    raw = folder / "upload"
    raw.write_bytes(data)
    try:
        image = load_service_image(raw)  # raises ImageDecodeError (a readable one-liner) for non-images
    except PictrieveError as exc:
        raise UIError(str(exc).replace(str(raw), "the uploaded file")) from exc  # no server paths on the page
    path = folder / "query.png"
    image.save(path)
    return path


class _guarded_upload:
    """Save an upload (size-capped) to a temp file, decode it with the indexer's guarded loader."""

    def __init__(self, upload: Any, limit: int) -> None:
        self.upload, self.limit = upload, limit

    def __enter__(self) -> Path:
        self.dir = tempfile.TemporaryDirectory(prefix="pictrieve-upload-")
        try:
            return _save_upload(self.upload, self.limit, Path(self.dir.name))
        except BaseException:
            self.dir.cleanup()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.dir.cleanup()
