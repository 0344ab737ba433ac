"""Photos with EXIF blocks made here (capture time, GPS, camera, Orientation), as phones write them."""

from __future__ import annotations

from fractions import Fraction

from PIL import Image
from PIL.TiffImagePlugin import IFDRational


def exif_block(orientation: int | None = None, *, taken: str | None = None, offset: str | None = None,
               gps: tuple[float, float] | None = None, make: str | None = None, model: str | None = None) -> Image.Exif:
    exif = Image.Exif()
    if orientation is not None:
        exif[0x0112] = orientation
    if make:
        exif[0x010F] = make
    if model:
        exif[0x0110] = model
    if taken:
        sub = exif.get_ifd(0x8769)
        sub[0x9003] = taken
        if offset:
            sub[0x9011] = offset
    if gps:
        lat, lon = gps
        ifd = exif.get_ifd(0x8825)
        ifd[1], ifd[2] = ("S" if lat < 0 else "N"), dms(abs(lat))
        ifd[3], ifd[4] = ("W" if lon < 0 else "E"), dms(abs(lon))
    return exif


def dms(value: float) -> tuple[IFDRational, IFDRational, IFDRational]:
    degrees = int(value)
    minutes = int((value - degrees) * 60)
    seconds = Fraction((value - degrees - minutes / 60) * 3600).limit_denominator(1000)
    return IFDRational(degrees, 1), IFDRational(minutes, 1), IFDRational(seconds.numerator, seconds.denominator)
