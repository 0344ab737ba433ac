"""Deprecated alias of :mod:`pictrieve.agents.settings` (run settings as LangGraph context), kept for one release.

The classes moved below ``graphs`` so that each method's folder, ``agents/<method>/``, can declare its own
settings; importing them from here warns.
"""

import warnings

from pictrieve.agents import settings as _moved

warnings.warn(
    "pictrieve.graphs.settings moved to pictrieve.agents.settings; import from there "
    "(this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    return getattr(_moved, name)
