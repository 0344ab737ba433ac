"""Turning anticipated failures into one clear line and a non-zero exit code."""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from typing import Iterator

import click

from pictrieve.errors import PictrieveError

EXIT_USER_ERROR = 2


@contextmanager
def friendly_errors() -> Iterator[None]:
    """Print ``error: <message>`` for pictrieve errors and missing files; full traceback with -vv."""
    try:
        yield
    except (PictrieveError, FileNotFoundError) as exc:
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            raise
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_USER_ERROR)
