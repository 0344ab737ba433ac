"""Resumable QC2 training: the frozen-trunk cache and the training state on disk.

Two things make a long CPU run expensive to lose: the frozen-trunk cache (every example through the
frozen lower layers, about 0.16 s per caption on a contended core) and the steps trained so far. Both
live in a checkpoint folder:

- ``trunk-<key>/shard-NNNNN.pt``: the cached hidden states, in shards of examples (sorted by length),
  each written once. ``<key>`` names the base model, the split point and the exact token ids, so a
  cache is never used for other examples or another model.
- ``state.pt``: the trainable weights, the optimizer and scheduler states, torch's RNG state, the step
  and the losses so far. Re-running the same training resumes from it; a different run (other data or
  hyper-parameters) starts afresh with a warning.

Every file is written to a temporary name and renamed into place (:func:`atomic_write_bytes`), so an
interrupted write never replaces a good file.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pictrieve.tools.core.files import atomic_write_bytes
from pictrieve.tools.core.time_budget import TimeBudget

logger = logging.getLogger(__name__)

STATE_FILE = "state.pt"
SHARD_SIZE = 512
CHUNK_SIZE = 64
"""Examples run through the frozen layers between two looks at the clock (about 10 s of SmolLM2 on a busy core)."""


def save_torch(obj: Any, path: Path) -> None:
    """``torch.save`` through a temporary file and a rename."""
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_bytes(Path(path), buffer.getvalue())


def load_torch(path: Path) -> Any:
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)


def trunk_key(model: Any, split: int, encoded: Sequence[tuple[list[int], list[int]]]) -> str:
    """Identity of a trunk cache: the base model, the number of frozen layers and every token id."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    digest = hashlib.sha1()
    digest.update(str(getattr(config, "_name_or_path", "")).encode())
    digest.update((config.to_json_string() if config is not None else "").encode())
    digest.update(f"split={split}".encode())
    for ids, _ in encoded:
        digest.update(json.dumps(ids).encode())
    return digest.hexdigest()[:16]


def cached_trunk_on_disk(
    compute: Callable[[list[int]], list[Any]],
    encoded: Sequence[tuple[list[int], list[int]]],
    folder: Path,
    *,
    progress: bool = True,
    shard_size: int = SHARD_SIZE,
    chunk_size: int = CHUNK_SIZE,
    budget: TimeBudget | None = None,
) -> list[Any] | None:
    """Hidden states for every example, from ``folder``'s shards where present, else ``compute(indices)``.

    Examples are taken in order of length (less padding) and stored in shards of ``shard_size``;
    a shard is written as soon as it is complete, so an interrupted cache resumes at the last shard.
    ``compute`` runs on ``chunk_size`` examples at a time and ``budget`` is checked after each chunk:
    when it says stop, the part of the shard computed so far is saved (a re-run continues from it)
    and ``None`` is returned.
    """
    from tqdm.auto import tqdm

    folder.mkdir(parents=True, exist_ok=True)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
    cache: list[Any] = [None] * len(encoded)
    shards = [order[start : start + shard_size] for start in range(0, len(order), shard_size)]
    reused = 0
    with tqdm(total=len(order), desc="caching frozen layers", unit="ex", disable=not progress) as bar:
        for number, indices in enumerate(shards):
            path = folder / f"shard-{number:05d}.pt"
            states: list[Any] = []
            if path.is_file():
                stored = load_torch(path)
                done = stored.get("indices") or []
                if done == indices[: len(done)]:  # the whole shard, or the part a stopped run saved
                    states = list(stored["states"])
                    reused += len(done)
                    bar.update(len(done))
            complete = len(states) == len(indices)
            while len(states) < len(indices):
                chunk = indices[len(states) : len(states) + chunk_size]
                states.extend(compute(chunk))
                bar.update(len(chunk))
                if budget is not None:
                    budget.progressed()
                    if budget.should_stop() and len(states) < len(indices):
                        save_torch({"indices": indices[: len(states)], "states": states}, path)
                        logger.info("frozen-trunk cache: the time budget is spent after %d of %d examples",
                                    sum(c is not None for c in cache) + len(states), len(order))
                        return None
            if not complete:
                save_torch({"indices": indices, "states": states}, path)
            for index, state in zip(indices, states):
                cache[index] = state
            if budget is not None and budget.should_stop() and number + 1 < len(shards):
                return None
    if reused:
        logger.info("frozen-trunk cache: reused %d of %d examples from %s", reused, len(order), folder)
    return cache


def save_state(folder: Path, state: dict[str, Any]) -> None:
    save_torch(state, Path(folder) / STATE_FILE)


def load_state(folder: Path, run_key: str) -> dict[str, Any] | None:
    """The saved training state of this run (``run_key``), or None (none saved, or another run's)."""
    path = Path(folder) / STATE_FILE
    if not path.is_file():
        return None
    try:
        state = load_torch(path)
    except Exception as exc:  # unreadable: start afresh rather than fail the run
        logger.warning("cannot read the QC2 checkpoint %s (%s); training from the start", path, exc)
        return None
    if state.get("run_key") != run_key:
        logger.warning("the checkpoint in %s is from another training run (other data or settings); "
                       "training from the start and replacing it", folder)
        return None
    return state
