"""The PlugIR chat prompts (``prompts/plugir/*.txt``, read by :func:`pictrieve.prompts.chat_turns`), filled in.

A prompt file is a list of chat turns. Lines starting with ``#`` before the first turn are
comments; each turn starts with ``### system``, ``### user`` or ``### assistant``. Placeholders are
``{name}`` and only the names passed to :func:`render_prompt` are replaced, so other braces in a
prompt stay as written.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from pictrieve import prompts

_MESSAGE_TYPES = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}


def render_prompt(name: str, **values: str) -> list[BaseMessage]:
    """The prompt ``name`` as LangChain messages, with ``{key}`` replaced by ``values[key]``."""
    messages = []
    for role, template in prompts.chat_turns("plugir", name):
        for key, value in values.items():
            template = template.replace("{" + key + "}", str(value))
        messages.append(_MESSAGE_TYPES[role](content=template))
    return messages
