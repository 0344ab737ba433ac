"""Load the PlugIR chat prompts from ``pictrieve/prompts/plugir/*.txt`` and fill them in.

A prompt file is a list of chat turns. Lines starting with ``#`` before the first turn are
comments; each turn starts with ``### system``, ``### user`` or ``### assistant``. Placeholders are
``{name}`` and only the names passed to :func:`render_prompt` are replaced, so other braces in a
prompt stay as written.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

_TURN = re.compile(r"^### (system|user|assistant)\s*$", re.MULTILINE)
_MESSAGE_TYPES = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}


@lru_cache(maxsize=None)
def load_prompt(name: str) -> tuple[tuple[str, str], ...]:
    """The turns ``((role, template), ...)`` of ``prompts/plugir/<name>.txt``."""
    text = resources.files("pictrieve.prompts").joinpath("plugir", f"{name}.txt").read_text(encoding="utf-8")
    parts = _TURN.split(text)
    if len(parts) < 3:
        raise ValueError(f"prompt {name!r} has no '### <role>' turns")
    roles, bodies = parts[1::2], parts[2::2]
    return tuple((role, body.strip("\n")) for role, body in zip(roles, bodies))


def render_prompt(name: str, **values: str) -> list[BaseMessage]:
    """The prompt ``name`` as LangChain messages, with ``{key}`` replaced by ``values[key]``."""
    messages = []
    for role, template in load_prompt(name):
        for key, value in values.items():
            template = template.replace("{" + key + "}", str(value))
        messages.append(_MESSAGE_TYPES[role](content=template))
    return messages
