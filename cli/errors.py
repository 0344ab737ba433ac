"""Turning anticipated failures into one clear line and a non-zero exit code.

Library errors say what to change in Python (``pass embedder=... to Gallery.open``); here each
error type gets the matching command-line hint, so the CLI user reads the flag to use.
"""

from __future__ import annotations

import logging
import shlex
import sys
from contextlib import contextmanager
from typing import Iterator

import click

from pictrieve.errors import PictrieveError

EXIT_USER_ERROR = 2


def cli_hint(exc: BaseException) -> str | None:
    """The command-line advice for a library error, or ``None``.

    A hint names the gallery the error is about when the error knows it (``GalleryError.location``,
    quoted for the shell), and the placeholder ``GALLERY`` otherwise.
    """
    from pictrieve.vectorstore import errors as gallery_errors

    location = getattr(exc, "location", None)
    gallery = shlex.quote(location) if location else "GALLERY"
    hints: list[tuple[type[BaseException], str]] = [
        (gallery_errors.GalleryUnreachableError,
         "start the Chroma server again and re-run the same `pictrieve index` command: it resumes where it stopped"),
        (gallery_errors.NotAGalleryError,
         f"index photos into it with `pictrieve index PHOTOS --gallery {gallery}`"),
        (gallery_errors.EmptyGalleryError,
         f"index photos first with `pictrieve index PHOTOS --gallery {gallery}`, or pick another of the "
         f"gallery's embedders with --embedder (see `pictrieve info --gallery {gallery}`)"),
        (gallery_errors.DimensionMismatchError,
         "choose the embedder the gallery was built with (--embedder; `pictrieve info` lists them)"),
        (gallery_errors.GalleryPermissionError, "pass a --gallery location you can write to"),
        (gallery_errors.GalleryBusyError, "wait for the other `pictrieve` command to finish"),
        (gallery_errors.MissingFoldersError,
         f"reconnect them, or if they are gone for good, check with `pictrieve sync --gallery {gallery} "
         "--dry-run` and pass --allow-missing-folders"),
        (gallery_errors.LargeRemovalError,
         f"check with `pictrieve sync --gallery {gallery} --dry-run`, then confirm with --yes"),
    ]
    for error_type, hint in hints:
        if isinstance(exc, error_type):
            return hint
    by_name = {  # errors of other packages' families, matched by class name to avoid importing them
        "UnknownEmbedderError": "choose one with --embedder NAME",
        "UnknownChatModelError": "choose one with --llm NAME",
    }
    for cls in type(exc).__mro__:
        if cls.__name__ in by_name:
            return by_name[cls.__name__]
    if isinstance(exc, gallery_errors.GalleryError) and str(exc).startswith("no gallery at"):
        return f"create it with `pictrieve index PHOTOS --gallery {gallery}`"
    return None


def error_line(exc: BaseException) -> str:
    """``error: <message>`` plus the command-line hint, on one line.

    An error that keeps its Python advice apart (``PictrieveError(problem, fix=...)``) has that
    advice replaced by the hint: a command-line user is not told to call ``Gallery.open``.
    """
    hint = cli_hint(exc)
    if hint and getattr(exc, "fix", None):
        return f"error: {exc.problem}; {hint}"  # type: ignore[attr-defined]
    return f"error: {exc}" + (f" (command line: {hint})" if hint else "")


@contextmanager
def friendly_errors() -> Iterator[None]:
    """Print one ``error:`` line for pictrieve errors, missing files and a torch/torchvision mismatch;
    the full traceback with -vv."""
    from pictrieve.tools.core.torch_stack import torch_stack_error

    try:
        yield
    except (PictrieveError, FileNotFoundError) as exc:
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            raise
        click.echo(error_line(exc), err=True)
        sys.exit(EXIT_USER_ERROR)
    except Exception as exc:  # an install problem surfacing from deep inside a library's import
        problem = torch_stack_error(exc)
        if problem is None or logging.getLogger().isEnabledFor(logging.DEBUG):
            raise
        click.echo(error_line(problem), err=True)
        sys.exit(EXIT_USER_ERROR)
