"""The registry of retrieval methods: what the CLI, the evaluation harness, the web page and the
LangGraph server read to find every method.

Every method follows one contract (see :mod:`pictrieve.graphs`):

- a builder ``build_<method>_graph(index, *, llm=None, checkpointer=None, name=..., **extras)``
  returning a ``CompiledStateGraph``: ``index`` is the :class:`~pictrieve.vectorstore.gallery.Gallery`
  searched, everything else keyword-only; no checkpointer unless one is passed (the LangGraph server
  brings its own);
- declared ``input_schema`` / ``output_schema`` and a ``context_schema`` (its run settings, a
  :class:`~pictrieve.graphs.settings.RunSettings` dataclass);
- results as :class:`~pictrieve.vectorstore.hits.ImageHit` lists.

>>> from pictrieve.graphs.registry import get_method
>>> method = get_method("search")
>>> graph = method.build(Gallery.open("./my.gallery"))
>>> graph.invoke({"query": "a dog"}, context={"k": 5})["hits"]

Builders and settings are named as ``"module:attribute"`` strings, so listing methods imports nothing
heavy.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from pictrieve.errors import PictrieveError


class UnknownMethodError(PictrieveError, ValueError):
    """No method of that name is registered."""


def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Method:
    """One registered retrieval method.

    ``needs`` lists what the builder needs besides the gallery (``"llm"``, ``"qc2_model"``,
    ``"visualizer"``, ...), so the CLI and server know what to construct.
    """

    name: str
    builder: str
    settings: str
    description: str
    needs: tuple[str, ...] = ()
    example_input: dict[str, Any] = field(default_factory=dict)

    def load_builder(self) -> Any:
        return _load(self.builder)

    def settings_class(self) -> type:
        return _load(self.settings)

    def build(self, index: Any, **kwargs: Any) -> Any:
        """Compile the method's graph over ``index`` (keyword arguments go to the builder)."""
        return self.load_builder()(index, **kwargs)


_METHODS: dict[str, Method] = {}


def register_method(method: Method) -> None:
    """Add (or replace) a method; third-party methods register the same way."""
    _METHODS[method.name] = method


def get_method(name: str) -> Method:
    """The method called ``name``; unknown names raise :class:`UnknownMethodError` listing the known ones."""
    try:
        return _METHODS[name]
    except KeyError:
        raise UnknownMethodError(f"unknown method {name!r}; known: {', '.join(available_methods())}") from None


def available_methods() -> list[str]:
    return sorted(_METHODS)


def methods() -> list[Method]:
    return [_METHODS[name] for name in available_methods()]


register_method(Method(
    name="search",
    builder="pictrieve.graphs.search:build_search_graph",
    settings="pictrieve.graphs.search:SearchSettings",
    description="Plain search by text or example image (cosine similarity in the gallery's embedder space).",
    example_input={"query": "two dogs playing in the snow"},
))
register_method(Method(
    name="plugir",
    builder="pictrieve.graphs.interactive_retrieval:build_plugir_graph",
    settings="pictrieve.graphs.interactive_retrieval:PlugIRSettings",
    description="PlugIR interactive retrieval: asks one question per round, pausing with interrupt() for the answer.",
    needs=("llm",),
    example_input={"description": "a dog running in the snow"},
))
register_method(Method(
    name="qc2",
    builder="pictrieve.graphs.quality_retrieval:build_qc2_graph",
    settings="pictrieve.graphs.quality_retrieval:QC2Settings",
    description="QC2 quality-controllable retrieval: completes a short query toward chosen relevance and quality levels.",
    needs=("qc2_model",),
    example_input={"query": "a dog", "levels": {"relevance": "high", "quality": "high"}},
))

register_method(Method(
    name="vsa",
    builder="pictrieve.graphs.vision_search:build_vision_search_graph",
    settings="pictrieve.graphs.vision_search:VisionSearchSettings",
    description="Vision Search Assistant: answer a question about a photo from its regions and a web or local search, with numbered sources.",
    needs=("llm",),
    example_input={"question": "What breed is this dog and how big does it grow?", "image": "photo.jpg"},
))
register_method(Method(
    name="visret",
    builder="pictrieve.graphs.visret:build_visret_graph",
    settings="pictrieve.graphs.visret:VisRetSettings",
    description="VisRet: visualize the query as guide images, search image-to-image, fuse by reciprocal rank.",
    needs=("visualizer",),
    example_input={"query": "a dog catching a frisbee"},
))
register_method(Method(
    name="needle",
    builder="pictrieve.graphs.needle:build_needle_graph",
    settings="pictrieve.graphs.needle:NeedleSettings",
    description="NEEDLE: guide images from several visualizers, ranked by several embedders (and tiles), fused with trust weights learned from feedback.",
    needs=("visualizers",),
    example_input={"query": "a kite over a beach", "topic": "outdoors"},
))
