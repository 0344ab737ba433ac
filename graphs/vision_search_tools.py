"""Deprecated alias of :mod:`pictrieve.integrations.langchain_tools` (the LangChain tools are a front end, not a
graph), kept for one release."""

from pictrieve.integrations import langchain_tools
from pictrieve.tools.core.deprecation import moved_module

__getattr__ = moved_module(__name__, "moved to pictrieve.integrations.langchain_tools", langchain_tools)
