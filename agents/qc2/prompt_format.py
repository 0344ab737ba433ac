"""QC2's text format: the instruction that carries the levels, cleaned captions, and encoded examples.

Each training example is one gallery caption ``T_i`` with the levels of its image's scores, written as
``"<bos>Relevance: High, Aesthetic: Low, Query: " + T_i + <eos>``; the loss covers only the caption
and end tokens, never the instruction. The space after ``Query:`` is tokenised with the caption
(``" a dog ..."``) because byte-level BPE tokenisers attach a leading space to the word; completion
encodes ``" " + query`` the same way, so training and inference see the same tokens.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

IGNORE_INDEX = -100
"""Label value the loss skips (the instruction's tokens)."""


def clean_caption(text: str) -> str:
    """Normalise a caption for training: ASCII, single spaces, lower case, ends with a period.

    Captioners and annotators leave stray characters and ``"dog ."`` spacing (flickr8k); the paper
    cleans non-English characters before training. Lower case matches how users type short queries.
    """
    text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii")
    text = " ".join(text.split())
    text = re.sub(r"\s+([.,!?;:])", r"\1", text).strip().lower()
    if text and text[-1] not in ".!?":
        text += "."
    return text


def normalize_query(query: str) -> str:
    """The form of a user's short query that the model sees (same normalisation as captions)."""
    text = clean_caption(query)
    return text[:-1] if text.endswith(".") else text


def format_instruction(axes: Sequence[str], levels: Sequence[str]) -> str:
    """``"Relevance: High, Aesthetic: Low, Query:"`` (the caption/query follows after a space)."""
    if len(axes) != len(levels):
        raise ValueError(f"need one level per axis {list(axes)}, got {list(levels)}")
    return ", ".join(f"{axis}: {level}" for axis, level in zip(axes, levels)) + ", Query:"


@dataclass(frozen=True)
class QC2Example:
    """One caption and its levels, in the order of the model's axes."""

    caption: str
    levels: tuple[str, ...]


def encode_example(tokenizer: Any, instruction: str, caption: str, max_length: int = 64) -> tuple[list[int], list[int]]:
    """``(input_ids, labels)``: ``<bos> instruction " caption" <eos>``, labels -100 on bos+instruction.

    Captions longer than ``max_length`` are cut (and then get no end token, so the model is never
    taught to stop mid-sentence).
    """
    prefix = ([tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else [])
    prefix += tokenizer(instruction, add_special_tokens=False)["input_ids"]
    body = tokenizer(" " + caption, add_special_tokens=False)["input_ids"]
    eos = [tokenizer.eos_token_id]
    room = max_length - len(prefix)
    if room < 2:
        raise ValueError(f"max_length {max_length} leaves no room for a caption after the instruction")
    if len(body) + 1 > room:
        body, eos = body[:room], []
    ids = prefix + body + eos
    labels = [IGNORE_INDEX] * len(prefix) + body + eos
    return ids, labels
