"""Optional dependencies (pyproject's extras), checked when an option that needs one is given.

An option that needs an extra (``--search ddgs``, a ``diffusers:`` visualizer, NEEDLE's ``reducer=umap``,
``pictrieve ui``, ...) is checked here as the command starts, before any model loads: ``--search ddgs``
without the web extra was refused only after 27 s of photo analysis. The check finds the extra's modules
without importing them (cheap: Ray or diffusers take seconds to import), so a module that is there but
broken still fails later, at its import, with its own error.
"""

from __future__ import annotations

import importlib.util

from pictrieve.errors import PictrieveError

EXTRAS: dict[str, tuple[str, ...]] = {
    "web": ("ddgs|duckduckgo_search", "trafilatura"),
    "generation": ("diffusers", "accelerate"),
    "needle": ("umap",),
    "scale": ("ray",),
    "places": ("reverse_geocoder",),
    "ui": ("fastapi", "uvicorn", "multipart"),
    "mcp": ("mcp",),
}
"""The modules each extra provides that pictrieve imports (``a|b``: either will do)."""


class MissingExtraError(PictrieveError, ImportError):
    """An option needs an extra that is not installed; the message names it and the pip command."""

    def __init__(self, problem: str, *, extra: str) -> None:
        super().__init__(problem, fix=f"pip install 'pictrieve[{extra}]'")
        self.extra = extra


def installed(module: str) -> bool:
    """Whether ``module`` (top-level name) can be found, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a broken half-import in sys.modules
        return False


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` (see :data:`EXTRAS`) that cannot be found here."""
    return [choice for choice in EXTRAS[extra] if not any(installed(name) for name in choice.split("|"))]


def require_extra(extra: str, what: str) -> None:
    """Raise :class:`MissingExtraError` (``WHAT needs the EXTRA extra (M is missing); pip install
    'pictrieve[EXTRA]'``) unless every module of ``extra`` is installed."""
    missing = missing_modules(extra)
    if missing:
        names = ", ".join(choice.split("|")[0] for choice in missing)
        raise MissingExtraError(f"{what} needs the {extra} extra ({names} not installed)", extra=extra)
