"""Does a trained QC2 model use the levels in its prompt? The level-usage check.

The same captions are scored (mean next-token loss over the caption and end tokens) under their
true levels, under the opposite levels, and under random levels. A model that learned the
conditioning predicts a caption better when told its true levels, so the true-level loss is
clearly the lowest; a model that ignores the levels gives the same loss under all three. The
opposite is also taken one axis at a time, which says which axis the model reads.

"Opposite" mirrors the level order (Low <-> High, Very Low <-> Very High); the middle level stays,
so captions at the middle level are unchanged in the opposite variant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pictrieve.agents.qc2.levels import AxisLevels
from pictrieve.agents.qc2.prompt_format import QC2Example

TRUE, OPPOSITE, RANDOM = "true", "opposite", "random"


def opposite_level(level: str, levels: Sequence[str]) -> str:
    """The mirror of ``level`` in ``levels`` (Low <-> High; the middle level stays)."""
    levels = list(levels)
    return levels[len(levels) - 1 - levels.index(level)]


def level_variants(examples: Sequence[QC2Example], axes: Sequence[AxisLevels], *, seed: int = 0,
                   per_axis: bool = True) -> dict[str, list[QC2Example]]:
    """``true``, ``opposite``, ``random`` (and ``opposite_<score key>`` per axis) versions of ``examples``."""
    rng = np.random.default_rng(seed)
    variants = {
        TRUE: list(examples),
        OPPOSITE: [QC2Example(ex.caption, tuple(opposite_level(lv, ax.levels) for lv, ax in zip(ex.levels, axes)))
                   for ex in examples],
    }
    if per_axis:
        for position, axis in enumerate(axes):
            variants[f"{OPPOSITE}_{axis.score_key}"] = [
                QC2Example(ex.caption, tuple(opposite_level(lv, axis.levels) if i == position else lv
                                             for i, lv in enumerate(ex.levels)))
                for ex in examples
            ]
    variants[RANDOM] = [QC2Example(ex.caption, tuple(ax.levels[rng.integers(len(ax.levels))] for ax in axes))
                        for ex in examples]
    return variants


def sample_examples(examples: Sequence[QC2Example], n: int | None, seed: int = 0) -> list[QC2Example]:
    """A seeded subset of ``n`` examples, in their original order (all when ``n`` is None or larger)."""
    if n is None or n >= len(examples):
        return list(examples)
    keep = np.sort(np.random.default_rng(seed).choice(len(examples), size=n, replace=False))
    return [examples[i] for i in keep]


def level_usage(model: Any, tokenizer: Any, variants: dict[str, Sequence[QC2Example]], axis_names: Sequence[str],
                *, allowed_token_ids: Sequence[int] | None = None, max_length: int = 64,
                batch_size: int = 32) -> dict[str, float]:
    """Mean caption loss per variant for a trained (saved and loaded) model: the check run after training."""
    from pictrieve.agents.qc2.training import caption_loss_sum

    out = {}
    for name, examples in variants.items():
        total, tokens = 0.0, 0
        for start in range(0, len(examples), batch_size):
            loss, count = caption_loss_sum(model, tokenizer, examples[start : start + batch_size], axis_names,
                                           max_length=max_length, allowed_token_ids=allowed_token_ids)
            total, tokens = total + loss, tokens + count
        out[name] = total / max(1, tokens)
    return out


def separation(losses: dict[str, float]) -> dict[str, float]:
    """How much lower the true-level loss is than each other variant's (positive: the levels help)."""
    true = losses[TRUE]
    return {name: value - true for name, value in losses.items() if name != TRUE and name != "epoch"}
