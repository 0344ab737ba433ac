"""VisRet nodes: rewrite a query into a visualization prompt (LLM), with a safe fallback."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pictrieve.agents.method import Method

logger = logging.getLogger(__name__)

_PROMPTS = Path(__file__).resolve().parents[2] / "prompts"

METHOD = Method(
    name="visret",
    description="VisRet: visualize the query as guide images, search image-to-image, fuse by reciprocal rank.",
    builder="pictrieve.graphs.visret:build_visret_graph",
    settings="pictrieve.graphs.visret:VisRetSettings",
    input_schema="pictrieve.graphs.visret:VisRetInput",
    output_schema="pictrieve.graphs.visret:VisRetOutput",
    needs=("llm", "visualizer"),
    example_input={"query": "a dog catching a frisbee"},
)


def rewrite_prompt_template() -> str:
    return (_PROMPTS / "visret_rewrite.txt").read_text(encoding="utf-8")


def visualization_prompt(query: str, llm: Any = None) -> str:
    """The text to visualize for ``query``: the LLM's rewrite, or the query itself without an LLM
    (or when its reply holds no line to use; logged). A failed call raises
    :class:`~pictrieve.tools.llm_calls.ModelCallError`: a search must not quietly go on without
    the model it was asked to use."""
    if llm is None:
        return query
    from pictrieve.tools.llm_calls import complete, note_fallback

    reply = complete(llm, rewrite_prompt_template().format(query=query))
    lines = [line.strip() for line in reply.splitlines() if line.strip()]
    rewritten = lines[0].strip('"\'').strip() if lines else ""
    if not rewritten:
        note_fallback(logger, "the rewrite of the query into a visualization prompt was empty; using the query")
    return rewritten or query
