"""Errors raised by galleries. Messages describe the Python fix; the CLI adds its flag hints."""

from __future__ import annotations

from pictrieve.errors import PictrieveError


class GalleryError(PictrieveError, RuntimeError):
    """Base class for gallery errors; messages say what to do.

    ``location`` (optional) is the gallery the error is about, as it was given (a folder or a URL), so
    that a command-line hint can name it instead of a placeholder.
    """

    def __init__(self, problem: str = "", *args: object, fix: str | None = None,
                 location: str | None = None) -> None:
        super().__init__(problem, *args, fix=fix)
        self.location = location


class NotAGalleryError(GalleryError):
    """The location holds no pictrieve gallery (a missing folder, or a folder without its database).
    Opening one never writes anything there: only indexing creates a gallery."""


class GalleryUnreachableError(GalleryError):
    """The Chroma server of a gallery is not answering (during a write, what was written before is kept)."""


class EmptyGalleryError(GalleryError):
    """The gallery has no images for the embedder in use."""


class DimensionMismatchError(GalleryError):
    """The stored vectors and the embedder (or a query vector) have different dimensions."""


class EmbedderChangedError(GalleryError):
    """The gallery's vectors for this embedder name were made by different weights (a renamed or retrained model)."""


class AmbiguousEmbedderError(GalleryError):
    """Kept for callers that catch it; :meth:`Gallery.open` no longer raises it."""


class ImageNotFoundError(GalleryError, KeyError):
    """An image id the gallery does not hold (still a ``KeyError``, as a missing key is)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return GalleryError.__str__(self)


class StoreBackendError(GalleryError):
    """The store's backend (Chroma) refused or failed a request; the backend's own exception is its ``__cause__``.
    Callers catch this (or :class:`GalleryError`) instead of a backend's exception types."""


class QueryError(GalleryError, ValueError):
    """A search request that cannot be answered as given (empty text, k below 1)."""


class GalleryBusyError(GalleryError):
    """Another process is writing to the same embedded gallery."""


class GalleryPermissionError(GalleryError):
    """The gallery folder cannot be created, read or written."""


class SyncRefusedError(GalleryError):
    """``sync`` removed nothing because the removal looked like a mistake (see its subclasses)."""


class MissingFoldersError(SyncRefusedError):
    """Whole folders of the gallery are gone: more likely an unplugged drive than deleted photos."""


class LargeRemovalError(SyncRefusedError):
    """``sync`` would remove more than a fifth of the gallery; it needs an explicit go-ahead."""
