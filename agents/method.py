"""The method contract: one :class:`Method` object describes a retrieval method to everything that runs it.

The command line (``pictrieve methods``, ``pictrieve search --method``), the web page, the LangGraph
server (``langgraph dev``) and the evaluation harness read these objects from the registry
(:mod:`pictrieve.graphs.registry`) and name no method themselves. A built-in method's folder,
``agents/<method>/``, exposes its object as ``METHOD`` in its ``__init__``; a third-party package
registers one through the ``pictrieve.methods`` entry point group::

    # pyproject.toml of the other package
    [project.entry-points."pictrieve.methods"]
    mine = "my_package:METHOD"        # a Method, or a function of no argument returning one

A :class:`Method` names its builder, settings and schemas as ``"module:attribute"`` strings (or the
objects themselves), so listing methods imports nothing heavy; they are loaded when first used.

The builder's shape is fixed: ``builder(index, *, checkpointer=None, name=<method name>, <need>=...)``
returns a compiled LangGraph graph searching ``index`` (a :class:`~pictrieve.vectorstore.gallery.Gallery`,
or ``None`` for a method whose gallery is optional), with

- one keyword argument per entry of :attr:`Method.needs` (the need's own name: one of the house's,
  :data:`~pictrieve.agents.needs.NEEDS`, or a :class:`~pictrieve.agents.needs.Need` the method declares
  with its resolver), which every front end builds the same way from what it was given (``--llm``,
  ``$PICTRIEVE_LLM``, ``create_app(llm=...)``): :func:`pictrieve.agents.needs.resolve_needs`;
- no checkpointer compiled in unless one is passed (the LangGraph server brings its own);
- ``input_schema``, ``output_schema`` and ``context_schema`` (the run settings, a
  :class:`~pictrieve.agents.settings.RunSettings` dataclass) declared on its ``StateGraph``, the same
  classes the :class:`Method` names, so a caller knows them without building a gallery-bound graph;
- ``hits`` (a list of :class:`~pictrieve.vectorstore.hits.ImageHit`, possibly empty) in every output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pictrieve.agents.asks import Ask
from pictrieve.agents.needs import NEEDS, Need, need_clashes
from pictrieve.tools.core.registry import load_target as load_registered_target

if TYPE_CHECKING:  # a light import: the registry reads Method objects before any store or model is needed
    from pictrieve.vectorstore.store import ImageStore

GALLERY_MODES = ("required", "optional")
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


class MethodDefinitionError(ValueError):
    """A :class:`Method` that breaks the contract (a bad name, an unknown need, a missing schema)."""


def load_target(target: Any) -> Any:
    """The object a ``"module:attribute"`` string names (any other value is returned as it is);
    :func:`pictrieve.tools.core.registry.load_target`, with :class:`MethodDefinitionError` for a malformed string."""
    return load_registered_target(target, error=MethodDefinitionError)


@dataclass(frozen=True)
class Method:
    """One retrieval method: what it is, how to build it, what it takes and returns (module docstring)."""

    name: str
    """Identifier (lower case, digits, ``_``): the graph id served, the ``--method`` value, the web tab."""
    description: str
    """One line saying what the method does (shown by ``pictrieve methods`` and the web page)."""
    builder: str | Callable[..., Any]
    """``"module:function"`` (or the function) compiling the graph (shape: module docstring)."""
    settings: str | type
    """``"module:Class"`` (or the class): its run settings, a RunSettings dataclass (the context_schema)."""
    input_schema: str | type
    """``"module:Class"`` (or the class): the TypedDict a caller sends."""
    output_schema: str | type
    """``"module:Class"`` (or the class): the TypedDict a caller gets back; it has ``hits``."""
    needs: tuple[str | Need, ...] = ()
    """What the builder needs besides the gallery: names of the house's needs
    (:data:`~pictrieve.agents.needs.NEEDS`) or :class:`~pictrieve.agents.needs.Need` objects of the method's
    own, each with its resolver (a plugin's model, say). Kept as names; the method's own are
    :attr:`own_needs`."""
    gallery: str = "required"
    """``"optional"`` when the method also runs without a gallery (built with ``index=None``)."""
    served: str | Callable[[Any], Mapping[str, Any]] | None = None
    """Extra builder arguments for the LangGraph server: ``"module:function"`` (or the function) taking the
    run's ``RunnableConfig`` and returning keyword arguments, for what :data:`NEEDS` does not cover (read
    ``config["configurable"]`` and the environment with :func:`config_value`). It may block (open files,
    load models): the server calls it in a worker thread. The needs themselves are built by the server."""
    example_input: Mapping[str, Any] = field(default_factory=dict)
    """A typical input, shown in help and docs."""
    optional: tuple[str, ...] = ()
    """Needs the method also runs without (VisRet's query rewriter): a front end gives one only when its
    operator chose one, not the need's default (:attr:`~pictrieve.agents.needs.Need.not_a_choice`)."""
    exact_ranking: bool = False
    """Its ranking is the gallery's own text ranking (plain search): evaluations score it with the exact,
    tie-aware ranker over every stored vector instead of running its graph."""
    steps: str | Mapping[str, Any] | None = None
    """``"module:attribute"`` (or the mapping) naming each graph node as people watch it run: node name ->
    :class:`~pictrieve.agents.steps.Step`. The web page, MCP progress and the command line word finished
    nodes from it; ``None``: each is ``<node>: done``."""
    asks: tuple[Ask, ...] = ()
    """What it asks a person while it runs (it pauses with ``interrupt()``): one
    :class:`~pictrieve.agents.asks.Ask` per kind of question, with the question's and the reply's shapes. Every front
    end shows its questions and reads replies from these alone (:class:`pictrieve.graphs.sessions.MethodSessions`);
    a method that asks is given a checkpointer to pause on."""
    own_needs: tuple[Need, ...] = field(default=(), init=False, repr=False)
    """The needs it declares itself (from :attr:`needs`), each with its resolver."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise MethodDefinitionError(f"method name {self.name!r}: use lower-case letters, digits and _ "
                                        "(it is a graph id, a --method value and a Python name)")
        declared = tuple(self.needs)
        own = tuple(need for need in declared if isinstance(need, Need))
        clash = [need.name for need in own if need.name in NEEDS]
        if clash:
            raise MethodDefinitionError(f"method {self.name}: its own need(s) {', '.join(clash)} take the name of "
                                        "one of the house's needs: use that one by name, or another name")
        clashes = need_clashes(own, NEEDS.values())
        if clashes:
            raise MethodDefinitionError(f"method {self.name}: {'; '.join(clashes)}: give its need another config_key")
        if any(need.brought_by_caller for need in own):
            raise MethodDefinitionError(f"method {self.name}: give each need of its own a resolver "
                                        "(resolve=function or 'module:function')")
        names = tuple(need.name if isinstance(need, Need) else need for need in declared)
        object.__setattr__(self, "needs", names)
        object.__setattr__(self, "own_needs", own)
        unknown = [str(need) for need in names if not isinstance(need, str) or (need not in NEEDS and
                                                                                 need not in {n.name for n in own})]
        if unknown:
            raise MethodDefinitionError(f"method {self.name}: unknown need(s) {', '.join(unknown)}; "
                                        f"known: {', '.join(NEEDS)} (or declare a Need of its own)")
        if len(set(names)) != len(names):
            raise MethodDefinitionError(f"method {self.name}: a need is listed twice")
        object.__setattr__(self, "optional", tuple(self.optional))
        stray = [need for need in self.optional if need not in names]
        if stray:
            raise MethodDefinitionError(f"method {self.name}: optional need(s) {', '.join(stray)} are not among "
                                        "its needs")
        if self.gallery not in GALLERY_MODES:
            raise MethodDefinitionError(f"method {self.name}: gallery must be one of {GALLERY_MODES}, "
                                        f"got {self.gallery!r}")
        if not (self.description or "").strip():
            raise MethodDefinitionError(f"method {self.name}: give it a one-line description")
        object.__setattr__(self, "example_input", MappingProxyType(dict(self.example_input)))
        object.__setattr__(self, "asks", tuple(self.asks))
        if not all(isinstance(ask, Ask) for ask in self.asks):
            raise MethodDefinitionError(f"method {self.name}: asks holds Ask objects (pictrieve.agents.asks.Ask)")
        kinds = [ask.kind for ask in self.asks]
        if len(set(kinds)) != len(kinds) or (len(kinds) > 1 and not all(kinds)):
            raise MethodDefinitionError(f"method {self.name}: give each of its Asks its own kind (the payload's "
                                        "'kind' that tells them apart)")

    # --- the parts, loaded on first use ----------------------------------------------------------

    def load_builder(self) -> Callable[..., Any]:
        return load_target(self.builder)

    def settings_class(self) -> type:
        return load_target(self.settings)

    def input_class(self) -> type:
        return load_target(self.input_schema)

    def output_class(self) -> type:
        return load_target(self.output_schema)

    def build(self, index: ImageStore, **kwargs: Any) -> Any:
        """Compile the method's graph over ``index`` (keyword arguments go to the builder; ``name``
        defaults to the method's)."""
        kwargs.setdefault("name", self.name)
        return self.load_builder()(index, **kwargs)

    def need_specs(self) -> list[Need]:
        """The :class:`~pictrieve.agents.needs.Need` of each of its needs (the house's and its own), in order."""
        own = {need.name: need for need in self.own_needs}
        return [own.get(name) or NEEDS[name] for name in self.needs]

    def step_table(self) -> Mapping[str, Any]:
        """The :attr:`steps` table, loaded (empty when the method declares none)."""
        return load_target(self.steps) if self.steps is not None else {}

    @property
    def pauses(self) -> bool:
        """It may pause for a person: it declares what it asks, or needs a checkpointer to pause on."""
        return bool(self.asks) or "checkpointer" in self.needs

    def served_kwargs(self, config: Any) -> dict[str, Any]:
        """The extra builder arguments :attr:`served` gives for a server run's ``config`` (blocking)."""
        if self.served is None:
            return {}
        return dict(load_target(self.served)(config))

    # --- what it takes and returns --------------------------------------------------------------

    def input_fields(self) -> list[dict[str, Any]]:
        from pictrieve.agents.settings import describe_fields

        return describe_fields(self.input_class())

    def output_fields(self) -> list[dict[str, Any]]:
        from pictrieve.agents.settings import describe_fields

        return describe_fields(self.output_class())

    def settings_fields(self) -> list[dict[str, Any]]:
        from pictrieve.agents.settings import describe_fields

        return describe_fields(self.settings_class())

    def takes(self, key: str) -> bool:
        """Whether the method's input has a field ``key`` (e.g. ``"query"``)."""
        return any(f["name"] == key for f in self.input_fields())

    def text_input(self) -> str | None:
        """The input field a single line of text goes to: ``query`` if the input has one, else its first
        required text field (``description``, ``question``), else ``None``."""
        fields_ = self.input_fields()
        names = [f["name"] for f in fields_]
        if "query" in names:
            return "query"
        return next((f["name"] for f in fields_ if f["required"] and f["type"] == "str"), None)

    def describe(self) -> dict[str, Any]:
        """Everything a person or a page needs to run the method, as JSON (``pictrieve methods --json``).

        ``name``, ``description``, ``needs`` (``[{"name", "description"}]``), ``gallery``,
        ``input``/``output`` (``[{"name", "type", "required", "description"}]``), ``settings``
        (``[{"name", "type", "default", "description"}]``, ``choices`` for a Literal), ``example_input``,
        ``text_input`` (the field a line of text goes to), ``pauses`` (it may pause for a person: it needs a
        checkpointer), ``asks`` (what it asks then: :meth:`~pictrieve.agents.asks.Ask.describe` of each).
        """
        return {
            "name": self.name,
            "description": self.description,
            "needs": [{"name": need.name, "description": need.description} for need in self.need_specs()],
            "gallery": self.gallery,
            "input": self.input_fields(),
            "output": self.output_fields(),
            "settings": self.settings_fields(),
            "example_input": dict(self.example_input),
            "text_input": self.text_input(),
            "pauses": self.pauses,
            "asks": [ask.describe() for ask in self.asks],
        }


def config_value(config: Any, key: str, env: str | None = None, default: str | None = None) -> str | None:
    """``config["configurable"][key]``, else ``$env``, else ``default`` (for :attr:`Method.served`)."""
    import os

    configurable = (config or {}).get("configurable") or {}
    value = configurable.get(key) or (os.environ.get(env) if env else None) or default
    return str(value) if value else None
