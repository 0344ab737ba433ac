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
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pictrieve.agents.needs import all_needs, build_given, missing_needs, names_of, resolve_needs, unmet_needs
from pictrieve.agents.settings import MAX_TEXT
from pictrieve.agents.steps import step_line as method_step_line
from pictrieve.agents.vsa.progress import STREAM_MODES, follow_run, start_line, step_line
from pictrieve.errors import PictrieveError
from pictrieve.graphs.registry import get_method
from pictrieve.graphs.sessions import MethodRun, MethodSessions
from pictrieve.mcp_server.progress import Progress, loading, no_progress
from pictrieve.mcp_server.sessions import PhotoSessions
from pictrieve.tools.core.gallery_photos import ChangedPhotoError
from pictrieve.tools.core.image_inputs import DEFAULT_MAX_IMAGE_BYTES, AllowedDirs, gallery_image_lookup, image_argument
from pictrieve.vectorstore.hits import as_hit
from pictrieve.vectorstore.relevance import judge_by_text
from pictrieve.vectorstore.search_request import SearchAnswer, SearchRequest

log = logging.getLogger(__name__)

PLAIN_FILTERS = ("filters", "hybrid", "collapse_duplicates")
"""Inputs of plain search that ``search_images`` passes on only to a method whose input takes them."""
MAX_K = 20
"""Most photos one call returns (each comes back as a picture)."""
METHOD_SESSION = re.compile(r"([a-z][a-z0-9_]*)-[0-9a-f]{32}\Z")
"""A ``start_method`` session id: the method's name, then the session's own."""
SHOWN_PER_ROUND = 5
"""Photos a PlugIR session shows with each question."""


class ToolInputError(PictrieveError, ValueError):
    """A tool argument that cannot be used as given; the message is the one line the model reads."""


@dataclass(frozen=True)
class ServerSettings:
    """What ``pictrieve mcp`` was started with; the needs' values are made into objects on first need."""

    state_dir: Path
    needs: Mapping[str, Any] = field(default_factory=dict)
    """What the operator gave for needs, by need (and endpoint) name: ``pictrieve mcp``'s need options
    (:mod:`pictrieve.cli.need_options`, one per :class:`~pictrieve.agents.needs.Need`) and ``--need NAME=VALUE``
    (a plugin's own); a need not given gets its default."""
    allowed_dirs: AllowedDirs = field(default_factory=AllowedDirs)
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES

    def given_needs(self) -> dict[str, Any]:
        """What the operator gave, by need name, for :func:`~pictrieve.agents.needs.resolve_needs`."""
        return dict(self.needs)

    def need_value(self, name: str) -> Any:
        """The operator's value of the need ``name`` (given, else its default; ``None`` for none)."""
        need = _needs().get(name)
        return None if need is None else need.value(self.needs.get(name))


def _needs() -> dict[str, Any]:
    """Every need of the registered methods (the house's and plugins' own), by name."""
    from pictrieve.graphs.registry import methods

    return all_needs(methods())


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
        from pictrieve.tools.models.chat_models import LocalChatModel

        model = self.need("llm", progress)
        if load and isinstance(model, LocalChatModel):
            from pictrieve.tools.models.causal_lm import shared_causal_lm

            self._part("llm-weights", lambda: shared_causal_lm(model.model_name, model.device), progress,
                       f"the chat model's weights {model.model_name!r} (once per server)")
        return model

    def need(self, name: str, progress: Progress = no_progress) -> Any:
        """What the need ``name`` makes of the operator's value (made once per server, as every graph's needs):
        for a tool that uses one outside a method's graph (``ask_gallery``'s reader)."""
        return build_given(_needs()[name], self.settings.needs, gallery=self.gallery, make=self._need_cache(progress))

    def _need_cache(self, progress: Progress) -> Callable[[tuple[Any, ...], Callable[[], Any]], Any]:
        """The need registry's cache: each model a need makes is made once per server, reported to ``progress``."""

        def make(key: tuple[Any, ...], factory: Callable[[], Any]) -> Any:
            label = f"the {str(key[0]).replace('-', ' ')} {key[1]!r} (once per server)" if len(key) > 1 else ""
            return self._part(f"need:{key!r}", factory, progress, label)

        return make

    def search_methods(self) -> list[str]:
        """The registered methods ``search_images`` offers: every one whose input takes a text ``query`` (as
        ``pictrieve search --method``), plain search first (plugins included)."""
        from pictrieve.graphs.registry import methods

        found = [method for method in methods() if method.takes("query")]
        return [m.name for m in sorted(found, key=lambda m: (not m.exact_ranking, m.name))]

    def ready_methods(self) -> list[str]:
        """:meth:`search_methods` whose needs this server can meet now (a visualizer given, a QC2 model trained)."""
        given = self.settings.given_needs()
        return [name for name in self.search_methods()
                if not unmet_needs(get_method(name), given, gallery=self.gallery)]

    def graph(self, name: str, progress: Progress = no_progress) -> Any:
        """``name``'s graph over the gallery, its needs resolved from the server's settings by the need registry
        (each model it makes is made once per server and reported to ``progress``); a need the server lacks is
        one line saying how to restart it."""
        self.embedder(progress)
        method = get_method(name)
        given = self.settings.given_needs()
        for need in missing_needs(method, given):
            raise ToolInputError(f"{name} needs {need.description}, and this server has none: restart it with "
                                 f"{need.cli_option} {need.example or 'VALUE'}, or use method='{self.plain_method()}'")
        for need, why in unmet_needs(method, given, gallery=self.gallery):
            raise ToolInputError(f"{name} cannot run here: {why}; or use method='{self.plain_method()}'")
        if not method.needs:
            return self._part(f"graph:{name}", lambda: method.build(self.gallery))
        # A method that pauses for a person is run without a checkpointer here: its defaults never pause.
        kwargs = resolve_needs(method, given, gallery=self.gallery, make=self._need_cache(progress))
        return self._part(f"graph:{name}", lambda: method.build(self.gallery, **kwargs), progress,
                          f"the {name} method")

    def plain_method(self) -> str:
        """The method that ranks by the gallery's own text ranking (plain search)."""
        from pictrieve.graphs.registry import methods

        return next(m.name for m in methods() if m.exact_ranking)

    def image_method(self) -> str:
        """The method ``search_by_image`` runs: plain search (it takes an ``image``)."""
        return self.plain_method()

    def sessions(self, progress: Progress = no_progress) -> PhotoSessions:
        self.embedder(progress)

        def build() -> PhotoSessions:
            from pictrieve.graphs.checkpoints import sqlite_checkpointer
            from pictrieve.agents.plugir.settings import default_arm

            method = get_method("plugir")
            saver = sqlite_checkpointer(Path(self.settings.state_dir) / "plugir-sessions.sqlite")
            # its needs as every graph's: each model made once per server, so the chat model is the one the other
            # tools share
            kwargs = resolve_needs(method, self.settings.given_needs(), gallery=self.gallery,
                                   make=self._need_cache(progress))
            graph = method.build(self.gallery, checkpointer=saver, **kwargs)
            arm = default_arm(kwargs.get("llm"))  # the arm a person gets with the chat model PlugIR asks with
            # the one session runner, the server's run settings for every session (a continued one too)
            return PhotoSessions(MethodSessions(method, graph, context={"shown_k": SHOWN_PER_ROUND, "arm": arm}))

        return self._part("sessions", build, progress, "the find-photo method (PlugIR)")

    # --- the tools' work ---------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """What ``pictrieve info`` shows, and what this server is set up to do (loads no model)."""
        from pictrieve.vectorstore.gallery import gallery_contents
        from pictrieve.vectorstore.indexing import finds_objects
        from pictrieve.vectorstore.photo_evidence import objects_status

        rows = gallery_contents(self.gallery.location)
        return {"gallery": str(self.gallery.location), "images": self.gallery.count(),
                "embedders": [{"name": r["embedder"], "dim": int(r["dim"] or 0), "images": int(r["images"]),
                               "default": bool(r["default"]), "relevance": _relevance_info(r["relevance"])}
                              for r in rows],
                "search_methods": self.ready_methods(), "needs": self.shown_needs(),
                "allowed_dirs": [str(d) for d in self.settings.allowed_dirs.dirs],
                "max_image_bytes": self.settings.max_image_bytes,
                "objects": objects_status(self.gallery, told=finds_objects(self.gallery, None)) if rows else None}

    def searches_the_web(self) -> bool:
        """Whether ``ask_about_image`` searches the open web (the Vision Search Assistant's search is ``ddgs``)."""
        return self.settings.need_value("search") == "ddgs"

    def shown_needs(self) -> dict[str, str | None]:
        """What the server was started with, by need (a name; ``None``: none), every registered method's needs
        (a plugin's own included); endpoints are the operator's and not shown."""
        shown: dict[str, str | None] = {}
        for name, need in sorted(_needs().items()):
            if need.brought_by_caller:
                continue
            value = need.value(self.settings.needs.get(name))
            shown[name] = None if value is None else (
                ",".join(map(str, names_of(value))) if need.many else str(getattr(value, "name", None) or value))
        return shown

    def search(self, query: str, k: int, method: str, progress: Progress = no_progress, *,
               only_relevant: bool = False, filters: dict[str, Any] | None = None,
               hybrid: bool = True, collapse_duplicates: bool = False) -> SearchAnswer:
        """The answer of ``method`` for ``query`` (plain search: the search graph, i.e. the one
        :class:`~pictrieve.vectorstore.search_request.SearchRequest` every front end makes), each hit marked
        ``relevant`` (a method's fused hits by the query's cosine to each photo); with ``only_relevant`` the others
        are dropped, and an empty answer says why. ``filters``: the photo filters (after, before, near, radius_km,
        place, camera, folder), plain search only; alone (no query) they browse, newest first. ``hybrid``: plain
        search matches the photos' own words too (the default); ``collapse_duplicates`` shows each group of
        near-identical photos once (plain search only)."""
        query = str(query or "").strip()
        if query or not (filters and method == self.plain_method()):  # blank or too long: one line
            query = _text(query, "the query", "say in words what the photos should show, or give filters to browse by")
        offered = self.search_methods()
        if method not in offered:
            raise ToolInputError(f"unknown method {method!r}: use one of {', '.join(offered)}")
        spec = get_method(method)
        extra = {"filters": filters or None, "hybrid": bool(hybrid),
                 "collapse_duplicates": True if collapse_duplicates else None}
        if filters and not spec.takes("filters"):
            raise ToolInputError(f"the date, place, camera and folder filters work with method "
                                 f"'{self.plain_method()}' only")
        if collapse_duplicates and not spec.takes("collapse_duplicates"):
            raise ToolInputError(f"collapse_duplicates works with method '{self.plain_method()}' only")
        graph = self.graph(method, progress)
        plain = spec.exact_ranking
        progress(f"searching {self.gallery.count()} photos" if plain else f"{method}: {spec.description}"[:200])
        output: dict[str, Any] = {}
        state: dict[str, Any] = {**({"query": query} if query else {}),
                                 **{key: value for key, value in extra.items() if value is not None and spec.takes(key)}}
        context = _context(spec, k)
        if plain:
            context["only_relevant"] = bool(only_relevant)
        for mode, chunk in graph.stream(state, context=context, stream_mode=["updates", "values"]):
            if mode == "updates" and "__interrupt__" in chunk:  # its settings here make it ask the person
                raise ToolInputError(f"{method} asks the person a question while it runs: use start_method "
                                     f"(method='{method}') and answer_method")
            if mode == "values":
                output = dict(chunk)
            elif not plain:
                progress(f"{method}: " + ", ".join(f"{node} done" for node in chunk))
        if plain:
            answer = SearchAnswer.of_run(state, output, k=_k(k), only_relevant=bool(only_relevant))
        else:
            hits = judge_by_text(self.gallery, query, [as_hit(h) for h in (output.get("hits") or [])[: _k(k)]])
            answer = SearchAnswer.of_hits(SearchRequest.of(query=query, k=_k(k), only_relevant=bool(only_relevant),
                                                           method=method), hits)
        progress(f"found {len(answer.hits)} photos")
        return answer

    def search_by_image(self, image: str, k: int, progress: Progress = no_progress) -> SearchAnswer:
        """The answer of plain search for the photo ``image`` (a gallery id, base64 data or an allowed path)."""
        with self._image(image) as path:
            graph = self.graph(self.image_method(), progress)
            progress(f"searching {self.gallery.count()} photos")
            state = {"image": str(path)}
            answer = SearchAnswer.of_run(state, graph.invoke(state, context={"k": _k(k)}), k=_k(k))
        progress(f"found {len(answer.hits)} photos")
        return answer

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
        from pictrieve.agents.shown_text import may_show
        from pictrieve.agents.visret.reader import answer_from_gallery

        question = _text(question, "the question", "ask something about the photos")
        if not 1 <= int(k) <= 10:
            raise ToolInputError(f"k must be between 1 and 10, not {k}")
        self.embedder(progress)
        chosen = self.settings.need_value("llm")
        if may_show(chosen):
            reader: Any = self.chat_model(progress, load=True)
            progress(f"reading the {int(k)} best-matching photos with the chat model")
        else:  # the offline model's words are never shown: the photos' own words are quoted (no model loaded)
            reader = chosen
            progress(f"quoting the captions and text of the {int(k)} best-matching photos")
        found = answer_from_gallery(self.gallery, question, reader, k=int(k))
        progress("answered")
        return {"answer": str(found["answer"]), "answerer": str(found["answerer"]), "hits": list(found["hits"])}

    def find_photo(self, description: str, progress: Progress = no_progress) -> dict[str, Any]:
        description = _text(description, "the description", "describe the photo you are looking for")
        sessions = self.sessions(progress)
        progress("searching and thinking of a first question")
        return sessions.start(description, progress)

    def answer_question(self, session: str, answer: str, progress: Progress = no_progress) -> dict[str, Any]:
        answer = _text(answer, "the answer", "answer the question, say 'found N' for photo N, or 'stop'")
        return self.sessions(progress).answer(str(session or "").strip(), answer, progress)

    # --- any method that asks the person (start_method / answer_method) ---------------------------------------

    def asking_methods(self) -> list[str]:
        """The registered methods ``start_method`` offers: every one that declares what it asks a person
        (:attr:`~pictrieve.agents.method.Method.asks`) and starts from a line of text (plugins included)."""
        from pictrieve.graphs.registry import methods

        return [method.name for method in methods() if method.asks and method.text_input()]

    def method_sessions(self, name: str, progress: Progress = no_progress) -> MethodSessions:
        """The sessions of method ``name``, run by the one session runner every front end uses
        (:class:`~pictrieve.graphs.sessions.MethodSessions`), its checkpoints in a SQLite file of the state folder so a
        session survives a restart (its run settings do not: a continued session runs on with the method's defaults)."""
        offered = self.asking_methods()
        if name not in offered:
            raise ToolInputError(f"unknown method {name!r}: start_method runs {', '.join(offered)}")
        self.embedder(progress)

        def build() -> MethodSessions:
            from pictrieve.graphs.checkpoints import sqlite_checkpointer

            method = get_method(name)
            given = self.settings.given_needs()
            for need in missing_needs(method, given):
                raise ToolInputError(f"{name} needs {need.description}, and this server has none: restart it with "
                                     f"{need.cli_option} {need.example or 'VALUE'}")
            saver = sqlite_checkpointer(Path(self.settings.state_dir) / f"{name}-sessions.sqlite")
            kwargs = resolve_needs(method, given, gallery=self.gallery, make=self._need_cache(progress))
            return MethodSessions(method, method.build(self.gallery, checkpointer=saver, **kwargs))

        return self._part(f"method-sessions:{name}", build, progress, f"the {name} method")

    def start_method(self, name: str, text: str, settings: dict[str, Any] | None = None,
                     progress: Progress = no_progress) -> MethodRun:
        """A new session of method ``name`` started from ``text`` (its text input) with run ``settings`` (text or
        JSON values, read by its settings class), run to its first question or its end."""
        from pictrieve.agents.settings import SettingsError, parse_setting
        from pictrieve.graphs.serving import ServingConfigError, check_served_settings

        sessions = self.method_sessions(name, progress)
        method = sessions.method
        text = _text(text, f"the {method.text_input()}", f"say what {name} should start from")
        cls = method.settings_class()
        context: dict[str, Any] = {}
        try:
            for key, value in (settings or {}).items():
                context[str(key)] = parse_setting(cls, str(key), value) if isinstance(value, str) else value
            cls.coerce(context)
            check_served_settings(context)  # what a server gives one caller, as served runs (a plugin's k: no bound)
        except (SettingsError, ServingConfigError) as exc:
            raise ToolInputError(str(exc)) from None
        steps = method.step_table()
        progress(f"{name}: {method.description}"[:200])
        return sessions.start({method.text_input(): text}, context, session=f"{name}-{sessions.new_session()}",
                              on_step=lambda node, update: progress(method_step_line(steps, node, update)))

    def answer_method(self, session: str, reply: Any, progress: Progress = no_progress) -> MethodRun:
        """Answer the question session ``session`` waits on with ``reply`` (checked against the shape its method
        declares), run to its next question or its end."""
        found = METHOD_SESSION.match(str(session or ""))
        if found is None or found.group(1) not in self.asking_methods():
            raise ToolInputError(f"unknown session {str(session)[:80]!r}: session ids come from start_method")
        sessions = self.method_sessions(found.group(1), progress)
        steps = sessions.method.step_table()
        # an ended, busy or unknown session, or a reply of another shape, is one line (SessionError, ReplyError)
        return sessions.reply(found.group(0), reply,
                              on_step=lambda node, update: progress(method_step_line(steps, node, update)))

    def image_file(self, image_id: str) -> Path:
        """The file of gallery image ``image_id`` (ids only: a path is just an unknown id here)."""
        found = self._lookup(str(image_id)) if self._lookup else None
        if found is None:
            raise ToolInputError(f"no image with id {str(image_id)[:64]} in this gallery (ids come from search results)")
        return Path(found)

    def image_bytes(self, image_id: str) -> bytes:
        """The bytes of gallery image ``image_id`` as clients show them (the file, or a JPEG of a HEIC or TIFF:
        :func:`~pictrieve.tools.core.thumbnails.viewable_photo`), only while its file is the one indexed."""
        from pictrieve.tools.core.thumbnails import viewable_photo

        path, shown = self.image_file(image_id), f"gallery image {image_id}"
        try:
            return viewable_photo(path, name=shown, max_bytes=self.settings.max_image_bytes)[0]
        except FileNotFoundError:
            raise ToolInputError(f"the file of gallery image {image_id} is gone (run `pictrieve sync` on the gallery)") from None
        except ChangedPhotoError as exc:
            log.warning("refused %s: %s", path, exc)
            raise ToolInputError(str(exc)) from None
        except (PictrieveError, OSError) as exc:
            log.info("cannot send %s: %s", path, exc)
            raise ToolInputError(f"the file of gallery image {image_id} cannot be read") from None

    def _image(self, image: str) -> Any:
        return image_argument(image, lookup_id=self._lookup, allowed=self.settings.allowed_dirs,
                              max_bytes=self.settings.max_image_bytes)


def _text(value: Any, what: str, fix: str) -> str:
    """A caller's text, refused when blank or longer than MAX_TEXT (every text the service takes passes here:
    tool arguments, a person's answer through elicitation, a Python caller's)."""
    text = str(value or "").strip()
    if not text:
        raise ToolInputError(f"{what} is blank: {fix}")
    if len(text) > MAX_TEXT:
        raise ToolInputError(f"{what} is longer than {MAX_TEXT} characters: say it in fewer words")
    return text


def _context(spec: Any, k: Any) -> dict[str, Any]:
    """The run settings: ``k`` for a method that has that setting."""
    return {"k": _k(k)} if "k" in spec.settings_class().names() else (_k(k) and {})


def _k(k: Any) -> int:
    if not 1 <= int(k) <= MAX_K:
        raise ToolInputError(f"k must be between 1 and {MAX_K}, not {k}")
    return int(k)


def _relevance_info(rule: dict[str, Any]) -> dict[str, Any]:
    """What gallery_info says of an embedder's relevance rule (``RelevanceCutoff.to_json``, without its stats)."""
    return {key: rule.get(key) for key in ("rule", "threshold", "source", "description")}
