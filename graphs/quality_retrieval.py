"""Deprecated alias of :mod:`pictrieve.graphs.qc2` (the method's one name), kept for one release.

Importing it warns; every name is looked up in the new module, so old imports keep working meanwhile.
"""

import warnings

from pictrieve.graphs import qc2 as _renamed

warnings.warn(
    "pictrieve.graphs.quality_retrieval is renamed pictrieve.graphs.qc2; import that instead "
    "(this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    return getattr(_renamed, name)
