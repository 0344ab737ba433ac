"""Context reformulation (CR): caption + dialogue -> one caption-style retrieval query.

Zero-shot text encoders read dialogues poorly (paper Section 3.2), so retrieval uses a sentence an
LLM rewrites from the description and the answers (Table 20 layout; temperature 0, up to 512
tokens). If the rewrite equals last round's query, it is paraphrased (temperature 0.7, top_p 0.8,
as in the authors' code) so that the search can move. :func:`concatenate_dialogue` is the ZS
baseline: the raw dialogue joined into one string.
"""

from __future__ import annotations

import logging
import re
from typing import Sequence

from langchain_core.language_models.chat_models import BaseChatModel

from pictrieve.agents.plugir.chat_prompts import render_prompt
from pictrieve.agents.plugir.questioner import Turn
from pictrieve.tools.models.llm_calls import complete, note_fallback

logger = logging.getLogger(__name__)

# Paper settings; the new caption is one line, so generation also stops at a line break.
REFORMULATION_SAMPLING = {"temperature": 0.0, "max_tokens": 512, "stop": ["\n"]}
PARAPHRASE_SAMPLING = {"temperature": 0.7, "top_p": 0.8, "max_tokens": 512, "stop": ["\n"]}
_LABEL = re.compile(r"^\s*(?:\[?\s*(?:new\s+caption|caption|paraphrased|text)\s*\]?\s*[:：]\s*)+", re.I)


def concatenate_dialogue(description: str, dialogue: Sequence[Turn]) -> str:
    """The ZS query: ``description, q1 a1, q2 a2, ...`` (the authors' concatenation)."""
    return ", ".join([description] + [f"{t['question']} {t['answer']}" for t in dialogue])


def clean_caption(text: str) -> str:
    """First non-empty line of a reply, without labels like ``[New Caption]:`` or quotes."""
    for line in text.strip().splitlines():
        line = _LABEL.sub("", line).strip().strip('"\'`').strip()
        if line:
            return line
    return ""


def reformulate(
    llm: BaseChatModel,
    description: str,
    dialogue: Sequence[Turn],
    *,
    previous: str | None = None,
    max_words: int = 120,
    max_tokens: int | None = None,
) -> str:
    """One caption-style sentence carrying the description and the dialogue.

    Falls back to the concatenated dialogue (logged) when the model's reply is unusable; a failed
    call raises :class:`~pictrieve.tools.models.llm_calls.ModelCallError`.
    """
    if not dialogue:
        return description
    dialogue_text = ", ".join(f"{t['question']} {t['answer']}" for t in dialogue)
    sampling = dict(REFORMULATION_SAMPLING)
    if max_tokens:
        sampling["max_tokens"] = max_tokens
    reply = complete(llm, render_prompt("reformulate", caption=description,
                                        dialogue=dialogue_text), **sampling)
    caption = clean_caption(reply)
    if not caption or len(caption.split()) > max_words:
        note_fallback(logger, "unusable reformulation; using the concatenated dialogue", repr(reply[:200]))
        return concatenate_dialogue(description, dialogue)
    if previous is not None and caption.strip().lower() == previous.strip().lower():
        caption = paraphrase(llm, caption, max_tokens=max_tokens)
    return caption


def paraphrase(llm: BaseChatModel, text: str, max_tokens: int | None = None) -> str:
    """``text`` in other words (or ``text`` itself when the model gives nothing usable)."""
    sampling = dict(PARAPHRASE_SAMPLING)
    if max_tokens:
        sampling["max_tokens"] = max_tokens
    reply = clean_caption(complete(llm, render_prompt("paraphrase", text=text), **sampling))
    if not reply:
        note_fallback(logger, "empty paraphrase; keeping the query unchanged")
        return text
    return reply
