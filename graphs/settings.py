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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

from langgraph.runtime import Runtime

from pictrieve.errors import PictrieveError

S = TypeVar("S", bound="RunSettings")


class SettingsError(PictrieveError, ValueError):
    """A run setting with a value it cannot take."""


@dataclass
class RunSettings:
    """Base of every method's settings: validation and conversion helpers."""

    def __post_init__(self) -> None:
        self.validate()

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


def settings_of(runtime: Runtime[Any] | None, cls: type[S]) -> S:
    """The run's settings from a node's ``runtime`` (defaults when the caller passed no context)."""
    return cls.coerce(getattr(runtime, "context", None))


def require_positive(settings: RunSettings, *names: str) -> None:
    """Raise :class:`SettingsError` unless each named int setting is >= 1 (``None`` allowed)."""
    for name in names:
        value = getattr(settings, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise SettingsError(f"{name} must be a whole number >= 1, got {value!r}")
