"""What a person (or a simulated user) replies to PlugIR's question, read into an answer, a pick or a stop."""

from __future__ import annotations

import logging
import re
from typing import Any, Mapping, Sequence

from pictrieve.agents.plugir.caption_terms import vocabulary
from pictrieve.agents.settings import MAX_TEXT
from pictrieve.vectorstore.hits import ImageHit, as_hit

logger = logging.getLogger(__name__)

_FOUND = re.compile(r"^\s*(?:found|select|pick|it'?s)\s*#?\s*(\S+)?\s*$", re.I)
_STOP = {"stop", "quit", "exit", "q", "done", "give up"}


def parse_reply(reply: Any, shown: Sequence[ImageHit]) -> dict[str, Any]:
    """Turn a resume value into ``{"answer": str}``, ``{"found": ImageHit}``, ``{"stop": True}`` or
    ``{"refused": why}`` (a pick of no photo shown: ``found 11`` of 10, ``found 0``; ask again, saying ``why``).

    Accepts a string (``"found 3"`` = the 3rd shown image, or a shown image's id; ``"stop"``; anything
    else is an answer) or a mapping with ``answer`` / ``found`` / ``stop`` keys, each text at most
    :data:`~pictrieve.agents.settings.MAX_TEXT` characters (a number is read as its digits). Any other value
    (a list, a nested mapping, a longer text) is refused, so a resume can never grow an answer past the bound
    every front end keeps.
    """
    if isinstance(reply, Mapping):
        if reply.get("stop"):
            return {"stop": True}
        if reply.get("found") is not None:
            token = _text(reply["found"])
            return {"refused": _REPLY_SHAPE} if token is None else _found(token, shown)
        reply = reply.get("answer", "")
    text = _text(reply)
    if text is None:
        return {"refused": _REPLY_SHAPE}
    text = text.strip()
    if text.lower() in _STOP:
        return {"stop": True}
    match = _FOUND.match(text)
    if match and text.lower().split()[0] in {"found", "select", "pick"}:
        return _found(match.group(1) or "1", shown)
    return {"answer": text or "unknown"}


_REPLY_SHAPE = f"Answer in words (at most {MAX_TEXT} characters), say found N for a photo shown, or stop to end."


def _text(value: Any) -> str | None:
    """``value`` as a reply's text: a string (or a number's digits) of at most MAX_TEXT characters, else None."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    return value if isinstance(value, str) and len(value) <= MAX_TEXT else None


def _found(token: str, shown: Sequence[ImageHit]) -> dict[str, Any]:
    shown = [as_hit(hit) for hit in shown]
    for hit in shown:
        if hit.id == token:
            return {"found": hit}
    if token.isdigit() and 1 <= int(token) <= len(shown):
        return {"found": shown[int(token) - 1]}
    # Not one of the shown images: never end the session on a photo nobody saw; say what a pick can be.
    logger.info("'found %s' matches no shown image; asking again", token)
    picks = f"found 1 to found {len(shown)}" if len(shown) > 1 else "found 1"
    what = f"There is no photo {token} here" if token.isdigit() else f"No photo shown has the id {token!r}"
    return {"refused": f"{what}: say {picks} for a photo shown, stop to end, or answer the question."}


def option_labels(spec: Mapping[str, Any]) -> list[str]:
    """The words a person picks from for a choice question ("black", not "black dog")."""
    options = list(spec.get("options", []))
    labels = [o.split(" ", 1)[0] for o in options] if spec.get("noun") else options
    return labels + [vocabulary()["none_option"]]
