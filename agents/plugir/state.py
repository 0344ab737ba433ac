"""PlugIR's input, output and state schemas (what a session starts from, returns and carries between nodes)."""

from __future__ import annotations

import operator
from typing import Annotated, Any

from pydantic import Field
from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12 (server schemas)

from pictrieve.agents.plugir.offline_answers import DialogueFacts, fold_facts
from pictrieve.agents.plugir.questioner import Turn


class Timing(TypedDict):
    round: int
    node: str
    seconds: float


class PlugIRInput(TypedDict):
    """What a session starts from: the user's first description of the photo (D_0)."""

    description: Annotated[str, Field(description="The person's first description of the photo they look for.")]


class PlugIROutput(TypedDict, total=False):
    """What a caller reads back: the dialogue, the queries, what was shown and what was found."""

    dialogue: Annotated[list[Turn], Field(description="(Q_1, A_1), ..., (Q_t, A_t)"), operator.add]
    round: Annotated[int, Field(description=(
        "t: answers received so far; after a pick or a stop, the round it ended in"))]
    query: Annotated[str, Field(description="this round's retrieval query (reformulated caption or concatenation)")]
    queries: Annotated[list[str], Field(description="query of every round, index = round"), operator.add]
    # Hits are plain JSON dicts (``ImageHit.to_json()``; ``as_hit`` reads one back), so every
    # checkpointer can store and read the state without being told about our types.
    shown: Annotated[list[dict[str, Any]], Field(description="the top images shown to the user this round")]
    hits: Annotated[list[dict[str, Any]], Field(description="the same images: every method's output carries ``hits``")]
    ranking: Annotated[list[tuple[str, float]], Field(description=(
        "(id, score) of the ranked_k best this round, in the order shown"))]
    retrieval_context: Annotated[list[str], Field(description="RCE captions shown to the questioner this round")]
    question: Annotated[str, Field(description="the question asked this round")]
    question_spec: Annotated[dict[str, Any] | None, Field(description=(
        "the offline questioner's question (kind, term, options)"))]
    found: Annotated[dict[str, Any] | None, Field(description="the image the user picked")]
    stopped: bool
    timings: Annotated[list[Timing], operator.add]


class PlugIRQuestion(TypedDict):
    """What a round asks the person (``ask``'s ``interrupt()`` payload)."""

    round: Annotated[int, Field(description="The question's number (answers received so far + 1).")]
    question: Annotated[str, Field(description="The question, in words.")]
    query: Annotated[str, Field(description="The retrieval query the photos shown were found with.")]
    shown: Annotated[list[dict[str, Any]], Field(description="The best photos now (hits), shown with the question.")]
    options: NotRequired[Annotated[list[str], Field(description="Its choices, for a question with options.")]]
    notice: NotRequired[Annotated[str, Field(description="Why it is asked again (a pick of no photo shown).")]]


class PlugIRReply(TypedDict, total=False):
    """What the person answers (the resume value): one of an answer, a pick or a stop."""

    answer: Annotated[str, Field(description="The answer to the question, in words.")]
    found: Annotated[str, Field(description="The photo that is the one: its id, or its place N among those shown.")]
    stop: Annotated[bool, Field(description="End the search with the photos shown.")]


class PlugIRState(PlugIRInput, PlugIROutput, total=False):
    """The graph state. Lists that grow round by round use ``operator.add`` reducers."""

    candidates: list[dict[str, Any]]  # top-n of this round's query
    questions: list[str]  # this round's candidate questions
    offline_questions: list[dict[str, Any]]  # the offline questioner's candidate questions (specs)
    # What the answers mean (confirmed, denied, the phrases they add), read once per answer by ``ask``
    # and folded by :func:`~.offline_answers.fold_facts`, a later answer overriding an earlier one.
    facts: Annotated[DialogueFacts, fold_facts]
