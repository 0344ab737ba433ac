"""The scripts of ``benchmarks/`` imported as modules, for the tests that run them briefly.

``benchmarks/`` is no package: its scripts import each other by file name, as Python allows a script
run from its folder (``python benchmarks/load_search.py`` puts ``benchmarks/`` on ``sys.path``).
:func:`benchmark_script` loads a script and the sibling scripts it names, without touching ``sys.path``.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from helpers import REPO_ROOT

BENCHMARKS = REPO_ROOT / "benchmarks"


def benchmark_script(name: str, *siblings: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module, after the ``siblings`` it imports (each once per session)."""
    for module in (*siblings, name):
        if module not in sys.modules:
            spec = importlib.util.spec_from_file_location(module, BENCHMARKS / f"{module}.py")
            loaded = importlib.util.module_from_spec(spec)
            sys.modules[module] = loaded
            spec.loader.exec_module(loaded)
    return sys.modules[name]
