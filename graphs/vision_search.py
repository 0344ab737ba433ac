"""Deprecated alias of :mod:`pictrieve.graphs.vsa` (the method's one name), kept for one release.

Importing it warns; every name is looked up in the new module, so old imports keep working meanwhile.
"""

import warnings

from pictrieve.graphs import vsa as _renamed

warnings.warn(
    "pictrieve.graphs.vision_search is renamed pictrieve.graphs.vsa; import that instead "
    "(this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)


def build_vision_search_graph(*args, **kwargs):
    """Deprecated name of :func:`pictrieve.graphs.vsa.build_vsa_graph`."""
    warnings.warn("build_vision_search_graph is renamed build_vsa_graph (pictrieve.graphs.vsa)",
                  DeprecationWarning, stacklevel=2)
    return _renamed.build_vsa_graph(*args, **kwargs)


def __getattr__(name: str):
    return getattr(_renamed, name)
