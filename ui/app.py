"""The web app behind ``pictrieve ui``: a JSON API over the method registry plus one static page.

FastAPI serves a hand-written HTML/JS page (no build step, no CDN) and these endpoints:

- ``GET /api/status``: image count, embedders, which methods (tabs) are available.
- ``GET /api/image/{id}``: the bytes of a gallery image, looked up by id only (never a request path).
- ``POST /api/search``: text query, uploaded image, or ``like`` (an id: "more like this").
- ``POST /api/chat/start`` / ``/api/chat/reply`` / ``GET /api/chat/{thread}``: PlugIR rounds; the
  sessions live in a SQLite checkpointer so they survive a page reload and a server restart.
- ``POST /api/steer``: QC2 with relevance/quality levels.

Every error reaches the page as ``{"error": "one readable line"}``; stack traces stay in the log.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, UploadFile
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from pictrieve.errors import PictrieveError
from pictrieve.graphs.registry import available_methods, get_method

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
"""Uploads above this size are refused before decoding."""
MAX_K = 100


class UIError(PictrieveError, ValueError):
    """A request the page made that cannot be served as given; the message is shown on the page."""


def create_app(
    gallery: Any,
    *,
    llm: Any = None,
    state_dir: str | Path | None = None,
    max_upload_bytes: int = MAX_UPLOAD_BYTES,
    plugir_extras: dict[str, Any] | None = None,
) -> FastAPI:
    """The app serving ``gallery``; ``llm`` is the chat model (name or object) for PlugIR.

    ``state_dir`` holds the chat sessions' SQLite checkpointer (default: a temporary folder).
    ``plugir_extras`` go to PlugIR's builder (e.g. ``captioner``).
    """
    app = FastAPI(title="pictrieve", docs_url=None, redoc_url=None, openapi_url=None)
    state_dir = Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="pictrieve-ui-"))
    graphs: dict[str, Any] = {}
    lock = threading.Lock()

    def graph(name: str) -> Any:
        # Built on first use: a page that only searches never loads a language model.
        with lock:
            if name not in graphs:
                if name == "plugir":
                    from pictrieve.graphs.interactive_retrieval import sqlite_checkpointer

                    graphs[name] = get_method("plugir").build(
                        gallery, llm=llm, checkpointer=sqlite_checkpointer(state_dir / "chat.sqlite"),
                        **(plugir_extras or {}))
                elif name == "qc2":
                    from pictrieve.agents.qc2.pipeline import load_for_gallery

                    graphs[name] = get_method("qc2").build(gallery, model=load_for_gallery(gallery))
                else:
                    graphs[name] = get_method(name).build(gallery)
            return graphs[name]

    @app.exception_handler(Exception)
    async def readable_error(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, (PictrieveError, KeyError, ValueError)):
            message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
            return JSONResponse({"error": message or type(exc).__name__}, status_code=400)
        log.exception("ui request %s failed", request.url.path)
        return JSONResponse({"error": f"internal error ({type(exc).__name__}); see the server log"},
                            status_code=500)

    @app.get("/", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"),
                            headers={"Content-Security-Policy": "default-src 'self'; img-src 'self' blob:; "
                                     "style-src 'self' 'unsafe-inline'; script-src 'self'"})

    @app.get("/api/status")
    def status() -> dict[str, Any]:
        names = list(getattr(gallery, "embedder_names", None) or [gallery.embedder_name])
        return {"count": gallery.count(), "embedder": gallery.embedder_name, "embedders": names,
                "location": str(gallery.location), "methods": available_methods()}

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
        return FileResponse(path)

    @app.post("/api/search")
    async def search(request: Request) -> dict[str, Any]:
        form = await _form_or_json(request)
        k = _k(form.get("k"), 24)
        search_graph = graph("search")
        if form.get("like"):
            (item,) = gallery.get([str(form["like"])])
            result = search_graph.invoke({"image": item.path}, context={"k": k})
        elif isinstance(form.get("image"), UploadFile) or hasattr(form.get("image"), "read"):
            with _guarded_upload(form["image"], max_upload_bytes) as path:
                result = search_graph.invoke({"image": str(path)}, context={"k": k})
        elif str(form.get("query") or "").strip():
            result = search_graph.invoke({"query": str(form["query"])}, context={"k": k})
        else:
            raise UIError("type what you are looking for, or drop a picture")
        return {"hits": [h.to_json() for h in result["hits"]]}

    @app.post("/api/chat/start")
    async def chat_start(request: Request) -> dict[str, Any]:
        body = await _form_or_json(request)
        description = str(body.get("description") or "").strip()
        if not description:
            raise UIError("describe the photo you are looking for first")
        thread = uuid.uuid4().hex
        config = {"configurable": {"thread_id": thread}}
        graph("plugir").invoke({"description": description}, config, context=_chat_context(body))
        return _chat_view(graph("plugir"), thread)

    @app.post("/api/chat/reply")
    async def chat_reply(request: Request) -> dict[str, Any]:
        from langgraph.types import Command

        body = await _form_or_json(request)
        thread = _thread(body.get("thread"))
        plugir = graph("plugir")
        if not plugir.get_state({"configurable": {"thread_id": thread}}).next:
            raise UIError("this chat has ended; start a new one")
        if body.get("found"):
            reply: Any = {"found": str(body["found"])}
        elif body.get("stop"):
            reply = {"stop": True}
        else:
            answer = str(body.get("answer") or "").strip()
            if not answer:
                raise UIError("type an answer, or click the photo if you see it")
            reply = {"answer": answer}
        plugir.invoke(Command(resume=reply), {"configurable": {"thread_id": thread}}, context=_chat_context(body))
        return _chat_view(plugir, thread)

    @app.get("/api/chat/{thread}")
    def chat_get(thread: str) -> dict[str, Any]:
        return _chat_view(graph("plugir"), _thread(thread))

    @app.post("/api/steer")
    async def steer(request: Request) -> dict[str, Any]:
        body = await _form_or_json(request)
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

    @app.get("/{name}")
    def static_file(name: str) -> FileResponse:
        # Only the page's own files, by exact name.
        allowed = {p.name: p for p in STATIC.iterdir() if p.is_file()}
        if name not in allowed:
            return JSONResponse({"error": "not found"}, status_code=404)
        return FileResponse(allowed[name])

    return app


def _chat_context(body: dict[str, Any]) -> dict[str, Any]:
    return {"shown_k": _k(body.get("shown_k"), 10)}


def _chat_view(plugir: Any, thread: str) -> dict[str, Any]:
    """What the page shows of a session: the pending question and images, or the outcome."""
    snapshot = plugir.get_state({"configurable": {"thread_id": thread}})
    values = snapshot.values or {}
    if not values:
        raise UIError("no such chat (it may have been started on another server); start a new one")
    pending = [i.value for task in snapshot.tasks for i in task.interrupts]
    found = values.get("found")
    dialogue = [t if isinstance(t, dict) else getattr(t, "model_dump", lambda: dict(t))()
                for t in values.get("dialogue") or []]
    view: dict[str, Any] = {"thread": thread, "round": values.get("round", 0), "query": values.get("query", ""),
                            "dialogue": [{"question": str(t.get("question", "")), "answer": str(t.get("answer", ""))}
                                         for t in dialogue],
                            "done": not snapshot.next, "found": found.to_json() if found is not None else None}
    if pending:
        view.update(question=pending[0]["question"], shown=pending[0]["shown"])
    else:
        view.update(question="", shown=[h.to_json() for h in values.get("shown") or []])
    return view


def _thread(value: Any) -> str:
    text = str(value or "")
    if not text or len(text) > 64 or not text.isalnum():
        raise UIError("no such chat; start a new one")
    return text


def _k(value: Any, default: int) -> int:
    try:
        k = int(value) if value not in (None, "") else default
    except (TypeError, ValueError) as exc:
        raise UIError(f"k must be a whole number, not {value!r}") from exc
    if not 1 <= k <= MAX_K:
        raise UIError(f"k must be between 1 and {MAX_K}")
    return k


async def _form_or_json(request: Request) -> dict[str, Any]:
    if request.headers.get("content-type", "").startswith("application/json"):
        body = await request.json()
        if not isinstance(body, dict):
            raise UIError("expected a JSON object")
        return body
    return dict(await request.form())


class _guarded_upload:
    """Save an upload (size-capped) to a temp file, decode it with the indexer's guarded loader."""

    def __init__(self, upload: Any, limit: int) -> None:
        self.upload, self.limit = upload, limit

    def __enter__(self) -> Path:
        from pictrieve.tools.images import load_image

        data = self.upload.file.read(self.limit + 1)
        if len(data) > self.limit:
            raise UIError(f"the picture is larger than {self.limit // (1024 * 1024)} MiB; use a smaller one")
        self.dir = tempfile.TemporaryDirectory(prefix="pictrieve-upload-")
        raw = Path(self.dir.name) / "upload"
        raw.write_bytes(data)
        image = load_image(raw)  # raises ImageDecodeError (a readable one-liner) for non-images
        path = Path(self.dir.name) / "query.png"
        image.save(path)
        return path

    def __exit__(self, *exc: Any) -> None:
        self.dir.cleanup()
