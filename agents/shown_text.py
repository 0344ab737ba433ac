"""Whether a chat model's words may be shown to a person: the one rule every answerer and front end asks.

The offline chat model (SmolLM2-135M, the default ``--llm``) writes fluent text that is often wrong: asked for
the total of a receipt that says 42.50 from the receipt's own text, it answered "The total on the receipt is
3."; asked to turn "a dog running on grass" into a picture prompt, it wrote "The description of a dog running
on grass requires a lot of detail and context...". Such words are never shown as an answer or as a rewrite
of a person's words. Where they would be, the answerer quotes what it read instead (the Vision Search
Assistant's extractive answerer, :mod:`pictrieve.agents.vsa.extractive`; the gallery reader's
:func:`pictrieve.agents.visret.reader.quote_photo_words`), or shows nothing and says that a capable model
writes it (:func:`not_written`).

Which model is too small is the chat-model need's to say (:attr:`pictrieve.agents.needs.Need.too_small` of
``NEEDS["llm"]``): the same rule drops it as a choice for an optional need (VisRet's and NEEDLE's query
rewriter), whether a front end passes its name or the model object. A method's own use of the model inside
its steps (PlugIR's questions, QC2's completions: what the method shows is its ranking) is not governed here.
"""

from __future__ import annotations

from typing import Any

CAPABLE_LLM = "--llm openai:MODEL --base-url URL"
"""How an operator gives a capable chat model (any OpenAI-compatible endpoint; ``$PICTRIEVE_LLM`` too)."""


def may_show(chat: Any) -> bool:
    """Whether what ``chat`` writes may be shown to a person as an answer or as a rewrite of their words: any
    chat model but the one the chat-model need calls too small (the offline SmolLM2-135M); ``None``: no model,
    nothing written."""
    from pictrieve.agents.needs import NEEDS

    return chat is not None and not NEEDS["llm"].is_too_small(chat)


def not_written(what: str = "answer") -> str:
    """One sentence saying that no ``what`` was written and how to have one: where a small model's words would
    have been shown."""
    return (f"No {what} is written: the offline chat model (SmolLM2-135M) is too small to write one worth reading; "
            f"a capable model writes it (start with {CAPABLE_LLM}).")


__all__ = ["CAPABLE_LLM", "may_show", "not_written"]
