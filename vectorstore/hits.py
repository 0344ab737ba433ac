"""The one result type of every pictrieve method: a ranked gallery image, JSON-ready.

Every retrieval method (plain search, PlugIR, QC2, VisRet, NEEDLE, the Vision Search Assistant's
gallery tool) returns :class:`ImageHit` objects: in graph state, on the CLI's ``--json``, in the
LangChain documents of :class:`~pictrieve.vectorstore.retriever.GalleryRetriever`, and on the web
page. It is a frozen pydantic model, so it checkpoints with LangGraph's serializer, crosses the
LangGraph server as plain JSON (``hit.model_dump(mode="json")``) and validates when a JSON dict comes
back (``ImageHit.model_validate(d)``). Frozen on purpose: fusion and re-ranking return new hits
(``hit.model_copy(update={"rank": 1})``) instead of editing a hit another ranking still holds.

How a hit is shown is said here once, for every front end: :func:`hit_line` (the command line's row),
:func:`hit_json` (what a model and a program read: the MCP tools' ``Hit`` and the LangChain tools' rows) and
:func:`photo_blocks` (each photo as a labelled JPEG thumbnail, as LangChain's standard content blocks, which
the MCP server turns into MCP content).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ImageHit(BaseModel):
    """One ranked image: gallery ``id``, file ``path``, ``score`` (higher is better), 1-based ``rank``.

    ``score`` is the cosine similarity for a plain search and the fused score (e.g. reciprocal-rank
    fusion) for methods that combine rankings; ``relevant`` says whether it matches the query well; ``metadata`` is what the gallery stores for the image
    (size, hash, captions, annotations). ``captions`` repeats the stored captions for convenience.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    path: str = ""
    score: float = 0.0
    rank: int = 0
    captions: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    copies: list[str] = Field(default_factory=list)
    """With ``collapse_duplicates``: the paths of the near-identical photos this hit stands for (itself left
    out), folded into it from the same search's candidates; empty otherwise."""
    relevant: bool | None = None
    """Whether the hit matches its query well: its score reaches the embedder's calibrated cutoff (see
    :mod:`~pictrieve.vectorstore.relevance`). Plain search sets it on every hit; ``None``: not judged
    (a method whose fused scores are not the embedder's cosine)."""
    keyword_match: bool = False
    """Whether the photo's own words (folder, file name, captions, place, photo text) matched the query in a
    hybrid search (:mod:`~pictrieve.vectorstore.keywords`); ``False`` for a search by vectors alone."""
    matched_by: Literal["vector", "words", "both", "filters"] | None = None
    """Why a plain search shows it: ``vector`` (its embedding is among the closest), ``words`` (the photo's own words
    matched and brought it in, its vector alone would not have), ``both``, or ``filters`` (browsing by filters
    alone, newest first); ``None``: not said (another method's fused ranking)."""

    @field_validator("score")
    @classmethod
    def _finite(cls, value: float) -> float:
        # JSON has no NaN: a score nobody computed is 0, not NaN.
        return 0.0 if math.isnan(value) else float(value)

    @property
    def caption(self) -> str:
        """The first caption, or ``""``."""
        return self.captions[0] if self.captions else ""

    @property
    def label(self) -> str:
        """A short human label: the first caption, else the file name, else the id."""
        return self.caption or str(self.metadata.get("name") or "") or self.path.rsplit("/", 1)[-1] or self.id

    @property
    def taken_at(self) -> str:
        """When the photo was taken (ISO 8601, from EXIF or the file's time: see :attr:`dated_by_file`), or ``""``."""
        return str(self.metadata.get("taken_at") or "")

    @property
    def dated_by_file(self) -> bool:
        """Whether :attr:`taken_at` is only the file's time (the photo has no EXIF capture time)."""
        return self.metadata.get("taken_at_source") == "file"

    @property
    def date_label(self) -> str:
        """The day it was taken by the photo's own clock, ``"2023-06-13"``; ``"2023-06-13 (file date)"`` when the
        photo has no EXIF capture time and the day is its file's; ``""`` when unknown (or of unknown source)."""
        if not self.taken_at or self.metadata.get("taken_at_source") not in ("exif", "file"):
            return ""
        return self.taken_at[:10] + (" (file date)" if self.dated_by_file else "")

    @property
    def place(self) -> str:
        """Where it was taken ("city, region, country code"), or ``""``."""
        return str(self.metadata.get("place") or "")

    @property
    def camera(self) -> str:
        """The camera that took it, or ``""``."""
        return str(self.metadata.get("camera") or "")

    @property
    def photo_text(self) -> str:
        """The text read in the photo (signs, screenshots; indexed with ``--ocr``), or ``""``."""
        return str(self.metadata.get("photo_text") or "")

    def to_json(self) -> dict[str, Any]:
        """A plain JSON dict (what ``--json``, the server and the web page show)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_record(cls, id_: str, metadata: Mapping[str, Any] | None, *, score: float = 0.0, rank: int = 0) -> "ImageHit":
        """A hit from a stored gallery record (its metadata as Chroma returns it)."""
        meta = dict(metadata or {})
        return cls(
            id=str(id_),
            path=str(meta.get("path", "")),
            score=score,
            rank=rank,
            captions=[str(c) for c in (meta.get("captions") or [])],
            metadata=meta,
        )


def as_hit(value: ImageHit | Mapping[str, Any]) -> ImageHit:
    """Accept a hit or its JSON dict (as it comes back from the LangGraph server or a checkpoint)."""
    return value if isinstance(value, ImageHit) else ImageHit.model_validate(dict(value))


# --- how a hit is shown -------------------------------------------------------------------------------------

KNOWN_FIELDS = ("taken_at", "place", "camera", "photo_text")
"""What :func:`hit_json` adds when the photo has it: when, where and with which camera it was taken, the text read
in it (a gallery indexed with ``--ocr``). A photo dated only by its file gets ``file_date`` instead of
``taken_at``, and every dated one ``date`` (:attr:`ImageHit.date_label`)."""


def hit_json(hit: ImageHit | Mapping[str, Any]) -> dict[str, Any]:
    """What a model and a program read about a hit: ``rank``, ``id``, ``path``, ``score`` (4 decimals),
    ``relevant`` (``None``: not judged), the first ``caption``, ``keyword_match``, ``matched_by`` when said; those of :data:`KNOWN_FIELDS`
    the photo has a value for; and ``copies`` when a collapsed search folded near-identical photos into it.
    The MCP tools' ``Hit`` schema and the LangChain tools' rows are this dict."""
    hit = as_hit(hit)
    known = {name: value for name in KNOWN_FIELDS if (value := getattr(hit, name))}
    if hit.dated_by_file and "taken_at" in known:  # a file's time is no capture time: say which it is
        known = {"file_date" if name == "taken_at" else name: value for name, value in known.items()}
    if hit.date_label:
        known["date"] = hit.date_label
    return {"rank": hit.rank, "id": hit.id, "path": hit.path, "score": round(hit.score, 4), "relevant": hit.relevant,
            "caption": hit.caption, "keyword_match": hit.keyword_match,
            **({"matched_by": hit.matched_by} if hit.matched_by else {}), **known,
            **({"copies": list(hit.copies)} if hit.copies else {})}


def hit_line(hit: ImageHit | Mapping[str, Any]) -> str:
    """A hit as one line of text: rank, score, file (or id), caption, then what is known of when, where and with
    what it was taken (the day by the photo's own clock, "(file date)" when it is only the file's), ``[words]`` for
    a keyword match, and how
    many near-identical copies it stands for."""
    hit = as_hit(hit)
    caption = f"  {hit.caption}" if hit.caption else ""
    about = "  ".join(part for part in (hit.date_label, hit.place, hit.camera) if part)
    words = "  [words]" if hit.keyword_match else ""
    copies = (f"  (+{len(hit.copies)} near-identical {'copy' if len(hit.copies) == 1 else 'copies'})"
              if hit.copies else "")
    return f"{hit.rank:3d}  {hit.score:.3f}  {hit.path or hit.id}{caption}" + (f"  [{about}]" if about else "") \
        + words + copies


def hit_rows(hits: Iterable[ImageHit | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:func:`hit_json` of each hit."""
    return [hit_json(hit) for hit in hits]


def photo_blocks(hits: Sequence[ImageHit | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each hit's photo for a model that sees images, as standard content blocks (LangChain's ``text`` and
    ``image`` blocks: ``{"type": "image", "base64": ..., "mime_type": "image/jpeg"}``): a label, ``Photo n (id
    ...):`` and the first caption, then its JPEG thumbnail (:func:`pictrieve.tools.core.thumbnails.jpeg_thumbnail`,
    longest side at most 512 px). A photo whose file cannot be read gets a line saying so instead."""
    from pictrieve.errors import PictrieveError
    from pictrieve.tools.core.thumbnails import jpeg_thumbnail

    blocks: list[dict[str, Any]] = []
    for n, hit in enumerate(map(as_hit, hits), start=1):
        label = f"Photo {n} (id {hit.id}):"
        try:
            data = jpeg_thumbnail(hit.path)
        except (PictrieveError, OSError):
            blocks.append({"type": "text", "text": f"{label} the image file cannot be read"})
            continue
        blocks.append({"type": "text", "text": f"{label} {hit.caption}" if hit.caption else label})
        blocks.append({"type": "image", "base64": base64.b64encode(data).decode("ascii"), "mime_type": "image/jpeg"})
    return blocks
