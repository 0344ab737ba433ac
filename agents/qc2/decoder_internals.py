"""Running the layers of a Llama-style decoder by hand, for QC2's frozen-trunk training cache.

With the lower decoder layers frozen, their outputs for each training example never change, so
training computes them once (:func:`_cache_trunk`) and each epoch runs only the top layers
(:func:`_run_layers`). This needs the model's parts: ``model.model.layers``, ``rotary_emb`` and
``norm`` (SmolLM2, Qwen2.5, Llama); :func:`_decoder_parts` returns ``None`` for other architectures,
which then train through the model's own forward.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)


def _base(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _layer_list(model: Any):
    base = _base(model)
    inner = getattr(base, "model", None)
    if inner is not None and hasattr(inner, "layers"):
        return inner.layers
    transformer = getattr(base, "transformer", None)
    if transformer is not None and hasattr(transformer, "h"):
        return transformer.h
    return None


def _decoder_parts(model: Any) -> dict[str, Any] | None:
    """Llama-style pieces (embeddings, layers, rotary, final norm, output head), else None."""
    base = _base(model)
    inner = getattr(base, "model", None)
    if inner is None or not all(hasattr(inner, a) for a in ("embed_tokens", "layers", "rotary_emb", "norm")):
        return None
    return {
        "embed": inner.embed_tokens,
        "layers": inner.layers,
        "rotary": inner.rotary_emb,
        "norm": inner.norm,
        "head": base.get_output_embeddings(),
    }


def _causal_mask(length: int, dtype: Any):
    import torch

    mask = torch.full((length, length), torch.finfo(dtype).min, dtype=dtype).triu(1)
    return mask[None, None]


def _run_layers(parts: dict[str, Any], layers: Sequence[Any], hidden):
    import torch

    length = hidden.shape[1]
    position_ids = torch.arange(length, device=hidden.device)[None]
    rotary = parts["rotary"](hidden, position_ids=position_ids)
    mask = _causal_mask(length, hidden.dtype)
    for layer in layers:
        out = layer(hidden, attention_mask=mask, position_ids=position_ids, position_embeddings=rotary)
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden


def _pad(rows: Sequence[Sequence[int]], value: int):
    import torch

    length = max(len(r) for r in rows)
    return torch.tensor([list(r) + [value] * (length - len(r)) for r in rows], dtype=torch.long)


def _trunk_states(parts: dict[str, Any], encoded, indices: Sequence[int], split: int, batch_size: int = 64):
    """Hidden states after the first ``split`` layers for ``encoded[indices]``, one ``(len_i, hidden)`` each.

    Right padding with a causal mask never lets a real token see a pad, so the states are exact.
    """
    import torch

    states: list[Any] = []
    with torch.no_grad():
        for start in range(0, len(indices), batch_size):
            chunk = list(indices[start : start + batch_size])
            ids = _pad([encoded[i][0] for i in chunk], 0)
            hidden = _run_layers(parts, parts["layers"][:split], parts["embed"](ids))
            states.extend(hidden[row, : len(encoded[index][0])].clone() for row, index in enumerate(chunk))
    return states


def _cache_trunk(parts: dict[str, Any], encoded, split: int, progress: bool, batch_size: int = 64,
                 budget: Any = None):
    """:func:`_trunk_states` of every example (in memory), computed in order of length; ``None`` when
    ``budget`` (a :class:`~pictrieve.tools.core.time_budget.TimeBudget`) ran out first."""
    from tqdm.auto import tqdm

    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
    cache: list[Any] = [None] * len(encoded)
    for start in tqdm(range(0, len(order), batch_size), desc="caching frozen layers", disable=not progress):
        chunk = order[start : start + batch_size]
        for index, state in zip(chunk, _trunk_states(parts, encoded, chunk, split, batch_size)):
            cache[index] = state
        if budget is not None:
            budget.progressed()
            if budget.should_stop() and start + batch_size < len(order):
                return None
    return cache
