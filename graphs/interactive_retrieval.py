"""Deprecated alias of :mod:`pictrieve.graphs.plugir` (the method's one name), kept for one release."""

from pictrieve.graphs import plugir
from pictrieve.tools.core.deprecation import moved_module

__getattr__ = moved_module(__name__, "is renamed pictrieve.graphs.plugir", plugir)
