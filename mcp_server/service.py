"""What the MCP tools do, as plain blocking calls over one gallery (the server runs each in a worker thread).

Graphs come from the method registry (:meth:`~pictrieve.agents.method.Method.build`) and models are made on
first need, then kept: ``gallery_info`` and listing the tools load nothing, a first search loads the
embedder, a first question to the Vision Search Assistant its detector and describer. Each load is reported
to the call's ``progress`` as it starts (``loading the ... embedder``), so a client hears why a first call
takes seconds. Every refusal of bad
input is a :class:`ToolInputError` (a :class:`~pictrieve.errors.PictrieveError`) with one line for the model.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pictrieve.agents.vsa.progress import STREAM_MODES, follow_run, start_line, step_line
from pictrieve.errors import PictrieveError
from pictrieve.graphs.registry import get_method
from pictrieve.mcp_server.progress import Progress, loading, no_progress
from pictrieve.mcp_server.sessions import PhotoSessions
from pictrieve.tools.core.image_inputs import DEFAULT_MAX_IMAGE_BYTES, AllowedDirs, gallery_image_lookup, image_argument
from pictrieve.vectorstore.hits import ImageHit, as_hit
from pictrieve.vectorstore.relevance import judge_by_text
from pictrieve.vectorstore.relevance import only_relevant as relevant_hits

log = logging.getLogger(__name__)

SEARCH_METHODS = ("search", "visret", "needle")
"""What ``search_images`` ranks with: plain search, or (with a visualizer) VisRet and NEEDLE."""
MAX_K = 20
"""Most photos one call returns (each comes back as a picture)."""
SHOWN_PER_ROUND = 5
"""Photos a PlugIR session shows with each question."""


class ToolInputError(PictrieveError, ValueError):
    """A tool argument that cannot be used as given; the message is the one line the model reads."""


@dataclass(frozen=True)
class ServerSettings:
    """What ``pictrieve mcp`` was started with (names are built on first need)."""

    state_dir: Path
    llm: str = "offline"
    base_url: str | None = None
    vlm: str = "offline"
    vlm_base_url: str | None = None
    detector: str = "ssd"
    search: str | None = None
    visualizer: str | None = None
    captioner: str = "auto"
    allowed_dirs: AllowedDirs = field(default_factory=AllowedDirs)
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES


class PictrieveService:
    """The tools' work over ``gallery`` (a :class:`~pictrieve.vectorstore.gallery.Gallery`)."""

    def __init__(self, gallery: Any, settings: ServerSettings) -> None:
        self.gallery, self.settings = gallery, settings
        self._made: dict[str, Any] = {}
        self._lock = threading.RLock()  # building a part may build another (a graph its visualizer)
        self._lookup = gallery_image_lookup(gallery)

    # --- parts, made once on first need ------------------------------------------------------------

    def _part(self, key: str, make: Callable[[], Any], progress: Progress = no_progress, what: str = "") -> Any:
        """The part ``key``, made by ``make`` on first need (reported as ``loading WHAT`` when ``what``)."""
        with self._lock:
            if key not in self._made:
                if what:
                    with loading(progress, what):
                        self._made[key] = make()
                else:
                    self._made[key] = make()
            return self._made[key]

    def embedder(self, progress: Progress = no_progress) -> Any:
        """The gallery's embedder, loaded now if it is not yet (a CLIP model takes seconds to tens of seconds)."""
        if not self.gallery.embedder_loaded:
            with self._lock:
                if not self.gallery.embedder_loaded:
                    with loading(progress, f"the {self.gallery.embedder_name} embedder (once per server)"):
                        return self.gallery.embedder
        return self.gallery.embedder

    def chat_model(self, progress: Progress = no_progress, *, load: bool = False) -> Any:
        """The server's chat model. A local model loads its weights on its first call; with ``load`` they are
        loaded now, reported (for a caller sure to call it: the offline PlugIR and VSA steps never do)."""
        from pictrieve.tools.models.chat_models import LocalChatModel, create_chat_model

        model = self._part("llm", lambda: create_chat_model(self.settings.llm, base_url=self.settings.base_url))
        if load and isinstance(model, LocalChatModel):
            from pictrieve.tools.models.causal_lm import shared_causal_lm

            self._part("llm-weights", lambda: shared_causal_lm(model.model_name, model.device), progress,
                       f"the chat model {self.settings.llm!r} (once per server)")
        return model

    def _rewriter(self, progress: Progress = no_progress) -> Any:
        """The chat model VisRet and NEEDLE rewrite a query with; none with the offline model (its rewrites
        are slow and poor, so the query is visualized as written, as on the web page)."""
        from pictrieve.tools.models.chat_models import is_offline_chat_model

        return None if is_offline_chat_model(self.settings.llm) else self.chat_model(progress)

    def visualizer(self, progress: Progress = no_progress) -> Any:
        if not self.settings.visualizer:
            raise ToolInputError("visret and needle need a visualizer, and this server has none: restart it with "
                                  "--visualizer exemplar:DIR (DIR: a folder of photos with captions.jsonl), or use "
                                  "method='search'")
        from pictrieve.tools.models.visualizers import create_visualizer

        return self._part("visualizer", lambda: create_visualizer(self.settings.visualizer), progress,
                          f"the visualizer {self.settings.visualizer!r} (once per server)")

    def graph(self, name: str, progress: Progress = no_progress) -> Any:
        """``name``'s graph over the gallery, its needs from the server's settings (the models it needs first
        are loaded here, each reported to ``progress``)."""
        self.embedder(progress)
        if name in ("visret", "needle"):
            llm, visualizer = self._rewriter(progress), self.visualizer(progress)
        elif name == "vsa":
            llm = self.chat_model(progress)

        def build() -> Any:
            method = get_method(name)
            if name in ("visret", "needle"):
                return method.build(self.gallery, llm=llm, visualizers=[visualizer])
            if name == "vsa":
                from pictrieve.tools.models.vlm import create_region_captioner

                vlm = create_region_captioner(self.settings.vlm, base_url=self.settings.vlm_base_url)
                return method.build(self.gallery, llm=llm, vlm=vlm, detector=self.settings.detector,
                                    search=self.settings.search)
            return method.build(self.gallery)

        return self._part(f"graph:{name}", build, progress, f"the {name} method" if name != "search" else "")

    def sessions(self, progress: Progress = no_progress) -> PhotoSessions:
        self.embedder(progress)
        llm = self.chat_model(progress)

        def build() -> PhotoSessions:
            from pictrieve.graphs.checkpoints import sqlite_checkpointer
            from pictrieve.graphs.plugir import default_arm

            saver = sqlite_checkpointer(Path(self.settings.state_dir) / "plugir-sessions.sqlite")
            graph = get_method("plugir").build(self.gallery, llm=llm, captioner=self.settings.captioner,
                                               checkpointer=saver)
            return PhotoSessions(graph, {"shown_k": SHOWN_PER_ROUND, "arm": default_arm(llm)},
                                 get_method("plugir").step_table())

        return self._part("sessions", build, progress, "the find-photo method (PlugIR)")

    # --- the tools' work ---------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """What ``pictrieve info`` shows, and what this server is set up to do (loads no model)."""
        from pictrieve.vectorstore.gallery import gallery_contents

        rows = gallery_contents(self.gallery.location)
        return {"gallery": str(self.gallery.location), "images": self.gallery.count(),
                "embedders": [{"name": r["embedder"], "dim": int(r["dim"] or 0), "images": int(r["images"]),
                               "default": bool(r["default"])} for r in rows],
                "search_methods": list(SEARCH_METHODS) if self.settings.visualizer else ["search"],
                "visualizer": self.settings.visualizer, "web_search": self.settings.search,
                "chat_model": self.settings.llm, "allowed_dirs": [str(d) for d in self.settings.allowed_dirs.dirs],
                "max_image_bytes": self.settings.max_image_bytes}

    def search(self, query: str, k: int, method: str, progress: Progress = no_progress, *,
               only_relevant: bool = False, filters: dict[str, Any] | None = None,
               hybrid: bool = True, collapse_duplicates: bool = False) -> list[ImageHit]:
        """The hits of ``method`` for ``query``, each marked ``relevant`` (a method's fused hits by the query's
        cosine to each photo); with ``only_relevant`` the others are dropped. ``filters``: the search graph's
        photo filters (after, before, near, radius_km, place, camera, folder), plain search only. ``hybrid``: plain
        search matches the photos' own words too (the search graph's default); ``collapse_duplicates`` shows each
        group of near-identical photos once (plain search only)."""
        query = _text(query, "the query", "say in words what the photos should show")
        if method not in SEARCH_METHODS:
            raise ToolInputError(f"unknown method {method!r}: use one of {', '.join(SEARCH_METHODS)}")
        if method != "search":
            if not self.settings.visualizer:
                self.visualizer()  # says how to set one up before anything loads
            if filters:
                raise ToolInputError("the date, place, camera and folder filters work with method 'search' only")
            if collapse_duplicates:
                raise ToolInputError("collapse_duplicates works with method 'search' only")
        graph = self.graph(method, progress)
        progress(f"{method}: making guide pictures of the query" if method != "search"
                 else f"searching {self.gallery.count()} photos")
        hits: list[ImageHit] = []
        state: dict[str, Any] = {"query": query, **({"filters": filters} if filters else {}),
                                 **({"hybrid": bool(hybrid)} if method == "search" else {}),
                                 **({"collapse_duplicates": True} if collapse_duplicates else {})}
        for mode, chunk in graph.stream(state, context={"k": _k(k)}, stream_mode=["updates", "values"]):
            if mode == "values":
                hits = list(chunk.get("hits") or [])
            elif method != "search":
                progress(f"{method}: " + ", ".join(f"{node} done" for node in chunk))
        hits = judge_by_text(self.gallery, query, [as_hit(h) for h in hits[: _k(k)]])
        progress(f"found {len(hits)} photos")
        return relevant_hits(hits) if only_relevant else hits

    def search_by_image(self, image: str, k: int, progress: Progress = no_progress) -> list[ImageHit]:
        with self._image(image) as path:
            graph = self.graph("search", progress)
            progress(f"searching {self.gallery.count()} photos")
            hits = list(graph.invoke({"image": path}, context={"k": _k(k)})["hits"])
        progress(f"found {len(hits)} photos")
        return hits

    def ask_about_image(self, image: str, question: str, progress: Progress = no_progress) -> dict[str, Any]:
        question = _text(question, "the question", "ask something about the photo")
        with self._image(image) as path:
            graph = self.graph("vsa", progress)
            progress("looking at the photo (the first question loads the detector and describer)")

            def show(node: str, change: dict[str, Any]) -> None:
                line = step_line(node, change)
                if line:
                    progress(line)

            def starting(node: str, given: dict[str, Any]) -> None:
                line = start_line(node, given)
                if line:
                    progress(line)

            updates = graph.stream({"image": path, "question": question}, stream_mode=STREAM_MODES)
            state = follow_run(updates, show, starting)  # the steps as `pictrieve ask` and the web page show them
        cited = set((state.get("citations") or {}).get("cited") or [])
        sources = [{"number": int(s["number"]), "title": str(s.get("title") or s.get("url") or ""),
                    "url": str(s.get("url") or ""), "cited": state.get("citations") is None or int(s["number"]) in cited}
                   for s in state.get("sources") or []]
        return {"answer": str(state.get("answer", "")), "sources": sources, "answerer": str(state.get("answerer", ""))}

    def ask_gallery(self, question: str, k: int, progress: Progress = no_progress) -> dict[str, Any]:
        from pictrieve.agents.visret.reader import answer_from_gallery

        question = _text(question, "the question", "ask something about the photos")
        if not 1 <= int(k) <= 10:
            raise ToolInputError(f"k must be between 1 and 10, not {k}")
        self.embedder(progress)
        reader = self.chat_model(progress, load=True)
        progress(f"reading the {int(k)} best-matching photos with the chat model")
        found = answer_from_gallery(self.gallery, question, reader, k=int(k))
        progress("answered")
        return {"answer": str(found["answer"]), "hits": list(found["hits"])}

    def find_photo(self, description: str, progress: Progress = no_progress) -> dict[str, Any]:
        description = _text(description, "the description", "describe the photo you are looking for")
        sessions = self.sessions(progress)
        progress("searching and thinking of a first question")
        return sessions.start(description, progress)

    def answer_question(self, session: str, answer: str, progress: Progress = no_progress) -> dict[str, Any]:
        answer = _text(answer, "the answer", "answer the question, say 'found N' for photo N, or 'stop'")
        return self.sessions(progress).answer(str(session or "").strip(), answer, progress)

    def image_file(self, image_id: str) -> Path:
        """The file of gallery image ``image_id`` (ids only: a path is just an unknown id here)."""
        found = self._lookup(str(image_id)) if self._lookup else None
        if found is None:
            raise ToolInputError(f"no image with id {str(image_id)[:64]} in this gallery (ids come from search results)")
        path = Path(found)
        if not path.is_file():
            raise ToolInputError(f"the file of gallery image {image_id} is gone (run `pictrieve sync` on the gallery)")
        if path.stat().st_size > self.settings.max_image_bytes:
            raise ToolInputError(f"the image file is larger than this server sends ({self.settings.max_image_bytes / 2**20:g} "
                                 "MiB); search results show it as a thumbnail")
        return path

    def _image(self, image: str) -> Any:
        return image_argument(image, lookup_id=self._lookup, allowed=self.settings.allowed_dirs,
                              max_bytes=self.settings.max_image_bytes)


def _text(value: Any, what: str, fix: str) -> str:
    text = str(value or "").strip()
    if not text:
        raise ToolInputError(f"{what} is blank: {fix}")
    return text


def _k(k: Any) -> int:
    if not 1 <= int(k) <= MAX_K:
        raise ToolInputError(f"k must be between 1 and {MAX_K}, not {k}")
    return int(k)
