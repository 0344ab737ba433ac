"""Deprecated alias of :mod:`pictrieve.graphs.qc2` (the method's one name), kept for one release."""

from pictrieve.graphs import qc2
from pictrieve.tools.core.deprecation import moved_module

__getattr__ = moved_module(__name__, "is renamed pictrieve.graphs.qc2", qc2)
