"""Deprecated alias of :mod:`pictrieve.graphs.plugir` (the method's one name), kept for one release.

Importing it warns; every name is looked up in the new module, so old imports keep working meanwhile.
"""

import warnings

from pictrieve.graphs import plugir as _renamed

warnings.warn(
    "pictrieve.graphs.interactive_retrieval is renamed pictrieve.graphs.plugir; import that instead "
    "(this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    return getattr(_renamed, name)
