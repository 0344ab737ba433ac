"""Deprecated alias of :mod:`pictrieve.agents.settings` (run settings as LangGraph context), kept for one release."""

from pictrieve.agents import settings
from pictrieve.tools.core.deprecation import moved_module

__getattr__ = moved_module(__name__, "moved to pictrieve.agents.settings", settings)
