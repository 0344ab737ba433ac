"""A simulated user for unattended evaluation: answers questions about a known target photo.

It reads only the target's human captions (the evaluation hides the one used as the initial
description) and answers briefly, or "unknown". Any callable ``(question, state) -> str`` can
replace it, e.g. a VQA model that looks at the target image.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Callable, Mapping, Sequence

from langchain_core.language_models.chat_models import BaseChatModel

from pictrieve.agents.plugir.chat_prompts import render_prompt
from pictrieve.agents.plugir.llm_calls import complete

logger = logging.getLogger(__name__)

Answerer = Callable[[str, Mapping[str, Any]], str]
"""``answer = answerer(question, graph_state)``."""

ANSWER_SAMPLING = {"temperature": 0.0, "max_tokens": 24, "stop": ["\n"]}
UNKNOWN = "unknown"


class CaptionAnswerer:
    """Answers from a fixed list of captions with a chat model (temperature 0)."""

    def __init__(self, llm: BaseChatModel, captions: Sequence[str]):
        if not captions:
            raise ValueError("CaptionAnswerer needs at least one caption of the target")
        self.llm = llm
        self.captions = list(captions)

    def __call__(self, question: str, state: Mapping[str, Any] | None = None) -> str:
        captions = "\n".join(f"- {c}" for c in self.captions)
        reply = complete(self.llm, render_prompt("plugir_simulated_user", captions=captions,
                                                 question=question), **ANSWER_SAMPLING)
        return clean_answer(reply)


def clean_answer(reply: str) -> str:
    """First line of a reply without an ``Answer:`` label; ``unknown`` when empty."""
    for line in reply.strip().splitlines():
        line = re.sub(r"^\s*\[?answer\]?\s*[:：]\s*", "", line, flags=re.I).strip().strip('"')
        if line:
            return line
    return UNKNOWN
