"""Sample quality-conditioned completions of a short query (QC2 inference).

The model sees ``<bos>Relevance: High, Aesthetic: Low, Query: a dog`` and continues it; the
completion is the user's query followed by the generated words up to the end of the first sentence.
Sampling follows the QC2 reference settings: temperature 0.7, top-k 50, top-p 0.9, repetition
penalty 1.2, no repeated bigrams, at most 50 new tokens. Several queries (and several samples per
query) are generated in one left-padded batch.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pictrieve.agents.qc2.prompt_format import format_instruction, normalize_query

logger = logging.getLogger(__name__)

_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")
# While generating, a trailing "3." may still become "3.5": stop only once a space or line follows.
_FINISHED_SENTENCE = re.compile(r"[.!?]\s|\n")


@dataclass(frozen=True)
class SamplingSettings:
    """Generation settings; defaults are the paper's."""

    temperature: float = 0.7
    top_k: int = 50
    top_p: float = 0.9
    repetition_penalty: float = 1.2
    no_repeat_ngram_size: int = 2
    max_new_tokens: int = 50


@dataclass(frozen=True)
class CompletionRequest:
    """A short query and the level wanted on each axis (in the model's axis order)."""

    query: str
    levels: tuple[str, ...]


def first_sentence(text: str) -> str:
    """``text`` up to and including its first sentence end (``.``, ``!``, ``?``), or a newline."""
    match = _SENTENCE_END.search(text)
    return text if match is None else text[: match.end()].rstrip()


def complete_queries(
    model: Any,
    tokenizer: Any,
    requests: Sequence[CompletionRequest],
    axes: Sequence[str],
    *,
    samples: int = 1,
    settings: SamplingSettings | None = None,
    allowed_token_ids: Sequence[int] | None = None,
    seed: int | None = None,
    batch_size: int = 32,
) -> list[list[str]]:
    """``samples`` completions for each request; each starts with the request's query verbatim."""
    from pictrieve.tools.core.seeding import torch_seeded

    settings = settings or SamplingSettings()
    prompts = [prompt_ids(tokenizer, r, axes) for r in requests]
    outputs: list[list[str]] = []
    # The seed applies to this call only (a forked generator), never to the process's global one.
    with torch_seeded(seed):
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            continuations = [text for text, _ in sample_continuations(
                model, tokenizer, chunk, samples, settings, allowed_token_ids)]
            for offset, request in enumerate(requests[start : start + batch_size]):
                texts = continuations[offset * samples : (offset + 1) * samples]
                outputs.append([_assemble(request.query, text) for text in texts])
    return outputs


def prompt_ids(tokenizer: Any, request: CompletionRequest, axes: Sequence[str]) -> list[int]:
    """Token ids the model continues: ``<bos>`` + instruction + ``" " + normalised query``."""
    query = normalize_query(request.query)
    if not query:
        raise ValueError("empty query: type a few words, e.g. 'a dog'")
    ids = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    ids += tokenizer(format_instruction(axes, request.levels), add_special_tokens=False)["input_ids"]
    ids += tokenizer(" " + query, add_special_tokens=False)["input_ids"]
    return ids


def _assemble(query: str, continuation: str) -> str:
    # Byte-level BPE decoding keeps the continuation's own leading space (" runs ...") or its
    # absence (a word continued: "a dog" + "s ..."), so plain concatenation is right.
    # The model saw the query without its final full stop (normalize_query), so drop it here too:
    # "a dog." + " runs on grass." must read "a dog runs on grass.".
    return (query.strip().rstrip(".!?").rstrip() + first_sentence(continuation).rstrip()).strip()


class _FirstSentenceStop:
    """Stop each row once its generated text contains a sentence end (or the end token)."""

    def __init__(self, tokenizer: Any, prompt_length: int) -> None:
        self.tokenizer = tokenizer
        self.prompt_length = prompt_length

    def __call__(self, input_ids, scores, **kwargs):  # noqa: ANN001
        import torch

        new = input_ids[:, self.prompt_length :]
        done = [bool(_FINISHED_SENTENCE.search(self.tokenizer.decode(row, skip_special_tokens=True))) for row in new]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class _AllowedTokens:
    """Logits processor: only the given ids may be sampled (the model's training vocabulary)."""

    def __init__(self, allowed: Sequence[int], vocab_size: int) -> None:
        import torch

        self.mask = torch.full((vocab_size,), float("-inf"))
        self.mask[torch.tensor(list(allowed))] = 0.0

    def __call__(self, input_ids, scores):  # noqa: ANN001
        width = min(scores.shape[-1], self.mask.shape[0])
        scores = scores.clone()
        scores[:, :width] += self.mask[:width].to(scores.device)
        if scores.shape[-1] > width:
            scores[:, width:] = float("-inf")
        return scores


def sample_continuations(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Sequence[int]],
    samples: int = 1,
    settings: SamplingSettings | None = None,
    allowed: Sequence[int] | None = None,
) -> list[tuple[str, int]]:
    """``(decoded new text, number of new tokens)`` for each prompt x sample, prompt-major."""
    import torch
    from transformers import LogitsProcessorList, StoppingCriteriaList

    settings = settings or SamplingSettings()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    length = max(len(p) for p in prompts)
    device = next(model.parameters()).device
    input_ids = torch.tensor([[pad] * (length - len(p)) + p for p in prompts], device=device)
    attention = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts], device=device)
    processors = LogitsProcessorList()
    if allowed is not None:
        processors.append(_AllowedTokens(allowed, model.get_output_embeddings().weight.shape[0]))
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            do_sample=True,
            temperature=settings.temperature,
            top_k=settings.top_k,
            top_p=settings.top_p,
            repetition_penalty=settings.repetition_penalty,
            no_repeat_ngram_size=settings.no_repeat_ngram_size,
            max_new_tokens=settings.max_new_tokens,
            num_return_sequences=samples,
            pad_token_id=pad,
            eos_token_id=tokenizer.eos_token_id,
            logits_processor=processors,
            stopping_criteria=StoppingCriteriaList([_FirstSentenceStop(tokenizer, length)]),
        )
    results = []
    for row in out[:, length:].tolist():
        while row and row[-1] == pad:  # finished rows are padded to the longest one
            row.pop()
        results.append((tokenizer.decode(row, skip_special_tokens=True), len(row)))
    return results
