"""Old import paths kept for one release: importing one warns, and its names are found where they moved.

A module that moved leaves a two-line alias at its old path::

    from pictrieve.graphs import plugir
    from pictrieve.tools.core.deprecation import moved_module

    __getattr__ = moved_module(__name__, "is renamed pictrieve.graphs.plugir", plugir)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any


def moved_module(old: str, what_happened: str, *new: ModuleType) -> Callable[[str], Any]:
    """Warn that module ``old`` ``what_happened`` (a :class:`DeprecationWarning` attributed to the code that
    imported it), and return the module ``__getattr__`` that looks each name up in ``new``, in order."""
    warnings.warn(f"{old} {what_happened}; import from there (this alias goes in the next release)",
                  DeprecationWarning, stacklevel=3)

    def __getattr__(name: str) -> Any:
        for module in new:
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    return __getattr__
