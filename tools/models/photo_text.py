"""Text in photos (OCR): signs, screenshots, labels, read at index time and stored on each record.

The reader is RapidOCR (``rapidocr`` on ONNX Runtime), whose PP-OCRv6 detection and recognition models (Chinese
and English with Latin scripts, 31 MB) and its angle classifier ship inside the PyPI wheel: nothing is downloaded,
it works offline (the ``ocr`` extra). Of the other OCRs on PyPI, ``easyocr`` and ``paddleocr`` download their
weights at first use and ``tesseract`` needs a system package, so they are not used.

Cost decides the settings: a photo is looked at with its longest side at most :data:`DETECT_SIDE` pixels (RapidOCR's
default scales the shortest side *up* to 736, which made a 500x375 photo cost 1.7 s and read specks as characters;
capped it costs about 0.2 s on one CPU thread; small text on a 12 MP photo may be missed). Even so it costs about as
much again as embedding a photo, and 5-7 times that for a screenshot full of text (BENCHMARKS.md), while most photos
show none, so indexing reads text only when asked (``pictrieve index --ocr``).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import threading
from typing import Any

from PIL import Image

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.threads import intra_op_threads

logger = logging.getLogger(__name__)

PHOTO_TEXT_KEY = "photo_text"
"""The record field that holds a photo's text (lines joined by newlines; ``""``: read, and none found)."""
OCR_EXTRA = "pictrieve[ocr]"
DETECT_SIDE = 960
"""Longest side, in pixels, a photo is scaled down to for text detection (never up)."""
MIN_SCORE = 0.6
"""Lines recognised with less confidence are dropped (RapidOCR's own floor is 0.5)."""
MIN_CHARS = 2
"""Shorter lines are dropped: a lone character read off a texture is noise far more often than a word."""
MAX_CHARS = 4000
"""A photo's text is cut here (a page of a document): enough to find it by, small enough for a record."""


class PhotoTextUnavailableError(PictrieveError):
    """Reading text in photos was asked for, and the ``ocr`` extra is not installed."""


def ocr_installed() -> bool:
    """Whether the ``ocr`` extra (``rapidocr`` and ``onnxruntime``) is installed (nothing is imported)."""
    for name in ("rapidocr", "onnxruntime"):
        if name in sys.modules:  # imported, or set to None: Python's way to say "not importable"
            if sys.modules[name] is None:
                return False
        elif importlib.util.find_spec(name) is None:
            return False
    return True


def require_ocr() -> None:
    """Raise :class:`PhotoTextUnavailableError` (one line saying what to install) unless the extra is installed."""
    if not ocr_installed():
        raise PhotoTextUnavailableError(f"reading text in photos needs the ocr extra: pip install '{OCR_EXTRA}'")


class PhotoTextReader:
    """Reads the text of decoded photos. The model loads on the first :meth:`read` (about 3 s) and is shared by
    the threads that call it, one call at a time (ONNX Runtime spreads each call over ``threads`` CPU threads)."""

    def __init__(self, *, detect_side: int = DETECT_SIDE, min_score: float = MIN_SCORE,
                 threads: int | None = None) -> None:
        self.detect_side = int(detect_side)
        self.min_score = float(min_score)
        self.threads = threads
        self._lock = threading.Lock()
        self._engine: Any = None

    def _load(self) -> Any:
        require_ocr()
        from rapidocr import RapidOCR

        logging.getLogger("RapidOCR").setLevel(logging.ERROR)  # it warns on every photo without text
        threads = self.threads or intra_op_threads()
        return RapidOCR(params={
            "Global.log_level": "error",
            "Det.limit_type": "max",
            "Det.limit_side_len": self.detect_side,
            "EngineConfig.onnxruntime.intra_op_num_threads": threads,
            "EngineConfig.onnxruntime.inter_op_num_threads": 1,
        })

    def read(self, image: Image.Image) -> str:
        """The text in ``image`` (an upright RGB photo), one line per text line found, in reading order;
        ``""`` when there is none."""
        with self._lock:
            if self._engine is None:
                self._engine = self._load()
            found = self._engine(image.convert("RGB"))
        lines = [str(text).strip() for text, score in zip(found.txts or (), found.scores or ())
                 if float(score) >= self.min_score and len(str(text).strip()) >= MIN_CHARS]
        return "\n".join(lines)[:MAX_CHARS]


_default_lock = threading.Lock()
_default: PhotoTextReader | None = None


def default_reader() -> PhotoTextReader:
    """The process's shared reader (one model in memory, however many galleries index)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = PhotoTextReader()
        return _default


def read_photo_text(image: Image.Image) -> str:
    """The text in ``image``, read by the shared :func:`default_reader`."""
    return default_reader().read(image)
