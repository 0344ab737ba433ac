"""Prompts and word lists as package data, and the one loader every method reads them with.

Method ``m`` keeps its prompts in ``prompts/<m>/`` (``plugir``, ``visret``, ``vsa``); ``judges/`` holds
the evaluation judges' rubrics and ``image_tags.yaml`` the offline tagger's vocabulary. Reading goes through
:mod:`importlib.resources`, so prompts load the same from a wheel, a zip or a source checkout, and never
from a path beside a source file. A user who wants other wording edits the file; no prompt lives in code.

- :func:`text` gives a prompt file as a string (``text("vsa", "planner")`` reads ``prompts/vsa/planner.txt``);
- :func:`data` parses a YAML file (``data("plugir", "hypernyms")``);
- :func:`chat_turns` splits a chat prompt into its ``### system`` / ``### user`` / ``### assistant`` turns.

Every result is cached: prompts do not change while a process runs.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = ["PromptError", "chat_turns", "data", "text"]

_TURN = re.compile(r"^### (system|user|assistant)\s*$", re.MULTILINE)


class PromptError(ValueError):
    """A prompt file that is missing or not in the form its reader expects."""


def _read(parts: tuple[str, ...], suffix: str) -> str:
    *folders, name = parts
    resource = resources.files(__name__).joinpath(*folders, f"{name}{suffix}")
    try:
        return resource.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PromptError(f"no prompt {'/'.join(parts)}{suffix} in pictrieve/prompts") from None


@lru_cache(maxsize=None)
def text(*parts: str) -> str:
    """The text of ``prompts/<parts...>.txt``: ``text("vsa", "planner")``, ``text("judges", "same_fact")``."""
    return _read(parts, ".txt")


@lru_cache(maxsize=None)
def data(*parts: str) -> Any:
    """The parsed YAML of ``prompts/<parts...>.yaml``: ``data("image_tags")``, ``data("plugir", "hypernyms")``.

    Callers must not change what they get: it is shared by every later call.
    """
    import yaml  # a dependency of langchain-core; imported here so prompts stay cheap to import

    return yaml.safe_load(_read(parts, ".yaml"))


@lru_cache(maxsize=None)
def chat_turns(*parts: str) -> tuple[tuple[str, str], ...]:
    """The turns ``((role, template), ...)`` of the chat prompt ``prompts/<parts...>.txt``.

    A chat prompt is a list of turns, each starting with a ``### system``, ``### user`` or ``### assistant``
    line; lines before the first turn are comments.
    """
    split = _TURN.split(text(*parts))
    if len(split) < 3:
        raise PromptError(f"prompt {'/'.join(parts)}.txt has no '### <role>' turns")
    roles, bodies = split[1::2], split[2::2]
    return tuple((role, body.strip("\n")) for role, body in zip(roles, bodies))
