"""One process-wide cache of loaded models, shared between instances and threads.

Loading a model costs seconds and hundreds of MB; several embedders, captioners or chat models in
one process should share it. :func:`shared_model` builds the value for a key once, even when many
threads ask at the same moment (one lock per key, so two *different* models can load in
parallel), and returns that same object afterwards. Shared models are for inference only: code
that trains or modifies a model must load its own copy.

Keys are tuples that say everything the built object depends on, e.g.
``("sentence-encoder", "cpu")`` or ``("causal-lm", name, device)``.

A build that can take seconds passes a ``label`` ("the MiniLM sentence encoder"): inside
:func:`announcing_model_loads` it is announced as it starts, so a command that shows its steps says
what it is loading instead of sitting silent in the middle of a step.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, Hashable, TypeVar

T = TypeVar("T")

_models: dict[Hashable, Any] = {}
_key_locks: dict[Hashable, threading.Lock] = {}
_registry_lock = threading.Lock()
_listeners: list[Callable[[str], None]] = []
_recorders = threading.local()


@contextmanager
def announcing_model_loads(listener: Callable[[str], None]) -> Iterator[None]:
    """Within the block, call ``listener(label)`` as each labelled shared model starts to build (in any
    thread), e.g. to print "loading the MiniLM sentence encoder ..." under the step that needs it."""
    with _registry_lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _registry_lock:
            _listeners.remove(listener)


@contextmanager
def recording_builds() -> Iterator[list[Hashable]]:
    """Within the block, the keys of the shared models that *this thread* builds (cache misses it paid for) are
    appended to the yielded list; a value another thread built, or one already cached, is not. A server uses it
    to tell a run's graph made from cached parts from one that loaded a model while the run waited."""
    built: list[Hashable] = []
    stack = getattr(_recorders, "stack", None)
    if stack is None:
        stack = _recorders.stack = []
    stack.append(built)
    try:
        yield built
    finally:
        stack.pop()  # blocks nest last in, first out within a thread


def shared_model(key: Hashable, build: Callable[[], T], label: str | None = None) -> T:
    """The object cached under ``key``, calling ``build()`` once if there is none yet.

    ``label`` names what a build loads, for :func:`announcing_model_loads` (give one when it can take
    seconds). If ``build`` raises, nothing is cached and the next call tries again.
    """
    try:
        return _models[key]
    except KeyError:
        pass
    with _registry_lock:
        lock = _key_locks.setdefault(key, threading.Lock())
    with lock:
        if key not in _models:
            if label:
                for listener in list(_listeners):
                    listener(label)
            _models[key] = build()
            for built in getattr(_recorders, "stack", ()):
                built.append(key)
        return _models[key]


def is_shared(key: Hashable) -> bool:
    """Whether a model is already loaded under ``key`` (nothing is built)."""
    return key in _models


def forget_shared_models(predicate: Callable[[Hashable], bool] | None = None) -> int:
    """Drop cached models (all, or those whose key matches ``predicate``); returns how many.

    Objects still referenced elsewhere stay alive; the next :func:`shared_model` call rebuilds.
    """
    with _registry_lock:
        keys = [key for key in list(_models) if predicate is None or predicate(key)]
        for key in keys:
            _models.pop(key, None)
    return len(keys)
