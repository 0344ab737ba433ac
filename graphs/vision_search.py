"""Deprecated alias of :mod:`pictrieve.graphs.vsa` (the method's one name), kept for one release."""

import warnings

from pictrieve.graphs import vsa
from pictrieve.tools.core.deprecation import moved_module

__getattr__ = moved_module(__name__, "is renamed pictrieve.graphs.vsa", vsa)


def build_vision_search_graph(*args, **kwargs):
    """Deprecated name of :func:`pictrieve.graphs.vsa.build_vsa_graph`."""
    warnings.warn("build_vision_search_graph is renamed build_vsa_graph (pictrieve.graphs.vsa)",
                  DeprecationWarning, stacklevel=2)
    return vsa.build_vsa_graph(*args, **kwargs)
