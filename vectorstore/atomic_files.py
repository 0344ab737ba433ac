"""Files kept beside a gallery (its keyword index, its filter columns) written so that a crash or a reader never
finds a half-written one, and saved by one process at a time."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """One saver at a time per folder (other processes wait; readers never do)."""
    with open(folder / ".lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def write_atomically(path: Path, write: Callable[[Any], Any]) -> None:
    """Write ``path`` through a temporary file beside it, flushed to disk, then renamed over it."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(temporary, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
