"""VisRet nodes: rewrite a query into a visualization prompt (LLM), with a safe fallback."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_PROMPTS = Path(__file__).resolve().parents[2] / "prompts"


def rewrite_prompt_template() -> str:
    return (_PROMPTS / "visret_rewrite.txt").read_text(encoding="utf-8")


def visualization_prompt(query: str, llm: Any = None) -> str:
    """The text to visualize for ``query``: the LLM's rewrite, or the query itself without an LLM
    (or when the LLM fails or answers nothing, so one failing call never ends a search)."""
    if llm is None:
        return query
    from langchain_core.messages import HumanMessage

    from pictrieve.agents.plugir.llm_calls import complete

    reply = complete(llm, [HumanMessage(rewrite_prompt_template().format(query=query))])
    lines = [line.strip() for line in reply.splitlines() if line.strip()]
    reply = lines[0].strip('"\'').strip() if lines else ""
    return reply or query
