"""The PlugIR questioner: candidate questions about the wanted photo.

Two prompts, as in the paper's ablation: the baseline (description + dialogue, Table 17) and the
grounded one that also sees captions of the current retrieval candidates and explains its choice
(chain of thought, Table 18). Sampling follows the paper: temperature 0.7, at most 32 new tokens.
Small models often ramble past the question or forget the question mark, so every reply goes
through :func:`extract_question`; replies without a usable question are dropped and logged.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Sequence

from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12 (server schemas)

from langchain_core.language_models.chat_models import BaseChatModel

from pictrieve.agents.plugir.chat_prompts import render_prompt
from pictrieve.tools.models.llm_calls import sample_replies

logger = logging.getLogger(__name__)

# Paper: temperature 0.7, at most 32 tokens. We also stop at the first "?": the question is what
# we keep (the authors cut at "?" too), and the explanation the grounded prompt asks for comes
# after it, so stopping early cannot change the question, only save generation time.
QUESTION_SAMPLING = {"temperature": 0.7, "max_tokens": 32, "stop": ["?"]}
FALLBACK_QUESTION = "What else can you tell me about the image?"

_INTERROGATIVES = (
    "what", "which", "who", "whom", "whose", "where", "when", "why", "how", "is", "are", "was",
    "were", "do", "does", "did", "can", "could", "has", "have", "will", "would", "should", "any",
)
_PREFIX = re.compile(r"^\s*(?:\d+[.)]\s*|[-*•]\s*|(?:new\s+)?question\s*\d*\s*[:：]\s*)+", re.I)


class Turn(TypedDict):
    """One exchange of the dialogue. ``spec``: the offline questioner's question (kind, term, options),
    so its answer can be read exactly."""

    question: str
    answer: str
    spec: NotRequired[dict[str, Any]]


def format_dialogue(dialogue: Sequence[Turn]) -> str:
    """``Question: ...\\nAnswer: ...\\n`` lines, the dialogue layout of the questioner prompts."""
    return "".join(f"Question: {t['question']}\nAnswer: {t['answer']}\n" for t in dialogue)


def format_candidates(captions: Sequence[str]) -> str:
    """Numbered candidate captions, one per line."""
    return "\n".join(f"{i}. {c}" for i, c in enumerate(captions))


def extract_question(text: str) -> str | None:
    """The first well-formed question in a model reply, or ``None``.

    Keeps the text up to the first ``?`` (the authors cut there too) after dropping list markers
    and ``Question:`` labels. Without a ``?``, the first line with an interrogative word among its
    first three words is accepted and given one; lines before it (preambles) are skipped. Too
    short (under 3 words) or too long (over 40 words) lines are skipped too.
    """
    if not text:
        return None
    for line in text.strip().splitlines():
        line = _PREFIX.sub("", line).strip().strip('"\'`').strip()
        if not line or line.endswith(":") or line.lower().startswith(("explanation", "answer")):
            continue
        if "?" in line:
            candidate = line.split("?")[0].strip() + "?"
        elif any(word.lower().strip(",") in _INTERROGATIVES for word in line.split()[:3]):
            # Generation stops at "?" and the stop string is cut off, so a real model's question
            # arrives without its "?"; "In what season ..." opens with a preposition.
            candidate = re.split(r"(?<=[.!])\s", line)[0].rstrip(".! ") + "?"
        else:
            continue  # a preamble such as "Sure! Here is my question:"
        if 3 <= len(candidate.split()) <= 40:
            return candidate[0].upper() + candidate[1:]
    return None


def generate_questions(
    llm: BaseChatModel,
    description: str,
    dialogue: Sequence[Turn],
    *,
    candidates: Sequence[str] | None = None,
    n: int = 5,
    avoid: Sequence[str] = (),
) -> list[str]:
    """Up to ``n`` distinct, well-formed questions (possibly fewer; a failed model call raises
    :class:`~pictrieve.tools.models.llm_calls.ModelCallError`).

    ``candidates`` (captions from retrieval context extraction) selects the grounded prompt;
    ``None`` or empty selects the baseline. Questions equal to one in ``avoid`` or already in
    the dialogue are dropped.
    """
    dialogue_text = format_dialogue(dialogue)
    if candidates:
        messages = render_prompt("questioner_grounded", candidates=format_candidates(candidates),
                                 description=description, dialogue=dialogue_text)
    else:
        messages = render_prompt("questioner_baseline", description=description,
                                 dialogue=dialogue_text)
    replies = sample_replies(llm, messages, n, **QUESTION_SAMPLING)
    seen = {_norm(q) for q in avoid} | {_norm(t["question"]) for t in dialogue}
    questions = []
    for reply in replies:
        question = extract_question(reply)
        if question is None:
            logger.info("questioner reply without a usable question: %r", reply[:200])
            continue
        if _norm(question) in seen:
            logger.info("questioner repeated an earlier question: %r", question)
            continue
        seen.add(_norm(question))
        questions.append(question)
    return questions


def _norm(question: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", question.lower()).strip()
