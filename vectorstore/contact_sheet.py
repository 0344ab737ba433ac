"""Self-contained HTML contact sheets of search results.

Thumbnails are embedded as base64 JPEG, so the file can be mailed or opened anywhere without the
gallery. Written atomically: a half-written sheet never replaces a good one.
"""

from __future__ import annotations

import base64
import html
import io
import logging
import os
from pathlib import Path
from typing import Sequence

from pictrieve.tools.core.files import atomic_write_bytes
from pictrieve.tools.core.images import ImageDecodeError, load_image
from pictrieve.vectorstore.hits import ImageHit

logger = logging.getLogger(__name__)

THUMBNAIL_SIZE = 384

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;background:#fafafa;color:#222}
h1{font-size:1.3em} h2{font-size:1.05em;margin-top:2em}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(220px,1fr));gap:12px}
figure{margin:0;background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px;max-width:480px}
img{width:100%;aspect-ratio:4/3;height:auto;object-fit:contain;background:#eee}
figcaption{font-size:.8em;overflow-wrap:anywhere}
.rank{font-weight:bold} .score{color:#555}
.missing{aspect-ratio:4/3;display:flex;align-items:center;justify-content:center;background:#eee}
"""


def thumbnail_data_uri(path: str | os.PathLike, size: int = THUMBNAIL_SIZE) -> str | None:
    """A ``data:image/jpeg;base64,...`` thumbnail, or ``None`` if the file cannot be read."""
    try:
        image = load_image(path)
    except (ImageDecodeError, OSError) as exc:
        logger.warning("no thumbnail for %s (%s)", path, exc)
        return None
    image.thumbnail((size, size))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=85)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def render_contact_sheet(sections: Sequence[tuple[str, Sequence[ImageHit]]], title: str = "pictrieve results") -> str:
    """HTML for one or more titled sections of hits (e.g. one per query or per dialogue round)."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for heading, hits in sections:
        if heading != title:  # a single search's section carries the page title: say it once
            parts.append(f"<h2>{html.escape(heading)}</h2>")
        parts.append("<div class='grid'>")
        for hit in hits:
            uri = thumbnail_data_uri(hit.path)
            picture = f"<img src='{uri}' alt=''>" if uri else "<div class='missing'>unreadable</div>"
            caption = html.escape(hit.captions[0]) if hit.captions else ""
            parts.append(
                f"<figure title='{html.escape(hit.path, quote=True)}'>{picture}<figcaption><span class='rank'>#{hit.rank}</span> "
                f"<span class='score'>{hit.score:.3f}</span><br>{_breakable_path(hit.path)}"
                f"{'<br><i>' + caption + '</i>' if caption else ''}</figcaption></figure>"
            )
        parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _breakable_path(path: str) -> str:
    """``path`` escaped, with line-break opportunities after each ``/`` (never inside a name)."""
    return "/<wbr>".join(html.escape(part) for part in path.split("/"))


def write_contact_sheet(
    hits: Sequence[ImageHit] | Sequence[tuple[str, Sequence[ImageHit]]],
    path: str | os.PathLike,
    title: str = "pictrieve results",
) -> Path:
    """Write a contact sheet for ``hits`` (or for titled sections of hits) to ``path``."""
    sections = hits if hits and isinstance(hits[0], tuple) else [(title, hits)]
    path = Path(path)
    atomic_write_bytes(path, render_contact_sheet(sections, title).encode("utf-8"))  # type: ignore[arg-type]
    return path
