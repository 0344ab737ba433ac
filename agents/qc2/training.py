"""Fine-tune a small causal LM to complete queries conditioned on quality levels (QC2, Sec. 3.3).

The example format is :mod:`.prompt_format`'s; the frozen-trunk cache runs decoder layers through
:mod:`.decoder_internals`; the trained model is saved and loaded by :mod:`.bundle`.

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
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pictrieve.agents.qc2.decoder_internals import (
    _cache_trunk,
    _decoder_parts,
    _layer_list,
    _pad,
    _run_layers,
    _trunk_states,
)
from pictrieve.agents.qc2.errors import QC2ModelError
from pictrieve.agents.qc2.prompt_format import (
    IGNORE_INDEX,
    QC2Example,
    clean_caption,
    encode_example,
    format_instruction,
)
from pictrieve.tools.core.time_budget import TimeBudget

logger = logging.getLogger(__name__)


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
    resumed_from_step: int = 0
    stopped_early: bool = False
    """Training steps are left (the time budget ran out first): run again to resume."""
    level_check_pending: bool = False
    """Every step is trained but the last level-usage check was cut by the time budget (a re-run measures it)."""
    probe_losses: list[dict[str, float]] = field(default_factory=list)

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
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int | None = None,
    max_seconds: float | None = None,
    budget: TimeBudget | None = None,
    probes: dict[str, Sequence[QC2Example]] | None = None,
) -> tuple[Any, TrainReport, list[int] | None]:
    """Fine-tune ``model`` on ``examples``; return ``(trained model, report, allowed output ids)``.

    ``model`` is changed in place (LoRA adapters are added with peft unless ``lora_rank`` is 0).

    ``checkpoint_dir``: keep the frozen-trunk cache and the training state there (every
    ``checkpoint_every`` steps and after each epoch), and resume from them when the same training
    is run again (see :mod:`.checkpoints`). ``budget`` (a :class:`TimeBudget`, e.g. a whole
    command's) or ``max_seconds`` (a budget from this call's start): the frozen-trunk cache, the
    per-epoch checks and the steps all count against it, each checks the clock inside its loop, and
    the run stops cleanly at the first check past it, once it has made some progress (the cache made
    so far and the training state are saved; ``report.stopped_early`` says so; running again
    resumes, a check that was cut short included). ``probes``: named example sets whose mean
    caption loss is measured after every epoch (the level-usage check: the same captions with true,
    opposite or random levels); they are never trained on, and their results go to
    ``report.probe_losses``.
    """
    from pictrieve.tools.core.seeding import torch_seeded

    config = config or QC2TrainConfig()
    if budget is None:
        budget = TimeBudget(max_seconds)
    # Seeded in a forked generator: training never reseeds the caller's process-wide RNG.
    with torch_seeded(config.seed):
        return _train(model, tokenizer, examples, axes, config, progress=progress,
                      checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir is not None else None,
                      checkpoint_every=checkpoint_every, budget=budget, probes=probes or {})


def _epoch_batches(encoded, n: int, config: QC2TrainConfig, epoch: int) -> list[list[int]]:
    """The batches of one epoch: a function of the seed and the epoch only, so a resumed run replays them."""
    return _length_grouped_batches(n, encoded, config.batch_size, random.Random(config.seed * 100_003 + epoch))


def _train(model: Any, tokenizer: Any, examples: Sequence[QC2Example], axes: Sequence[str],
           config: QC2TrainConfig, *, progress: bool, checkpoint_dir: Path | None = None,
           checkpoint_every: int | None = None, budget: TimeBudget,
           probes: dict[str, Sequence[QC2Example]] | None = None) -> tuple[Any, TrainReport, list[int] | None]:
    """The steps of :func:`train_completion_model`: encode, make the top layers learn, cache the frozen trunk,
    resume, train, report. Torch's random state is drawn in this order, so a seeded run repeats exactly."""
    if not examples:
        raise QC2ModelError("no training examples: annotate the gallery first (`pictrieve quality annotate`)")
    rows = _encode_rows(tokenizer, examples, axes, config, probes or {})
    allowed = _allowed_output_ids(rows.encoded[: rows.n_train], tokenizer) if config.restrict_vocab else None
    model = _prepare_trainable(model, config)
    start = time.perf_counter()
    trunk = _frozen_trunk(model, config, rows.encoded, checkpoint_dir, progress=progress, budget=budget)
    cache_seconds = time.perf_counter() - start
    if trunk.unfinished:  # the budget ran out while caching: what is cached is kept
        logger.warning("QC2 training stopped while caching the frozen layers: the time budget (%.0f s) is "
                       "spent; run the same command again to resume", budget.seconds)
        model.eval()
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        return model, TrainReport(examples=rows.n_train, steps=0, epochs=config.epochs, seconds=cache_seconds,
                                  cache_seconds=cache_seconds, first_loss=float("nan"), final_loss=float("nan"),
                                  trainable_parameters=trainable, cached_trunk=False, stopped_early=True), allowed

    run = _TrainingRun(model, tokenizer, config, rows, trunk, allowed, checkpoint_dir=checkpoint_dir, budget=budget)
    run.resume()
    run.train(progress=progress, checkpoint_every=checkpoint_every)
    model.eval()
    report = run.report(seconds=time.perf_counter() - start, cache_seconds=cache_seconds)
    logger.info("QC2 training: %d steps in %.0f s (trunk cache %.0f s), loss %.3f -> %.3f",
                report.steps, report.seconds, cache_seconds, report.first_loss, report.final_loss)
    return model, report, allowed


@dataclass
class _Rows:
    """The encoded examples: the ``n_train`` training rows first, then each probe's (``probe_rows``: their
    indices), which are only ever evaluated."""

    encoded: list[tuple[list[int], list[int]]]
    n_train: int
    probe_rows: dict[str, list[int]]


def _encode_rows(tokenizer: Any, examples: Sequence[QC2Example], axes: Sequence[str], config: QC2TrainConfig,
                 probes: dict[str, Sequence[QC2Example]]) -> _Rows:
    def encode(ex: QC2Example):
        instruction = format_instruction(axes, ex.levels)
        return encode_example(tokenizer, instruction, clean_caption(ex.caption), config.max_length)

    encoded = [encode(ex) for ex in examples]
    n_train = len(encoded)
    probe_rows: dict[str, list[int]] = {}
    for name, probe in probes.items():
        probe_rows[name] = list(range(len(encoded), len(encoded) + len(probe)))
        encoded.extend(encode(ex) for ex in probe)
    return _Rows(encoded, n_train, probe_rows)


@dataclass
class _Trunk:
    """The frozen lower decoder layers: ``parts`` (None where the model is trained whole: caching is off or the
    architecture has no layer list we run), the first learning layer ``split``, and the cached outputs of the
    layers below it for every row (None when the time budget stopped the caching)."""

    parts: dict[str, Any] | None = None
    split: int = 0
    cache: Any = None

    @property
    def unfinished(self) -> bool:
        return self.parts is not None and self.cache is None


def _frozen_trunk(model: Any, config: QC2TrainConfig, encoded: list, checkpoint_dir: Path | None, *,
                  progress: bool, budget: TimeBudget) -> _Trunk:
    """Run every row through the frozen layers once (kept on disk under ``checkpoint_dir`` when given, so a
    resumed run reuses it), so that each epoch runs only the top layers."""
    from pictrieve.agents.qc2 import checkpoints

    parts = _decoder_parts(model) if config.cache_frozen_layers else None
    if parts is None:
        return _Trunk()
    n_layers = len(parts["layers"])
    split = n_layers - min(config.train_layers or n_layers, n_layers)
    if checkpoint_dir is not None:
        key = checkpoints.trunk_key(model, split, encoded)
        cache = checkpoints.cached_trunk_on_disk(
            lambda idx: _trunk_states(parts, encoded, idx, split), encoded,
            checkpoint_dir / f"trunk-{key}", progress=progress, budget=budget)
    else:
        cache = _cache_trunk(parts, encoded, split, progress, budget=budget)
    return _Trunk(parts, split, cache)


class _TrainingRun:
    """One training run after the trunk is cached: the optimizer and its schedule, the steps done, the losses,
    the level checks, and the checkpoint they are saved in and resumed from."""

    def __init__(self, model: Any, tokenizer: Any, config: QC2TrainConfig, rows: _Rows, trunk: _Trunk,
                 allowed: list[int] | None, *, checkpoint_dir: Path | None, budget: TimeBudget) -> None:
        import torch

        self.model, self.tokenizer, self.config, self.rows, self.trunk = model, tokenizer, config, rows, trunk
        self.checkpoint_dir, self.budget = checkpoint_dir, budget
        self.trainable_named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.trainable = [p for _, p in self.trainable_named]
        self.steps_per_epoch = math.ceil(rows.n_train / config.batch_size)
        total_steps = self.steps_per_epoch * config.epochs
        self.total_steps = min(total_steps, config.max_steps) if config.max_steps is not None else total_steps
        self.optimizer = torch.optim.AdamW(self.trainable, lr=config.learning_rate, weight_decay=config.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: _warmup_linear(step, config.warmup_steps, self.total_steps)
        )
        self.allowed_tensor = torch.tensor(allowed) if allowed is not None else None
        self.remap = _remap_table(allowed, _vocab_size(model, tokenizer)) if allowed is not None else None
        # The run's identity: a checkpoint of another run (other data or settings) is never resumed.
        self.run_key = hashlib.sha1(json.dumps([
            asdict(config), [e[0] for e in rows.encoded[: rows.n_train]], sorted(rows.probe_rows),
        ]).encode()).hexdigest()[:16]
        self.step = 0
        self.resumed_from = 0
        self.losses: list[float] = []
        self.probe_history: list[dict[str, float]] = []
        self.stopped = False

    def batch_loss(self, batch: list[int], reduction: str = "mean"):
        trunk, rows = self.trunk, self.rows
        if trunk.cache is not None:
            return _cached_loss(trunk.parts, trunk.cache, rows.encoded, batch, trunk.split, self.allowed_tensor,
                                self.remap, reduction)
        return _full_loss(self.model, rows.encoded, batch, self.tokenizer, self.allowed_tensor, self.remap, reduction)

    def set_train_mode(self) -> None:
        """Dropout on in the learning layers; the frozen ones below stay in eval mode."""
        self.model.train()
        if self.trunk.parts is not None:
            for layer in self.trunk.parts["layers"][: self.trunk.split]:
                layer.eval()

    def resume(self) -> None:
        """Take up this run's checkpoint, if one was kept: weights, optimizer, schedule, random state, losses."""
        import torch

        from pictrieve.agents.qc2 import checkpoints

        if self.checkpoint_dir is None:
            return
        state = checkpoints.load_state(self.checkpoint_dir, self.run_key)
        if state is None:
            return
        by_name = dict(self.trainable_named)
        with torch.no_grad():
            for name, value in state["trainable"].items():
                by_name[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        self.step, self.losses, self.probe_history = state["step"], list(state["losses"]), list(state["probe_history"])
        self.resumed_from = self.step
        logger.info("resuming QC2 training from step %d of %d (%s)", self.step, self.total_steps, self.checkpoint_dir)

    def save(self, reason: str) -> None:
        import torch

        from pictrieve.agents.qc2 import checkpoints

        if self.checkpoint_dir is None:
            return
        checkpoints.save_state(self.checkpoint_dir, {
            "run_key": self.run_key, "step": self.step, "losses": self.losses, "probe_history": self.probe_history,
            "trainable": {name: p.detach().clone() for name, p in self.trainable_named},
            "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
        })
        logger.debug("checkpoint at step %d (%s)", self.step, reason)

    def measure_probes(self, epoch: int) -> dict[str, float] | None:
        """The level check after ``epoch``, or None when the budget stopped it (a re-run measures it)."""
        import torch

        self.model.eval()
        row: dict[str, float] = {"epoch": epoch}
        with torch.no_grad():
            for name, rows in self.rows.probe_rows.items():
                total, tokens = 0.0, 0
                for begin in range(0, len(rows), 64):
                    if self.budget.should_stop():
                        self.set_train_mode()
                        return None
                    batch = rows[begin : begin + 64]
                    loss_sum, count = self.batch_loss(batch, reduction="sum")
                    total, tokens = total + float(loss_sum), tokens + int(count)
                row[name] = total / max(1, tokens)
        self.set_train_mode()
        self.budget.progressed()
        logger.info("level check after epoch %d: %s", epoch,
                    ", ".join(f"{k} {v:.4f}" for k, v in row.items() if k != "epoch"))
        return row

    def check_levels_if_due(self) -> bool:
        """Run the level check owed at this step (before training, after an epoch, or one a stopped run
        left undone); False when the budget stopped it."""
        epoch = math.ceil(self.step / self.steps_per_epoch)
        at_boundary = self.step % self.steps_per_epoch == 0 or self.step >= self.total_steps
        measured = bool(self.probe_history) and self.probe_history[-1]["epoch"] >= epoch
        if not self.rows.probe_rows or not at_boundary or measured:
            return True
        row = self.measure_probes(epoch)
        if row is not None:
            self.probe_history.append(row)
        return row is not None

    def take_step(self, batch: list[int]) -> None:
        import torch

        loss = self.batch_loss(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.trainable, 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.losses.append(float(loss.detach()))
        self.step += 1

    def train(self, *, progress: bool, checkpoint_every: int | None) -> None:
        """Train the steps left, epoch by epoch (each epoch's batches replayed from where a resumed run
        stopped), checking the levels after each epoch and saving the state, until done or the budget is spent."""
        from tqdm.auto import tqdm

        self.set_train_mode()
        self.stopped = not self.check_levels_if_due()
        if self.stopped:
            self.save("time budget")
        bar = tqdm(total=self.total_steps, initial=self.step, desc="training QC2", unit="step", disable=not progress)
        while self.step < self.total_steps and not self.stopped:
            epoch = self.step // self.steps_per_epoch
            done_in_epoch = self.step - epoch * self.steps_per_epoch
            for batch in _epoch_batches(self.rows.encoded, self.rows.n_train, self.config, epoch)[done_in_epoch:]:
                if self.step >= self.total_steps:
                    break
                self.take_step(batch)
                bar.update(1)
                bar.set_postfix(loss=f"{self.losses[-1]:.3f}")
                self.budget.progressed()
                if checkpoint_every and self.step % checkpoint_every == 0 and self.step % self.steps_per_epoch:
                    self.save("every %d steps" % checkpoint_every)
                if self.budget.should_stop() and self.step < self.total_steps:
                    self.stopped = True
                    break
            if not self.stopped:
                self.stopped = not self.check_levels_if_due()
            self.save("end of epoch" if not self.stopped else "time budget")
        bar.close()
        if self.stopped and self.step < self.total_steps:
            logger.warning("QC2 training stopped at step %d of %d: the time budget (%.0f s) is spent; "
                           "run the same command again to resume", self.step, self.total_steps, self.budget.seconds)
        elif self.stopped:
            logger.warning("QC2 training finished its %d steps; the time budget (%.0f s) cut the last level-usage "
                           "check: run the same command again to measure it", self.step, self.budget.seconds)

    def report(self, *, seconds: float, cache_seconds: float) -> TrainReport:
        losses, done = self.losses, self.step >= self.total_steps
        return TrainReport(
            examples=self.rows.n_train,
            steps=self.step,
            epochs=self.config.epochs,
            seconds=seconds,
            cache_seconds=cache_seconds,
            first_loss=losses[0] if losses else float("nan"),
            final_loss=float(np.mean(losses[-max(1, self.steps_per_epoch // 4):])) if losses else float("nan"),
            losses=losses,
            trainable_parameters=sum(p.numel() for p in self.trainable),
            cached_trunk=self.trunk.cache is not None,
            resumed_from_step=self.resumed_from,
            # A run whose every step is done is finished, even when the budget cut its last level check.
            stopped_early=self.stopped and not done,
            level_check_pending=self.stopped and done,
            probe_losses=self.probe_history,
        )


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
        from pictrieve.tools.core.loading import quiet_peft_wrapping

        with quiet_peft_wrapping():
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


def _restricted_loss(hidden, head, targets, allowed, remap, reduction="mean"):
    import torch.nn.functional as F

    if allowed is None:
        return _reduce(F.cross_entropy(head(hidden), targets, reduction="none"), targets, reduction)
    weight = head.weight[allowed]
    bias = head.bias[allowed] if getattr(head, "bias", None) is not None else None
    targets = remap[targets]
    return _reduce(F.cross_entropy(F.linear(hidden, weight, bias), targets, reduction="none"), targets, reduction)


def _reduce(token_losses, targets, reduction: str):
    """``"mean"`` over the scored tokens, or ``"sum"`` as ``(sum, number of scored tokens)``.

    Tokens outside the allowed vocabulary (a held-out caption's word that no training caption uses)
    map to IGNORE_INDEX and are not scored.
    """
    keep = targets != IGNORE_INDEX
    if reduction == "sum":
        return token_losses[keep].sum(), int(keep.sum())
    return token_losses[keep].mean()


def _cached_loss(parts, cache, encoded, batch, split, allowed, remap, reduction="mean"):
    import torch

    length = max(len(encoded[i][0]) for i in batch)
    hidden = torch.zeros(len(batch), length, cache[batch[0]].shape[-1], dtype=cache[batch[0]].dtype)
    for row, index in enumerate(batch):
        hidden[row, : cache[index].shape[0]] = cache[index]
    hidden = parts["norm"](_run_layers(parts, parts["layers"][split:], hidden))
    targets, keep = _shifted_targets(encoded, batch)
    return _restricted_loss(hidden[:, :-1][keep], parts["head"], targets[keep], allowed, remap, reduction)


def _full_loss(model, encoded, batch, tokenizer, allowed, remap, reduction="mean"):
    """Ordinary forward of the whole model (any architecture); softmax over ``allowed`` if given."""
    import torch.nn.functional as F

    ids = _pad([encoded[i][0] for i in batch], tokenizer.pad_token_id or 0)
    attention = _pad([[1] * len(encoded[i][0]) for i in batch], 0)
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
    targets, keep = _shifted_targets(encoded, batch)
    logits, targets = logits[keep], targets[keep]
    if allowed is not None:
        logits, targets = logits[:, allowed], remap[targets]
    return _reduce(F.cross_entropy(logits, targets, reduction="none"), targets, reduction)


def caption_loss_sum(model: Any, tokenizer: Any, examples: Sequence[QC2Example], axes: Sequence[str],
                     max_length: int = 64, allowed_token_ids: Sequence[int] | None = None) -> tuple[float, int]:
    """``(summed next-token loss, scored tokens)`` over caption+end tokens, full vocabulary or ``allowed_token_ids``.

    With ``allowed_token_ids``, tokens outside that set are not scored (the model cannot produce them).
    """
    import torch

    encoded = [encode_example(tokenizer, format_instruction(axes, ex.levels), clean_caption(ex.caption), max_length)
               for ex in examples]
    allowed = torch.tensor(list(allowed_token_ids)) if allowed_token_ids is not None else None
    remap = _remap_table(allowed_token_ids, _vocab_size(model, tokenizer)) if allowed_token_ids is not None else None
    with torch.no_grad():
        total, count = _full_loss(model, encoded, list(range(len(encoded))), tokenizer, allowed, remap, "sum")
    return float(total), count


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
