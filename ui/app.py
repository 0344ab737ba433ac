"""The web app behind ``pictrieve ui``: a JSON API over the method registry plus one static page.

FastAPI serves a hand-written HTML/JS page (no build step, no CDN) and these endpoints:

- ``GET /api/status``: image count, embedders, which methods (tabs) are available.
- ``GET /api/image/{id}``: the bytes of a gallery image, looked up by id only (never a request path), and only
  while its file is the one indexed (no link followed, still an image:
  :func:`~pictrieve.tools.core.thumbnails.viewable_photo`); a format browsers cannot show (HEIC, TIFF) comes as
  a JPEG of it, its longest side at most :data:`VIEW_SIDE`.
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
- ``GET /api/duplicates``: the gallery's groups of near-identical photos, read-only (:mod:`pictrieve.ui.duplicates`).
- ``GET /api/methods``: :meth:`~pictrieve.agents.method.Method.describe` of every registered method, with
  the page's tab for it; ``POST /api/methods/{name}/run`` (``{"input": {...}, "settings": {...}}``) runs a
  method without a view of its own (a plugin, say) as a job (:mod:`pictrieve.ui.methods`): its generic tab.
- ``POST /api/visualize`` with ``method: needle`` starts a NEEDLE session (:mod:`pictrieve.ui.needle`);
  ``POST /api/needle/{session}/guides`` (``{"rejected": [ids]}``) and ``/results``
  (``{"irrelevant": [ids]}``) answer its pauses (each a job); ``GET /api/needle/{session}/guide/{id}``
  serves a guide picture by session and guide id.

Every error reaches the page as ``{"error": "one readable line"}``; stack traces stay in the log.

Graphs are built from the registry: each method's needs (:attr:`~pictrieve.agents.method.Method.needs`)
are resolved from what the app was started with (``create_app(needs={...})``, by need name) by
:func:`pictrieve.agents.needs.resolve_needs` (a need not given gets its default), so a registered method runs
here without code of its own; the tabs below name the methods they show.

Each tab's routes are a router in the tab's module (:mod:`~pictrieve.ui.search`, :mod:`~pictrieve.ui.chat`,
:mod:`~pictrieve.ui.steer`, :mod:`~pictrieve.ui.ask`, :mod:`~pictrieve.ui.visualize` with NEEDLE's,
:mod:`~pictrieve.ui.duplicates`, :mod:`~pictrieve.ui.methods` for the generic tabs); the page, its files,
status, images and jobs are this module's.
What the server holds between requests (the gallery, what it was started with, its jobs, the graphs
built so far) is one :class:`~pictrieve.ui.state.PageState`, ``app.state.page``, which every route reads.
Requests are read into values by :mod:`pictrieve.ui.forms`.

No handler blocks the event loop, so one visitor's slow request never holds up another's: handlers
read the request on the loop and do the rest in a worker thread (``run_in_threadpool``), and long work
(loading models, running a chat round, Ask, Visualize, NEEDLE) runs as a job.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from pictrieve.agents.needs import names_of
from pictrieve.errors import PictrieveError
from pictrieve.graphs.registry import available_methods
from pictrieve.tools.core.gallery_photos import ChangedPhotoError
from pictrieve.tools.core.thumbnails import viewable_photo
from pictrieve.ui.ask import router as ask_router
from pictrieve.ui.chat import router as chat_router
from pictrieve.ui.duplicates import router as duplicates_router
from pictrieve.ui.forms import MAX_UPLOAD_BYTES, page_message
from pictrieve.ui.guard import BodyTooLarge, PageGuard
from pictrieve.ui.jobs import ABANDON_AFTER, MAX_RUNNING, Jobs, JobsBusy
from pictrieve.ui.methods import generic_views
from pictrieve.ui.methods import router as methods_router
from pictrieve.ui.search import router as search_router
from pictrieve.ui.state import PageState, page_state
from pictrieve.ui.steer import router as steer_router
from pictrieve.ui.visualize import router as visualize_router
from pictrieve.ui.visualize import visualize_methods
from pictrieve.vectorstore.errors import GalleryError

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
VIEW_SIDE = 1600
"""Longest side of the JPEG the page gets for a photo browsers cannot show (the larger view uses it too)."""
MAX_CHATS = 200
"""Chat sessions kept in ``chat.sqlite``; starting one more deletes the one touched longest ago (see
:func:`pictrieve.ui.chat.prune_chats`)."""
TAB_ROUTERS = (search_router, chat_router, steer_router, ask_router, visualize_router, duplicates_router,
               methods_router)
"""Each tab's routes, in the order of the page's tabs."""


def create_app(
    gallery: Any,
    *,
    needs: dict[str, Any] | None = None,
    state_dir: str | Path | None = None,
    max_upload_bytes: int = MAX_UPLOAD_BYTES,
    settings: dict[str, dict[str, Any]] | None = None,
    extras: dict[str, dict[str, Any]] | None = None,
    abandon_after: float = ABANDON_AFTER,
    bound: str | None = None,
    allowed_hosts: Sequence[str] = (),
    max_running: int = MAX_RUNNING,
    max_chats: int = MAX_CHATS,
) -> FastAPI:
    """The app serving ``gallery``.

    Every graph is built from its method's needs, resolved as every front end does
    (:func:`pictrieve.agents.needs.resolve_needs`) from ``needs``: what the app is started with, by need (and
    endpoint) name, a name or a ready object each (``{"llm": "openai:m", "base_url": URL, "visualizers":
    "exemplar:DIR", ...}``, a plugin's own need likewise); a need not given gets its default (``qc2_model``: the
    model trained for the gallery; without visualizers the Visualize tab says how to add them). ``settings`` are
    run settings by method name that every run of it starts from (``{"vsa": {"plan_with_llm": False}}``;
    the page always reviews NEEDLE's guides and results); ``extras`` more builder arguments by method name,
    which win over the needs. Each model is made once per app.

    ``state_dir`` holds the chat sessions' SQLite checkpointer (default: a temporary folder).
    A job nobody polls for ``abandon_after`` seconds is cancelled; at most ``max_running`` jobs run at
    once (``429`` past that). The app's state is ``app.state.page`` (:class:`~pictrieve.ui.state.PageState`),
    its jobs also ``app.state.jobs``. At most ``max_chats`` chat sessions are kept.

    Every request passes :class:`~pictrieve.ui.guard.PageGuard` first: its ``Host`` must be a loopback
    name, ``bound`` (the address the server listens on, when it is a specific one) or one of
    ``allowed_hosts``; the API answers only the page's own origin; bodies are JSON (at most 1 MiB) or the
    page's own multipart upload (at most ``max_upload_bytes``); every answer carries the security headers.
    """
    app = _GuardedApp(title="pictrieve", docs_url=None, redoc_url=None, openapi_url=None)
    app.guard = lambda inner: PageGuard(inner, bound=bound, allowed_hosts=allowed_hosts, upload_limit=max_upload_bytes)
    app.state.page = PageState(
        gallery=gallery, jobs=Jobs(abandon_after=abandon_after, running=max_running),
        state_dir=Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="pictrieve-ui-")),
        given_needs=dict(needs or {}), method_extras={name: dict(kw) for name, kw in (extras or {}).items()},
        method_settings={name: dict(kw) for name, kw in (settings or {}).items()},
        max_upload_bytes=max_upload_bytes, max_chats=max_chats)
    app.state.jobs = app.state.page.jobs
    _answer_errors(app)
    for router in TAB_ROUTERS:
        app.include_router(router)
    app.include_router(page_router)  # last: its /{name} serves the page's own files
    return app


def _answer_errors(app: FastAPI) -> None:
    """Every error as the page's one line: a refused request 400 (404 for a NEEDLE session that is gone), too many
    jobs 429, a body past its limit 413, anything else 500 with the trace in the log only."""

    async def refused(request: Request, exc: Exception) -> JSONResponse:
        from pictrieve.ui.needle import SessionNotFound

        if isinstance(exc, SessionNotFound):
            return JSONResponse({"error": str(exc)}, status_code=404)
        return JSONResponse({"error": page_message(exc)}, status_code=400)

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


# --- the page itself, its files, status, images and jobs (every tab's) ------------------------------------

page_router = APIRouter()
Page = Annotated[PageState, Depends(page_state)]


@page_router.get("/", response_class=HTMLResponse)
def page_html() -> HTMLResponse:
    # Its Content-Security-Policy (and the other security headers) come from PageGuard, as for every answer.
    return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))


@page_router.get("/api/status")
def status(page: Page) -> dict[str, Any]:
    gallery, visualizers = page.gallery, names_of(page.need_value("visualizers"))
    names = list(getattr(gallery, "embedder_names", None) or [gallery.embedder_name])
    default = getattr(gallery, "default_embedder", None) or gallery.embedder_name
    shown_visualizer = ", ".join(filter(None, (v if isinstance(v, str) else getattr(v, "name", None)
                                               for v in visualizers))) or None
    return {"count": gallery.count(), "embedder": gallery.embedder_name, "embedders": names,
            "default_embedder": default, "location": str(gallery.location), "methods": available_methods(),
            "index_command": f"pictrieve index PHOTOS --gallery {gallery.location}",
            "visualize": {"methods": visualize_methods(), "visualizer": shown_visualizer,
                          "about": _visualizer_about(visualizers[0] if visualizers else None)},
            "ask": {"search": _search_name(page.need_value("search"))},
            "generic": generic_views(page)}


@page_router.get("/api/image/{image_id}")
def image(image_id: str, page: Page) -> Response:
    # Only ids the gallery holds; the file path comes from the gallery, never from the request.
    try:
        (item,) = page.gallery.get([image_id])
    except (KeyError, GalleryError):  # unknown id, or a malformed one the store refuses
        return JSONResponse({"error": "no such image in this gallery"}, status_code=404)
    shown = f"gallery image {image_id}"
    try:  # the file that was indexed (no link followed, still an image); HEIC, TIFF...: a JPEG of it
        data, media_type = viewable_photo(item.path, name=shown, max_side=VIEW_SIDE)
    except FileNotFoundError:
        return JSONResponse({"error": "the image file is gone (run `pictrieve sync`)"}, status_code=404)
    except ChangedPhotoError as exc:
        log.warning("refused %s: %s", item.path, exc)
        return JSONResponse({"error": str(exc)}, status_code=404)
    except (PictrieveError, OSError) as exc:
        log.info("cannot show %s: %s", item.path, exc)
        return JSONResponse({"error": "the image file cannot be read"}, status_code=404)
    return Response(data, media_type=media_type)


@page_router.get("/api/jobs/{job_id}")
def job_view(job_id: str, page: Page) -> Any:
    job = page.jobs.poll(job_id)
    if job is None:
        return JSONResponse({"error": "this job is gone (the server restarted or forgot it); run it again"},
                            status_code=404)
    return job.view()


@page_router.post("/api/jobs/{job_id}/cancel")
def job_cancel(job_id: str, page: Page) -> Any:
    # Sent by the page (navigator.sendBeacon) when it goes away; the job stops between graph steps.
    if not page.jobs.cancel(job_id):
        return JSONResponse({"error": "this job is gone"}, status_code=404)
    return {"cancelled": True}


@page_router.get("/api/jobs/{job_id}/image/{name}")
def job_image(job_id: str, name: str, page: Page) -> Response:
    # Bytes the job made, by job id and image name: no path from the request reaches the disk.
    job = page.jobs.get(job_id)
    entry = job.images.get(name) if job is not None else None
    if entry is None:
        return JSONResponse({"error": "no such image"}, status_code=404)
    return Response(entry["bytes"], media_type="image/png")


@page_router.get("/{name}")
def static_file(name: str) -> Response:
    # Only the page's own files, by exact name.
    allowed = {p.name: p for p in STATIC.iterdir() if p.is_file()}
    if name not in allowed:
        return JSONResponse({"error": "not found"}, status_code=404)
    return FileResponse(allowed[name])


class _GuardedApp(FastAPI):
    """FastAPI whose whole middleware stack (Starlette's error middleware included) sits inside ``guard``,
    so a refused request never reaches a route and every answer, a 500 too, gets the security headers."""

    guard: Any = None

    def build_middleware_stack(self) -> Any:
        stack = super().build_middleware_stack()
        return self.guard(stack) if self.guard is not None else stack


def _visualizer_about(made: Any) -> str:
    """What the configured visualizer's images are, said without building it (no model loads)."""
    if made is None:
        return ""
    if not isinstance(made, str):
        return "generated images" if getattr(made, "generates", True) else "found photos, not generated"
    from pictrieve.tools.models.visualizers import VISUALIZERS

    family = made.partition(":")[0]
    return next((e.description for e in VISUALIZERS.entries() if e.family == family), "")


def _search_name(backend: Any) -> str | None:
    if backend is None or isinstance(backend, str):
        return backend
    return str(getattr(backend, "name", type(backend).__name__))
