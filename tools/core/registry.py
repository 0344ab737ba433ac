"""One registry mechanism for every family of named things pictrieve builds from a string.

Embedders (``offline``, ``open_clip:ViT-B-32/laion2b_s34b_b79k``), chat models, captioners,
detectors, visualizers (text-to-image), web-search backends and retrieval methods are all chosen by
a name of the form ``family`` or ``family:spec``, like ``open_clip.create_model``'s names. A
:class:`Registry` maps each family to a builder, given as a callable or as a lazy
``"module:attribute"`` string so that listing the choices (``--help``, error messages) never imports
torch. ``registry.create("family:spec", **kwargs)`` calls ``builder(spec, **kwargs)``.

>>> EMBEDDERS.register("mine", "my_package.embedder:build")   # users add their own families
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from pictrieve.errors import PictrieveError

T = TypeVar("T")


class UnknownNameError(PictrieveError, ValueError):
    """A name whose family no registry entry builds."""


@dataclass(frozen=True)
class Entry:
    """One registered family: its builder (callable or ``"module:attribute"``) and a one-line help."""

    family: str
    builder: Callable[..., Any] | str
    description: str = ""

    def load(self) -> Callable[..., Any]:
        """The builder itself, importing its module on first use."""
        return load_target(self.builder)


class Registry(Generic[T]):
    """Families of one kind of thing (``kind`` names it in messages), each built from ``family:spec``.

    ``example`` is shown in the error for an unknown name, so the message says what to type.
    ``error`` is the exception class raised for unknown names (a subclass of :class:`UnknownNameError`).
    """

    def __init__(self, kind: str, *, example: str = "", error: type[UnknownNameError] = UnknownNameError) -> None:
        self.kind = kind
        self.example = example
        self.error = error
        self._entries: dict[str, Entry] = {}

    def register(self, family: str, builder: Callable[..., T] | str, description: str = "") -> None:
        """Make ``family`` and ``family:spec`` names build with ``builder(spec, **kwargs)``."""
        if not family or ":" in family:
            raise ValueError(f"a {self.kind} family name must be non-empty and contain no ':', got {family!r}")
        self._entries[family] = Entry(family, builder, description)

    def families(self) -> list[str]:
        """The registered family names, sorted."""
        return sorted(self._entries)

    def entries(self) -> list[Entry]:
        """The registered entries, sorted by family."""
        return [self._entries[name] for name in self.families()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and split_name(name)[0] in self._entries

    def check(self, name: str) -> str:
        """``name`` stripped, if its family is registered; else raise ``self.error`` listing the choices."""
        family, _ = split_name(name)
        if family not in self._entries:
            hint = f" (e.g. {self.example})" if self.example else ""
            raise self.error(f"unknown {self.kind} {name!r}; known: {', '.join(self.families())}{hint}")
        return name.strip()

    def builder_for(self, name: str) -> tuple[Callable[..., T], str]:
        """The builder of ``name``'s family and the ``spec`` part of the name."""
        family, spec = split_name(self.check(name))
        return self._entries[family].load(), spec

    def create(self, name: str, **kwargs: Any) -> T:
        """Build ``name``: ``builder(spec, **kwargs)``."""
        builder, spec = self.builder_for(name)
        return builder(spec, **kwargs)


def load_target(target: Any, *, error: type[Exception] = ValueError) -> Any:
    """The object a ``"module:attribute"`` string names, importing the module (``attribute`` may be
    dotted: ``"pkg.mod:Class.method"``); any other value is returned as it is.

    The one loader of such strings: registry builders, a method's builder and schemas
    (:mod:`pictrieve.agents.method`), the command line's subcommands. A string not of that form raises
    ``error`` (callers pass their own error class).
    """
    if not isinstance(target, str):
        return target
    module, sep, attribute = target.partition(":")
    if not sep or not module.strip() or not attribute.strip():
        raise error(f"{target!r} is not of the form 'module:attribute'")
    value: Any = importlib.import_module(module.strip())
    for part in attribute.strip().split("."):
        value = getattr(value, part)
    return value


def split_name(name: str) -> tuple[str, str]:
    """``"family:spec"`` -> ``("family", "spec")``; ``"family"`` -> ``("family", "")``."""
    family, _, spec = str(name).strip().partition(":")
    return family, spec
