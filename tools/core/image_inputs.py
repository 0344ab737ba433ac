"""Image arguments that come from outside the process: an agent's tool call names a photo as a gallery id,
base64 image data, or a file path, and only paths under the folders the operator allowed may be read.

The MCP server (``pictrieve mcp``) and the LangChain tools (:mod:`pictrieve.integrations.langchain_tools`)
resolve their ``image`` arguments here, so both follow one rule:

- **ids**: a photo of the gallery, looked up by the caller's ``lookup_id`` (the file path comes from the
  gallery, never from the request), read as the file that was indexed
  (:func:`~pictrieve.tools.core.gallery_photos.open_gallery_photo`: a photo replaced by a link is refused) into
  the private folder, so the graph reads what was checked;
- **base64** (or a ``data:image/...;base64,`` URL): decoded, size-capped before decoding, written to a
  private temporary folder that lives as long as the ``with`` block;
- **paths**: only inside an :class:`AllowedDirs` folder, checked on the real path (symlinks and ``..``
  resolved first), so a link inside an allowed folder that points outside it is refused too; the file is
  then read through no link (a link swapped in after the check is refused) into the private folder, so the
  graph reads what was checked. With no allowed folder (the default) no path is read at all.

Every refusal is one line that names no file content; a path outside the allowed folders is refused
before anything is read, with the same words whether or not the file exists. A value that is none of the
three says what each reading found (an unknown id or short base64 is not answered as a path). What is
accepted is then decoded once within a service's memory budget
(:func:`pictrieve.tools.core.images.load_service_image`: a JPEG decoded reduced, any other format above the
pixel budget refused from its header), so a bad or oversized image is refused before any model loads, and a
large one reaches the graph as a reduced copy.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.gallery_photos import open_gallery_photo
from pictrieve.tools.core.images import image_size, load_service_image

DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024
"""Largest image file or decoded base64 image accepted (the web page's upload cap)."""

GALLERY_ID = re.compile(r"[0-9a-f]{24}\Z")
"""The shape of a gallery record id (:func:`pictrieve.vectorstore.chroma_store.path_id`)."""
_BASE64 = re.compile(r"[A-Za-z0-9+/=_\-\s]+\Z")
_DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[\w=.+-]+)*;base64,(?P<data>.*)\Z", re.S | re.I)
MIN_BASE64_CHARS = 64
"""Shorter strings are never read as base64 (no image file is that small), so short names are never decoded."""

ImageLookup = Callable[[str], "str | None"]
"""``lookup_id(value) -> file path`` of a gallery image, or ``None`` when ``value`` is no id of the gallery."""


def gallery_image_lookup(gallery: Any) -> ImageLookup | None:
    """``id -> file path`` over ``gallery`` (anything with ``get(ids)`` returning items with a ``path``; ``None``
    for an id it does not hold), for :func:`image_argument`; ``None`` without a gallery."""
    if gallery is None:
        return None

    def lookup(image_id: str) -> str | None:
        try:
            (item,) = gallery.get([image_id])
        except (KeyError, PictrieveError):  # an unknown id, or one the store refuses (a GalleryError)
            return None
        return item.path

    return lookup


class ImageInputError(PictrieveError, ValueError):
    """An image argument that cannot be used; the message is one line for the caller (a model, a person)."""


class PathNotAllowedError(ImageInputError):
    """A path outside the folders this process may read (nothing was read)."""


@dataclass(frozen=True)
class AllowedDirs:
    """The folders whose files an image argument may name (real paths); empty: no path is allowed."""

    dirs: tuple[Path, ...] = ()

    @classmethod
    def of(cls, dirs: Iterable[str | os.PathLike] | None) -> "AllowedDirs":
        """The allow-list for ``dirs``, each resolved to its real path; a folder that does not exist is an error
        (said when the server starts, not when a file is asked for)."""
        resolved = []
        for folder in dirs or ():
            real = Path(os.path.realpath(Path(folder).expanduser()))
            if not real.is_dir():
                raise ImageInputError(f"allowed folder {folder} is not a folder")
            resolved.append(real)
        return cls(tuple(dict.fromkeys(resolved)))

    def __bool__(self) -> bool:
        return bool(self.dirs)

    def describe(self) -> str:
        return ", ".join(map(str, self.dirs)) if self.dirs else "none"

    def resolve(self, path: str | os.PathLike) -> Path:
        """The real path of ``path`` when it lies inside an allowed folder, else :class:`PathNotAllowedError`.

        Decided on the real path alone (``realpath``: symlinks and ``..`` resolved), before the file is opened
        or even checked for existence, so the answer says nothing about files outside the allowed folders.
        """
        text = os.fspath(path)
        if "\x00" in text:
            raise PathNotAllowedError("the image path holds a NUL character")
        real = Path(os.path.realpath(Path(text).expanduser()))
        if not any(real == folder or real.is_relative_to(folder) for folder in self.dirs):
            raise PathNotAllowedError(self.refusal())
        return real

    def refusal(self) -> str:
        if not self.dirs:
            return ("this server reads no image paths (none were allowed): pass a gallery id or base64 image data, "
                    "or start the server with --allow-dir DIR")
        return (f"the image path is outside the folders this server may read ({self.describe()}); pass a gallery id, "
                "base64 image data, or a path inside one of those folders")


def looks_like_image_data(value: str) -> bool:
    """Whether ``value`` is meant as image data: a ``data:`` URL, or a long run of base64 characters."""
    text = value.strip()
    if _DATA_URL.match(text):
        return True
    return len(text) >= MIN_BASE64_CHARS and _BASE64.match(text) is not None


def decode_image_data(value: str, *, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> bytes:
    """The bytes of base64 image data (plain, URL-safe, or a ``data:`` URL), refused above ``max_bytes``
    before decoding; :class:`ImageInputError` when it is not base64."""
    text = value.strip()
    match = _DATA_URL.match(text)
    if match:
        text = match.group("data").strip()
    text = re.sub(r"\s+", "", text)
    if len(text) * 3 // 4 > max_bytes + 3:
        raise ImageInputError(f"the image data is larger than {_size(max_bytes)}; send a smaller image")
    text = text.replace("-", "+").replace("_", "/")
    try:
        data = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ImageInputError("the image data is not valid base64") from None
    if len(data) > max_bytes:
        raise ImageInputError(f"the image data is larger than {_size(max_bytes)}; send a smaller image")
    return data


@contextmanager
def image_argument(
    value: str,
    *,
    lookup_id: ImageLookup | None = None,
    allowed: AllowedDirs = AllowedDirs(),
    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    max_pixels: int | None = None,
) -> Iterator[str]:
    """The file of the image ``value`` names (a gallery id, base64 data, or an allowed path), checked to decode
    within a service's memory budget (:func:`~pictrieve.tools.core.images.load_service_image`; ``max_pixels``:
    its pixel budget, default the server's).

    Yields a path that stays valid inside the ``with`` block: a private copy of what was checked (a gallery
    photo, an allowed file, base64 data) in a temporary folder removed afterwards, reduced when it is larger
    than the models need (so the graph's own decodes of it are cheap too). Raises :class:`ImageInputError` with one line for anything
    that cannot be used; a value that is none of the three says what each try found.
    """
    with tempfile.TemporaryDirectory(prefix="pictrieve-image-") as folder:
        yield image_file(value, folder, lookup_id=lookup_id, allowed=allowed, max_bytes=max_bytes,
                         max_pixels=max_pixels)


def image_file(
    value: str,
    folder: str | os.PathLike,
    *,
    lookup_id: ImageLookup | None = None,
    allowed: AllowedDirs = AllowedDirs(),
    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    max_pixels: int | None = None,
) -> str:
    """:func:`image_argument` for a caller that owns the lifetime of what it writes (a served run that keeps
    the picture across graph steps): the data and reduced copies go into ``folder`` (a private folder the
    caller removes), and the path returned is valid as long as it is."""
    text = str(value or "").strip()
    if not text:
        raise ImageInputError("the image is blank: pass a gallery id, base64 image data, or an allowed file path")
    source, shown = _source_file(text, lookup_id, allowed, max_bytes, Path(folder))
    return _decoded_within_budget(source, shown, Path(folder), max_pixels)


def _source_file(text: str, lookup_id: ImageLookup | None, allowed: AllowedDirs, max_bytes: int,
                 folder: Path) -> tuple[Path, str]:
    """The file ``text`` names and how to name it to the caller: a gallery photo, the data written to
    ``folder``, or an allowed path (checked before anything is read)."""
    found = lookup_id(text) if lookup_id is not None and len(text) < MIN_BASE64_CHARS and _is_name(text) else None
    if found is not None:
        return _gallery_copy(Path(found), f"gallery image {text}", folder), f"gallery image {text}"
    if looks_like_image_data(text):
        path = folder / f"data-{uuid.uuid4().hex}"
        path.write_bytes(decode_image_data(text, max_bytes=max_bytes))
        return path, "the image data"
    if GALLERY_ID.match(text):
        raise ImageInputError(f"no image with id {text} in this gallery (ids come from search results)")
    try:
        real = allowed.resolve(text)
    except PathNotAllowedError as refused:
        if _plainly_a_path(text):
            raise
        raise ImageInputError(_none_of_the_three(text, allowed, refused)) from None
    if not real.is_file():
        if not _plainly_a_path(text):
            raise ImageInputError(_none_of_the_three(text, allowed, None))
        raise ImageInputError(f"no image file at {text}")
    if real.stat().st_size > max_bytes:
        raise ImageInputError(f"the image file is larger than {_size(max_bytes)}; use a smaller one")
    return _allowed_copy(real, text, folder, max_bytes), text


def _allowed_copy(real: Path, shown: str, folder: Path, max_bytes: int) -> Path:
    """A copy in ``folder`` of the allowed file at ``real`` (its real path, checked to lie in an allowed folder),
    read through no link (:func:`~pictrieve.tools.core.gallery_photos.open_gallery_photo`): a link put anywhere
    along it after the check (someone who can write into an allowed folder swapping a file or a folder) is
    refused, and what the graph reads later is this copy, whatever happens to the folder meanwhile."""
    try:
        with open_gallery_photo(real, name=shown, max_bytes=max_bytes) as opened:
            data = opened.read()
    except FileNotFoundError:
        raise ImageInputError(f"no image file at {shown}") from None
    except PictrieveError:  # ChangedPhotoError: a link, not a regular file, or larger now
        raise ImageInputError(f"the image file {shown} changed as it was read (a link, not a regular file, or "
                              f"larger than {_size(max_bytes)} now); pass it again") from None
    except OSError as exc:
        raise ImageInputError(f"the image file {shown} cannot be read ({exc.strerror or type(exc).__name__})") from None
    copy = folder / f"allowed-{uuid.uuid4().hex}{real.suffix.lower()}"
    copy.write_bytes(data)
    return copy


def gallery_photo_copy(image_id: str, folder: str | os.PathLike, lookup_id: ImageLookup) -> str:
    """A private copy in ``folder`` of the gallery photo ``image_id`` (an id only: a path is an unknown id), read
    as the file that was indexed: for a front end whose caller names a gallery photo by id alone (the page's
    "more like this" and Ask). Raises :class:`ImageInputError` in one line (an unknown id, a file gone, a photo
    replaced by a link or by a non-image)."""
    text = str(image_id or "").strip()
    found = lookup_id(text) if text and len(text) < MIN_BASE64_CHARS and _is_name(text) else None
    if found is None:
        raise ImageInputError("no such image in this gallery")
    return str(_gallery_copy(Path(found), f"gallery image {text}", Path(folder)))


def _gallery_copy(found: Path, shown: str, folder: Path) -> Path:
    """A copy in ``folder`` of the gallery photo stored at ``found``, read as the file that was indexed
    (:func:`~pictrieve.tools.core.gallery_photos.open_gallery_photo`: a photo replaced by a link is refused), so
    what the graph reads later is what was checked here, whatever happens to the folder meanwhile."""
    try:
        with open_gallery_photo(found, name=shown) as photo:
            data = photo.checked()
    except FileNotFoundError:
        raise ImageInputError(f"the file of {shown} is gone (run `pictrieve sync` on the gallery)") from None
    except PictrieveError as exc:  # ChangedPhotoError (a link, no image now), ImageTooLargeError: one line each
        raise ImageInputError(str(exc)) from None
    except OSError as exc:
        raise ImageInputError(f"the file of {shown} cannot be read ({exc.strerror or type(exc).__name__})") from None
    copy = folder / f"gallery-{uuid.uuid4().hex}{found.suffix.lower()}"
    copy.write_bytes(data)
    return copy


def _decoded_within_budget(source: Path, shown: str, folder: Path, max_pixels: int | None) -> str:
    """``source`` when it decodes within the budget at its own size, else a reduced PNG copy in ``folder``."""
    try:
        image = load_service_image(source, max_pixels=max_pixels)
        if image.size == image_size(source):
            return str(source)
    except PictrieveError as exc:  # ImageDecodeError: one line, naming the file as the caller knows it
        raise ImageInputError(str(exc).replace(str(source), shown)) from None
    reduced = folder / f"reduced-{uuid.uuid4().hex}.png"
    image.save(reduced, format="PNG", compress_level=1)
    return str(reduced)


def _plainly_a_path(text: str) -> bool:
    """Whether ``text`` can only be a file path: it holds a character no id or base64 has (a dot, a
    backslash) or starts like a path (``~``, ``.``)."""
    return text.startswith(("~", ".")) or any(c in text for c in ".\\")


def _none_of_the_three(text: str, allowed: AllowedDirs, refused: PathNotAllowedError | None) -> str:
    """What each of the three readings of ``text`` found, for a value that is no id, no data and no path."""
    shown = text if len(text) <= 40 else text[:39] + "…"
    if _BASE64.match(text):
        data = f"too short to be base64 image data (at least {MIN_BASE64_CHARS} characters)"
    else:
        data = "not base64 image data or a data:image/...;base64 URL"
    if refused is None:
        path = f"no file of that name in the folders this server may read ({allowed.describe()})"
    elif not allowed:
        path = "not a file path this server may read (it reads none: its operator can allow folders with --allow-dir)"
    else:
        path = f"not a file path inside the folders this server may read ({allowed.describe()})"
    return (f"the image {shown!r} is no gallery id of this gallery (ids come from search results), {data}, and "
            f"{path}")


def _is_name(text: str) -> bool:
    return "/" not in text and "\\" not in text and not text.startswith("~")


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 1024:g} KiB"
