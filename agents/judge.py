"""An LLM judge: grades an answer against a reference answer by a rubric kept as data (``prompts/judges/``).

Two methods' evaluations use it, each with the rubric it needs:

- ``visual_rag`` (VisRet §4, grading the answers of :mod:`pictrieve.agents.visret.reader`): the
  Visual-RAG grading rubric the paper uses (our wording): a score in [0, 1], partial credit per key
  feature, -0.5 for a stated feature the reference does not support, 0 for "I don't know"; the reply's
  ``Score: x``, clamped to [0, 1].
- ``same_fact`` (``pictrieve eval vsa``): yes (1.0) when the answer states the reference's key fact, no
  (0.0) otherwise. Ours: the VSA paper's open-set evaluation is by people and its closed-set one a GPT-4o
  scorer of LLaVA-W reasoning, neither reproducible offline.

The judge runs at temperature 0, so a grade does not change between runs. Deliberate difference from the
VisRet authors' code, whose judge calls used the API default temperature (their grades varied).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pictrieve import prompts

SCORE = re.compile(r"Score:\s*(-?[0-9]*\.?[0-9]+)")


def parse_score(reply: str) -> float:
    """The first ``Score: x`` in a judge's reply, clamped to [0, 1]; 0 when there is none."""
    match = SCORE.search(reply or "")
    return 0.0 if not match else min(1.0, max(0.0, float(match.group(1))))


def parse_yes(reply: str) -> float:
    """1.0 when the judge's reply starts with "yes" (any case), else 0.0."""
    return 1.0 if (reply or "").strip().lower().startswith("yes") else 0.0


@dataclass(frozen=True)
class Rubric:
    """How a judge grades: its prompt (``prompts/judges/<name>.txt``, with ``{question}``, ``{reference}``
    and ``{answer}``) and how its reply becomes a grade in [0, 1]."""

    name: str
    parse: Callable[[str], float]

    def prompt(self) -> str:
        return prompts.text("judges", self.name)


RUBRICS: dict[str, Rubric] = {
    "visual_rag": Rubric("visual_rag", parse_score),
    "same_fact": Rubric("same_fact", parse_yes),
}


def judge_answer(judge: Any, question: str, reference: str | Sequence[str], answer: str, *,
                 rubric: str = "visual_rag") -> tuple[float, str]:
    """``(grade in [0, 1], the judge's reply)`` for ``answer`` against ``reference`` (a list: any item
    counts) by the chat model ``judge`` with one of :data:`RUBRICS`. A failed call raises
    :class:`~pictrieve.tools.models.llm_calls.ModelCallError`."""
    from pictrieve.tools.models.llm_calls import complete

    try:
        chosen = RUBRICS[rubric]
    except KeyError:
        raise ValueError(f"unknown judge rubric {rubric!r}; known: {', '.join(RUBRICS)}") from None
    if not isinstance(reference, str):
        reference = ", or ".join(reference)  # the VisRet authors' join lacked the space after "or"
    prompt = chosen.prompt().format(question=question, reference=reference, answer=answer)
    bound = judge.bind(temperature=0) if hasattr(judge, "bind") else judge
    reply = complete(bound, prompt)
    return chosen.parse(reply), reply
