"""PlugIR's input, output and state schemas (what a session starts from, returns and carries between nodes)."""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12 (server schemas)

from pictrieve.agents.plugir.offline_answers import DialogueFacts, fold_facts
from pictrieve.agents.plugir.questioner import Turn


class Timing(TypedDict):
    round: int
    node: str
    seconds: float


class PlugIRInput(TypedDict):
    """What a session starts from: the user's first description of the photo (D_0)."""

    description: str


class PlugIROutput(TypedDict, total=False):
    """What a caller reads back: the dialogue, the queries, what was shown and what was found."""

    dialogue: Annotated[list[Turn], operator.add]  # (Q_1, A_1), ..., (Q_t, A_t)
    round: int  # t: answers received so far; after a pick or a stop, the round it ended in
    query: str  # this round's retrieval query (reformulated caption or concatenation)
    queries: Annotated[list[str], operator.add]  # query of every round, index = round
    # Hits are plain JSON dicts (``ImageHit.to_json()``; ``as_hit`` reads one back), so every
    # checkpointer can store and read the state without being told about our types.
    shown: list[dict[str, Any]]  # the top images shown to the user this round
    hits: list[dict[str, Any]]  # the same images: every method's output carries ``hits``
    ranking: list[tuple[str, float]]  # (id, score) of the ranked_k best this round, in the order shown
    retrieval_context: list[str]  # RCE captions shown to the questioner this round
    question: str  # the question asked this round
    question_spec: dict[str, Any] | None  # the offline questioner's question (kind, term, options)
    found: dict[str, Any] | None  # the image the user picked
    stopped: bool
    timings: Annotated[list[Timing], operator.add]


class PlugIRState(PlugIRInput, PlugIROutput, total=False):
    """The graph state. Lists that grow round by round use ``operator.add`` reducers."""

    candidates: list[dict[str, Any]]  # top-n of this round's query
    questions: list[str]  # this round's candidate questions
    offline_questions: list[dict[str, Any]]  # the offline questioner's candidate questions (specs)
    # What the answers mean (confirmed, denied, the phrases they add), read once per answer by ``ask``
    # and folded by :func:`~.offline_answers.fold_facts`, a later answer overriding an earlier one.
    facts: Annotated[DialogueFacts, fold_facts]
