"""Plain-text and Markdown pages as paragraphs: one block per line, whatever the source's wrapping.

Hand-written Markdown and text files are often hard-wrapped at 72 or 80 columns, so a line break
there is not the end of anything: "...appeared in" / "England in the 1880s." is one sentence. The
HTML extractor (trafilatura) already gives one block per line; :func:`unwrap_paragraphs` gives plain
text and Markdown the same shape, so everything downstream (the page search's passages, the
extractive answerer's sentences) can treat a line as a paragraph.

Markdown's rules, kept small: a blank line ends a paragraph; headings, list items, block quotes and
table rows start a block of their own (a numbered item interrupts a paragraph only when it is "1."); a heading is one line; fenced code keeps its lines; a line
ending in two spaces or a backslash is a hard break. Other lines continue the paragraph, joined by a
space, or by nothing after a word broken at its hyphen ("two-" / "wheeled").
"""

from __future__ import annotations

import re

_BLOCK_START = re.compile(r"\s{0,3}(#{1,6}\s|[-*+]\s|>|\|)")
_BULLET = re.compile(r"[-*+]\s")
_ORDERED_ITEM = re.compile(r"\s{0,3}(\d{1,9})[.)]\s")
_HEADING = re.compile(r"\s{0,3}#{1,6}\s")
_FENCE = re.compile(r"\s{0,3}(```|~~~)")
_SETEXT_RULE = re.compile(r"\s{0,3}(=+|-+|\*+|_+)\s*$")


def unwrap_paragraphs(text: str) -> str:
    """``text`` with each paragraph (or heading, list item, quote, table row) on one line."""
    blocks: list[str] = []
    current: list[str] = []
    in_fence = False

    def end_block() -> None:
        if current:
            blocks.append(_join(current))
            current.clear()

    for raw in (text or "").replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.rstrip()
        if _FENCE.match(line):
            end_block()
            in_fence = not in_fence
            continue
        if in_fence:
            if line.strip():
                blocks.append(line.strip())
            continue
        if not line.strip():
            end_block()
            continue
        if _SETEXT_RULE.match(line):  # underlines a heading ("Title" / "=====") or is a rule
            end_block()
            continue
        ordered = _ORDERED_ITEM.match(line)
        # As in CommonMark, only "1." may interrupt a paragraph: "...followed in" / "1888. Tyres..." is one.
        in_list = bool(current) and bool(_ORDERED_ITEM.match(current[0]) or _BULLET.match(current[0]))
        if _BLOCK_START.match(line) or (ordered and (not current or in_list or ordered.group(1) == "1")):
            end_block()
        current.append(line.strip())
        if _HEADING.match(line) or raw.endswith("  ") or line.endswith("\\"):
            if line.endswith("\\"):
                current[-1] = current[-1][:-1].rstrip()
            end_block()
    end_block()
    return "\n".join(blocks)


def _join(lines: list[str]) -> str:
    text = lines[0]
    for line in lines[1:]:
        if re.search(r"[A-Za-z]-$", text) and line[:1].isalpha():
            text += line  # a compound word wrapped at its hyphen
        else:
            text += " " + line
    return text
