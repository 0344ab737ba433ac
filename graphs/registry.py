"""The registry of retrieval methods: what the CLI, the evaluation harness, the web page and the
LangGraph server read to find every method. None of them names a method itself.

Methods come from

- **built-ins**: every subpackage ``pictrieve.agents.<method>`` whose ``__init__`` exposes ``METHOD``
  (a :class:`~pictrieve.agents.method.Method`);
- **plugins**: every entry point of the group ``pictrieve.methods`` of an installed distribution, naming a
  ``Method`` or a function of no argument returning one. A plugin that fails to load (an import error,
  not a Method, a name a built-in has) is logged once with its name and skipped: it never breaks the
  command line, the page or the server for the other methods (:func:`skipped_methods` lists them);
- :func:`register_method`, for a method defined in the running program.

They are found on first use and kept; :func:`refresh_methods` looks again (after installing a plugin
into a running process). The contract each method keeps is :mod:`pictrieve.agents.method`'s.

>>> from pictrieve.graphs.registry import get_method
>>> method = get_method("search")
>>> graph = method.build(Gallery.open("./my.gallery"))
>>> graph.invoke({"query": "a dog"}, context={"k": 5})["hits"]
>>> method.describe()["settings"]          # [{"name": "k", "type": "int", "default": 10, ...}]
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import threading
from typing import Any

from pictrieve.agents.method import Method, MethodDefinitionError
from pictrieve.agents.needs import need_clashes
from pictrieve.errors import PictrieveError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "pictrieve.methods"


class UnknownMethodError(PictrieveError, ValueError):
    """No method of that name is registered."""


_lock = threading.RLock()
_methods: dict[str, Method] | None = None
_origins: dict[str, str] = {}
_added: dict[str, Method] = {}
_skipped: list[dict[str, str]] = []


def register_method(method: Method) -> None:
    """Add (or replace) a method defined in this program (installed packages use the entry point group)."""
    if not isinstance(method, Method):
        raise MethodDefinitionError(f"expected a Method, got {type(method).__name__}")
    with _lock:
        _refuse_need_clashes(method, [m for name, m in _all().items() if name != method.name])
        _added[method.name] = method
        if _methods is not None:
            _methods[method.name] = method
            _origins[method.name] = "registered"


def _refuse_need_clashes(method: Method, others: list[Method]) -> None:
    """Refuse ``method`` when one of its own needs clashes with another method's (one name for two different
    needs, or one ``configurable`` key for two): a server would check a run's choice under one need's rule and
    hand it to the other's resolver (:func:`~pictrieve.agents.needs.need_clashes`)."""
    known = [need for other in others for need in other.own_needs]
    clashes = need_clashes(method.own_needs, known)
    if clashes:
        raise MethodDefinitionError(f"method {method.name}: {'; '.join(clashes)} (declared by another method): "
                                    "give its own need another name and config_key")


def unregister_method(name: str) -> None:
    """Remove a method added with :func:`register_method` (built-ins and plugins stay)."""
    with _lock:
        _added.pop(name, None)
        refresh_methods()


def get_method(name: str) -> Method:
    """The method called ``name``; unknown names raise :class:`UnknownMethodError` listing the known ones."""
    try:
        return _all()[name]
    except KeyError:
        raise UnknownMethodError(f"unknown method {name!r}; known: {', '.join(available_methods())}") from None


def available_methods() -> list[str]:
    return sorted(_all())


def methods() -> list[Method]:
    registered = _all()
    return [registered[name] for name in sorted(registered)]


def builtin_methods() -> list[str]:
    """Names of the methods that ship with pictrieve (what the repository's ``langgraph.json`` lists)."""
    _all()
    return sorted(name for name, origin in _origins.items() if origin == "built-in")


def method_origin(name: str) -> str:
    """``"built-in"``, ``"registered"`` or ``"entry point NAME (DISTRIBUTION)"``."""
    get_method(name)
    return _origins[name]


def skipped_methods() -> list[dict[str, str]]:
    """The plugins that failed to load: ``[{"entry_point", "error"}]``."""
    _all()
    return [dict(s) for s in _skipped]


def refresh_methods() -> None:
    """Forget what was found and look again on next use (plugins installed since; each failing one is
    logged again once)."""
    global _methods
    with _lock:
        _methods = None


def _all() -> dict[str, Method]:
    global _methods
    found = _methods
    if found is not None:
        return found
    with _lock:
        if _methods is None:
            _origins.clear()
            _skipped.clear()
            loaded = _builtins()
            _origins.update((name, "built-in") for name in loaded)
            for name, method in _plugins(loaded).items():
                loaded[name] = method
            for name, method in _added.items():
                try:
                    _refuse_need_clashes(method, [m for other, m in loaded.items() if other != name])
                except MethodDefinitionError as exc:  # a plugin installed since it was registered
                    log.warning("skipping the registered method %s: %s", name, exc)
                    _skipped.append({"entry_point": f"registered {name}", "distribution": "this program",
                                     "error": f"MethodDefinitionError: {exc}"})
                    continue
                loaded[name] = method
                _origins[name] = "registered"
            _methods = loaded
        return _methods


def _builtins() -> dict[str, Method]:
    """``METHOD`` of every ``pictrieve.agents.<name>`` package (a broken built-in is a bug: it raises)."""
    import pictrieve.agents as agents

    found: dict[str, Method] = {}
    for info in sorted(pkgutil.iter_modules(agents.__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        method = getattr(importlib.import_module(f"pictrieve.agents.{info.name}"), "METHOD", None)
        if method is None:
            continue
        if not isinstance(method, Method):
            raise MethodDefinitionError(f"pictrieve.agents.{info.name}.METHOD is not a Method")
        found[method.name] = method
    return found


def _plugins(taken: dict[str, Method]) -> dict[str, Method]:
    from importlib.metadata import entry_points

    importlib.invalidate_caches()  # a distribution added to sys.path since the last look
    found: dict[str, Method] = {}
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        where = f"{point.name} = {point.value}"
        distribution = getattr(getattr(point, "dist", None), "name", None) or "unknown distribution"
        try:
            loaded = point.load()
            method = loaded() if callable(loaded) and not isinstance(loaded, Method) else loaded
            if not isinstance(method, Method):
                raise MethodDefinitionError(f"it gave a {type(method).__name__}, not a pictrieve Method")
            if method.name in taken or method.name in found:
                raise MethodDefinitionError(f"the name {method.name!r} is taken by another method")
            _refuse_need_clashes(method, [*taken.values(), *found.values()])
        except Exception as exc:  # noqa: BLE001  (a broken plugin must not break the other methods)
            reason = f"{type(exc).__name__}: {exc}"
            log.warning("skipping the method plugin %s from %s: %s", where, distribution, reason)
            _skipped.append({"entry_point": where, "distribution": distribution, "error": reason})
            continue
        found[method.name] = method
        _origins[method.name] = f"entry point {point.name} ({distribution})"
    return found


def describe_methods() -> list[dict[str, Any]]:
    """:meth:`Method.describe` of every method, with its ``origin`` (``pictrieve methods --json``)."""
    return [{**method.describe(), "origin": method_origin(method.name)} for method in methods()]
