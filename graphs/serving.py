"""Every method's graph for the LangGraph server (``langgraph dev``, LangGraph Platform).

``langgraph.json`` at the repository root names one factory here per method. The server calls a
factory with the run's config and compiles nothing itself; the factory builds the method's graph over
a gallery chosen by

- ``config["configurable"]["gallery"]`` (per assistant or per run), else ``$PICTRIEVE_GALLERY``;
- ``configurable.embedder`` / ``$PICTRIEVE_EMBEDDER``: which of the gallery's embedders (default: the
  gallery's recorded default);
- ``configurable.llm`` / ``$PICTRIEVE_LLM`` (default ``offline``) and ``$PICTRIEVE_BASE_URL`` for methods that
  talk to a language model.

Run settings are the graph's context (its ``context_schema``), so Studio shows them and a client passes
them per run: ``client.runs.wait(thread, "search", input={"query": "a dog"}, context={"k": 5})``.
No factory compiles a checkpointer: the server brings its own, which is what makes PlugIR's
``interrupt()`` resumable over HTTP.

Opened galleries and loaded models are kept in the process's shared model cache
(:mod:`pictrieve.tools.model_cache`), so only the first run pays for loading.

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
import os
from typing import Any, Awaitable, Callable

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from pictrieve.errors import PictrieveError
from pictrieve.graphs.registry import get_method
from pictrieve.tools.model_cache import shared_model

ENV_GALLERY = "PICTRIEVE_GALLERY"
ENV_EMBEDDER = "PICTRIEVE_EMBEDDER"
ENV_LLM = "PICTRIEVE_LLM"
ENV_BASE_URL = "PICTRIEVE_BASE_URL"


class ServingConfigError(PictrieveError):
    """The server was started without saying which gallery to serve."""


def _setting(config: RunnableConfig | None, key: str, env: str, default: str | None = None) -> str | None:
    configurable = (config or {}).get("configurable") or {}
    value = configurable.get(key) or os.environ.get(env) or default
    return str(value) if value else None


def _open_gallery(location: str, embedder: str | None) -> Any:
    from pictrieve.vectorstore.gallery import Gallery

    return shared_model(("served-gallery", location, embedder), lambda: Gallery.open(location, embedder, create=False))


def gallery_for(config: RunnableConfig | None) -> Any:
    """The gallery a served graph searches (see the module docstring for how it is chosen)."""
    location = _setting(config, "gallery", ENV_GALLERY)
    if not location:
        raise ServingConfigError(
            f"no gallery to serve: set {ENV_GALLERY}=PATH (or http://host:port) before `langgraph dev`, "
            "or pass configurable.gallery in the assistant's config"
        )
    # The embedder variable is the CLI's global default too; a served gallery uses its own recorded
    # default unless the config names one explicitly.
    embedder = ((config or {}).get("configurable") or {}).get("embedder")
    return _open_gallery(location, embedder)


def _chat_model(name: str, base_url: str | None) -> Any:
    from pictrieve.tools.chat_models import create_chat_model

    return shared_model(("served-chat-model", name, base_url), lambda: create_chat_model(name, base_url=base_url))


def llm_for(config: RunnableConfig | None) -> Any:
    """The chat model a served graph uses (``offline`` unless configured)."""
    return _chat_model(_setting(config, "llm", ENV_LLM, "offline"), _setting(config, "base_url", ENV_BASE_URL))


def build_served(method: str, config: RunnableConfig | None, **extras: Any) -> CompiledStateGraph:
    """``method``'s graph over the configured gallery, without a checkpointer (the server has one)."""
    return get_method(method).build(gallery_for(config), name=method, **extras)


# --- how each method's graph is built for the server (sync, blocking) -----------------------------


def _search(config: RunnableConfig | None) -> CompiledStateGraph:
    """Plain search by text or image path."""
    return build_served("search", config)


def _plugir(config: RunnableConfig | None) -> CompiledStateGraph:
    """PlugIR: one question per round; resume the thread with the user's answer."""
    return build_served("plugir", config, llm=llm_for(config), captioner="auto")


def _qc2(config: RunnableConfig | None) -> CompiledStateGraph:
    """QC2: the model trained for the gallery (``pictrieve quality train``), or ``configurable.qc2_model``."""
    model_dir = ((config or {}).get("configurable") or {}).get("qc2_model")
    return build_served("qc2", config, model=_qc2_model(gallery_for(config), model_dir))


def _vsa(config: RunnableConfig | None) -> CompiledStateGraph:
    """Vision Search Assistant: a question about an image path (or, with a gallery, a photo found in it).

    ``configurable.search`` / ``$PICTRIEVE_SEARCH`` (``ddgs`` or ``local:DIR``; none: no search),
    ``configurable.vlm`` / ``$PICTRIEVE_VLM`` (default ``offline``), ``configurable.detector`` (``ssd``).
    The gallery is optional here: without one the graph answers about the given image only.
    """
    from pictrieve.tools.vlm import create_region_captioner

    index = gallery_for(config) if _setting(config, "gallery", ENV_GALLERY) else None
    return get_method("vsa").build(
        index, name="vsa", llm=llm_for(config),
        vlm=create_region_captioner(_setting(config, "vlm", "PICTRIEVE_VLM", "offline") or "offline",
                                    base_url=_setting(config, "vlm_base_url", "PICTRIEVE_VLM_BASE_URL")),
        detector=_setting(config, "detector", "PICTRIEVE_DETECTOR", "ssd"),
        search=_setting(config, "search", "PICTRIEVE_SEARCH"),
    )


def _visret(config: RunnableConfig | None) -> CompiledStateGraph:
    """VisRet: ``configurable.visualizer`` / ``$PICTRIEVE_VISUALIZER`` (e.g. ``exemplar:/photos/captioned``)."""
    name = _setting(config, "visualizer", "PICTRIEVE_VISUALIZER")
    return build_served("visret", config, llm=llm_for(config), visualizer=_visualizer(name) if name else None)


def _needle(config: RunnableConfig | None) -> CompiledStateGraph:
    """NEEDLE: ``configurable.visualizer`` / ``$PICTRIEVE_VISUALIZER``, several names separated by commas;
    the gallery's embedders (index it with several: ``pictrieve index PHOTOS -e offline -e efficientnet-lite0``)."""
    names = [n.strip() for n in (_setting(config, "visualizer", "PICTRIEVE_VISUALIZER") or "").split(",") if n.strip()]
    return build_served("needle", config, llm=llm_for(config), visualizers=[_visualizer(n) for n in names])


_BUILDERS: dict[str, Callable[[RunnableConfig | None], CompiledStateGraph]] = {
    "search": _search, "plugir": _plugir, "qc2": _qc2, "vsa": _vsa, "visret": _visret, "needle": _needle,
}


def served_graph(method: str, config: RunnableConfig | None = None) -> CompiledStateGraph:
    """``method``'s graph as the server gets it, built here and now (blocking: it may open the gallery
    and load models). The settings come from ``config`` and the environment (module docstring)."""
    if method not in _BUILDERS:
        raise ServingConfigError(f"no served graph {method!r}; choose from {', '.join(_BUILDERS)}")
    return _BUILDERS[method](config)


def _factory(method: str) -> Callable[[RunnableConfig], Awaitable[CompiledStateGraph]]:
    """The server's factory for ``method``: :func:`served_graph`, awaited in a worker thread."""

    async def factory(config: RunnableConfig) -> CompiledStateGraph:
        return await asyncio.to_thread(served_graph, method, config)

    factory.__name__ = factory.__qualname__ = method
    factory.__doc__ = _BUILDERS[method].__doc__
    return factory


# --- one factory per method: the names langgraph.json points at ---------------------------------
search = _factory("search")
plugir = _factory("plugir")
qc2 = _factory("qc2")
vsa = _factory("vsa")
visret = _factory("visret")
needle = _factory("needle")


def _visualizer(name: str) -> Any:
    """One visualizer per name for the server's life (the exemplar one holds its caption vectors),
    built once even when several runs' factories ask at once (they build in worker threads)."""
    from pictrieve.tools.visualizers import create_visualizer

    return shared_model(("served-visualizer", name), lambda: create_visualizer(name))


def _qc2_model(gallery: Any, model_dir: str | None) -> Any:
    from pictrieve.agents.qc2.pipeline import load_for_gallery

    key = ("served-qc2", str(gallery.location), gallery.embedder_name, model_dir)
    return shared_model(key, lambda: load_for_gallery(gallery, model_dir))


# --- a langgraph.json for an installed package ---------------------------------------------------


def served_graphs() -> dict[str, str]:
    """``{graph id: "path/to/serving.py:factory"}`` for every method this module serves.

    The repository's ``langgraph.json`` lists the same factories with paths relative to the repository
    root (a test keeps the two in step); :func:`langgraph_config` gives absolute paths, which is what an
    installed package (no repository checkout) needs.
    """
    from pictrieve.graphs.registry import available_methods

    here = os.path.abspath(__file__)
    return {name: f"{here}:{name}" for name in available_methods() if callable(globals().get(name))}


def langgraph_config(env: dict[str, str] | None = None) -> dict[str, Any]:
    """A ``langgraph.json`` document serving every method from this installed copy of pictrieve."""
    return {"dependencies": [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))],
            "graphs": served_graphs(), "env": dict(env or {})}
