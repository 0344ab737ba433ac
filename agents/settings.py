"""Run settings: what a caller may change per run, passed as LangGraph *context*, never kept in state.

Every method declares its settings as a dataclass deriving from :class:`RunSettings` and compiles its
graph with ``StateGraph(..., context_schema=ThatClass)``. LangGraph then

- accepts them per run: ``graph.invoke(inputs, context={"shown_k": 5})`` or an instance;
  a dict is turned into the dataclass, so an unknown key is a ``TypeError`` naming it;
- shows them in LangGraph Studio and the server's assistant schema (``graph.get_context_jsonschema()``);
- hands them to nodes as ``runtime.context`` (``None`` when the caller passed nothing: nodes call
  :func:`settings_of` to get the defaults instead).

Names never clash across methods: ``shown_k`` (images shown to a person), ``candidate_k`` (images a
method reasons over), ``k`` (images returned), ``sample_top_k`` (top-k sampling of a language model).
Values are checked in ``__post_init__`` by :meth:`RunSettings.validate` so a bad value fails at the
start of a run with a message that says which setting and what is allowed.

Each field says what it is in its type: ``k: Annotated[int, Field(description="How many images to
return.")] = 10`` (pydantic's ``Field``). LangGraph puts that description in the graph's JSON schemas (so
Studio and the server's assistant schema show it), and :func:`describe_fields` reads it, so ``pictrieve
methods``, the web page, MCP and the docs show it with the field's type and default.

The module lives below ``graphs`` so that each method's folder, ``agents/<method>/``, can hold its own
settings.
"""

from __future__ import annotations

import functools
import json
import types
import typing
from dataclasses import MISSING, asdict, dataclass, fields, is_dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pictrieve.errors import PictrieveError

if TYPE_CHECKING:  # pragma: no cover
    from langgraph.runtime import Runtime

S = TypeVar("S", bound="RunSettings")

MAX_TEXT = 2000
"""The most characters of one text a caller sends to any front end: a query, a description, a question, an
answer (the web page, ``pictrieve serve``, MCP). One bound for all, so a text accepted by one is accepted by
every other; a person says a search in far fewer words, and a megabyte of query is only load."""


class SettingsError(PictrieveError, ValueError):
    """A run setting with a value it cannot take."""


@dataclass
class RunSettings:
    """Base of every method's settings: validation and conversion helpers."""

    def __post_init__(self) -> None:
        self.check_bounds()
        self.validate()

    def check_bounds(self) -> None:
        """Raise :class:`SettingsError` for a value outside its field's declared bounds: ``Field(le=...)`` (and
        ``ge``, ``lt``, ``gt``, ``max_length``) in the field's ``Annotated`` type. Every setting that costs work per
        unit (rounds, questions, attempts, tokens, ``*_k`` counts) declares an upper bound, so no caller of any
        front end can make one run take hours; the bounds show in the graph's JSON schema (Studio, MCP)."""
        for name, bounds in _field_bounds(type(self)).items():
            value = getattr(self, name, None)
            if value is None or isinstance(value, bool):
                continue
            for kind, limit in bounds:
                measured = len(value) if kind == "max_length" and hasattr(value, "__len__") else value
                if not isinstance(measured, (int, float)):
                    continue
                broken = {"le": measured > limit, "lt": measured >= limit, "ge": measured < limit,
                          "gt": measured <= limit, "max_length": measured > limit}[kind]
                if broken:
                    said = {"le": "at most", "lt": "below", "ge": "at least", "gt": "above",
                            "max_length": "at most this long:"}[kind]
                    raise SettingsError(f"{name} must be {said} {limit}, got {str(value)[:60]!r}"
                                        if kind == "max_length" else f"{name} must be {said} {limit}, got {value!r}")

    def validate(self) -> None:
        """Raise :class:`SettingsError` for a value out of range (subclasses extend)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def coerce(cls: type[S], value: "S | dict[str, Any] | None") -> S:
        """An instance from an instance, a dict (unknown keys refused with the known ones) or ``None``."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(cls.names()))
            if unknown:
                raise SettingsError(
                    f"unknown setting(s) {', '.join(unknown)} for {cls.__name__}; known: {', '.join(cls.names())}"
                )
            return cls(**value)
        raise SettingsError(f"expected {cls.__name__} or a dict of its fields, got {type(value).__name__}")


@functools.lru_cache(maxsize=None)
def _field_bounds(cls: type) -> dict[str, list[tuple[str, Any]]]:
    """``{field: [(kind, limit), ...]}`` from each field's ``Annotated[..., Field(le=...)]`` constraints."""
    bounds: dict[str, list[tuple[str, Any]]] = {}
    for name, hint in _type_hints(cls, extras=True).items():
        found = []
        for meta in getattr(hint, "__metadata__", ()):
            for constraint in [meta, *getattr(meta, "metadata", ())]:
                for kind in ("le", "lt", "ge", "gt", "max_length"):
                    limit = getattr(constraint, kind, None)
                    if isinstance(limit, (int, float)) and not isinstance(limit, bool):
                        found.append((kind, limit))
        if found:
            bounds[name] = list(dict.fromkeys(found))
    return bounds


def settings_of(runtime: "Runtime[Any] | None", cls: type[S]) -> S:
    """The run's settings from a node's ``runtime`` (defaults when the caller passed no context)."""
    return cls.coerce(getattr(runtime, "context", None))


def require_positive(settings: RunSettings, *names: str) -> None:
    """Raise :class:`SettingsError` unless each named int setting is >= 1 (``None`` allowed)."""
    for name in names:
        value = getattr(settings, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise SettingsError(f"{name} must be a whole number >= 1, got {value!r}")


# --- describing a schema (settings dataclasses, input/output TypedDicts) as JSON ---------------------


def describe_fields(cls: type) -> list[dict[str, Any]]:
    """One JSON-able record per field of a settings dataclass or a TypedDict, in declaration order.

    Each record has ``name``, ``type`` (as written, e.g. ``"int | None"``), ``description`` (the field's
    ``Field(description=...)``) and, for a dataclass, ``default`` (JSON-able, else its
    ``repr``) and its ``maximum`` when it declares one (``Field(le=...)``) or, for a TypedDict, ``required``. A
    ``Literal`` field also lists its ``choices``.
    The description is the field's own (:func:`field_descriptions`), never read from source code.
    """
    hints = _type_hints(cls)
    docs = field_descriptions(cls)
    records: list[dict[str, Any]] = []
    if is_dataclass(cls):
        for f in fields(cls):
            record = _type_record(f.name, hints.get(f.name, f.type), docs)
            default = f.default if f.default is not MISSING else (
                f.default_factory() if f.default_factory is not MISSING else MISSING)  # type: ignore[misc]
            if default is not MISSING:
                record["default"] = _jsonable(default)
            most = [limit for kind, limit in _field_bounds(cls).get(f.name, []) if kind == "le"]
            if most:
                record["maximum"] = most[0]
            records.append(record)
        return records
    required = set(getattr(cls, "__required_keys__", ()))
    for name, hint in _type_hints(cls, extras=True).items():
        # With postponed annotations ``__required_keys__`` misses NotRequired[...]: read the hint itself.
        marker = typing.get_origin(hint)
        needed = False if marker is typing.NotRequired else True if marker is typing.Required else name in required
        records.append({**_type_record(name, hints.get(name, hint), docs), "required": needed})
    return records


def parse_setting(cls: type[RunSettings], name: str, text: str) -> Any:
    """The value of setting ``name`` of ``cls`` from command-line text (``"3"``, ``"true"``, ``"a,b"``).

    Parsed by the field's type: numbers, booleans (true/false/yes/no/1/0), ``none``/``null`` for an
    optional field, lists as comma-separated text or JSON; anything else is kept as text. The settings
    class validates the value afterwards.
    """
    hints = _type_hints(cls)
    if name not in hints:
        raise SettingsError(f"unknown setting {name!r} for {cls.__name__}; known: {', '.join(cls.names())}")
    return _parse(hints[name], text.strip(), name)


def field_descriptions(cls: type) -> dict[str, str]:
    """``{field: description}`` from each field's ``Annotated[..., Field(description=...)]`` (pydantic's
    ``Field``, which LangGraph's schemas and Studio show too), over ``cls`` and the classes it derives from.

    A ``typing_extensions.Doc`` in the ``Annotated`` is read as well. Fields without one are left out.
    """
    descriptions: dict[str, str] = {}
    for name, hint in _type_hints(cls, extras=True).items():
        text = _description(hint)
        if text:
            descriptions[name] = " ".join(text.split())
    return descriptions


def _description(hint: Any) -> str | None:
    while typing.get_origin(hint) in (typing.NotRequired, typing.Required):
        hint = typing.get_args(hint)[0]
    for meta in getattr(hint, "__metadata__", ()):
        text = getattr(meta, "description", None) or getattr(meta, "documentation", None)
        if isinstance(text, str):
            return text
    return None


def type_name(hint: Any) -> str:
    """A type as a person writes it: ``int``, ``int | None``, ``list[str]``, ``'off' | 'guides'``."""
    if hint is type(None) or hint is None:
        return "None"
    if isinstance(hint, str):
        return hint
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin in (typing.Annotated, typing.NotRequired, typing.Required):
        return type_name(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    return getattr(hint, "__name__", str(hint))


def _schema_classes(cls: type) -> list[type]:
    """``cls`` and the schema classes it derives from, nearest first (TypedDicts keep theirs in
    ``__orig_bases__``, dataclasses in ``__mro__``)."""
    if is_dataclass(cls):
        return [k for k in cls.__mro__ if is_dataclass(k)]
    out: list[type] = []
    pending = [cls]
    while pending:
        klass = pending.pop(0)
        if klass in out or not isinstance(klass, type) or klass is dict:
            continue
        out.append(klass)
        pending.extend(b for b in getattr(klass, "__orig_bases__", ()) if isinstance(b, type))
    return out


def _type_hints(cls: type, extras: bool = False) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=extras)
    except Exception:  # noqa: BLE001  (a forward reference that does not resolve: keep the written text)
        hints: dict[str, Any] = {}
        for klass in reversed(_schema_classes(cls)):
            hints.update(getattr(klass, "__annotations__", {}))
        return hints


def _type_record(name: str, hint: Any, docs: dict[str, str]) -> dict[str, Any]:
    record: dict[str, Any] = {"name": name, "type": type_name(hint), "description": docs.get(name, "")}
    choices = _literal_choices(hint)
    if choices:
        record["choices"] = choices
    return record


def _literal_choices(hint: Any) -> list[Any]:
    if typing.get_origin(hint) is typing.Literal:
        return list(typing.get_args(hint))
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [c for a in typing.get_args(hint) for c in _literal_choices(a)]
    return []


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


_TRUE, _FALSE, _NONE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}, {"none", "null"}


def _parse(hint: Any, text: str, name: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) < len(args) and text.lower() in _NONE:
            return None
        errors = []
        for option in options:
            try:
                return _parse(option, text, name)
            except SettingsError as exc:
                errors.append(str(exc))
        raise SettingsError(errors[0] if errors else f"{name}: cannot read {text!r}")
    if origin is typing.Literal:
        for choice in args:
            if str(choice) == text:
                return choice
        raise SettingsError(f"{name} must be one of {', '.join(map(str, args))}, got {text!r}")
    if hint is bool:
        if text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        raise SettingsError(f"{name} must be true or false, got {text!r}")
    if hint in (int, float):
        try:
            return hint(text)
        except ValueError:
            raise SettingsError(f"{name} must be a {'whole ' if hint is int else ''}number, got {text!r}") from None
    if origin in (list, tuple):
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise SettingsError(f"{name}: {text!r} is not a JSON list ({exc.msg})") from None
        parts = [p.strip() for p in text.split(",") if p.strip()]
        return [_parse(args[0], p, name) for p in parts] if args else parts
    if origin is dict or hint is dict:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise SettingsError(f"{name}: {text!r} is not a JSON object ({exc.msg})") from None
    return text
