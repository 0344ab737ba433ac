"""The PlugIR filter, Algorithm 2: keep questions the context cannot answer, then the gentlest.

1. An LLM answers each question from the current context alone (Table 19 layout; temperature 0,
   at most 10 tokens). A question it answers is redundant: the dialogue already holds the answer.
   Only questions answered "uncertain" are kept.
2. Among those, pick the question whose addition to the query changes the similarity
   distribution over the top-n candidates least: ``argmin KL(p_c || p_{c,q})`` with
   ``p = softmax(sim(query, candidates))``. An abrupt change signals a question about something
   the candidates have but the target probably lacks.
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np
from langchain_core.language_models.chat_models import BaseChatModel

from pictrieve.agents.plugir.chat_prompts import render_prompt
from pictrieve.agents.plugir.retrieval_context import softmax
from pictrieve.tools.models.llm_calls import complete_batch

logger = logging.getLogger(__name__)

FILTER_SAMPLING = {"temperature": 0.0, "max_tokens": 10, "stop": ["\n"]}


def answer_from_context(llm: BaseChatModel, context: str, questions: Sequence[str]) -> list[str]:
    """The LLM's answer to each question given only ``context``."""
    conversations = [render_prompt("filter", context=context, question=q) for q in questions]
    return complete_batch(llm, conversations, **FILTER_SAMPLING)


def is_uncertain(answer: str) -> bool:
    """True when the context-only answer admits it cannot tell (the authors test for 'uncertain')."""
    return "uncertain" in answer.lower()


def unanswerable_questions(llm: BaseChatModel, context: str,
                           questions: Sequence[str]) -> list[str]:
    """The questions the LLM cannot answer from ``context`` (Algorithm 2, lines 4-9)."""
    answers = answer_from_context(llm, context, questions)
    kept = [q for q, a in zip(questions, answers) if is_uncertain(a)]
    for q, a in zip(questions, answers):
        if not is_uncertain(a):
            logger.debug("filtered out answerable question %r (context says %r)", q, a)
    return kept


def kl_divergence(p: np.ndarray, q: np.ndarray, axis: int = -1) -> np.ndarray:
    """``KL(p || q)`` along ``axis`` (nats)."""
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-300, None)
    q = np.clip(np.asarray(q, dtype=np.float64), 1e-300, None)
    return (p * (np.log(p) - np.log(q))).sum(axis=axis)


def select_least_disruptive(context_scores: np.ndarray, extended_scores: np.ndarray) -> int:
    """Index of the row of ``extended_scores`` whose softmax is closest (KL) to the context's.

    ``context_scores`` (n,) are similarities of the query to the n candidates;
    ``extended_scores`` (q, n) those of ``query + ", " + question`` for each of q questions.
    """
    extended_scores = np.atleast_2d(extended_scores)
    p_context = softmax(context_scores)
    divergences = kl_divergence(p_context[None, :], softmax(extended_scores, axis=1), axis=1)
    return int(np.argmin(divergences))
