"""Finding and decoding image files safely.

``iter_image_files`` expands what a user types (folders, globs, files) into image paths;
``load_image`` decodes one file fully, so that truncated or corrupt files fail here, with a clear
message, rather than later inside a model.

Decompression bombs (a few kilobytes that decode to gigapixels) are refused from the header size,
before any pixel is decoded, above a per-call pixel cap (``max_pixels``, default
:data:`DEFAULT_MAX_PIXELS`, or the ``PICTRIEVE_MAX_IMAGE_PIXELS`` variable). Nothing here changes
Pillow's process-wide settings.

That cap is the desktop indexer's: the person indexes their own photos. A picture sent by a network caller
(an MCP tool call, an upload to the page, a served run's image input) is decoded by
:func:`load_service_image` instead, in bounded memory: a JPEG is decoded already reduced (libjpeg's DCT
scaling, Pillow's draft mode) to about what the models need, any other format whose header declares more
than :data:`SERVICE_MAX_PIXELS` is refused before decoding, and at most :data:`SERVICE_DECODES` large
pictures decode at once.
"""

from __future__ import annotations

import errno
import functools
import glob
import hashlib
import io
import logging
import os
import stat
import struct
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from pictrieve.errors import PictrieveError

logger = logging.getLogger(__name__)

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".ppm", ".pgm", ".heic", ".heif", ".hif",
     ".avif"}
)
"""The file names a folder walk takes for photos (the one list). HEIC/HEIF decode through the ``heic`` extra
(``pillow-heif``); without it such a file is listed, then skipped with one line naming the extra. AVIF decodes
through Pillow itself (built with libavif)."""

BROWSER_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".avif"})
"""Photos every current browser shows as they are; the page sends the others (HEIC, TIFF, PPM) as JPEG."""

HEIC_EXTRA = "pictrieve[heic]"
_HEIF_BRANDS = frozenset({b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"hevm", b"hevs", b"mif1", b"msf1",
                          b"mif2", b"miaf"})
"""ISO base media ``ftyp`` brands of HEIF files (HEVC-coded and generic): what a phone writes as .heic/.heif."""


def _register_heif() -> bool:
    """Teach Pillow to open HEIC/HEIF (the ``heic`` extra, ``pillow-heif``), once, at import; ``False`` without it.

    pillow-heif applies the container's rotation (``irot``/``imir``) while decoding and then reports EXIF
    Orientation 1, so a phone's sideways HEIC comes out upright and is never turned twice."""
    try:
        from pillow_heif import register_heif_opener
    except ImportError:
        return False
    register_heif_opener()
    return True


HEIF_READABLE = _register_heif()
"""Whether HEIC/HEIF photos can be decoded here (``pillow-heif`` is installed)."""

DEFAULT_MAX_PIXELS = 180_000_000
"""Largest image decoded by default: 180 MP (above today's largest phone sensors, 200 MP excepted).
An RGB image this size takes about 540 MB while decoding."""
MAX_PIXELS_ENV = "PICTRIEVE_MAX_IMAGE_PIXELS"

SERVICE_MAX_PIXELS = 50_000_000
"""Most pixels a server decodes for one caller's picture (after a JPEG's reduction): 50 MP, so a 45-50 MP
camera's PNG or TIFF still passes. Decoding one takes at most about 350 MB (RGBA, then RGB)."""
SERVICE_MAX_PIXELS_ENV = "PICTRIEVE_SERVICE_MAX_PIXELS"
SERVICE_SIDE = 1536
"""Longest side a caller's picture is reduced to: above what the embedders (224-384 px), the detectors
(300-768 px) and a describer's region crops use."""
SERVICE_DECODES = 2
"""Large caller pictures (above :data:`_SMALL_PIXELS`) decoded at once; more wait their turn, so sixteen
callers cost what two do."""
_SMALL_PIXELS = 4_000_000
_service_decodes = threading.BoundedSemaphore(SERVICE_DECODES)


class ImageBytes:
    """An image file already read into memory (from a file opened with care, say a gallery photo checked to be
    the file that was indexed), named as the caller knows it: the loaders here take it wherever they take a
    path, decode only these bytes (the file is not opened again), and name it by ``name`` in their messages."""

    __slots__ = ("data", "name")

    def __init__(self, data: bytes, name: str) -> None:
        self.data, self.name = data, name

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"ImageBytes({self.name!r}, {len(self.data)} bytes)"


class ImageDecodeError(PictrieveError, ValueError):
    """A file could not be decoded as an image."""


class ImageTooLargeError(ImageDecodeError):
    """An image whose header declares more pixels than the cap in force (nothing was decoded)."""

    def __init__(self, message: str, *, size: tuple[int, int], cap: int) -> None:
        super().__init__(message)
        self.size, self.cap = size, cap


def is_image_path(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_EXTENSIONS


def is_hidden_name(name: str) -> bool:
    """Whether a file or folder name is hidden, so that indexing skips it (and everything below a hidden
    folder): ``.thumbnails``, macOS's ``._IMG_1.JPG`` resource forks, a download's ``.photo.jpg.part``. The
    one rule for the folder walk of ``index`` and the events of ``index --watch``."""
    return name.startswith(".")


def shown_by_browsers(path: str | os.PathLike) -> bool:
    """Whether a browser shows the photo at ``path`` as it is (by its name; see :data:`BROWSER_EXTENSIONS`)."""
    return Path(path).suffix.lower() in BROWSER_EXTENSIONS


def iter_image_files(
    sources: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    problems: list[tuple[str, str]] | None = None,
) -> Iterator[Path]:
    """Yield absolute image paths from folders (recursive), glob patterns and files, de-duplicated.

    Explicitly named files are yielded whatever their extension (so a bad file named by the user is
    reported rather than silently ignored); files found by walking a folder or a glob must have an
    image extension. Hidden files and folders are skipped while walking. Symlinked folders are
    followed (each real folder once, so loops end). What cannot be used (unreadable folders, symlink
    loops, dangling links) is appended to ``problems`` as ``(path as found, reason)`` when given,
    else logged; a source that does not exist at all raises ``FileNotFoundError``.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    report = problems.append if problems is not None else _log_problem
    seen: set[Path] = set()
    real_folders: dict[str, str] = {}
    for source in sources:
        for path in _expand_source(str(source), report):
            try:
                resolved = _real_path(path, real_folders)
            except (OSError, RuntimeError) as exc:
                report((str(path), _link_problem(path, exc)))
                continue
            if resolved not in seen:
                seen.add(resolved)
                yield resolved


def _real_path(path: Path, real_folders: dict[str, str]) -> Path:
    """``path.resolve(strict=True)``, each folder resolved once (``real_folders`` remembers them): a file that is no
    link costs one ``lstat`` instead of one per part of its path (a 500-photo folder took 0.1-0.2 s of the main
    thread before any photo was decoded)."""
    folder, name = os.path.split(path)
    if name in ("", ".", "..") or stat.S_ISLNK(os.lstat(path).st_mode):
        return path.resolve(strict=True)
    real = real_folders.get(folder)
    if real is None:
        real = real_folders[folder] = os.path.realpath(folder or ".", strict=True)
    return Path(real, name)


def _log_problem(problem: tuple[str, str]) -> None:
    logger.warning("skipped %s: %s", *problem)


def _link_problem(path: Path, exc: BaseException) -> str:
    if isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP:
        return f"{path}: symlink loop"
    if path.is_symlink():
        return f"{path}: broken symlink (its target {os.readlink(path)} does not exist)"
    return f"{path}: {getattr(exc, 'strerror', None) or exc}"


def _expand_source(source: str, report: Any) -> Iterator[Path]:
    path = Path(source).expanduser()
    if path.is_dir():
        yield from _walk(path, report)
    elif path.exists() or path.is_symlink():
        yield path
    elif glob.has_magic(source):
        for match in sorted(glob.glob(os.path.expanduser(source), recursive=True)):
            candidate = Path(match)
            if candidate.is_file() and is_image_path(candidate):
                yield candidate
    else:
        raise FileNotFoundError(f"{source}: no such file, folder or glob match")


def _walk(top: Path, report: Any) -> Iterator[Path]:
    visited: set[tuple[int, int]] = set()

    def on_error(exc: OSError) -> None:
        report((str(exc.filename), f"{exc.filename}: cannot read folder ({exc.strerror or exc})"))

    for root, dirs, files in os.walk(top, onerror=on_error, followlinks=True):
        found = os.stat(root)
        if (found.st_dev, found.st_ino) in visited:  # a symlinked folder seen before: a loop
            dirs[:] = []
            continue
        visited.add((found.st_dev, found.st_ino))
        dirs[:] = sorted(d for d in dirs if not is_hidden_name(d))
        for name in sorted(files):
            candidate = Path(root) / name
            if not is_hidden_name(name) and is_image_path(candidate):
                yield candidate


def max_image_pixels() -> int:
    """The pixel cap in force: ``PICTRIEVE_MAX_IMAGE_PIXELS`` when set, else :data:`DEFAULT_MAX_PIXELS`."""
    value = os.environ.get(MAX_PIXELS_ENV, "").strip()
    if not value:
        return DEFAULT_MAX_PIXELS
    try:
        cap = int(float(value))
    except ValueError:
        raise ImageDecodeError(f"{MAX_PIXELS_ENV}={value!r} is not a number of pixels") from None
    if cap <= 0:
        raise ImageDecodeError(f"{MAX_PIXELS_ENV} must be a positive number of pixels, got {value!r}")
    return cap


def load_image(
    path: str | os.PathLike | ImageBytes,
    *,
    max_pixels: int | None = None,
    draft_size: tuple[int, int] | None = None,
    header: ImageFile.ImageFile | None = None,
) -> Image.Image:
    """Decode ``path`` completely into an RGB image, or raise :class:`ImageDecodeError` (one line).

    This is the one guarded loader: every entry that takes a user's photo (``index``, ``ask``,
    ``search --image``, the graphs' image inputs, the page's uploads) decodes it here, so an empty,
    truncated or non-image file gets the same one-line reason everywhere.

    ``draft_size`` lets JPEG decoding scale down by 1/2, 1/4 or 1/8 while staying at least that large,
    which bounds memory and time for huge photos. Images whose header declares more than ``max_pixels``
    pixels (default :func:`max_image_pixels`) once so reduced are refused before decoding
    (:class:`ImageTooLargeError`). ``header``: ``path`` already opened by :func:`open_header` and not yet decoded
    (the indexer reads the photo's metadata from it first), which this call decodes and closes.
    """
    decoded = _decode_upright(path, max_pixels, draft_size, header)
    return decoded if isinstance(decoded, Image.Image) else Image.fromarray(decoded)


def load_pixels(
    path: str | os.PathLike | ImageBytes,
    *,
    max_pixels: int | None = None,
    draft_size: tuple[int, int] | None = None,
    header: ImageFile.ImageFile | None = None,
) -> np.ndarray:
    """:func:`load_image`'s pixels as an ``(h, w, 3)`` uint8 RGB array (upright), with its checks and errors.

    For the indexer's consumers that work on arrays: a JPEG OpenCV decodes goes straight to the array (Pillow's
    RGB image would be one copy into its 4-byte pixels and another back out, about 0.4 ms at 384x288)."""
    decoded = _decode_upright(path, max_pixels, draft_size, header)
    return np.asarray(decoded) if isinstance(decoded, Image.Image) else decoded


def _decode_upright(
    path: str | os.PathLike | ImageBytes, max_pixels: int | None, draft_size: tuple[int, int] | None,
    header: ImageFile.ImageFile | None = None,
) -> Image.Image | np.ndarray:
    """The guarded decode behind :func:`load_image` and :func:`load_pixels`: the upright RGB pixels, as the array
    OpenCV decoded or as Pillow's image, whichever decoded them."""
    cap = max_image_pixels() if max_pixels is None else int(max_pixels)
    try:
        image = header if header is not None else _open_header(path)
    except ImageDecodeError:
        raise
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ImageDecodeError(f"{path}: not a readable image ({exc})") from exc
    try:
        if draft_size is not None and image.format == "JPEG":
            image.draft("RGB", draft_size)  # sets the size decoding will give; nothing is decoded yet
        width, height = image.size
        if width * height > cap:
            raise ImageTooLargeError(
                f"{path}: {width}x{height} = {width * height / 1e6:.0f} MP is above the cap of "
                f"{cap / 1e6:.0f} MP (a decompression bomb?); if the image is genuine, raise the cap with "
                f"--max-pixels N (Python: max_pixels=N) or {MAX_PIXELS_ENV}",
                size=(width, height), cap=cap,
            )
        orientation = exif_orientation(image)
        pixels = _decode_jpeg_with_opencv(image)
        if pixels is not None:
            return upright_pixels(pixels, orientation)
        image.load()
        return upright(image.convert("RGB"), orientation)
    except ImageDecodeError:
        raise
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageDecodeError(f"{path}: not a readable image ({exc})") from exc
    finally:
        image.close()


_OPENCV_SAME_RAWMODES = (("RGB", ""), ("L", ""))
"""Pillow's JPEG decoder arguments (raw mode, JPEG colour space) under which OpenCV's decode gives its pixels: an
8-bit YCbCr, RGB or greyscale JPEG whose colour space libjpeg detects itself. CMYK/YCCK (Adobe's inverted ``CMYK;I``)
and anything else stay with Pillow."""


def _decode_jpeg_with_opencv(image: ImageFile.ImageFile) -> np.ndarray | None:
    """The pixels Pillow would decode for an opened JPEG (``image``, its header read, its draft set), decoded by
    OpenCV instead, as an ``(h, w, 3)`` uint8 RGB array not yet turned upright; ``None`` where that is not known to be the same, so the
    caller decodes with Pillow (whose answer, or error, is then the one given).

    Both run libjpeg-turbo with the same settings (accurate integer IDCT, fancy upsampling, the DCT scaling of
    Pillow's draft mode as ``IMREAD_REDUCED_*``), so the pixels are the same bit for bit
    (:func:`_opencv_decodes_as_pillow` checks that once per process); OpenCV's decode takes half the time (0.64 against
    1.32 ms for a 500x375 photo, one thread) and releases the GIL. EXIF Orientation is ignored here (the caller
    applies it, as for every format). A file that does not end with the JPEG end marker (truncated, or data after the
    picture) goes to Pillow, which refuses a truncated one where libjpeg alone fills in grey.
    """
    if image.format != "JPEG" or image.mode not in ("RGB", "L") or len(image.tile) != 1 \
            or tuple(image.tile[0].args or ()) not in _OPENCV_SAME_RAWMODES:
        return None
    cv2 = _opencv_jpeg()
    flags = _opencv_flags(image.decoderconfig[0] if image.decoderconfig else 1) if cv2 is not None else None
    if flags is None or image.fp is None:
        return None
    image.fp.seek(0)
    data = image.fp.read()
    if not data.endswith(b"\xff\xd9"):
        return None
    try:
        pixels = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flags)
    except cv2.error:  # e.g. above OpenCV's own pixel limit (1 GP) when --max-pixels allows more
        pixels = None
    if pixels is None or pixels.shape != (image.size[1], image.size[0], 3):
        return None  # Pillow decodes it, or says why it cannot
    return pixels


def _opencv_flags(scale: int) -> int | None:
    """``cv2.imdecode`` flags for an RGB decode at 1/``scale`` (Pillow's draft scale), EXIF Orientation ignored."""
    import cv2

    reduced = {1: 0, 2: cv2.IMREAD_REDUCED_GRAYSCALE_2, 4: cv2.IMREAD_REDUCED_GRAYSCALE_4,
               8: cv2.IMREAD_REDUCED_GRAYSCALE_8}.get(scale)
    if reduced is None:
        return None
    return reduced | cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION


@functools.lru_cache(maxsize=1)
def _opencv_jpeg() -> Any:
    """The ``cv2`` module where its JPEG decode gives Pillow's pixels here (checked once), else ``None``."""
    try:
        import cv2
    except ImportError:
        return None
    if not hasattr(cv2, "IMREAD_COLOR_RGB") or not _opencv_decodes_as_pillow(cv2):
        logger.debug("JPEGs decode with Pillow: OpenCV %s does not give Pillow's pixels", cv2.__version__)
        return None
    return cv2


def _opencv_decodes_as_pillow(cv2: Any) -> bool:
    """Whether OpenCV and Pillow decode the same JPEGs to the same pixels on this install (their libjpeg-turbo
    builds may differ): a small textured picture saved baseline 4:2:0, progressive and greyscale, each decoded at
    full size and at 1/2 both ways. About a millisecond, once per process."""
    noise = np.random.default_rng(0).integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
    gradient = np.linspace(0, 255, 64 * 48 * 3).reshape(48, 64, 3).astype(np.uint8)
    picture = Image.fromarray(np.where(np.arange(64)[None, :, None] < 32, noise, gradient), "RGB")
    for source, options in ((picture, {}), (picture, {"progressive": True}), (picture.convert("L"), {})):
        buffer = io.BytesIO()
        source.save(buffer, "JPEG", quality=90, **options)
        for scale in (1, 2):
            with Image.open(io.BytesIO(buffer.getvalue())) as reference:
                if scale > 1:
                    reference.draft("RGB", (reference.width // scale, reference.height // scale))
                expected = np.asarray(reference.convert("RGB"))
            decoded = cv2.imdecode(np.frombuffer(buffer.getvalue(), dtype=np.uint8), _opencv_flags(scale))
            if decoded is None or decoded.shape != expected.shape or not np.array_equal(decoded, expected):
                return False
    return True


def service_max_pixels() -> int:
    """The pixel budget for a caller's picture: ``PICTRIEVE_SERVICE_MAX_PIXELS`` when set (read by the server
    when it decodes, so the operator sets it), else :data:`SERVICE_MAX_PIXELS`."""
    value = os.environ.get(SERVICE_MAX_PIXELS_ENV, "").strip()
    try:
        cap = int(float(value)) if value else SERVICE_MAX_PIXELS
    except ValueError:
        raise ImageDecodeError(f"{SERVICE_MAX_PIXELS_ENV}={value!r} is not a number of pixels") from None
    if cap <= 0:
        raise ImageDecodeError(f"{SERVICE_MAX_PIXELS_ENV} must be a positive number of pixels, got {value!r}")
    return cap


def load_service_image(path: str | os.PathLike | ImageBytes, *, max_pixels: int | None = None,
                       side: int = SERVICE_SIDE) -> Image.Image:
    """Decode a picture a network caller sent, in bounded memory, as an RGB image whose longest side is at
    most ``side``; or raise :class:`ImageDecodeError` with one line (starting with ``path``, as
    :func:`load_image`'s do, so callers can replace it with the name the caller knows).

    A JPEG decodes reduced by up to 1/8 (draft mode) to at least ``side`` pixels a side, so a 13000x13000
    JPEG costs about 8 MB; any other format whose header declares more than ``max_pixels`` (default
    :func:`service_max_pixels`) is refused before a pixel is decoded. Large decodes take turns
    (:data:`SERVICE_DECODES` at once). Local indexing keeps :func:`load_image` and the indexer's cap.
    """
    cap = service_max_pixels() if max_pixels is None else int(max_pixels)
    try:
        width, height = _draft_size(path, side)
    except ImageDecodeError:
        raise
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ImageDecodeError(f"{path}: not a readable image ({exc})") from exc
    if width * height > cap:
        raise ImageTooLargeError(
            f"{path}: {width}x{height} = {width * height / 1e6:.0f} MP is more than this server decodes for one "
            f"picture ({cap / 1e6:g} MP); send a smaller picture (a JPEG of any size is accepted, decoded reduced)",
            size=(width, height), cap=cap)
    large = width * height > _SMALL_PIXELS
    if large:
        _service_decodes.acquire()
    try:
        image = load_image(path, max_pixels=cap, draft_size=_draft_box(image_size(path), side))
        if max(image.size) > side:
            image.thumbnail((side, side), Image.Resampling.LANCZOS, reducing_gap=3.0)
        return image
    finally:
        if large:
            _service_decodes.release()


def _draft_size(path: str | os.PathLike | ImageBytes, side: int) -> tuple[int, int]:
    """The size decoding ``path`` gives when a JPEG is reduced toward ``side`` (from the header alone)."""
    image = _open_header(path)
    try:
        if image.format == "JPEG":
            image.draft("RGB", _draft_box(image.size, side))
        return image.size
    finally:
        image.close()


def _draft_box(size: tuple[int, int], side: int) -> tuple[int, int]:
    """The size a JPEG may be reduced toward so that its longest side stays at least ``side`` (draft mode keeps
    the image at least this large in both directions, so a square box would hold a 4:3 photo at full size)."""
    longest = max(size)
    if longest <= side:
        return size
    return max(1, -(-size[0] * side // longest)), max(1, -(-size[1] * side // longest))


def image_size(path: str | os.PathLike | ImageBytes) -> tuple[int, int]:
    """``(width, height)`` from the file's header, without decoding pixels (as stored: see
    :func:`upright_size` for the size a viewer shows)."""
    image = _open_header(path)
    try:
        return image.size
    finally:
        image.close()


ORIENTATION_TAG = 0x0112
"""EXIF Orientation: 1 is upright; 2-8 say how the stored pixels must be flipped or turned to be shown."""
_TRANSPOSE: dict[int, tuple[Image.Transpose, ...]] = {
    2: (Image.Transpose.FLIP_LEFT_RIGHT,),
    3: (Image.Transpose.ROTATE_180,),
    4: (Image.Transpose.FLIP_TOP_BOTTOM,),
    5: (Image.Transpose.TRANSPOSE,),
    6: (Image.Transpose.ROTATE_270,),
    7: (Image.Transpose.TRANSVERSE,),
    8: (Image.Transpose.ROTATE_90,),
}


def exif_orientation(image: Image.Image) -> int:
    """The EXIF Orientation of an opened image (1 when absent, unreadable or out of range).

    Phones store most photos sideways and set this tag; every viewer shows them upright, so the
    loader turns them too (a sideways photo embedded as stored scored 0.75 against its upright self)."""
    try:
        value = int(header_exif(image).get(ORIENTATION_TAG, 1))
    except Exception:  # noqa: BLE001 - a corrupt EXIF block must not make the photo unreadable
        return 1
    return value if value in _TRANSPOSE else 1


def header_exif(image: Image.Image) -> Image.Exif:
    """``image.getexif()`` for an image opened but not decoded, without ever decoding its pixels.

    Pillow's PNG plugin decodes the whole picture to look for an ``eXIf`` chunk after the image data, so asking a
    small PNG that decodes huge for its EXIF (as reading a photo's orientation and dates does, before any pixel
    cap is checked) decoded it: a 389 KB PNG of 20,000 x 20,000 took 0.64 s and 800 MB in ``read_photo_metadata``.
    Here a PNG's late ``eXIf`` chunk is found by walking the chunk headers instead (:func:`_late_png_exif`) and
    Pillow's general reader does the rest (an early chunk, a "Raw profile type exif" text chunk as ImageMagick writes,
    XMP); every other format's EXIF comes from its header, as Pillow reads it."""
    if image.format == "PNG" and "exif" not in image.info:
        late = _late_png_exif(image)
        if late:
            image.info["exif"] = b"Exif\x00\x00" + late  # what Pillow's chunk reader stores
        return Image.Image.getexif(image)  # not PngImageFile's, which decodes the picture first
    return image.getexif()


_PNG_CHUNK_WALK_LIMIT = 100_000
"""Chunk headers :func:`_late_png_exif` reads at most (a PNG of a million tiny chunks is read no further)."""


def _late_png_exif(image: Image.Image) -> bytes | None:
    """The data of a PNG's ``eXIf`` chunk after its first ``IDAT`` (``None`` when there is none, or the chunks do not
    parse), read by seeking from chunk header to chunk header; the file position is left where it was."""
    fp, tile = getattr(image, "fp", None), getattr(image, "tile", None)
    if fp is None or not tile:
        return None
    where = fp.tell()
    try:
        position = tile[0].offset - 8  # the first IDAT chunk's header (the tile starts at its data)
        for _ in range(_PNG_CHUNK_WALK_LIMIT):
            fp.seek(position)
            header = fp.read(8)
            if len(header) < 8:
                return None
            length, kind = struct.unpack(">I4s", header)
            if kind == b"eXIf":
                data = fp.read(length)
                return data if len(data) == length else None
            if kind == b"IEND":
                return None
            position += 12 + length  # length, type, data, CRC
        return None
    except (OSError, struct.error, ValueError):
        return None
    finally:
        fp.seek(where)


def upright(image: Image.Image, orientation: int) -> Image.Image:
    """``image`` flipped or turned as EXIF ``orientation`` says, so it looks as a viewer shows it."""
    for step in _TRANSPOSE.get(orientation, ()):
        image = image.transpose(step)
    return image


def upright_pixels(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """:func:`upright` for an ``(h, w, channels)`` array: the same pixels as Pillow's transposes give, contiguous
    (a copy only when the photo is turned or flipped)."""
    turned = _TRANSPOSE_ARRAY.get(orientation)
    return np.ascontiguousarray(turned(pixels)) if turned is not None else pixels


_TRANSPOSE_ARRAY: dict[int, Callable[[np.ndarray], np.ndarray]] = {  # Pillow's _TRANSPOSE steps, as array views
    2: lambda a: a[:, ::-1],  # FLIP_LEFT_RIGHT
    3: lambda a: a[::-1, ::-1],  # ROTATE_180
    4: lambda a: a[::-1],  # FLIP_TOP_BOTTOM
    5: lambda a: a.transpose(1, 0, 2),  # TRANSPOSE
    6: lambda a: a.transpose(1, 0, 2)[:, ::-1],  # ROTATE_270 (clockwise)
    7: lambda a: a[::-1, ::-1].transpose(1, 0, 2),  # TRANSVERSE
    8: lambda a: a.transpose(1, 0, 2)[::-1],  # ROTATE_90 (anticlockwise)
}


def upright_size(size: tuple[int, int], orientation: int) -> tuple[int, int]:
    """The ``(width, height)`` a viewer shows for a stored ``size`` and EXIF ``orientation``."""
    return (size[1], size[0]) if orientation in (5, 6, 7, 8) else size


def open_header(path: str | os.PathLike | ImageBytes) -> ImageFile.ImageFile | None:
    """``path`` opened with only its header read (:func:`_open_header`), or ``None`` where it cannot be (the loader
    then opens it again and says why, in its own words). For a caller that reads a photo's metadata and then
    decodes it: Pillow's JPEG header parsing is Python, 0.06 ms a photo with the GIL held, and the indexer's decode
    threads did it twice."""
    try:
        return _open_header(path)
    except Exception:  # noqa: BLE001 - reported by whoever opens it next
        return None


def _open_header(path: str | os.PathLike | ImageBytes) -> ImageFile.ImageFile:
    """Open ``path`` (or the bytes of an :class:`ImageBytes`) reading only its header, like ``Image.open``
    without Pillow's global bomb limit.

    ``Image.open`` compares the size with the process-wide ``Image.MAX_IMAGE_PIXELS`` (warning above
    it, failing at twice it); our cap is per call instead, so we run the format plugins ourselves.
    """
    handle = io.BytesIO(path.data) if isinstance(path, ImageBytes) else open(path, "rb")
    try:
        prefix = handle.read(16)
        if not prefix:  # Pillow's format probes fail on it with a struct message
            raise ImageDecodeError(f"{path}: empty file (0 bytes)")
        for loader in (Image.preinit, Image.init):
            loader()
            for format_id in list(Image.ID):
                factory, accept = Image.OPEN[format_id]
                try:
                    accepted = not accept or accept(prefix)
                except (struct.error, IndexError, TypeError):  # a probe that needs more bytes than a tiny file has
                    continue
                if not accepted or isinstance(accepted, str):
                    continue
                handle.seek(0)
                try:
                    image = factory(handle, str(path))
                except (SyntaxError, IndexError, TypeError, struct.error):
                    continue
                image._exclusive_fp = True  # closing the image closes the file
                return image
        if not HEIF_READABLE and _is_heif(prefix):
            raise ImageDecodeError(f"{path}: a HEIC/HEIF photo, which needs pillow-heif: pip install '{HEIC_EXTRA}'")
        raise UnidentifiedImageError(f"cannot identify image file {str(path)!r}")
    except BaseException:
        handle.close()
        raise


def _is_heif(prefix: bytes) -> bool:
    """Whether a file's first bytes are a HEIF ``ftyp`` box (``....ftypheic``), whatever its name."""
    return prefix[4:8] == b"ftyp" and prefix[8:12] in _HEIF_BRANDS


def file_sha256(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()
