"""Turning anticipated failures into one clear line and a non-zero exit code."""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from typing import Iterator

import click

from pictrieve.errors import PictrieveError

EXIT_USER_ERROR = 2

# Library errors describe the Python fix; on the command line the flag that does the same is added.
_CLI_HINTS: dict[str, str] = {
    "EmptyGalleryError": "add photos with `pictrieve index PHOTOS --gallery GALLERY` (with --embedder NAME for another embedder)",
    "AmbiguousEmbedderError": "choose one with --embedder NAME (`pictrieve info --gallery GALLERY` lists them)",
    "UnknownEmbedderError": "choose one with --embedder NAME",
    "UnknownChatModelError": "choose one with --llm NAME",
}


def cli_hint(exc: BaseException) -> str | None:
    """The command-line form of the fix an error's message describes, if there is one."""
    for cls in type(exc).__mro__:
        if cls.__name__ in _CLI_HINTS:
            return _CLI_HINTS[cls.__name__]
    return None


@contextmanager
def friendly_errors() -> Iterator[None]:
    """Print ``error: <message>`` for pictrieve errors and missing files; full traceback with -vv."""
    try:
        yield
    except (PictrieveError, FileNotFoundError) as exc:
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            raise
        hint = cli_hint(exc)
        click.echo(f"error: {exc}" + (f"\n  on the command line: {hint}" if hint else ""), err=True)
        sys.exit(EXIT_USER_ERROR)
