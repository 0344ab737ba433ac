"""Searching a gallery on read-only storage: a private copy of its Chroma files in the user's cache.

Chroma cannot open a database it may not write (chromadb 1.5, embedded ``PersistentClient``; chroma-core issue
1438 asks for a read-only client and is open): on start it inserts a row into ``chroma.sqlite3`` (its
``acquire_write`` table: how it takes SQLite's write lock), and loading a collection's HNSW index saves the
index files again (``header.bin``, ``data_level0.bin``, ``length.bin``, ``link_lists.bin``), so on a read-only
mount even ``count()`` fails with "attempt to write a readonly database". For a gallery folder this process
cannot write (a read-only file system, or files it has no write permission on), searching therefore opens a
copy of the folder's files kept in ``$PICTRIEVE_CACHE/readonly-galleries/``: one folder per gallery, one
copy per state of its files (named by their sizes and modification times), made on first use and again only
when the gallery's files change (checked whenever the gallery is reopened: at start and after another
process's write). Writing to such a gallery is refused (:class:`~pictrieve.vectorstore.errors.
GalleryPermissionError`): a write to the copy would be lost.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path

from pictrieve.tools.core.pypi_assets import cache_root

logger = logging.getLogger(__name__)

COPIES_FOLDER = "readonly-galleries"
"""Under the user's cache: the private copies of read-only galleries."""

PICTRIEVE_FILES = frozenset({".pictrieve-write.lock", ".pictrieve-generation"})
"""pictrieve's own files in a gallery folder (its locks and write counter): read where they are, never copied."""

COMPLETE_MARK = ".complete"
STALE_SECONDS = 24 * 3600
"""A copy of an older state of the gallery unused this long is removed (another process may still read it)."""


def cannot_write(folder: str | os.PathLike) -> bool:
    """Whether this process cannot write the gallery folder ``folder``'s Chroma files: the file system is mounted
    read-only, or the folder, its database or an index file is not writable for this user (root writes anyway,
    unless the mount is read-only). Looks at the folder's top two levels only: Chroma keeps nothing deeper."""
    path = Path(folder).expanduser()
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        pass
    try:
        return any(not os.access(entry, os.W_OK) for entry, _ in _entries(path, with_folders=True))
    except OSError:  # an entry it cannot even read: Chroma reports that in its own words
        return False


def _entries(path: Path, *, with_folders: bool = False) -> list[tuple[Path, os.stat_result]]:
    """The gallery folder's Chroma entries (the folder itself with ``with_folders``), with their ``stat``."""
    found: list[tuple[Path, os.stat_result]] = [(path, path.stat())] if with_folders else []
    for entry in sorted(path.iterdir()):
        if entry.name in PICTRIEVE_FILES:
            continue
        info = entry.stat()
        if entry.is_dir():
            if with_folders:
                found.append((entry, info))
            found += [(inner, inner.stat()) for inner in sorted(entry.iterdir()) if inner.is_file()]
        elif entry.is_file():
            found.append((entry, info))
    return found


def _state(path: Path) -> list[tuple[str, int, int]]:
    """What the copy must follow: each Chroma file's relative path, size and modification time (ns)."""
    return [(str(entry.relative_to(path)), info.st_size, info.st_mtime_ns) for entry, info in _entries(path)]


def copies_of(folder: str | os.PathLike) -> Path:
    """Where the private copies of the gallery folder ``folder`` are kept (by its resolved path)."""
    resolved = str(Path(folder).expanduser().resolve())
    return cache_root() / COPIES_FOLDER / hashlib.sha256(resolved.encode()).hexdigest()[:20]


def private_copy(folder: str | os.PathLike, *, attempts: int = 3) -> Path:
    """A folder in the user's cache holding the same Chroma files as the gallery folder ``folder``, made now when
    the gallery's files changed since the last copy (or there is none). A copy that another process changed
    under way is made again (``attempts`` times), and a half-made copy is never used."""
    path = Path(folder).expanduser()
    root = copies_of(path)
    for _ in range(attempts):
        state = _state(path)
        digest = hashlib.sha256(json.dumps(state).encode()).hexdigest()[:16]
        target = root / digest
        if (target / COMPLETE_MARK).is_file():
            os.utime(target / COMPLETE_MARK)  # in use: not stale
            return target
        size = sum(length for _, length, _ in state)
        logger.warning("gallery folder %s is read-only: searching a private copy of its database (%.1f MB) in %s; "
                       "it is copied again only when the gallery changes", path, size / 1e6, root)
        root.mkdir(parents=True, exist_ok=True)
        part = root / f".{digest}.{os.getpid()}.part"
        shutil.rmtree(part, ignore_errors=True)
        for relative, _, _ in state:
            (part / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path / relative, part / relative)
        if _state(path) != state:  # written meanwhile: copy the new state
            shutil.rmtree(part, ignore_errors=True)
            continue
        (part / COMPLETE_MARK).write_text(json.dumps({"gallery": str(path.resolve()), "files": state}))
        try:
            os.replace(part, target)
        except OSError:  # another process finished the same copy first
            shutil.rmtree(part, ignore_errors=True)
        _remove_stale(root, keep=target)
        return target
    raise OSError(f"gallery folder {path} kept changing while it was copied; try again")


def _remove_stale(root: Path, *, keep: Path) -> None:
    """Remove copies of older states of the gallery that no process has opened for :data:`STALE_SECONDS`."""
    now = time.time()
    for other in root.iterdir():
        if other == keep:
            continue
        mark = other / COMPLETE_MARK
        try:
            last = mark.stat().st_mtime if mark.is_file() else other.stat().st_mtime
        except OSError:
            continue
        if now - last > STALE_SECONDS:
            shutil.rmtree(other, ignore_errors=True)
