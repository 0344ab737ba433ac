"""The guard in front of :meth:`Gallery.sync <pictrieve.vectorstore.gallery.Gallery.sync>`.

A file that no longer exists may only be out of reach: a photo folder on an unplugged drive looks
exactly like deleted photos, and forgetting them loses their vectors, captions and annotations.
So every sync (the Python call, ``pictrieve sync`` and ``pictrieve index --sync``) refuses when a
whole folder is gone, and wants an explicit go-ahead before removing more than a fifth of the
gallery.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pictrieve.vectorstore.errors import LargeRemovalError, MissingFoldersError

SYNC_CONFIRM_SHARE = 0.2
"""Removing more than this share of a gallery needs ``allow_large`` (``--yes`` on the command line)."""


def gone_folders(paths: Sequence[str]) -> list[str]:
    """The top-most missing folders among the parents of ``paths`` (those whose own parent exists)."""
    roots = set()
    for path in paths:
        folder = Path(path).parent
        if folder.exists():
            continue
        while not folder.parent.exists():
            folder = folder.parent
        roots.add(str(folder))
    return sorted(roots)


def check_removal(missing: Sequence[str], total: int, *, allow_missing_folders: bool = False,
                  allow_large: bool = False, location: str | None = None) -> None:
    """Raise unless removing the ``missing`` paths from a gallery of ``total`` images is safe
    (``location``, the gallery's, is carried by the error for the command line's hint)."""
    if not missing:
        return
    folders = gone_folders(missing)
    if folders and not allow_missing_folders:
        raise MissingFoldersError(
            f"{len(missing)} images are missing because these folders are gone: {', '.join(folders)} "
            "(unplugged drive?); nothing removed",
            fix="reconnect them, or if they are gone for good, check with sync(dry_run=True) and pass "
            "allow_missing_folders=True",
            location=location,
        )
    if not allow_large and len(missing) > SYNC_CONFIRM_SHARE * max(1, total):
        raise LargeRemovalError(
            f"sync would remove {len(missing)} of {total} images whose files are gone; nothing removed",
            fix="check with sync(dry_run=True), then pass allow_large=True",
            location=location,
        )
