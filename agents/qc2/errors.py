"""The errors of QC2: a model that cannot be trained, saved or loaded, or belongs to another gallery."""

from __future__ import annotations

from pictrieve.errors import PictrieveError


class QC2ModelError(PictrieveError, RuntimeError):
    """A QC2 model cannot be trained, saved or loaded as asked (the message says what to do)."""


class GalleryMismatchError(QC2ModelError):
    """The QC2 model was trained for another gallery (or the gallery changed since)."""
