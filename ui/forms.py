"""Reading the page's requests: JSON bodies and form fields checked into values, uploads saved and decoded.

Every tab's router (:mod:`pictrieve.ui.app` lists them) reads its request with these, so a bad value is the
same one line (:class:`UIError`, answered ``400``) on every tab.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from fastapi import Request

from pictrieve.agents.settings import MAX_TEXT  # one bound for every front end
from pictrieve.errors import PictrieveError

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
"""Uploads above this size are refused before decoding."""
MAX_K = 100


class UIError(PictrieveError, ValueError):
    """A request the page made that cannot be served as given; the message is shown on the page."""


def option_words() -> dict[str, str]:
    """What a command-line option of the server sets, in words a page's visitor reads: each need's option (its
    :attr:`~pictrieve.agents.needs.Need.spoken` name) and its endpoint's, and the gallery's."""
    from pictrieve.agents.needs import NEEDS

    words = {"--embedder": "the embedder", "--gallery": "the gallery"}
    for need in NEEDS.values():
        if need.cli_option:
            words[need.cli_option] = need.spoken
        if need.endpoint is not None:
            words[need.endpoint.cli_option] = f"{need.spoken}'s address"
    return words


_OPTION = re.compile(r"`?(?<![\w-])(--[a-z][a-z0-9-]*)(?:[ =](?:[a-z_]+:[^\s,;)`]*|[A-Z][A-Z_]+))?`?")


def page_message(exc: BaseException) -> str:
    """``exc`` as the page's one line. The library words its advice for the command line ("check --base-url");
    a visitor of the page cannot pass an option, so each option is named by what it sets, and the line says
    who can change it: whoever started the page. The page's own refusals (:class:`UIError`) are already
    worded for it."""
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    if isinstance(exc, UIError) or not _OPTION.search(text):
        return text or type(exc).__name__
    words = option_words()
    named = list(dict.fromkeys(words.get(m.group(1), "its settings") for m in _OPTION.finditer(text)))
    worded = _OPTION.sub(lambda m: words.get(m.group(1), "the server's settings"), text).rstrip(" .")
    worded = re.sub(r"\b(model|describer) model\b", r"\1", worded)  # "--llm model 'x'": the chat model 'x'
    return (f"{worded}. This page cannot change {' or '.join(named)}: try again later, or ask whoever started it "
            "to restart `pictrieve ui` with another setting")


async def form_or_json(request: Request) -> dict[str, Any]:
    """The request's JSON object, or its form fields (a multipart upload: at most 2 files and 32 fields)."""
    if request.headers.get("content-type", "").startswith("application/json"):
        body = await request.json()
        if not isinstance(body, dict):
            raise UIError("expected a JSON object")
        return body
    return dict(await request.form(max_files=2, max_fields=32))


def text(value: Any, what: str, most: int = MAX_TEXT) -> str:
    """``value`` as stripped text of at most ``most`` characters."""
    out = str(value or "").strip()
    if len(out) > most:
        raise UIError(f"{what} is longer than {most} characters; say it in fewer words")
    return out


def k_value(value: Any, default: int) -> int:
    """How many photos to show: a whole number from 1 to :data:`MAX_K` (``default`` when not given)."""
    return count(value, default, "k", MAX_K)


def count(value: Any, default: int, what: str, most: int) -> int:
    """A whole number from 1 to ``most`` (``default`` when not given)."""
    try:
        n = int(value) if value not in (None, "") else default
    except (TypeError, ValueError) as exc:
        raise UIError(f"{what} must be a whole number, not {value!r}") from exc
    if not 1 <= n <= most:
        raise UIError(f"{what} must be between 1 and {most}")
    return n


def checked(value: Any) -> bool:
    """A page checkbox's value, sent as JSON (true) or as a form field ("on", "true", "1")."""
    return value is True or str(value or "").lower() in {"1", "true", "on"}


def is_upload(value: Any) -> bool:
    """Whether a form value is an uploaded file."""
    return hasattr(value, "read")


def save_upload(upload: Any, limit: int, folder: Path) -> Path:
    """Read an upload (at most ``limit`` bytes), decode it within a service's memory budget (a JPEG reduced,
    other formats above the pixel budget refused from the header), save a PNG."""
    from pictrieve.tools.core.images import load_service_image

    data = upload.file.read(limit + 1)
    if len(data) > limit:
        size = f"{limit / 2**20:g} MiB" if limit >= 2**20 else f"{limit / 1024:g} KiB"
        raise UIError(f"the picture is larger than {size}; use a smaller one")
    raw = folder / "upload"
    raw.write_bytes(data)
    try:
        image = load_service_image(raw)  # raises ImageDecodeError (a readable one-liner) for non-images
    except PictrieveError as exc:
        raise UIError(str(exc).replace(str(raw), "the uploaded file")) from exc  # no server paths on the page
    path = folder / "query.png"
    image.save(path)
    return path


class guarded_upload:
    """Save an upload (size-capped) to a temp file, decode it with the indexer's guarded loader."""

    def __init__(self, upload: Any, limit: int) -> None:
        self.upload, self.limit = upload, limit

    def __enter__(self) -> Path:
        self.dir = tempfile.TemporaryDirectory(prefix="pictrieve-upload-")
        try:
            return save_upload(self.upload, self.limit, Path(self.dir.name))
        except BaseException:
            self.dir.cleanup()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.dir.cleanup()
