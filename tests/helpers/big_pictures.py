"""Pictures whose header declares far more pixels than their file holds, and a process's peak memory.

``flat_png`` writes a PNG of any size row by row through zlib, so making a 13000x13000 picture costs the
test a few megabytes, not the gigabyte Pillow would hold; ``flat_jpeg`` lets Pillow encode a flat grey
JPEG (one byte a pixel while encoding). ``peak_added`` measures how much a server process's resident
memory peaks above where it was while a block runs (Linux: ``VmHWM`` after resetting it through
``/proc/PID/clear_refs``, which a process's owner may write).
"""

from __future__ import annotations

import struct
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from PIL import Image

_COLOUR_TYPES = {"L": (0, 1), "RGB": (2, 3), "RGBA": (6, 4)}


def flat_png(path: Path, width: int, height: int, mode: str = "L", value: int = 128) -> Path:
    """A valid PNG of ``width`` x ``height`` pixels of one grey, written without holding its pixels."""
    colour_type, channels = _COLOUR_TYPES[mode]

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    squeeze = zlib.compressobj(9)
    row = b"\0" + bytes([value]) * (width * channels)  # filter type 0, then the row's samples
    body = b"".join(squeeze.compress(row) for _ in range(height)) + squeeze.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b""))
    return path


def flat_jpeg(path: Path, width: int, height: int, quality: int = 30) -> Path:
    """A flat grey JPEG of ``width`` x ``height`` (Pillow holds one byte a pixel while writing it)."""
    Image.new("L", (width, height), 128).save(path, format="JPEG", quality=quality)
    return path


def _status(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` memory field, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


class PeakAdded:
    """What :func:`peak_added` measured: ``bytes`` the peak rose above the resident size at the start."""

    bytes: int = 0

    def __repr__(self) -> str:
        return f"{self.bytes / 2**20:.0f} MiB"


@contextmanager
def peak_added(pid: int) -> Iterator[PeakAdded]:
    """How far process ``pid``'s resident memory peaks above its size at the start of the block."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak (VmHWM) restarts from the current size
    start = _status(pid, "VmRSS")
    measured = PeakAdded()
    yield measured
    measured.bytes = _status(pid, "VmHWM") - start
