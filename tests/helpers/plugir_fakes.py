"""Small fakes for the PlugIR tests: a hand-made gallery and a scripted chat model.

Control flow only: the fake chat model follows a script keyed on which prompt it receives, so
tests can check what the graph does with well-formed and malformed replies. It says nothing
about retrieval quality.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import numpy as np
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from pictrieve.vectorstore.hits import ImageHit

DIM = 16


def word_vector(word: str) -> np.ndarray:
    seed = int(hashlib.md5(word.lower().encode()).hexdigest()[:8], 16)
    return np.random.default_rng(seed).standard_normal(DIM)


class BagOfWordsEmbedder:
    """Texts embed as the normalised sum of per-word random vectors (deterministic)."""

    name = "fake-bow"
    dim = DIM

    def embed_texts(self, texts):
        rows = []
        for text in texts:
            words = [w.strip(".,?!") for w in text.split()] or ["empty"]
            v = sum(word_vector(w) for w in words if w)
            rows.append(v / max(np.linalg.norm(v), 1e-12))
        return np.asarray(rows, dtype=np.float32)




class FakeGallery:
    """Images described by one caption each; image vector = caption embedding."""

    def __init__(self, captions: list[str]):
        self.embedder = BagOfWordsEmbedder()
        self.captions = captions
        self._ids = [f"img{i:02d}" for i in range(len(captions))]
        self.vectors = self.embedder.embed_texts(captions)

    def count(self) -> int:
        return len(self._ids)

    def ids(self) -> list[str]:
        return list(self._ids)

    def embeddings(self, ids=None) -> np.ndarray:
        if ids is None:
            return self.vectors.copy()
        index = {id_: i for i, id_ in enumerate(self._ids)}
        return self.vectors[[index[i] for i in ids]]

    def search_vector(self, vector, k=10):
        scores = self.vectors @ np.asarray(vector, dtype=np.float32)
        order = np.argsort(-scores, kind="stable")[:k]
        return [ImageHit(id=self._ids[i], path=f"/photos/{self._ids[i]}.jpg", score=float(scores[i]), rank=r + 1,
                         captions=[self.captions[i]]) for r, i in enumerate(order)]


COLORS = ["red", "blue", "green", "white", "black", "brown"]
PLACES = ["snow", "park", "beach", "street", "field"]


def make_gallery() -> FakeGallery:
    captions = [f"a {c} dog running in the {p}" for c in COLORS for p in PLACES]
    return FakeGallery(captions)


class ScriptedChatModel(BaseChatModel):
    """Replies by prompt kind; records every (kind, prompt text, kwargs) it was called with."""

    questions: list[str] = Field(default_factory=lambda: ["What color is the dog?"])
    filter_answer: str = "Uncertain"
    reformulation: Callable[[str], str] | None = None
    calls: list[tuple[str, str, dict]] = Field(default_factory=list)

    model_config = {"arbitrary_types_allowed": True}

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs: Any):
        system = messages[0].content if messages else ""
        prompt = "\n".join(str(m.content) for m in messages)
        if "question generator" in system or "write the next question" in system:
            kind = "questioner"
            n_question = sum(1 for k, _, _ in self.calls if k == "questioner")
            text = self.questions[n_question % len(self.questions)]
        elif "Uncertain" in system:
            kind, text = "filter", self.filter_answer
        elif "[New Caption]" in system:
            kind = "reformulate"
            last = messages[-1].content
            text = self.reformulation(last) if self.reformulation else "a brown dog in the snow"
        elif "different, fluent words" in system:
            kind, text = "paraphrase", "a dog with brown fur in snow"
        else:
            kind, text = "answer", "brown"
        self.calls.append((kind, prompt, dict(kwargs, stop=stop) if stop else dict(kwargs)))
        for marker in stop or ():  # like a real endpoint: the text ends before the first stop string
            if marker in text:
                text = text[: text.index(marker)]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    def kinds(self) -> list[str]:
        return [k for k, _, _ in self.calls]
