"""Fine-tune a small causal LM to complete queries conditioned on quality levels (QC2, Sec. 3.3).

Each training example is one gallery caption ``T_i`` with the levels of its image's scores,
written as ``"<bos>Relevance: High, Aesthetic: Low, Query: " + T_i + <eos>``; the next-token loss
covers only the caption and end tokens, never the instruction. The space after ``Query:`` is
tokenised with the caption (``" a dog ..."``) because byte-level BPE tokenisers attach a leading
space to the word; inference encodes ``" " + query`` the same way, so training and completion see the
same tokens.

CPU budget, and where we deliberately differ from the paper (which fully fine-tunes GPT2-1.5B /
Qwen2.5-0.5B for 30-50 epochs on 8 A100s):

- LoRA adapters on the top ``train_layers`` decoder layers only; the layers below stay frozen.
- Because those lower layers are frozen and deterministic, their outputs are computed once per
  example and cached ("frozen trunk cache"), so each epoch only runs the top layers. This works for
  Llama-style decoders (SmolLM2, Qwen2.5: ``model.model.layers`` + ``rotary_emb`` + ``norm``); other
  architectures (GPT-2) fall back to ordinary training of the whole stack, which is slower.
- The output softmax is restricted to the tokens that occur in the gallery's captions (plus the end
  token), and sampling is masked to the same set. This makes the output layer ~10x cheaper and keeps
  completions in the gallery's own vocabulary (the paper's point that completions should be
  "aware of" the gallery); it also means a completion cannot introduce words no caption uses.

The result is saved as a small directory (``qc2.json`` + the LoRA adapter) that records the base
model, the level thresholds and a fingerprint of the gallery it was trained for.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import re
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pictrieve.agents.qc2.levels import AxisLevels
from pictrieve.errors import PictrieveError

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
BUNDLE_FILE = "qc2.json"
ADAPTER_DIR = "adapter"
FULL_MODEL_DIR = "model"
IGNORE_INDEX = -100


class QC2ModelError(PictrieveError, RuntimeError):
    """A QC2 model cannot be trained, saved or loaded as asked (the message says what to do)."""


class GalleryMismatchError(QC2ModelError):
    """The QC2 model was trained for another gallery (or the gallery changed since)."""


# --------------------------------------------------------------------------- text format


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


# --------------------------------------------------------------------------- gallery identity


def gallery_fingerprint(collection: str, ids: Sequence[str]) -> str:
    """Identity of a gallery's contents: collection name, image count and a hash of the sorted ids."""
    digest = hashlib.sha256("\n".join(sorted(ids)).encode("utf-8")).hexdigest()[:16]
    return f"{collection}:{len(ids)}:{digest}"


# --------------------------------------------------------------------------- training


@dataclass
class QC2TrainConfig:
    """Training hyper-parameters, sized for a CPU (see the module docstring for the deviations)."""

    epochs: int = 2
    batch_size: int = 32
    learning_rate: float = 5e-4
    warmup_steps: int = 10
    weight_decay: float = 0.0
    max_length: int = 64
    lora_rank: int = 16  # 0: fully fine-tune the top layers instead of LoRA
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    train_layers: int | None = 6  # top decoder layers that learn; None: all
    cache_frozen_layers: bool = True
    restrict_vocab: bool = True
    max_steps: int | None = None
    seed: int = 0


@dataclass
class TrainReport:
    examples: int
    steps: int
    epochs: int
    seconds: float
    cache_seconds: float
    first_loss: float
    final_loss: float
    losses: list[float] = field(default_factory=list)
    trainable_parameters: int = 0
    cached_trunk: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["losses"] = [round(x, 4) for x in self.losses]
        return data


def train_completion_model(
    model: Any,
    tokenizer: Any,
    examples: Sequence[QC2Example],
    axes: Sequence[str],
    config: QC2TrainConfig | None = None,
    *,
    progress: bool = True,
) -> tuple[Any, TrainReport, list[int] | None]:
    """Fine-tune ``model`` on ``examples``; return ``(trained model, report, allowed output ids)``.

    ``model`` is changed in place (LoRA adapters are added with peft unless ``lora_rank`` is 0).
    """
    import torch
    from tqdm.auto import tqdm

    config = config or QC2TrainConfig()
    if not examples:
        raise QC2ModelError("no training examples: annotate the gallery first (`pictrieve quality annotate`)")
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)

    encoded = [
        encode_example(tokenizer, format_instruction(axes, ex.levels), clean_caption(ex.caption), config.max_length)
        for ex in examples
    ]
    allowed = _allowed_output_ids(encoded, tokenizer) if config.restrict_vocab else None
    model = _prepare_trainable(model, config)
    trainable = [p for p in model.parameters() if p.requires_grad]
    parts = _decoder_parts(model) if config.cache_frozen_layers else None
    start = time.perf_counter()
    split = 0
    if parts is not None:
        n_layers = len(parts["layers"])
        split = n_layers - min(config.train_layers or n_layers, n_layers)
    cache = _cache_trunk(parts, encoded, split, progress) if parts is not None else None
    cache_seconds = time.perf_counter() - start

    steps_per_epoch = math.ceil(len(encoded) / config.batch_size)
    total_steps = steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _warmup_linear(step, config.warmup_steps, total_steps)
    )
    allowed_tensor = torch.tensor(allowed) if allowed is not None else None
    remap = _remap_table(allowed, _vocab_size(model, tokenizer)) if allowed is not None else None

    model.train()
    if parts is not None:
        for layer in parts["layers"][:split]:
            layer.eval()
    losses: list[float] = []
    step = 0
    bar = tqdm(total=total_steps, desc="training QC2", unit="step", disable=not progress)
    while step < total_steps:
        for batch in _length_grouped_batches(len(encoded), encoded, config.batch_size, rng):
            if step >= total_steps:
                break
            if cache is not None:
                loss = _cached_loss(parts, cache, encoded, batch, split, allowed_tensor, remap)
            else:
                loss = _full_loss(model, encoded, batch, tokenizer, allowed_tensor, remap)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    bar.close()
    model.eval()
    report = TrainReport(
        examples=len(encoded),
        steps=step,
        epochs=config.epochs,
        seconds=time.perf_counter() - start,
        cache_seconds=cache_seconds,
        first_loss=losses[0],
        final_loss=float(np.mean(losses[-max(1, steps_per_epoch // 4):])),
        losses=losses,
        trainable_parameters=sum(p.numel() for p in trainable),
        cached_trunk=cache is not None,
    )
    logger.info("QC2 training: %d steps in %.0f s (trunk cache %.0f s), loss %.3f -> %.3f",
                step, report.seconds, cache_seconds, report.first_loss, report.final_loss)
    return model, report, allowed


def _warmup_linear(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def _allowed_output_ids(encoded: Sequence[tuple[list[int], list[int]]], tokenizer: Any) -> list[int]:
    ids = {tok for _, labels in encoded for tok in labels if tok != IGNORE_INDEX}
    ids.add(tokenizer.eos_token_id)
    return sorted(ids)


def _vocab_size(model: Any, tokenizer: Any) -> int:
    return max(int(model.get_output_embeddings().weight.shape[0]), len(tokenizer))


def _remap_table(allowed: Sequence[int], vocab_size: int):
    import torch

    table = torch.full((vocab_size,), IGNORE_INDEX, dtype=torch.long)
    table[torch.tensor(allowed)] = torch.arange(len(allowed))
    return table


def _prepare_trainable(model: Any, config: QC2TrainConfig) -> Any:
    """Freeze everything, then make the top layers learn (LoRA adapters, or full weights)."""
    for param in model.parameters():
        param.requires_grad_(False)
    layers = _layer_list(model)
    n_layers = len(layers) if layers is not None else None
    top = None
    if n_layers is not None and config.train_layers is not None:
        top = list(range(max(0, n_layers - config.train_layers), n_layers))
    if config.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        targets = _lora_targets(model)
        lora = LoraConfig(
            r=config.lora_rank,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=targets,
            fan_in_fan_out=targets == _GPT2_LORA_TARGETS,  # GPT-2 stores Conv1D weights transposed
            layers_to_transform=top,
            task_type="CAUSAL_LM",
        )
        return get_peft_model(model, lora)
    if layers is None:
        raise QC2ModelError("full fine-tuning needs a decoder with a layer list; use LoRA (lora_rank > 0)")
    for index in top or range(n_layers):
        for param in layers[index].parameters():
            param.requires_grad_(True)
    return model


_GPT2_LORA_TARGETS = ["c_attn", "c_proj", "c_fc"]


def _lora_targets(model: Any) -> list[str] | str:
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    llama = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    if set(llama) <= names:
        return llama
    if set(_GPT2_LORA_TARGETS) <= names:
        return list(_GPT2_LORA_TARGETS)
    return "all-linear"


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


def _cache_trunk(parts: dict[str, Any], encoded, split: int, progress: bool, batch_size: int = 64):
    """Hidden states after the frozen layers, one ``(len_i, hidden)`` tensor per example.

    Right padding with a causal mask never lets a real token see a pad, so the states are exact.
    """
    import torch
    from tqdm.auto import tqdm

    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
    cache: list[Any] = [None] * len(encoded)
    with torch.no_grad():
        for start in tqdm(range(0, len(order), batch_size), desc="caching frozen layers", disable=not progress):
            chunk = order[start : start + batch_size]
            ids = _pad([encoded[i][0] for i in chunk], 0)
            hidden = _run_layers(parts, parts["layers"][:split], parts["embed"](ids))
            for row, index in enumerate(chunk):
                cache[index] = hidden[row, : len(encoded[index][0])].clone()
    return cache


def _length_grouped_batches(n: int, encoded, batch_size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled batches of similar length (less padding), in shuffled order."""
    indices = list(range(n))
    rng.shuffle(indices)
    window = batch_size * 8
    batches: list[list[int]] = []
    for start in range(0, n, window):
        chunk = sorted(indices[start : start + window], key=lambda i: len(encoded[i][0]))
        batches.extend(chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


def _shifted_targets(encoded, batch):
    labels = _pad([encoded[i][1] for i in batch], IGNORE_INDEX)
    targets = labels[:, 1:]
    return targets, targets != IGNORE_INDEX


def _restricted_loss(hidden, head, targets, allowed, remap):
    import torch.nn.functional as F

    if allowed is None:
        return F.cross_entropy(head(hidden), targets)
    weight = head.weight[allowed]
    bias = head.bias[allowed] if getattr(head, "bias", None) is not None else None
    return F.cross_entropy(F.linear(hidden, weight, bias), remap[targets])


def _cached_loss(parts, cache, encoded, batch, split, allowed, remap):
    import torch

    length = max(len(encoded[i][0]) for i in batch)
    hidden = torch.zeros(len(batch), length, cache[batch[0]].shape[-1], dtype=cache[batch[0]].dtype)
    for row, index in enumerate(batch):
        hidden[row, : cache[index].shape[0]] = cache[index]
    hidden = parts["norm"](_run_layers(parts, parts["layers"][split:], hidden))
    targets, keep = _shifted_targets(encoded, batch)
    return _restricted_loss(hidden[:, :-1][keep], parts["head"], targets[keep], allowed, remap)


def _full_loss(model, encoded, batch, tokenizer, allowed, remap):
    """Ordinary forward of the whole model (any architecture); softmax over ``allowed`` if given."""
    import torch.nn.functional as F

    ids = _pad([encoded[i][0] for i in batch], tokenizer.pad_token_id or 0)
    attention = _pad([[1] * len(encoded[i][0]) for i in batch], 0)
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
    targets, keep = _shifted_targets(encoded, batch)
    logits, targets = logits[keep], targets[keep]
    if allowed is not None:
        logits, targets = logits[:, allowed], remap[targets]
    return F.cross_entropy(logits, targets)


def mean_caption_loss(model: Any, tokenizer: Any, examples: Sequence[QC2Example], axes: Sequence[str],
                      max_length: int = 64, allowed_token_ids: Sequence[int] | None = None) -> float:
    """Mean next-token loss over caption+end tokens, over the full vocabulary or ``allowed_token_ids``."""
    import torch
    import torch.nn.functional as F

    encoded = [encode_example(tokenizer, format_instruction(axes, ex.levels), clean_caption(ex.caption), max_length)
               for ex in examples]
    batch = list(range(len(encoded)))
    ids = _pad([e[0] for e in encoded], tokenizer.pad_token_id or 0)
    attention = _pad([[1] * len(e[0]) for e in encoded], 0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits
    targets, keep = _shifted_targets(encoded, batch)
    logits, targets = logits[:, :-1][keep], targets[keep]
    if allowed_token_ids is not None:
        allowed = torch.tensor(list(allowed_token_ids))
        logits = logits[:, allowed]
        targets = _remap_table(allowed_token_ids, _vocab_size(model, tokenizer))[targets]
    return float(F.cross_entropy(logits, targets))


# --------------------------------------------------------------------------- saving / loading


@dataclass
class QC2Model:
    """A trained completion model with everything needed to use it on its gallery."""

    model: Any
    tokenizer: Any
    base_model: str
    axes: list[AxisLevels]
    fingerprint: str | None = None
    allowed_token_ids: list[int] | None = None
    training: dict[str, Any] = field(default_factory=dict)
    gallery: dict[str, Any] = field(default_factory=dict)

    @property
    def axis_names(self) -> list[str]:
        return [axis.axis for axis in self.axes]

    def axis(self, name: str) -> AxisLevels:
        for axis in self.axes:
            if axis.axis.lower() == name.lower() or axis.score_key == name.lower():
                return axis
        raise QC2ModelError(
            f"this QC2 model has no {name!r} axis (it was trained on: {', '.join(self.axis_names)}). "
            f"Annotate that score (`pictrieve quality annotate`) and retrain to use it."
        )

    def resolve_levels(self, requested: dict[str, str], default: str = "Medium") -> tuple[str, ...]:
        """One canonical level per model axis from ``{axis or score key: level}``; unspecified axes get ``default``."""
        chosen = {axis.axis: axis.normalize(default) for axis in self.axes}
        for name, level in requested.items():
            if level is None:
                continue
            axis = self.axis(name)
            chosen[axis.axis] = axis.normalize(level)
        return tuple(chosen[axis.axis] for axis in self.axes)

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        is_peft = hasattr(self.model, "peft_config")
        if is_peft:
            self.model.save_pretrained(directory / ADAPTER_DIR)
        else:
            self.model.save_pretrained(directory / FULL_MODEL_DIR)
            self.tokenizer.save_pretrained(directory / FULL_MODEL_DIR)
        meta = {
            "format": FORMAT_VERSION,
            "base_model": self.base_model,
            "weights": ADAPTER_DIR if is_peft else FULL_MODEL_DIR,
            "axes": [axis.to_dict() for axis in self.axes],
            "fingerprint": self.fingerprint,
            "gallery": self.gallery,
            "allowed_token_ids": self.allowed_token_ids,
            "training": self.training,
        }
        from pictrieve.tools.files import atomic_write_text

        atomic_write_text(directory / BUNDLE_FILE, json.dumps(meta, indent=1))
        return directory


def read_bundle_info(directory: str | Path) -> dict[str, Any]:
    """``qc2.json`` of a saved model (no weights loaded)."""
    path = Path(directory) / BUNDLE_FILE
    if not path.is_file():
        raise QC2ModelError(f"no QC2 model at {directory} ({BUNDLE_FILE} missing): train one with `pictrieve quality train`")
    meta = json.loads(path.read_text())
    if meta.get("format") != FORMAT_VERSION:
        raise QC2ModelError(f"{path}: unsupported QC2 model format {meta.get('format')!r}; retrain it")
    return meta


def load_qc2_model(directory: str | Path, *, fingerprint: str | None = None, device: str | None = None) -> QC2Model:
    """Load a saved QC2 model; refuse it when ``fingerprint`` (of the gallery in use) differs."""
    from pictrieve.tools.causal_lm import load_causal_lm

    directory = Path(directory)
    meta = read_bundle_info(directory)
    if fingerprint is not None and meta.get("fingerprint") != fingerprint:
        raise GalleryMismatchError(
            f"the QC2 model in {directory} was trained for gallery {meta.get('fingerprint')!r}, not for "
            f"this one ({fingerprint!r}); images were added or removed, or it is another gallery. "
            f"Re-annotate and retrain: `pictrieve quality annotate` then `pictrieve quality train`."
        )
    if meta["weights"] == ADAPTER_DIR:
        from peft import PeftModel

        base, tokenizer = load_causal_lm(meta["base_model"], device=device or "cpu")
        model = PeftModel.from_pretrained(base, directory / ADAPTER_DIR).merge_and_unload()
    else:
        model, tokenizer = load_causal_lm(str(directory / FULL_MODEL_DIR), device=device)
    return QC2Model(
        model=model.eval(),
        tokenizer=tokenizer,
        base_model=meta["base_model"],
        axes=[AxisLevels.from_dict(a) for a in meta["axes"]],
        fingerprint=meta.get("fingerprint"),
        allowed_token_ids=meta.get("allowed_token_ids"),
        training=meta.get("training") or {},
        gallery=meta.get("gallery") or {},
    )
