"""One process-wide cache of loaded models, shared between instances and threads.

Loading a model costs seconds and hundreds of MB; several embedders, captioners or chat models in
one process should share it. :func:`shared_model` builds the value for a key once, even when many
threads ask at the same moment (one lock per key, so two *different* models can load in
parallel), and returns that same object afterwards. Shared models are for inference only: code
that trains or modifies a model must load its own copy.

Keys are tuples that say everything the built object depends on, e.g.
``("sentence-encoder", "cpu")`` or ``("causal-lm", name, device)``.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Hashable, TypeVar

T = TypeVar("T")

_models: dict[Hashable, Any] = {}
_key_locks: dict[Hashable, threading.Lock] = {}
_registry_lock = threading.Lock()


def shared_model(key: Hashable, build: Callable[[], T]) -> T:
    """The object cached under ``key``, calling ``build()`` once if there is none yet.

    If ``build`` raises, nothing is cached and the next call tries again.
    """
    try:
        return _models[key]
    except KeyError:
        pass
    with _registry_lock:
        lock = _key_locks.setdefault(key, threading.Lock())
    with lock:
        if key not in _models:
            _models[key] = build()
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
