"""Every registered method's graph for the LangGraph server (``langgraph dev``, LangGraph Platform).

``langgraph.json`` at the repository root names one factory here per built-in method (``pictrieve serve
--write-config PATH`` writes one naming installed plugins too). There is no hand-written factory: this
module makes one for every method of the registry (:mod:`pictrieve.graphs.registry`). The server calls a
factory with the run's config and compiles nothing itself; the factory builds the method's graph over
the gallery its operator chose (``$PICTRIEVE_GALLERY``; a method whose gallery is optional, such as ``vsa``,
runs without one), and gives the builder what the method needs
(:attr:`~pictrieve.agents.method.Method.needs`).

**The server trusts only its operator** (``pictrieve serve`` options, the environment, the ``env`` of a
written ``langgraph.json``). A run's or assistant's ``configurable`` may

- never name where the server reaches or what it reads (:func:`operator_only_settings`: ``gallery``, each
  need's endpoint such as ``base_url``, a need no run chooses such as ``qc2_model``): a value other than the
  operator's is refused;
- choose the other settings (:func:`choosable_settings`: ``embedder`` and each need's ``configurable`` key)
  only among the operator's own value and those it allowed (``$PICTRIEVE_SERVE_ALLOW``, ``pictrieve serve
  --allow llm=offline,openai:gpt-4o-mini``).

Refusals (:func:`check_run_settings`) are one line naming the setting and how the operator allows it, raised
before any gallery, model or endpoint is opened. The rule is the need registry's
(:func:`pictrieve.agents.needs.check_caller_choices`), so a plugin's own need meets it too. Every served graph
starts with a ``served_input`` node (:func:`check_run_input`): text inputs must be strings, ``k`` at most
:data:`MAX_K`, and an ``image`` is a gallery id, base64 data, or a path inside ``$PICTRIEVE_SERVE_ALLOW_DIRS``
(``--allow-dir``; the MCP rule of :mod:`pictrieve.tools.core.image_inputs`). Host, Origin/CORS and the bearer
token are checked by the HTTP guard :mod:`pictrieve.graphs.serving_http`, which ``langgraph.json`` names as its
``http.app``.

Each need of a method comes from the run's choice (the need's ``configurable`` key), else the operator's
environment variable, else its default, and is made by the need's resolver
(:data:`pictrieve.agents.needs.NEEDS`, :func:`served_needs_of`): ``llm`` from ``configurable.llm`` /
``$PICTRIEVE_LLM`` (endpoint ``$PICTRIEVE_BASE_URL``, the operator's only), ``visualizers`` from
``configurable.visualizer`` / ``$PICTRIEVE_VISUALIZER`` (several names separated by commas), ``qc2_model``
from ``$PICTRIEVE_QC2_MODEL`` only (default: the gallery's), and so on (``pictrieve methods`` lists each
method's needs). ``configurable.embedder`` picks one of the gallery's embedders (default: its recorded default).

A method may add builder arguments of its own (:attr:`~pictrieve.agents.method.Method.served`).

Run settings are the graph's context (its ``context_schema``), so Studio shows them and a client passes
them per run: ``client.runs.wait(thread, "search", input={"query": "a dog"}, context={"k": 5})``.
No factory compiles a checkpointer: the server brings its own, which is what makes PlugIR's
``interrupt()`` resumable over HTTP.

Opened galleries and loaded models are kept in the process's shared model cache
(:mod:`pictrieve.tools.core.model_cache`), so only the first run pays for loading.

The factories are ``async``: the server calls a factory on its event loop for every run and every
state read, and opening a gallery or loading a model blocks (files, Chroma, torch). Each factory
builds its graph with :func:`served_graph` in a worker thread (``asyncio.to_thread``), so the loop
stays free for other runs and ``langgraph dev`` needs no ``--allow-blocking``; the graphs' nodes are
sync functions, which LangGraph itself runs in its executor. Python code that wants a served graph
without a server calls :func:`served_graph` directly.

Serve offline::

    PICTRIEVE_GALLERY=./pictrieve-demo/demo.gallery langgraph dev --no-browser
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator
from typing import Any, Awaitable, Callable

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from pictrieve.agents.needs import (NEEDS, MissingNeedError, Need, NeedNotAllowed, all_needs,
                                    check_caller_choices, choosable, operator_only, resolve_needs)
from pictrieve.agents.settings import MAX_TEXT
from pictrieve.errors import PictrieveError
from pictrieve.graphs.registry import UnknownMethodError, available_methods, builtin_methods, get_method, methods
from pictrieve.tools.core.model_cache import recording_builds, shared_model

ENV_GALLERY = "PICTRIEVE_GALLERY"
ENV_EMBEDDER = "PICTRIEVE_EMBEDDER"
ENV_WARM_UP = "PICTRIEVE_SERVE_WARM_UP"
"""``0`` turns off loading the methods' models when the server starts (:func:`lifespan`)."""

logger = logging.getLogger(__name__)


ENV_ALLOW = "PICTRIEVE_SERVE_ALLOW"
"""The values a run may choose besides the operator's own, as JSON ``{"llm": ["offline", "openai:gpt-4o-mini"]}``
(``pictrieve serve --allow llm=offline,openai:gpt-4o-mini`` sets it)."""


class ServingConfigError(PictrieveError, ValueError):
    """The server was started without saying which gallery to serve, or a run asked for a setting its
    operator did not allow (one line: the setting, and how the operator allows it)."""


GALLERY_SETTINGS: dict[str, tuple[str, str]] = {"gallery": (ENV_GALLERY, "--gallery")}
"""The one server setting beside the needs that only the operator sets: where the gallery is."""
EMBEDDER_SETTINGS: dict[str, tuple[str | None, str]] = {"embedder": (None, "--embedder")}
"""The one server setting beside the needs a run may choose (among what the operator allowed)."""


def served_needs() -> list[Need]:
    """Every need a served method may have: the house's (:data:`~pictrieve.agents.needs.NEEDS`) and those the
    registered methods declare (plugins included)."""
    return list(all_needs(methods()).values())


def operator_only_settings() -> dict[str, tuple[str, str]]:
    """Settings that say where the server reaches or what it reads (the gallery, each need's endpoint, a need
    no run may choose such as a model folder): only the operator sets them (environment, ``pictrieve serve``
    options); a run that names another value is refused, so no caller can make the server connect to its URL,
    send a key there, or open its path. ``{setting: (environment variable, option)}``."""
    return {**GALLERY_SETTINGS, **operator_only(served_needs())}


def choosable_settings() -> dict[str, tuple[str | None, str]]:
    """Settings a run may choose, among the operator's own value and those it allowed (``--allow KEY=V1,V2``):
    the embedder and each need's ``configurable`` key (:attr:`~pictrieve.agents.needs.Need.config_key`). A
    visualizer value may list several names (commas): each must be allowed."""
    return {**EMBEDDER_SETTINGS, **choosable(served_needs())}


OPERATOR_ONLY: dict[str, tuple[str, str]] = {**GALLERY_SETTINGS, **operator_only(NEEDS.values())}
""":func:`operator_only_settings` for the house's needs (plugins' are added by the function)."""
CHOOSABLE: dict[str, tuple[str | None, str]] = {**EMBEDDER_SETTINGS, **choosable(NEEDS.values())}
""":func:`choosable_settings` for the house's needs (plugins' are added by the function)."""


def allowed_values() -> dict[str, frozenset[str]]:
    """What the operator allowed runs to choose (:data:`ENV_ALLOW`), by setting; malformed: an error."""
    import json

    text = os.environ.get(ENV_ALLOW, "").strip()
    if not text:
        return {}
    try:
        parsed = json.loads(text)
        return {str(key): frozenset(str(v) for v in values) for key, values in parsed.items()}
    except (ValueError, AttributeError, TypeError):
        raise ServingConfigError(f"${ENV_ALLOW} is not a JSON object of lists (pictrieve serve --allow writes it)") from None


def _configurable(config: RunnableConfig | None) -> dict[str, Any]:
    configurable = (config or {}).get("configurable") or {}
    return configurable if isinstance(configurable, dict) else {}


def check_run_settings(config: RunnableConfig | None) -> None:
    """Refuse a run whose ``configurable`` names a setting its operator did not allow (see
    :func:`operator_only_settings` and :func:`choosable_settings`), in one line, before anything is opened or
    called. The rule is the need registry's (:func:`pictrieve.agents.needs.check_caller_choices`)."""
    try:
        check_caller_choices(_configurable(config), served_needs(), environ=os.environ, allowed=allowed_values(),
                             also_operator_only=GALLERY_SETTINGS, also_choosable=EMBEDDER_SETTINGS)
    except NeedNotAllowed as exc:
        raise ServingConfigError(str(exc)) from None


def _open_gallery(location: str, embedder: str | None) -> Any:
    from pictrieve.vectorstore.gallery import Gallery

    return shared_model(("served-gallery", location, embedder), lambda: Gallery.open(location, embedder, create=False))


def gallery_for(config: RunnableConfig | None) -> Any:
    """The gallery a served graph searches: the operator's (``$PICTRIEVE_GALLERY``); a run may name the
    same one, never another (:func:`check_run_settings`)."""
    check_run_settings(config)
    location = os.environ.get(ENV_GALLERY)
    if not location:
        raise ServingConfigError(
            f"no gallery to serve: set {ENV_GALLERY}=PATH (or http://host:port) before `langgraph dev`, "
            "or start the server with `pictrieve serve --gallery PATH`"
        )
    # The embedder variable is the CLI's global default too; a served gallery uses its own recorded
    # default unless the run names one the operator allowed.
    embedder = _configurable(config).get("embedder")
    return _open_gallery(location, embedder)


def _shared(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """The server's cache for what needs resolve to: each model built once for the server's life, even when
    several runs' factories ask at once (they build in worker threads)."""
    return shared_model(("served", *key), make)


def served_needs_of(spec: Any, config: RunnableConfig | None, index: Any) -> dict[str, Any]:
    """The builder arguments for ``spec``'s needs on the server: each need's value from the run's
    ``configurable`` (its :attr:`~pictrieve.agents.needs.Need.config_key`, already checked against what the
    operator allowed), else the operator's environment variable, else its default; endpoints and folders
    from the operator alone. Resolved by the need registry (:func:`pictrieve.agents.needs.resolve_needs`)."""
    configurable = _configurable(config)
    given = {need.name: configurable.get(need.config_key) for need in spec.need_specs() if need.config_key}
    try:
        return resolve_needs(spec, given, gallery=index, environ=os.environ, make=_shared)
    except MissingNeedError as exc:
        raise ServingConfigError(f"{exc.method} needs {exc.need.description}: its operator gives it with "
                                 f"`pictrieve serve {exc.need.cli_option or ''} {exc.need.example}` (or "
                                 f"${exc.need.env_var})") from None


def served_graph(method: str, config: RunnableConfig | None = None) -> CompiledStateGraph:
    """``method``'s graph as the server gets it, built here and now (blocking: it may open the gallery
    and load models). The settings come from ``config`` and the environment (module docstring).

    The gallery is opened first; each of the method's needs is then built by :func:`served_needs_of`,
    and the method's own :attr:`~pictrieve.agents.method.Method.served` arguments are added. A method
    whose gallery is optional gets ``None`` when no gallery is configured."""
    try:
        spec = get_method(method)
    except UnknownMethodError as exc:
        raise ServingConfigError(f"no served graph {method!r}; choose from {', '.join(available_methods())}") from exc
    check_run_settings(config)
    configured = bool(os.environ.get(ENV_GALLERY))
    index = gallery_for(config) if spec.gallery == "required" or configured else None
    kwargs = served_needs_of(spec, config, index)
    kwargs.update(spec.served_kwargs(config))
    return _guard_input(spec.build(index, name=method, **kwargs), index)


# --- what a run may put in its input and context -------------------------------------------------

ENV_ALLOW_DIRS = "PICTRIEVE_SERVE_ALLOW_DIRS"
"""Folders (``os.pathsep`` between them) whose image files a run's ``image`` input may name
(``pictrieve serve --allow-dir``); default none: images are gallery ids or image data."""
MAX_K = 100
"""The most results a served run may ask for (``k`` and every ``*_k`` setting), as on the web page."""
MAX_CANDIDATES = 1000
"""The most candidates any other ``*_k`` count of a served run may name (each costs work per run)."""
GUARD_NODE = "served_input"
TEXT_INPUTS = ("query", "description", "question", "topic", "prompt")
IMAGE_INPUTS = ("image",)


MAX_KEPT_PICTURES = 32
"""Pictures runs sent (as data, or reduced copies of large ones) kept at once by one server; the oldest go first."""
MAX_KEPT_PICTURE_BYTES = 256 * 1024 * 1024
"""Bytes of such pictures kept at once (a run may send 20 MiB; 13 pictures of the largest kind fit)."""
KEPT_PICTURE_SECONDS = 3600.0
"""A sent picture is removed an hour after it arrived: a paused run (PlugIR's questions) answered later than that
can no longer read it (a new run sends it again)."""


def _served_images_folder() -> str:
    """One private folder per server process for the pictures runs send as data (``pictrieve serve`` points
    ``TMPDIR`` into its own temporary folder, removed when it stops; a killed server's is removed when the next
    one starts)."""
    import tempfile

    return shared_model(("served-images-folder",), lambda: tempfile.mkdtemp(prefix="pictrieve-served-images-"))


def prune_served_pictures(folder: str | os.PathLike, keep: str | os.PathLike | None = None, *,
                          now: float | None = None, in_use: Any = None) -> list[str]:
    """Remove pictures of ``folder`` beyond what one server keeps: those older than :data:`KEPT_PICTURE_SECONDS`,
    then the oldest until at most :data:`MAX_KEPT_PICTURES` files and :data:`MAX_KEPT_PICTURE_BYTES` remain
    (``keep``, the picture just written, stays, and so does every picture of a run that has not ended,
    ``in_use``: default the server's own, :func:`pictures_in_use`; only their age removes them). Returns the
    names removed. Runs after each picture is written and on a timer (:func:`lifespan`), so what callers send
    stays bounded however many runs they start, and goes within a minute of its hour when nobody sends more."""
    import time
    from pathlib import Path

    now = time.time() if now is None else now
    kept = Path(keep).resolve() if keep is not None else None
    held = {Path(p).resolve() for p in (pictures_in_use() if in_use is None else in_use)}
    files = []
    for path in Path(folder).iterdir():
        try:
            stat = path.lstat()
        except FileNotFoundError:  # removed meanwhile by another run's pruning
            continue
        files.append((stat.st_mtime, stat.st_size, path))
    files.sort()
    removed, count, total = [], len(files), sum(size for _, size, _ in files)
    for mtime, size, path in files:
        young = now - mtime <= KEPT_PICTURE_SECONDS
        if path.resolve() == kept or (young and path.resolve() in held):
            continue
        if young and count <= MAX_KEPT_PICTURES and total <= MAX_KEPT_PICTURE_BYTES:
            continue
        path.unlink(missing_ok=True)
        removed.append(path.name)
        count, total = count - 1, total - size
    return removed


_held_lock = threading.Lock()
_held: dict[str, set[str]] = {}
"""The pictures of each thread whose run has not ended (it is running, or paused for an answer)."""


def pictures_in_use() -> set[str]:
    """Every picture a run that has not ended may still read (never removed for the count or byte bounds)."""
    with _held_lock:
        return set().union(*_held.values())


def _hold(thread: str, path: str) -> None:
    with _held_lock:
        _held.setdefault(thread, set()).add(path)


def release_pictures(thread: str) -> list[str]:
    """Remove the pictures runs of ``thread`` sent (its run ended without pausing); returns the paths removed."""
    with _held_lock:
        paths = sorted(_held.pop(thread, ()))
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return paths


def _thread_of_run() -> str | None:
    from langgraph.config import get_config

    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # called outside a run (a Python caller of check_run_input)
        return None
    thread = configurable.get("thread_id")
    return str(thread) if thread is not None else None


def _ended_runs_handler() -> Any:
    """A callback handler that removes a thread's sent pictures when a run of it ends without pausing: a root
    run's end after no ``GraphInterrupt`` among its steps (a pause keeps them for the resume, within their
    age). Added to every served graph that takes a picture (:func:`_guard_input`)."""
    from langchain_core.callbacks import BaseCallbackHandler
    from langgraph.errors import GraphInterrupt

    class PicturesOfEndedRuns(BaseCallbackHandler):
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.root: dict[Any, Any] = {}  # run id -> its root run's id
            self.runs: dict[Any, dict[str, Any]] = {}  # root run id -> {"thread", "paused", "steps"}

        def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any, parent_run_id: Any = None,
                           metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
            with self.lock:
                if parent_run_id is None:
                    thread = (metadata or {}).get("thread_id")
                    self.root[run_id] = run_id
                    self.runs[run_id] = {"thread": None if thread is None else str(thread), "paused": False,
                                         "steps": [run_id]}
                elif parent_run_id in self.root:
                    root = self.root[run_id] = self.root[parent_run_id]
                    self.runs[root]["steps"].append(run_id)

        def on_chain_error(self, error: BaseException, *, run_id: Any, parent_run_id: Any = None,
                           **kwargs: Any) -> None:
            if isinstance(error, GraphInterrupt):
                with self.lock:
                    root = self.root.get(run_id)
                    if root in self.runs:
                        self.runs[root]["paused"] = True
            if parent_run_id is None:
                self._ended(run_id)

        def on_chain_end(self, outputs: Any, *, run_id: Any, parent_run_id: Any = None, **kwargs: Any) -> None:
            if parent_run_id is None:
                self._ended(run_id)

        def _ended(self, run_id: Any) -> None:
            with self.lock:
                run = self.runs.pop(run_id, None)
                for step in (run or {}).get("steps", ()):
                    self.root.pop(step, None)
            if run and run["thread"] is not None and not run["paused"]:
                removed = release_pictures(run["thread"])
                if removed:
                    logger.info("removed %d picture(s) of an ended run", len(removed))

    return PicturesOfEndedRuns()


def check_run_input(state: dict[str, Any], context: Any, index: Any) -> dict[str, Any]:
    """The state update that makes a run's input safe to use, or :class:`ServingConfigError` in one line:
    text inputs must be strings, ``k`` settings at most :data:`MAX_K`, and an ``image`` a gallery id, image
    data, or a path inside the operator's ``--allow-dir`` folders (the MCP rule,
    :func:`pictrieve.tools.core.image_inputs.image_file`); the image becomes the file the graph reads."""
    from pictrieve.tools.core.image_inputs import AllowedDirs, ImageInputError, gallery_image_lookup, image_file

    for key in TEXT_INPUTS:
        if state.get(key) is not None and not isinstance(state[key], str):
            raise ServingConfigError(f"input.{key} must be a string, not {type(state[key]).__name__}")
        if isinstance(state.get(key), str) and len(state[key]) > MAX_TEXT:
            raise ServingConfigError(f"input.{key} is longer than {MAX_TEXT} characters; say it in fewer words")
    check_served_settings(context)
    update: dict[str, Any] = {}
    for key in IMAGE_INPUTS:
        value = state.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ServingConfigError(f"input.{key} must be a string (a gallery id, base64 image data or an allowed path)")
        allowed = AllowedDirs.of([d for d in os.environ.get(ENV_ALLOW_DIRS, "").split(os.pathsep) if d])
        try:
            folder = _served_images_folder()
            update[key] = image_file(value, folder, lookup_id=gallery_image_lookup(index), allowed=allowed)
        except ImageInputError as exc:
            raise ServingConfigError(f"input.{key}: {exc}") from None
        thread = _thread_of_run()
        if thread is not None:
            _hold(thread, update[key])
        prune_served_pictures(folder, keep=update[key])
        if _over_budget(folder):  # what is left is pictures of runs still going: never removed for a newcomer
            if thread is not None:
                release_pictures(thread)
            with contextlib.suppress(OSError):
                os.unlink(update[key])
            raise ServingConfigError(f"input.{key}: this server already keeps {MAX_KEPT_PICTURES} pictures "
                                     f"({MAX_KEPT_PICTURE_BYTES // 2**20} MiB) for runs that have not ended; "
                                     "try again when one ends")
    return update


def _over_budget(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds more pictures, or more bytes, than one server keeps."""
    sizes = []
    for entry in os.scandir(folder):
        with contextlib.suppress(OSError):
            sizes.append(entry.stat(follow_symlinks=False).st_size)
    return len(sizes) > MAX_KEPT_PICTURES or sum(sizes) > MAX_KEPT_PICTURE_BYTES


def check_served_settings(context: Any) -> None:
    """Refuse a served run's settings beyond what a server gives one caller, in one line: ``k`` from 1 to
    :data:`MAX_K`, every other ``*_k`` at most :data:`MAX_CANDIDATES` (each setting's own bounds are its
    class's, :meth:`~pictrieve.agents.settings.RunSettings.validate`)."""
    fields = vars(context) if hasattr(context, "__dict__") else (context if isinstance(context, dict) else {})
    for name, value in fields.items():
        if name == "k" and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_K):
            raise ServingConfigError(f"context.k must be a whole number from 1 to {MAX_K}, not {value!r}"[:200])
        if name.endswith("_k") and isinstance(value, int) and not isinstance(value, bool) and value > MAX_CANDIDATES:
            raise ServingConfigError(f"context.{name} must be at most {MAX_CANDIDATES}, not {value}"[:200])


def served_context(schema: Any) -> Any:
    """``schema`` (a method's settings class, its graph's ``context_schema``) with :func:`check_served_settings`
    added to its validation. LangGraph builds the context from a run's ``context`` at the start of every run, a
    resume included, so a setting refused on a fresh run is refused on a resume too (the ``served_input`` step
    runs only when a run starts from its input)."""
    from dataclasses import dataclass, is_dataclass

    from pictrieve.agents.settings import RunSettings

    if not (isinstance(schema, type) and is_dataclass(schema) and issubclass(schema, RunSettings)):
        return schema
    if getattr(schema, "__pictrieve_served__", False):
        return schema

    def validate(self: Any) -> None:
        schema.validate(self)
        check_served_settings(self)

    served = type(schema.__name__, (schema,), {"validate": validate, "__doc__": schema.__doc__,
                                                "__module__": schema.__module__, "__pictrieve_served__": True,
                                                "__qualname__": schema.__qualname__})
    return dataclass(served)


def _guard_input(graph: CompiledStateGraph, index: Any) -> CompiledStateGraph:
    """``graph`` recompiled with :func:`check_run_input` as its first node (``served_input``), so every run
    that starts from its input is checked before any of the method's nodes runs."""
    from langgraph.constants import START
    from langgraph.runtime import Runtime

    builder = graph.builder
    if GUARD_NODE in builder.nodes or not any(k in builder.channels for k in (*TEXT_INPUTS, *IMAGE_INPUTS)):
        return graph

    def served_input(state: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
        return check_run_input(state, runtime.context, index)

    builder.compiled = False
    builder.context_schema = served_context(builder.context_schema)
    builder.add_node(GUARD_NODE, served_input)
    for start, end in [edge for edge in builder.edges if edge[0] == START]:
        builder.edges.discard((start, end))
        builder.edges.add((GUARD_NODE, end))
    if START in builder.branches:
        builder.branches[GUARD_NODE] = builder.branches.pop(START)
    builder.add_edge(START, GUARD_NODE)
    guarded = builder.compile(name=graph.name)
    if any(k in builder.channels for k in IMAGE_INPUTS):  # a run's picture goes when the run ends
        guarded = guarded.with_config(callbacks=[_ended_runs_handler()])
    return guarded


def _factory(method: str) -> Callable[[RunnableConfig], Awaitable[CompiledStateGraph]]:
    """The server's factory for ``method``: :func:`served_graph` (through :func:`_graph_for_run`, which logs what
    it loaded), awaited in a worker thread."""

    async def factory(config: RunnableConfig) -> CompiledStateGraph:
        return await asyncio.to_thread(_graph_for_run, method, config)

    factory.__name__ = factory.__qualname__ = method
    factory.__doc__ = f"{get_method(method).description} (built by served_graph({method!r}, config) in a worker thread)"
    return factory


LOADED_ON_REQUEST = "loaded while a request waited"
"""What the server's log says when a factory call had to load a part (:func:`_graph_for_run`)."""


def _graph_for_run(method: str, config: RunnableConfig) -> CompiledStateGraph:
    """:func:`served_graph` for one factory call (a run, or LangGraph reading the graph for a request: its schema,
    a thread's state), logging each part it loaded into the shared cache: one the warm-up did not load (it could
    not be built then, or the server started with warm-up off) or a run's own allowed choice, used for the first
    time. Later calls reuse it; a call whose graph came from cached parts logs nothing, and a part loaded before a
    later step failed is logged too."""
    with recording_builds() as loaded:
        try:
            return served_graph(method, config)
        finally:
            if loaded:
                logger.info("%s: %s %s (first use; later requests reuse it)", method, LOADED_ON_REQUEST,
                            ", ".join(_part_name(key) for key in loaded))


def _part_name(key: Any) -> str:
    """A shared-cache key, short enough for one log line."""
    text = ":".join(str(part) for part in key) if isinstance(key, tuple) else str(key)
    return text if len(text) <= 120 else text[:117] + "..."


def warm_up(methods: list[str] | None = None) -> dict[str, str]:
    """Build each served graph once with the operator's settings (blocking), so that what every run's
    factory call would otherwise load on the first run (the gallery, its embedder, the chat model, the
    detector, ...) sits in the shared model cache before any client asks: LangGraph times each factory
    call and logs one that takes over 250 ms as an error ("Slow graph load"). Returns ``{method: "ok
    in 1.2 s" | the reason it could not be built}`` (and ``"text queries"``: the gallery's embedder embeds a
    text once); a method that cannot be built now (a QC2 gallery without a trained model, say) is left for its
    first run to report to the caller."""
    done = {name: _timed(lambda name=name: served_graph(name), "not built ahead")
            for name in methods or available_methods()}
    if os.environ.get(ENV_GALLERY):
        # A text query's model too: an embedder may load its text side on first use (open_clip builds its torch
        # model only then when its image tower runs from an ONNX export), and loading it during a run slows
        # LangGraph's other graph accesses past its 250 ms "Slow graph load" mark.
        done["text queries"] = _timed(lambda: gallery_for(None).embedder.embed_texts(["a photo"]), "not ready ahead")
    return done


def _timed(step: Callable[[], Any], failed: str) -> str:
    """``"ok in 1.2 s"`` once ``step()`` returns, else ``failed`` with the reason's first line."""
    import time

    started = time.perf_counter()
    try:
        step()
    except Exception as exc:  # noqa: BLE001 - reported to the log; the run that needs it says it again
        return f"{failed} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return f"ok in {time.perf_counter() - started:.1f} s"


def start_warm_up() -> threading.Thread:
    """:func:`warm_up` in a background thread, logging one line when it is done (the server answers
    meanwhile; a run that comes first waits for the same cached parts instead of loading them twice)."""

    def run() -> None:
        logger.info("loading the served methods' models ahead of the first run ...")
        done = warm_up()
        logger.info("served methods ready: %s", "; ".join(f"{name} {what}" for name, what in done.items()))

    thread = threading.Thread(target=run, name="pictrieve-warm-up", daemon=True)
    thread.start()
    return thread


@contextlib.asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """The server's start-up hook (the guard app's lifespan, which LangGraph merges into its own): start
    :func:`start_warm_up` unless ``$PICTRIEVE_SERVE_WARM_UP`` is ``0``, and remove sent pictures past their age
    every :data:`SWEEP_SECONDS` while the server runs."""
    if os.environ.get(ENV_WARM_UP, "1").strip() != "0" and os.environ.get(ENV_GALLERY):
        start_warm_up()
    sweeper = asyncio.create_task(_sweep_served_pictures())
    try:
        yield
    finally:
        sweeper.cancel()


SWEEP_SECONDS = 60.0
"""How often the server removes sent pictures past their age (:func:`prune_served_pictures`) without waiting
for another picture to arrive."""


async def _sweep_served_pictures(every: float | None = None) -> None:
    while True:
        await asyncio.sleep(SWEEP_SECONDS if every is None else every)
        try:
            await asyncio.to_thread(prune_served_pictures, _served_images_folder())
        except OSError as exc:
            logger.warning("could not remove old sent pictures: %s", exc)


# --- one factory per registered method: the names langgraph.json points at ------------------------
# The LangGraph server reads a graph from the module's namespace (``module.__dict__[name]``, not
# ``getattr``), so every method registered when this module is imported (built-ins and installed
# plugins) gets a global here; ``__getattr__`` (PEP 562) serves one registered later, for Python callers.


def factory_name(method: str) -> str:
    """The attribute of this module holding ``method``'s factory: its name, unless that is taken by
    something else of this module (then ``<name>_graph``)."""
    taken = globals().get(method)
    return method if taken is None or getattr(taken, "__pictrieve_factory__", None) == method else f"{method}_graph"


def _install_factories() -> None:
    for name in available_methods():
        made = _factory(name)
        made.__pictrieve_factory__ = name  # type: ignore[attr-defined]
        globals()[factory_name(name)] = made


def __getattr__(name: str) -> Any:
    known = available_methods()
    method = name if name in known else name.removesuffix("_graph")
    if method in known:
        made = _factory(method)
        made.__pictrieve_factory__ = method  # type: ignore[attr-defined]
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- a langgraph.json for an installed package ---------------------------------------------------


def served_graphs(names: list[str] | None = None, path: str | None = None) -> dict[str, str]:
    """``{graph id: "PATH:factory"}`` for ``names`` (default: every registered method, plugins
    included); ``PATH`` is this file's absolute path unless given."""
    here = path or os.path.abspath(__file__)
    return {name: f"{here}:{factory_name(name)}" for name in (available_methods() if names is None else names)}


def served_http(path: str | None = None) -> dict[str, Any]:
    """The ``http`` section of a ``langgraph.json``: the guard app (:mod:`pictrieve.graphs.serving_http`: Host,
    Origin, token, state-write and size checks around every route) and a CORS policy with no origin (never
    ``*``); the operator's origins reach the guard through ``$PICTRIEVE_SERVE_CORS_ORIGINS``. LangGraph's own
    MCP and A2A endpoints are off (more doors into the same runs, with inputs of their own shape: ``pictrieve
    mcp`` is the MCP server), and so are webhooks (a run would name a URL the server posts to)."""
    here = path or os.path.join(os.path.dirname(os.path.abspath(__file__)), "serving_http.py")
    return {"app": f"{here}:app", "cors": {"allow_origins": []}, "disable_mcp": True, "disable_a2a": True,
            "disable_webhooks": True}


def langgraph_config(env: dict[str, str] | None = None) -> dict[str, Any]:
    """A ``langgraph.json`` document serving every registered method (installed plugins included) from
    this installed copy of pictrieve, with absolute paths (``pictrieve serve --write-config``)."""
    return {"dependencies": [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))],
            "graphs": served_graphs(), "http": served_http(), "env": dict(env or {})}


def repository_langgraph_config() -> dict[str, Any]:
    """The repository's own ``langgraph.json``: the built-in methods, paths relative to the repository
    root (``langgraph dev`` run there). A test keeps the file equal to this."""
    return {"$schema": "https://langgra.ph/schema.json", "dependencies": ["."],
            "graphs": served_graphs(builtin_methods(), "./graphs/serving.py"),
            "http": served_http("./graphs/serving_http.py"), "env": {}}


_install_factories()
