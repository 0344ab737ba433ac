"""Why a filtered search found nothing: which filter left no photo, and what the gallery has instead.

:func:`explain_filter` counts, for each condition of a :class:`~pictrieve.vectorstore.photo_filter.PhotoFilter` on
its own, the photos that pass it, by the same rule the search applies (the filter columns of
:mod:`~pictrieve.vectorstore.filter_index`), and says in one line what a person can act on::

    0 photos pass place 'lisbon'; places here: Lisbon PT (12), Tokyo JP (8)
    0 photos pass camera 'iphone'; cameras here: Google Pixel 7 (20)
    0 photos pass folder 'photos/nope' (no such folder on disk); folders here: /home/me/photos (20)
    0 photos pass within 50 km of Porto; the nearest photo is 274 km away (Lisbon PT); 3 have no GPS position
    0 photos pass taken on or after 2024-01-01; photos here were taken 2019-03-01 .. 2023-06-13
    each filter passes photos on its own (place 'lisbon': 12, camera 'pixel': 20), but none passes them all

Every front end (CLI, page, MCP, LangChain tools, the served search) shows this line when a filtered search comes
back empty; a store's ``search_*`` never calls it (it is one more pass over the columns, made only when asked).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pictrieve.vectorstore.filter_index import FilterColumns, filter_columns
from pictrieve.vectorstore.photo_filter import PhotoFilter, distance_km

SHOWN = 5
"""How many values (places, cameras, folders) a line lists, most photos first."""


@dataclass(frozen=True)
class ConditionCount:
    """One condition of a filter on its own: how many photos pass it, and what the gallery has for it."""

    kind: str
    """``"dates"``, ``"near"``, ``"place"``, ``"camera"`` or ``"folder"``."""
    label: str
    """The condition in words: ``"place 'lisbon'"``, ``"within 50 km of Porto"``."""
    passing: int
    here: str
    """What the gallery holds for this field: ``"places here: Lisbon PT (12), Tokyo JP (8)"``."""


@dataclass(frozen=True)
class FilterExplanation:
    """How a gallery's photos fare against a filter: ``total`` photos, ``passing`` pass all of it, and each
    condition alone (``conditions``). ``message`` says it in one line."""

    total: int
    passing: int
    conditions: list[ConditionCount] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Whether no photo passes the filter (the filter, not the query, left the search empty)."""
        return self.passing == 0

    @property
    def message(self) -> str:
        """One line: which condition left nothing and what the gallery has, or that all together leave nothing,
        or how many photos pass (then an empty search is not the filter's doing)."""
        if self.total == 0:
            return "the gallery has no photos"
        if self.passing:
            return f"{_photos(self.passing)} of {self.total:,} pass the filters"
        blocking = [c for c in self.conditions if c.passing == 0]
        if blocking:
            return "; ".join(f"0 photos pass {c.label}" + (f"; {c.here}" if c.here else "") for c in blocking)
        alone = ", ".join(f"{c.label}: {c.passing:,}" for c in self.conditions)
        return f"each filter passes photos on its own ({alone}), but no photo passes them all together"

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "passing": self.passing, "message": self.message,
                "conditions": [{"kind": c.kind, "label": c.label, "passing": c.passing, "here": c.here}
                               for c in self.conditions]}


def explain_filter(store: Any, photo_filter: PhotoFilter) -> FilterExplanation:
    """How the photos of ``store`` (any :class:`~pictrieve.vectorstore.store.ImageStore`, this embedder's view) fare
    against ``photo_filter``: all of it, and each condition alone, with what the gallery has for each field.

    Call it when a filtered search returned nothing: ``explanation.empty`` says whether the filter left no photo
    (show ``explanation.message``), else the query or a relevance cut did. An embedded Chroma gallery is counted in
    its filter columns (milliseconds once they are read); other stores read their records' metadata once."""
    columns = filter_columns(store)
    if columns is None:
        columns = FilterColumns.of_records(store.metadata_of(store.ids()))
    total = len(columns)
    passing = int(columns.mask(photo_filter).sum()) if total else 0
    conditions = [_count(columns, kind, label, part, describe) for kind, label, part, describe in _parts(photo_filter)]
    return FilterExplanation(total=total, passing=passing, conditions=conditions)


def _count(columns: FilterColumns, kind: str, label: str, part: PhotoFilter, describe: Any) -> ConditionCount:
    mask = columns.mask(part)
    return ConditionCount(kind, label, int(mask.sum()), describe(columns) if not mask.any() else "")


def _parts(photo_filter: PhotoFilter) -> list[tuple[str, str, PhotoFilter, Any]]:
    """Each condition as its own filter: ``(kind, label, filter, what-the-gallery-has)``."""
    parts: list[tuple[str, str, PhotoFilter, Any]] = []
    if photo_filter.after or photo_filter.before:
        dates = PhotoFilter(after=photo_filter.after, before=photo_filter.before,
                            exif_dates_only=photo_filter.exif_dates_only)
        parts.append(("dates", _dates_label(dates), dates, lambda c: _dates_here(c, dates.exif_dates_only)))
    if photo_filter.near:
        near = PhotoFilter(near=photo_filter.near, radius_km=photo_filter.radius_km, near_name=photo_filter.near_name)
        where = photo_filter.near_name or f"{near.near[0]:.5g},{near.near[1]:.5g}"
        parts.append(("near", f"within {near.radius_km:g} km of {where}", near, lambda c: _near_here(c, near)))
    if photo_filter.place:
        place = PhotoFilter(place=photo_filter.place)
        parts.append(("place", f"place {photo_filter.place!r}", place, _places_here))
    if photo_filter.camera:
        camera = PhotoFilter(camera=photo_filter.camera)
        parts.append(("camera", f"camera {photo_filter.camera!r}", camera,
                      lambda c: _listed("cameras", c.values("camera"), "no photo here names its camera in its EXIF")))
    if photo_filter.folder:
        folder = photo_filter.folder
        parts.append(("folder", f"folder {folder!r}" + ("" if Path(folder).expanduser().is_dir()
                                                          else " (no such folder on disk)"),
                      PhotoFilter(folder=folder), lambda c: _listed("folders", c.values("folder"), "")))
    return parts


def _listed(what: str, values: list[str | None], none: str) -> str:
    """``"WHAT here: A (12), B (8), and 3 more"`` (most photos first, then by name), or ``none`` when no photo has a value."""
    counts = Counter(value for value in values if value)
    if not counts:
        return none
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0].casefold(), item[0]))
    shown = ", ".join(f"{value} ({n:,})" for value, n in ranked[:SHOWN])
    more = len(counts) - SHOWN
    missing = sum(1 for value in values if not value)
    return f"{what} here: {shown}" + (f", and {more:,} more" if more > 0 else "") + \
        (f"; {_photos(missing)} without one" if missing else "")


def _places_here(columns: FilterColumns) -> str:
    cities, countries = columns.values("place_city"), columns.values("place_country")
    named = [" ".join(part for part in (city, country) if part) or None for city, country in zip(cities, countries)]
    if any(named):
        return _listed("places", named, "")
    located = int(np.isfinite(columns.numbers("gps_lat")).sum())
    if located:
        return (f"{_photos(located)} here {'has' if located == 1 else 'have'} a GPS position but no place name "
                "(install pictrieve[places] and index again to name them)")
    return "no photo here has a GPS position, so none has a place"


def _near_here(columns: FilterColumns, near: PhotoFilter) -> str:
    lat, lon = columns.numbers("gps_lat"), columns.numbers("gps_lon")
    located = np.isfinite(lat) & np.isfinite(lon)
    if not located.any():
        return "no photo here has a GPS position"
    assert near.near is not None
    distances = [distance_km(near.near, (float(a), float(b))) for a, b in zip(lat[located], lon[located])]
    nearest = int(np.argmin(distances))
    place = [" ".join(p for p in (city, cc) if p) for city, cc in
             zip(columns.values("place_city"), columns.values("place_country"))]
    named = np.asarray(place, dtype=object)[located][nearest]
    unlocated = int((~located).sum())
    return (f"the nearest photo is {distances[nearest]:,.0f} km away" + (f" ({named})" if named else "")
            + (f"; {_photos(unlocated)} without a GPS position" if unlocated else ""))


def _dates_here(columns: FilterColumns, exif_only: bool) -> str:
    local = columns.numbers("taken_at_local_ts")
    sources = columns.values("taken_at_source")
    dated = np.isfinite(local)
    if not dated.any():
        return "no photo here has a date"
    usable = dated & np.asarray([source == "exif" for source in sources], bool) if exif_only else dated
    by_file = int((dated & np.asarray([source != "exif" for source in sources], bool)).sum())
    note = ""
    if by_file:
        its, are = ("its", "is") if by_file == 1 else ("their", "are")
        note = (f"; {_photos(by_file)} dated only by {its} file {are} left out (exif_dates_only)" if exif_only
                else f" ({_photos(by_file)} dated by {its} file)")
    if not usable.any():
        return "no photo here has an EXIF date" + note
    first, last = (_day(float(x)) for x in (local[usable].min(), local[usable].max()))
    return f"photos here were taken {first} .. {last}" + note


def _dates_label(dates: PhotoFilter) -> str:
    words = []
    if dates.after:
        words.append(f"on or after {_bound(dates.after)}")
    if dates.before:
        words.append(f"before {_bound(dates.before)}")
    return "taken " + " and ".join(words) + (" (EXIF dates only)" if dates.exif_dates_only else "")


def _bound(when: dt.datetime) -> str:
    if when.tzinfo is None and when.time() == dt.time():
        return when.date().isoformat()
    return when.isoformat()


def _day(wall_seconds: float) -> str:
    return (dt.datetime(1970, 1, 1) + dt.timedelta(seconds=math.floor(wall_seconds))).date().isoformat()


def _photos(n: int) -> str:
    return f"{n:,} photo" + ("" if n == 1 else "s")


__all__ = ["ConditionCount", "FilterExplanation", "explain_filter"]
