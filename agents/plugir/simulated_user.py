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
from pictrieve.tools.models.llm_calls import complete

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
        reply = complete(self.llm, render_prompt("simulated_user", captions=captions,
                                                 question=question), **ANSWER_SAMPLING)
        return clean_answer(reply)


def clean_answer(reply: str) -> str:
    """First line of a reply without an ``Answer:`` label; ``unknown`` when empty."""
    for line in reply.strip().splitlines():
        line = re.sub(r"^\s*\[?answer\]?\s*[:：]\s*", "", line, flags=re.I).strip().strip('"')
        if line:
            return line
    return UNKNOWN


class CaptionUser:
    """A simulated user that answers from the target's human captions without any language model,
    so an evaluation does not depend on a small LLM's inventions.

    - Offline questions (the graph state's ``question_spec``) are read exactly: "yes" when the
      captions hold the asked term, else "no"; a choice question gets the option the captions
      name, else "none of these".
    - Other yes/no questions ("Is the dog wearing a collar?"): "yes" when the captions hold every
      content term of the question, "no" when they hold none of the terms the description lacks;
      otherwise, and for open questions ("What colour is the dog?"), the caption most similar to
      the question (MiniLM), or "unknown" when none is close.

    Captions omit much of what a photo shows, so this user says "no" to things a person looking at
    the photo might confirm: it is stricter than a person, never more generous.
    """

    def __init__(self, captions: Sequence[str], *, encoder: Any = None, min_similarity: float = 0.3):
        from pictrieve.agents.plugir.caption_terms import caption_terms

        if not captions:
            raise ValueError("CaptionUser needs at least one caption of the target")
        self.captions = [c.strip() for c in captions]
        self.terms = caption_terms(self.captions)
        self._implied: set[str] | None = None
        self.encoder = encoder
        self.min_similarity = min_similarity

    def __call__(self, question: str, state: Mapping[str, Any] | None = None) -> str:
        from pictrieve.agents.plugir.offline_questions import Question

        spec = (state or {}).get("question_spec")
        # The graph may ask a choice question again with its options spelled out (same spec).
        if spec and spec.get("text") and question.startswith(spec["text"]):
            return self.answer_offline(Question.from_json(spec))
        return self.answer_free(question, (state or {}).get("description", ""))

    def answer_offline(self, question: Any) -> str:
        if question.kind == "yes_no":
            return "yes" if self.holds(question.key) else "no"
        for option in question.options:
            if self.holds(option):
                return option.split(" ", 1)[0] if question.noun else option
        return "none of these"

    def holds(self, key: str) -> bool:
        """Whether the captions say ``key`` or something it covers, as a person reading them would
        answer: a thing is there as the head of a compound ("ball" in "a tennis ball") and as a
        broader word ("animal" for "a dog")."""
        from pictrieve.agents.plugir.caption_terms import settled_by

        if self._implied is None:
            self._implied = settled_by(self.terms.keys)
        return key in self._implied

    def answer_free(self, question: str, description: str = "") -> str:
        from pictrieve.agents.plugir.caption_terms import caption_terms, singular, words

        asked = caption_terms(question)
        # Things and colours only: verbs vary in form ("carrying" vs "carries") and would read as "no".
        keys = asked.things | asked.colours | asked.coloured
        if re.match(r"^\s*(is|are|does|do|did|was|were|can|has|have)\b", question, re.I) and keys:
            mine = self.terms.keys | {singular(w) for c in self.captions for w in words(c)}
            if keys <= mine:
                return "yes"
            new = keys - caption_terms(description).keys
            if new and not (new & mine):
                return "no"
        return self._closest_caption(question)

    def _closest_caption(self, question: str) -> str:
        if self.encoder is None:
            self.encoder = _shared_encoder()
        vectors = self.encoder.encode([question] + self.captions)
        similarities = vectors[1:] @ vectors[0]
        best = int(similarities.argmax())
        return self.captions[best] if similarities[best] >= self.min_similarity else UNKNOWN


class FreeTextCaptionUser(CaptionUser):
    """A simulated person who answers the offline questions as people type them: the short answer,
    then, in their own words, what one of the target's captions says.

    - A "yes" adds the first caption not yet told that names the asked thing ("yes, a black dog
      carries a stick by the sea"); a "no" or "none of these" adds the shortest caption not yet told
      (people say what is there instead); each caption is told once, so later answers may be short.
    - A choice answered by several options names them all ("black and brown" for two dogs).

    Everything it says is in the target's human captions (those the evaluation did not use as the
    first description): no language model, and no word of the graph's own.
    """

    def __init__(self, captions: Sequence[str], **kwargs: Any):
        super().__init__(captions, **kwargs)
        self._told: set[int] = set()

    def answer_offline(self, question: Any) -> str:
        if question.kind == "choice":
            held = [o.split(" ", 1)[0] if question.noun else o for o in question.options if self.holds(o)]
            short = " and ".join(held) if held else "none of these"
        else:
            short = super().answer_offline(question)
        keys = {question.key} if question.kind == "yes_no" else set(question.options)
        detail = self._next_caption(keys if short not in ("no", "none of these") else None)
        return f"{short}, {detail}" if detail else short

    def _next_caption(self, about: set[str] | None) -> str | None:
        """The caption to tell next: the first untold one naming any of ``about``, or (``None``) the
        shortest untold one; ``None`` when there is none."""
        from pictrieve.agents.plugir.caption_terms import caption_terms, settled_by

        untold = [i for i in range(len(self.captions)) if i not in self._told]
        if about is not None:
            untold = [i for i in untold if about & settled_by(caption_terms(self.captions[i]).keys)]
        else:
            untold.sort(key=lambda i: (len(self.captions[i]), i))
        if not untold:
            return None
        self._told.add(untold[0])
        return self.captions[untold[0]].rstrip(" .").lower()


def _shared_encoder():
    """The process's one all-MiniLM-L6-v2 (the offline embedder's), shared through the model cache."""
    from pictrieve.tools.core.model_cache import shared_model
    from pictrieve.tools.models.sentence_encoder import SentenceEncoder

    return shared_model(("sentence-encoder",), SentenceEncoder)
