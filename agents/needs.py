"""What a method may need besides its gallery, and how each need becomes an object: one place for every front end.

A :class:`Need` is one kind of thing a builder takes as a keyword argument of the need's name (a chat model,
guide-image visualizers, a region detector, ...). It carries

- its **resolver**: what turns a name (``"offline"``, ``"exemplar:DIR"``) or a ready object into what the
  builder takes, with the gallery at hand (a model trained for it) and the need's endpoint;
- where an **operator** sets it: the environment variable (:attr:`Need.env_var`) and the command-line option
  (:attr:`Need.cli_option`); its endpoint, if it calls one (:class:`Endpoint`), likewise;
- what a **caller** of a server may choose: :attr:`Need.config_key` is the key a LangGraph run's
  ``configurable`` may set, among the values the operator allowed (:func:`check_caller_choices`); a need
  without one (a folder, say) and every endpoint are the operator's alone.

:data:`NEEDS` holds the house's needs; a method may declare one of its own (a :class:`Need` in its
``needs``, :class:`~pictrieve.agents.method.Method`). The front ends (the command line, the web page, the
MCP server, the LangGraph server) take their need options from these objects
(:mod:`pictrieve.cli.need_options`), collect what they were given by need name and call :func:`resolve_needs`;
none of them declares, stores or makes a need itself (a method's own view may read its method's value by name).

>>> from pictrieve.graphs.registry import get_method
>>> method = get_method("visret")
>>> kwargs = resolve_needs(method, {"visualizers": "exemplar:./captioned"}, gallery=gallery)
>>> graph = method.build(gallery, **kwargs)
"""

from __future__ import annotations

import re
from pathlib import Path
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.registry import load_target

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
_OPTION = re.compile(r"--[a-z][a-z0-9-]*\Z")


class NeedDefinitionError(ValueError):
    """A :class:`Need` that breaks its contract (a bad name or option, no resolver)."""


class MissingNeedError(PictrieveError, ValueError):
    """A method needs something nobody gave (a visualizer, say); :attr:`need` says how an operator gives it."""

    def __init__(self, method: str, need: Need) -> None:
        self.method, self.need = method, need
        super().__init__(f"{method} needs {need.description}: {need.how_to_give()}")


class NeedUnavailable(PictrieveError, ValueError):
    """A need cannot be made from what is at hand (a gallery's model without a gallery)."""


class NeedNotAllowed(PictrieveError, ValueError):
    """A caller chose a value its operator did not allow (one line: the setting, and how the operator allows it)."""


@dataclass(frozen=True)
class Endpoint:
    """Where a need's model is called (an OpenAI-compatible URL): the operator's alone, never a caller's."""

    key: str
    """Its name as a setting (``base_url``): the server's ``configurable`` key a run may not change."""
    env_var: str
    cli_option: str


def _call(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    return make()


@dataclass(frozen=True)
class NeedContext:
    """What a resolver has at hand besides the value it resolves."""

    gallery: Any = None
    """The gallery the method will search (``None`` for a method run without one)."""
    endpoint: str | None = None
    """The operator's endpoint for the need (:attr:`Need.endpoint`), if any."""
    make: Callable[[tuple[Any, ...], Callable[[], Any]], Any] = _call
    """``make(key, factory)``: the front end's cache (a server builds each model once for its life)."""
    check: bool = False
    """Check endpoints now (the command line: a dead endpoint is one line before any work starts)."""
    need: Need | None = None
    """The need being resolved or checked (its options name it in a one-line error)."""


Resolver = Callable[[Any, NeedContext], Any]


@dataclass(frozen=True)
class Need:
    """One kind of thing a builder may need, and how it is made (module docstring)."""

    name: str
    """The builder's keyword argument."""
    description: str
    """What it is, in a few words (``pictrieve methods``, error messages)."""
    resolve: str | Resolver | None = None
    """``resolve(value, context)`` (or ``"module:function"``): the builder's argument from ``value``, a name,
    a ready object or ``None`` (the default). ``None`` here: no resolver, the caller brings it (a checkpointer)."""
    env_var: str | None = None
    """The environment variable an operator sets it with (read by servers)."""
    cli_option: str | None = None
    """The command-line option it is given with (``--llm``)."""
    config_key: str | None = None
    """The key of a LangGraph run's ``configurable`` that may choose it among what the operator allowed;
    ``None``: only the operator sets it (a folder, a model path)."""
    default: str | None = None
    """The value when nothing is given (``None``: the builder's own default, or :attr:`required`)."""
    many: bool = False
    """The builder takes a list: names separated by commas, or a list of names or objects."""
    required: bool = False
    """A method that needs it cannot run without one: a missing one is :class:`MissingNeedError`."""
    endpoint: Endpoint | None = None
    """The URL its model is called at, if it calls one (the operator's alone)."""
    example: str = ""
    """An example value (``exemplar:DIR``), for help and error messages."""
    called: str = ""
    """What it is called in a sentence (``the chat model``): how the page names an option a visitor cannot set
    (empty: ``the`` and its name in words)."""
    not_a_choice: tuple[str, ...] = ()
    """Values that do not count as a choice for a method declaring the need optional
    (:attr:`~pictrieve.agents.method.Method.optional`): such a method is given nothing instead."""
    available: str | Callable[[Any, NeedContext], str | None] | None = None
    """``available(value, context)`` (or ``"module:function"``): why ``value`` cannot be made now (a model
    folder that holds no model), or ``None``; cheap, it makes nothing. Front ends list only methods whose
    needs can be met (:func:`unmet_needs`). ``None`` here: any value given can be made."""
    too_small: str | Callable[[Any], bool] | None = None
    """``too_small(value)`` (or ``"module:function"``): true for a model of this need too small to write what a
    person reads (the offline SmolLM2-135M chat model, by name or as the object built for it). Like a value of
    :attr:`not_a_choice` it is no choice for an optional need, whether a front end passes its name or the model
    object; and no front end shows its words as an answer or a rewrite (:func:`pictrieve.agents.shown_text.may_show`)."""

    check: str | Callable[[Any, NeedContext], None] | None = None
    """``check(value, context)`` (or ``"module:function"``): refuse ``value`` in one line now, before a front end
    starts work or a server starts listening (a misspelt name, a missing extra, an endpoint that does not
    answer, ``context.endpoint``); it makes nothing that loads. ``None`` here: nothing to check.
    :func:`check_given` runs it on what an operator gave."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise NeedDefinitionError(f"need name {self.name!r}: use lower-case letters, digits and _ "
                                      "(it is a builder's keyword argument)")
        if not (self.description or "").strip():
            raise NeedDefinitionError(f"need {self.name}: give it a few words of description")
        if self.cli_option is not None and not _OPTION.match(self.cli_option):
            raise NeedDefinitionError(f"need {self.name}: cli_option {self.cli_option!r} is no option (--lower-case)")
        if self.config_key is not None and not _NAME.match(self.config_key):
            raise NeedDefinitionError(f"need {self.name}: config_key {self.config_key!r}: use lower-case letters, "
                                      "digits and _")
        if self.resolve is not None and not (callable(self.resolve) or isinstance(self.resolve, str)):
            raise NeedDefinitionError(f"need {self.name}: resolve must be a function or a 'module:function' string")
        for hook in ("too_small", "check", "available"):
            value = getattr(self, hook)
            if value is not None and not (callable(value) or isinstance(value, str)):
                raise NeedDefinitionError(f"need {self.name}: {hook} must be a function or a 'module:function' string")
        object.__setattr__(self, "not_a_choice", tuple(self.not_a_choice))

    @property
    def spoken(self) -> str:
        """:attr:`called`, or ``the`` and its name in words."""
        return self.called or f"the {self.name.replace('_', ' ')}"

    @property
    def brought_by_caller(self) -> bool:
        """No resolver: the front end brings it itself (a checkpointer)."""
        return self.resolve is None

    def how_to_give(self) -> str:
        """How an operator gives it, in words (for one-line errors)."""
        ways = [w for w in (self.cli_option and f"{self.cli_option} {self.example or 'VALUE'}".strip(),
                            self.env_var and f"${self.env_var}") if w]
        return "give it with " + " or ".join(ways) if ways else "its front end must give it"

    def value(self, given: Any = None, environ: Mapping[str, str] | None = None, *, default: bool = True) -> Any:
        """What to resolve: ``given`` if anything was, else ``$env_var`` (when ``environ`` is read), else the
        default (with ``default``; else ``None``: the builder's own default)."""
        if not _blank(given):
            return given
        if environ is not None and self.env_var and environ.get(self.env_var):
            return environ[self.env_var]
        return self.default if default else None

    def endpoint_value(self, given: Any = None, environ: Mapping[str, str] | None = None) -> str | None:
        if self.endpoint is None:
            return None
        if not _blank(given):
            return str(given)
        return (environ.get(self.endpoint.env_var) or None) if environ is not None else None

    def is_too_small(self, value: Any) -> bool:
        """Whether ``value`` (a name or a model object) is :attr:`too_small` to write what a person reads."""
        if self.too_small is None or _blank(value):
            return False
        return bool(load_target(self.too_small, error=NeedDefinitionError)(value))

    def is_choice(self, value: Any) -> bool:
        """Whether ``value`` chooses something for an optional need: not blank, not one of :attr:`not_a_choice`,
        not :meth:`is_too_small` (a page given the offline chat model object chose no rewriter)."""
        if _blank(value) or (isinstance(value, str) and value in self.not_a_choice):
            return False
        return not self.is_too_small(value)

    def build(self, value: Any, context: NeedContext = NeedContext()) -> Any:
        """The builder's argument for ``value`` (a name, a list for a :attr:`many` need, or an object)."""
        if self.resolve is None:
            return value
        resolver = load_target(self.resolve, error=NeedDefinitionError)
        context = replace(context, need=self)
        if self.many:
            return [resolver(item, context) for item in names_of(value)]
        return resolver(value, context)


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list, tuple)) and not value)


def names_of(value: Any) -> list[Any]:
    """A :attr:`Need.many` value as a list: names separated by commas, a list, or one object."""
    if _blank(value):
        return []
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    if isinstance(value, (list, tuple)):
        return [name for item in value for name in (names_of(item) if isinstance(item, str) else [item])]
    return [value]


# --- the house's resolvers ----------------------------------------------------------------------


def _chat_model(value: Any, context: NeedContext) -> Any:
    if value is None or not isinstance(value, str):
        return value
    from pictrieve.tools.models.chat_models import (
        LANGCHAIN_PROVIDERS,
        create_chat_model,
    )

    # An endpoint belongs to a provider's model; one that runs in the process (offline, local:DIR) calls none.
    endpoint = context.endpoint if value.partition(":")[0] in LANGCHAIN_PROVIDERS else None
    model = context.make(("chat-model", value, endpoint), lambda: create_chat_model(value, base_url=endpoint))
    if context.check:
        _endpoint_answers(value, endpoint, context.need)
    return model


def _endpoint_answers(value: str, endpoint: str | None, need: Need | None) -> None:
    """One cheap call to a named provider model's endpoint (a dead or refusing one is one line naming the
    need's options)."""
    from pictrieve.tools.models.llm_calls import check_endpoint

    options = {} if need is None or need.cli_option is None or need.endpoint is None else \
        {"option": need.cli_option, "base_option": need.endpoint.cli_option}
    check_endpoint(value, endpoint, **options)


def _chat_model_check(value: Any, context: NeedContext) -> None:
    """The name is one :func:`~pictrieve.tools.models.chat_models.create_chat_model` knows (with an endpoint only
    for a provider's model; nothing loads), and its endpoint answers."""
    if not isinstance(value, str):
        return
    from pictrieve.tools.models.chat_models import create_chat_model

    _refused_in_one_line(lambda: create_chat_model(value, base_url=context.endpoint))
    _endpoint_answers(value, context.endpoint, context.need)


def _refused_in_one_line(make: Callable[[], Any]) -> None:
    """``make()``, its plain ``ValueError`` (an endpoint given to a model that runs here) as :class:`NeedUnavailable`."""
    try:
        make()
    except PictrieveError:
        raise
    except ValueError as exc:
        raise NeedUnavailable(str(exc)) from None


def _visualizer(value: Any, context: NeedContext) -> Any:
    if not isinstance(value, str):
        return value
    from pictrieve.tools.models.visualizers import (
        check_visualizer_name,
        create_visualizer,
    )

    name = check_visualizer_name(value)  # a missing extra: one line now, before anything loads
    return context.make(("visualizer", name), lambda: create_visualizer(name))


def _qc2_model(value: Any, context: NeedContext) -> Any:
    if value is not None and not isinstance(value, str):
        return value
    if context.gallery is None:
        raise NeedUnavailable("the QC2 model is the one trained for a gallery: open a gallery first")
    from pictrieve.agents.qc2.pipeline import load_for_gallery

    gallery = context.gallery
    key = ("qc2-model", str(gallery.location), gallery.embedder_name, value)
    return context.make(key, lambda: load_for_gallery(gallery, value))


def _qc2_model_missing(value: Any, context: NeedContext) -> str | None:
    """Why no QC2 model can be loaded for the gallery (no ``qc2.json`` in its folder), or ``None``."""
    if value is not None and not isinstance(value, str):
        return None
    if context.gallery is None:
        return "the QC2 model is the one trained for a gallery, and there is none"
    from pictrieve.agents.qc2.bundle import BUNDLE_FILE
    from pictrieve.agents.qc2.errors import QC2ModelError
    from pictrieve.agents.qc2.pipeline import default_model_dir

    try:
        folder = Path(value) if value else default_model_dir(context.gallery)
    except QC2ModelError as exc:  # a gallery on a server has no folder of its own
        return str(exc)
    if not (folder / BUNDLE_FILE).is_file():
        return (f"no QC2 model has been trained for this gallery (none in {folder}): train one with "
                "`pictrieve quality train --gallery GALLERY`")
    return None


def _region_describer(value: Any, context: NeedContext) -> Any:
    if not isinstance(value, str):
        return value
    from pictrieve.tools.models.chat_models import LANGCHAIN_PROVIDERS
    from pictrieve.tools.models.vlm import create_region_captioner

    endpoint = context.endpoint if value.partition(":")[0] in LANGCHAIN_PROVIDERS else None
    return context.make(("vlm", value, endpoint), lambda: create_region_captioner(value, base_url=endpoint))


def _region_describer_check(value: Any, context: NeedContext) -> None:
    """The name is a region describer's (with an endpoint only for a provider's model), and its endpoint answers."""
    if not isinstance(value, str):
        return
    from pictrieve.tools.models.vlm import create_region_captioner

    _refused_in_one_line(lambda: create_region_captioner(value, base_url=context.endpoint))
    _endpoint_answers(value, context.endpoint, context.need)


def _visualizer_check(value: Any, context: NeedContext) -> None:
    if isinstance(value, str):
        from pictrieve.tools.models.visualizers import check_visualizer_name

        check_visualizer_name(value)


def _search_check(value: Any, context: NeedContext) -> None:
    if isinstance(value, str):
        from pictrieve.tools.web.search import check_search_name

        check_search_name(value)


def _as_given(value: Any, context: NeedContext) -> Any:
    """The builder takes the name itself (it makes the object)."""
    return value


NEEDS: Mapping[str, Need] = MappingProxyType({need.name: need for need in (
    Need("llm", "a chat model (a LangChain BaseChatModel, or a name such as offline or openai:MODEL)",
         _chat_model, env_var="PICTRIEVE_LLM", cli_option="--llm", config_key="llm", default="offline",
         endpoint=Endpoint("base_url", "PICTRIEVE_BASE_URL", "--base-url"), example="openai:MODEL", check=_chat_model_check,
         called="the chat model",
         not_a_choice=("offline",), too_small="pictrieve.tools.models.chat_models:is_offline_chat_model"),
    Need("visualizers", "what makes guide images of the query: one visualizer or a list (e.g. exemplar:DIR)",
         _visualizer, env_var="PICTRIEVE_VISUALIZER", cli_option="--visualizer", config_key="visualizer",
         many=True, required=True, example="exemplar:DIR", check=_visualizer_check, called="the visualizer"),
    Need("qc2_model", "the QC2 query-completion model trained for the gallery (or the folder it was saved in)",
         _qc2_model, env_var="PICTRIEVE_QC2_MODEL", cli_option="--qc2-model", example="DIR",
         available=_qc2_model_missing, called="the QC2 model"),
    Need("captioner", "captions for gallery images that have none (a name such as auto, or a Captioner)",
         _as_given, env_var="PICTRIEVE_CAPTIONER", cli_option="--captioner", config_key="captioner", default="auto"),
    Need("vlm", "a vision-language model describing image regions (a name such as offline or openai:MODEL)",
         _region_describer, env_var="PICTRIEVE_VLM", cli_option="--vlm", config_key="vlm", default="offline",
         endpoint=Endpoint("vlm_base_url", "PICTRIEVE_VLM_BASE_URL", "--vlm-base-url"), example="openai:MODEL",
         check=_region_describer_check, called="the region describer"),
    Need("detector", "a region detector (a name such as ssd or zeroshot:MODEL, or a Detector)",
         _as_given, env_var="PICTRIEVE_DETECTOR", cli_option="--detector", config_key="detector", default="ssd"),
    Need("search", "a web or local page search (ddgs, local:DIR, or a search backend)",
         _as_given, env_var="PICTRIEVE_SEARCH", cli_option="--search", config_key="search", example="ddgs",
         check=_search_check, called="the page search"),
    Need("checkpointer", "pauses with interrupt() for a person: run it with a checkpointer to resume"),
)})
"""The house's needs by name. Each is passed to a builder as the keyword argument of the same name (except
``checkpointer``, which every builder takes and every front end brings: listing it says the method pauses
for a person)."""


# --- resolving a method's needs -----------------------------------------------------------------


def needs_of(method: Any) -> list[Need]:
    """The :class:`Need` objects of ``method``'s needs (house needs and its own), in its order."""
    return list(method.need_specs())


RESERVED_CONFIG_KEYS = ("gallery", "embedder")
"""``configurable`` keys a server reads itself (where the gallery is, which embedder): no need may take them."""


def need_clashes(needs: Iterable[Need], known: Iterable[Need] = ()) -> list[str]:
    """Why ``needs`` cannot be served beside ``known`` (and each other), one phrase each; empty when they can.

    A server checks a run's choice per ``configurable`` key and hands it to the need of that name, so two
    different needs of one name, or one ``config_key`` shared by two needs, would let a value checked by one
    need's rule reach the other's resolver (a plugin's choosable need escaping the operator's check). The same
    need (equal :class:`Need`) declared by two methods is fine."""
    by_name: dict[str, Need] = {}
    by_key: dict[str, Need] = {}
    clashes: list[str] = []
    for need in [*known, *needs]:
        other = by_name.get(need.name)
        if other is not None and other != need:
            clashes.append(f"a different need is already called {need.name!r}")
            continue
        by_name[need.name] = need
        if need.config_key is None:
            continue
        if need.config_key in RESERVED_CONFIG_KEYS:
            clashes.append(f"need {need.name!r} takes configurable.{need.config_key}, which the server reads itself")
            continue
        holder = by_key.get(need.config_key)
        if holder is not None and holder.name != need.name:
            clashes.append(f"need {need.name!r} takes configurable.{need.config_key}, the key of need {holder.name!r}")
            continue
        by_key[need.config_key] = need
    return clashes


def all_needs(methods: Iterable[Any] = ()) -> dict[str, Need]:
    """The house's needs and those the given methods declare, by name. Needs that clash
    (:func:`need_clashes`: two of one name, or one ``config_key`` for two) are refused with
    :class:`NeedDefinitionError`, never one of them silently kept (the registry refuses such a method first)."""
    found = dict(NEEDS)
    for method in methods:
        own = tuple(getattr(method, "own_needs", ()))
        clashes = need_clashes(own, found.values())
        if clashes:
            raise NeedDefinitionError(f"method {getattr(method, 'name', method)}: {'; '.join(clashes)}")
        found.update((need.name, need) for need in own)
    return found


def resolve_needs(method: Any, given: Mapping[str, Any] | None = None, *, gallery: Any = None,
                  environ: Mapping[str, str] | None = None, make: Callable[..., Any] = _call,
                  check: bool = False, skip: Iterable[str] = (), defaults: bool = True) -> dict[str, Any]:
    """The builder arguments for ``method``'s needs: each from ``given[need]`` (a name or an object), else the
    need's environment variable (only when ``environ`` is passed: a server reads its operator's), else its
    default (``defaults=False``: ``None``, so the builder makes its own); each endpoint from
    ``given[endpoint.key]`` or its variable. Needs without a resolver (a
    checkpointer) and those in ``skip`` (the caller gives them) are left out, and so is an optional need
    (:attr:`~pictrieve.agents.method.Method.optional`) that nobody chose. A required need nobody gave is
    :class:`MissingNeedError`. ``make(key, factory)`` is the caller's cache; ``check``: check endpoints now."""
    given = dict(given or {})
    skipped = set(skip)
    optional = set(getattr(method, "optional", ()))
    kwargs: dict[str, Any] = {}
    for need in needs_of(method):
        if need.brought_by_caller or need.name in skipped:
            continue
        value = need.value(given.get(need.name), environ, default=defaults)
        if need.name in optional and not need.is_choice(value):
            continue
        if need.required and not names_of(value):
            raise MissingNeedError(method.name, need)
        kwargs[need.name] = build_given(need, given, gallery=gallery, environ=environ, make=make, check=check,
                                        defaults=defaults)
    return kwargs


def build_given(need: Need, given: Mapping[str, Any] | None = None, *, gallery: Any = None,
                environ: Mapping[str, str] | None = None, make: Callable[..., Any] = _call, check: bool = False,
                defaults: bool = True) -> Any:
    """What ``need`` makes of what was given (``given`` by need and endpoint name, as :func:`resolve_needs` reads
    it): for a front end that needs one need's object outside a method's builder (a reader of the gallery)."""
    given = dict(given or {})
    value = need.value(given.get(need.name), environ, default=defaults)
    endpoint = need.endpoint_value(given.get(need.endpoint.key) if need.endpoint else None, environ)
    return need.build(value, NeedContext(gallery=gallery, endpoint=endpoint, make=make, check=check))


def missing_needs(method: Any, given: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> list[Need]:
    """The required needs of ``method`` nobody gave (cheap: nothing is made), to refuse a run in one line at once."""
    given = dict(given or {})
    return [need for need in needs_of(method) if need.required and not names_of(need.value(given.get(need.name), environ))]


def unmet_needs(method: Any, given: Mapping[str, Any] | None = None, *, gallery: Any = None,
                environ: Mapping[str, str] | None = None) -> list[tuple[Need, str]]:
    """``(need, why)`` for each need of ``method`` that cannot be met now: a required one nobody gave, or one whose
    value its :attr:`Need.available` check refuses (a QC2 model never trained). Cheap: nothing is made. Front ends
    offer only methods with none (MCP's ``gallery_info``), and refuse a run of another in one line."""
    given = dict(given or {})
    optional = set(getattr(method, "optional", ()))
    unmet = [(need, f"{need.description}: {need.how_to_give()}") for need in missing_needs(method, given, environ)]
    for need in needs_of(method):
        if need.available is None or need.brought_by_caller or any(need is n for n, _ in unmet):
            continue
        value = need.value(given.get(need.name), environ)
        if need.name in optional and _blank(value):
            continue
        check = load_target(need.available, error=NeedDefinitionError)
        why = next((reason for item in (names_of(value) if need.many else [value])
                    if (reason := check(item, NeedContext(gallery=gallery)))), None)
        if why:
            unmet.append((need, why))
    return unmet


def check_given(needs: Iterable[Need], given: Mapping[str, Any] | None = None, *,
                environ: Mapping[str, str] | None = None, defaults: bool = True) -> None:
    """Run each need's :attr:`Need.check` on what an operator gave (``given`` by need and endpoint name, else
    ``$env_var`` when ``environ`` is read, else the default with ``defaults``): a misspelt name, a missing extra
    or a dead endpoint is one line now, before a server starts or a command loads its first model."""
    given = dict(given or {})
    for need in needs:
        if need.check is None or need.brought_by_caller:
            continue
        value = need.value(given.get(need.name), environ, default=defaults)
        if _blank(value):
            continue
        endpoint = need.endpoint_value(given.get(need.endpoint.key) if need.endpoint else None, environ)
        check = load_target(need.check, error=NeedDefinitionError)
        for item in (names_of(value) if need.many else [value]):
            check(item, NeedContext(endpoint=endpoint, check=True, need=need))


# --- what a server's caller may choose ------------------------------------------------------------


def operator_only(needs: Iterable[Need]) -> dict[str, tuple[str, str]]:
    """``{setting: (environment variable, option)}`` that only a server's operator sets: every endpoint, and
    each need a caller may not choose (a folder, a model path)."""
    found: dict[str, tuple[str, str]] = {}
    for need in needs:
        if need.endpoint is not None:
            found[need.endpoint.key] = (need.endpoint.env_var, need.endpoint.cli_option)
        if need.config_key is None and need.env_var:
            found[need.name] = (need.env_var, need.cli_option or f"${need.env_var}")
    return found


def choosable(needs: Iterable[Need]) -> dict[str, tuple[str | None, str]]:
    """``{configurable key: (environment variable, option)}`` a caller may choose among what the operator allowed."""
    return {need.config_key: (need.env_var, need.cli_option or f"${need.env_var}")
            for need in needs if need.config_key is not None}


def check_caller_choices(configurable: Mapping[str, Any], needs: Iterable[Need], *, environ: Mapping[str, str],
                         allowed: Mapping[str, Iterable[str]], front: str = "pictrieve serve",
                         also_operator_only: Mapping[str, tuple[str, str]] | None = None,
                         also_choosable: Mapping[str, tuple[str | None, str]] | None = None) -> None:
    """Refuse, in one line (:class:`NeedNotAllowed`), a caller's ``configurable`` that names

    - a setting only the operator sets (:func:`operator_only`, and ``also_operator_only``) with a value other
      than the operator's own;
    - a choosable setting (:func:`choosable`, and ``also_choosable``) with a value that is neither the
      operator's own (``$env_var``, else the need's default) nor one it ``allowed``; a :attr:`Need.many`
      value may list several names (commas): each must be allowed.

    ``front`` is the command that starts the server (the messages say how its operator allows a value)."""
    needs = list(needs)
    by_key = {need.config_key: need for need in needs if need.config_key}
    for key, (env, option) in {**operator_only(needs), **(also_operator_only or {})}.items():
        value = configurable.get(key)
        if _blank(value) or str(value) == environ.get(env, ""):
            continue
        raise NeedNotAllowed(f"configurable.{key} is chosen by the server's operator, not by a run: the operator "
                             f"sets it with `{front} {option}` (or ${env})")
    for key, (env, option) in {**choosable(needs), **(also_choosable or {})}.items():
        value = configurable.get(key)
        if _blank(value):
            continue
        need = by_key.get(key)
        own = (environ.get(env, "") if env else "") or (need.default if need else "") or ""
        many = bool(need and need.many)
        names = names_of(str(value)) if many else [str(value)]
        permitted = set(allowed.get(key, ())) | ({own} | set(names_of(own)) if own else set())
        refused = [name for name in names if name not in permitted]
        if refused or not isinstance(value, str):
            choices = ", ".join(sorted(permitted)) or "only the server's own"
            raise NeedNotAllowed(
                f"configurable.{key}={str(value)[:80]!r} is not allowed on this server (allowed: {choices}); "
                f"its operator allows values with `{front} --allow {key}=VALUE[,VALUE]` or sets it with {option}")


__all__ = ["NEEDS", "Endpoint", "MissingNeedError", "Need", "NeedContext", "NeedDefinitionError", "NeedNotAllowed",
           "NeedUnavailable",
           "RESERVED_CONFIG_KEYS", "all_needs", "build_given", "check_caller_choices", "check_given", "choosable", "missing_needs", "names_of", "unmet_needs", "need_clashes", "needs_of", "operator_only",
           "resolve_needs"]
