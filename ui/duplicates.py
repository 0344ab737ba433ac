"""The page's Duplicates tab: ``GET /api/duplicates`` lists the gallery's groups of near-identical photos.

Read-only (nothing is deleted from the page) and model-free: the groups come from the perceptual hashes and
vectors stored at index time (:func:`~pictrieve.vectorstore.duplicates.find_duplicates`, what ``pictrieve
duplicates`` lists). The answer names photos by gallery id and path; the page shows each through
``/api/image/{id}``, so no path from a request ever reaches the disk. The handler is a plain function, which
FastAPI runs in a worker thread (reading every record's hash takes a moment on a large gallery), and it passes
the same guard as every other route (:class:`~pictrieve.ui.guard.PageGuard`, around the whole app). The report
is kept until the gallery is written to, so asking again reads nothing; while another request computes one, a
request that needs a new one is refused at once with ``429`` and one line
(:func:`~pictrieve.vectorstore.duplicates.duplicate_report`), like a job past the page's limit.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from pictrieve.ui.forms import UIError
from pictrieve.ui.jobs import JobsBusy
from pictrieve.ui.state import PageState, page_state
from pictrieve.vectorstore.duplicates import DEFAULT_MAX_DISTANCE, DEFAULT_MIN_COSINE, DuplicatesBusy, duplicate_report

MAX_GROUPS = 500
"""Most groups one answer lists (``total_groups`` says how many there are)."""


router = APIRouter()


@router.get("/api/duplicates")
def duplicates(page: Annotated[PageState, Depends(page_state)], limit: str | None = None,
               max_distance: str | None = None, min_cosine: str | None = None) -> dict[str, Any]:
    """The gallery's groups of near-identical photos (the first ``limit``), each ``ids``/``paths``, keeper first."""
    most = _number(limit, 100, "limit", int, 1, MAX_GROUPS)
    distance = _number(max_distance, DEFAULT_MAX_DISTANCE, "max_distance", int, 0, 16)
    cosine = _number(min_cosine, DEFAULT_MIN_COSINE, "min_cosine", float, -1.0, 1.0)
    try:
        found = duplicate_report(page.gallery, max_distance=distance, min_cosine=cosine)
    except DuplicatesBusy as exc:
        raise JobsBusy(str(exc)) from None
    return {"groups": [group.to_dict() for group in found.groups[:most]], "total_groups": len(found.groups),
            "copies": sum(len(group.ids) - 1 for group in found.groups), "compared": found.compared,
            "unhashed": found.unhashed, "index_command": f"pictrieve index PHOTOS --gallery {page.gallery.location}"}


def _number(value: str | None, default: Any, what: str, kind: type, low: float, high: float) -> Any:
    """A query parameter as ``kind`` within ``[low, high]`` (``default`` when absent), else one line for the page."""
    if value is None or not str(value).strip():
        return default
    try:
        number = kind(value)
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        raise UIError(f"{what} must be a number from {low:g} to {high:g}, not {str(value)[:20]!r}")
    return number
