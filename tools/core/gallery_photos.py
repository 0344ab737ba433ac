"""Opening a gallery photo for a caller: the file that was indexed, never what a link put in its place.

Indexing stores each photo under its real path (:func:`~pictrieve.tools.core.images.iter_image_files` resolves
links), so the stored path of a photo is one in which no folder and no file is a symbolic link. Someone who can
write into a photo folder (a shared folder, a synced one) can later replace ``photos/X.jpg``, or ``photos``
itself, by a link to any file the server's user may read; a server that opened the stored path as it is would
then send that file to whoever asks for photo X.

:func:`open_gallery_photo` is the one way a server opens a gallery photo for a caller: the page's
``/api/image/<id>``, MCP's ``pictrieve://image/<id>`` resource, the thumbnails in search results
(:func:`~pictrieve.tools.core.thumbnails.jpeg_thumbnail`) and a gallery id given as an image argument (MCP and
LangChain tools, served runs, the page's "more like this" and Ask: :mod:`~pictrieve.tools.core.image_inputs`),
and the pictures VisRet's reader sends a chat model (:func:`load_gallery_image`). It

- opens the path one component at a time from ``/``, each with ``O_NOFOLLOW`` (the folders with ``O_PATH``,
  so a folder one may only pass through still works), so a link anywhere along it is refused, with no gap
  between a check and the open for a swap to slip into;
- opens the file non-blocking and takes it only when it is a regular file (a FIFO put there cannot hold a
  worker; a device is never read), within ``max_bytes``;
- gives its bytes (:meth:`OpenedPhoto.checked`, :func:`read_gallery_photo`) only when they still decode as an
  image within the server's picture budget (:func:`~pictrieve.tools.core.images.load_service_image`), so a
  file swapped for another kind of file is refused too (a file already seen to decode, same device, inode,
  size and modification time, is not decoded again); or decodes them itself (:meth:`OpenedPhoto.image`: a
  thumbnail), never opening the path a second time.

What is refused is said in one line (:class:`ChangedPhotoError`) that names no content and no link target; a
file that is gone is the caller's ``FileNotFoundError``. Where ``os.open`` takes no ``dir_fd`` (Windows), the
path is refused when it is not its own real path, checked just before the open.

Not covered: a hard link is the file itself (Linux's ``fs.protected_hardlinks``, on by default, keeps a user
from hard-linking files they cannot read), and a link that was already in a folder when it was indexed was
followed then by ``index``, as the person indexing asked (see README's threat models).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from pictrieve.errors import PictrieveError
from PIL import Image

from pictrieve.tools.core.images import SERVICE_SIDE, ImageBytes, ImageTooLargeError, load_service_image

MAX_PHOTO_BYTES = 256 * 1024 * 1024
"""Largest gallery photo file read for a caller (a 100 MP TIFF is about 300 MB; the page shows such a photo as
a JPEG of it, decoded within the picture budget)."""
_CHECKED = 4096
"""Files remembered as decoding (their device, inode, size and modification time)."""

_checked: OrderedDict[tuple[str, int, int, int, int], None] = OrderedDict()
_lock = threading.Lock()
_DIR_FLAGS = (getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0))
_FILE_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_BINARY", 0))
_WALKS = os.open in os.supports_dir_fd and hasattr(os, "O_NOFOLLOW")


class ChangedPhotoError(PictrieveError, ValueError):
    """A gallery photo's file is no longer the photo that was indexed (a link, not a regular file, not an
    image), or is larger than a server sends; nothing of it was sent."""


class OpenedPhoto:
    """A gallery photo's file opened by :func:`open_gallery_photo`: a regular file reached through no link."""

    def __init__(self, handle: BinaryIO, info: os.stat_result, path: Path, name: str, max_bytes: int) -> None:
        self.handle, self.name, self.max_bytes = handle, name, max_bytes
        self.key = (str(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        """The file read (path, device, inode, size, modification time): a cache key that changes with it."""

    def read(self) -> bytes:
        """Its bytes, at most ``max_bytes`` (what would be more is refused)."""
        self.handle.seek(0)
        data = self.handle.read(self.max_bytes + 1)
        if len(data) > self.max_bytes:  # grew since it was opened
            raise ChangedPhotoError(f"{self.name} is larger than this server sends ({self.max_bytes / 2**20:g} MiB)")
        return data

    def image(self) -> ImageBytes:
        """Its bytes for the loaders of :mod:`~pictrieve.tools.core.images` (which then never open the path)."""
        return ImageBytes(self.read(), self.name)

    def checked(self, max_pixels: int | None = None) -> bytes:
        """Its bytes, once they are seen to decode as an image within the server's picture budget
        (:func:`~pictrieve.tools.core.images.load_service_image`; a file seen before is not decoded again)."""
        data = self.read()
        with _lock:
            if self.key in _checked:
                _checked.move_to_end(self.key)
                return data
        try:
            load_service_image(ImageBytes(data, self.name), max_pixels=max_pixels)
        except ImageTooLargeError:  # its own line, naming the photo as shown: more pixels than a server decodes
            raise
        except PictrieveError:  # ImageDecodeError: what stands there now is no image (its reason names no content)
            what = "is an empty file now" if not data else "does not decode as an image now"
            raise ChangedPhotoError(f"{self.name} {what}; run `pictrieve index` on its folder again") from None
        with _lock:
            _checked[self.key] = None
            while len(_checked) > _CHECKED:
                _checked.popitem(last=False)
        return data


@contextmanager
def open_gallery_photo(path: str | os.PathLike, *, name: str | None = None,
                       max_bytes: int = MAX_PHOTO_BYTES) -> Iterator[OpenedPhoto]:
    """The gallery photo stored at ``path``, opened as the file that was indexed (see the module docstring):
    the one open every server route that gives a caller a gallery photo's bytes or pixels goes through.
    ``name`` is how the caller knows it (``gallery image ID``), for the one-line refusals.

    Raises :class:`ChangedPhotoError`, ``FileNotFoundError`` when the file is gone, ``OSError`` when it cannot
    be read."""
    shown = name or f"the photo {Path(path).name}"
    fd = _open_without_links(Path(path), shown)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ChangedPhotoError(f"{shown} is no longer a regular file; run `pictrieve index` on its folder again")
        if info.st_size > max_bytes:
            raise ChangedPhotoError(f"{shown} is larger than this server sends ({max_bytes / 2**20:g} MiB)")
        yield OpenedPhoto(handle, info, Path(path), shown, max_bytes)


def read_gallery_photo(path: str | os.PathLike, *, name: str | None = None, max_bytes: int = MAX_PHOTO_BYTES,
                       max_pixels: int | None = None) -> bytes:
    """The bytes of the gallery photo stored at ``path``, opened by :func:`open_gallery_photo` and checked to
    decode as an image (:meth:`OpenedPhoto.checked`)."""
    with open_gallery_photo(path, name=name, max_bytes=max_bytes) as photo:
        return photo.checked(max_pixels)


def load_gallery_image(path: str | os.PathLike, *, name: str | None = None, side: int = SERVICE_SIDE) -> Image.Image:
    """The gallery photo stored at ``path`` decoded for a model that shows or describes it to a caller (VisRet's
    reader of MCP's ``ask_gallery``), through :func:`open_gallery_photo` and within the picture budget, its
    longest side at most ``side``."""
    with open_gallery_photo(path, name=name) as photo:
        return load_service_image(photo.image(), side=side)


def _open_without_links(path: Path, shown: str) -> int:
    """A read-only descriptor of ``path`` (absolute), opened with no symbolic link followed anywhere along it."""
    linked = ChangedPhotoError(f"{shown} was replaced by a link since it was indexed (a link in a photo folder is "
                               "never served); run `pictrieve index` on its folder again")
    if not path.is_absolute():
        raise ChangedPhotoError(f"{shown} has no absolute path in the gallery; run `pictrieve index` again")
    if not _WALKS:  # no openat(): the real path checked just before the open
        if os.path.realpath(path) != os.path.normpath(path):
            raise linked
        return os.open(path, _FILE_FLAGS)
    parts = path.parts
    folder = os.open(parts[0], _DIR_FLAGS)
    try:
        for part in parts[1:-1]:
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=folder)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) and _is_link(part, folder):
                    raise linked from None
                raise
            os.close(folder)
            folder = inner
        try:
            return os.open(parts[-1], _FILE_FLAGS, dir_fd=folder)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK) or _is_link(parts[-1], folder):
                raise linked from None
            raise
    finally:
        os.close(folder)


def _is_link(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False
