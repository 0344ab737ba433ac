"""Prompt texts of the Vision Search Assistant (``prompts/vsa/<name>.txt``, package data) and data fencing."""

from __future__ import annotations

import re

from pictrieve import prompts

_FENCE = re.compile(r"<<<\s*(END\s+)?(RESULT|FINDINGS)[^>]*>>>", re.IGNORECASE)


def prompt(name: str) -> str:
    """The text of ``prompts/vsa/<name>.txt`` (``planner``, ``searcher``, ``answer`` ...)."""
    return prompts.text("vsa", name)


def defang(text: str) -> str:
    """Page text with anything that looks like our fence markers removed, so a page cannot close its fence."""
    return _FENCE.sub("[removed marker]", text)


def fence_results(results: list[tuple[int, str, str]]) -> str:
    """``(number, title, text)`` triples as fenced blocks (the text is data, never instructions)."""
    return "\n\n".join(
        f"<<<RESULT {n}>>>\nTitle: {defang(title)}\n{defang(text)}\n<<<END RESULT {n}>>>" for n, title, text in results
    )
