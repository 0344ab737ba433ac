"""PlugIR's steps as people watch a round run (:mod:`pictrieve.agents.steps`): the page, MCP and ``pictrieve chat``
word each finished node from this table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pictrieve.agents.steps import Step


def _count(key: str, what: str) -> Any:
    def found(update: Mapping[str, Any]) -> str:
        n = len(update.get(key) or [])
        return f"{n} {what}" if n else ""

    return found


STEPS: Mapping[str, Step] = {
    "reformulate": Step("description", "wrote the search description", then="searching the gallery",
                        found=lambda update: repr(str(update.get("query") or ""))),
    "retrieve": Step("retrieval", "searched the gallery", then="reading the candidates",
                     found=_count("candidates", "candidates")),
    "extract_context": Step("candidates", "read the candidates", then="writing questions",
                            found=_count("retrieval_context", "distinct captions")),
    "generate_questions": Step("questions", "wrote candidate questions",
                               then="checking the questions against what is known",
                               found=_count("questions", "questions")),
    "filter_and_select": Step("filter", "chose a question", found=lambda update: repr(str(update.get("question") or ""))),
    "ask": Step("answer", "read the answer", then="rewriting the description with your answer",
                found=lambda update: "a pick or a stop" if update.get("stopped") else ""),
}
"""Each node of :func:`pictrieve.graphs.plugir.build_plugir_graph`, as people see it finish."""
