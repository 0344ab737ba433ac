"""``pictrieve train-embedder FOLDER --out HEAD``: train the offline image head on your captioned photos."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click
import numpy as np

from pictrieve.evaluation.head_training import HeadTraining

logger = logging.getLogger(__name__)


@click.command("train-embedder")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the head (.npz); use it as --embedder trained:OUT.")
@click.option("--held-out", default=0.15, show_default=True, type=click.FloatRange(0.02, 0.5),
              help="Fraction of photos kept out of training to choose the epoch (early stopping).")
@click.option("--epochs", default=HeadTraining.epochs, show_default=True, type=click.IntRange(1, 1000),
              help="Length of the one-cycle learning-rate schedule.")
@click.option("--patience", default=HeadTraining.patience, show_default=True, type=click.IntRange(1, 1000),
              help="Stop after this many epochs without a better held-out Recall@10.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--device", default=None, help="cpu, cuda, ... (default: the best available).")
def train_embedder(folder: Path, out: Path, held_out: float, epochs: int, patience: int, seed: int, device: str | None) -> None:
    """Train a projection head from EfficientNet-Lite0 features into MiniLM's sentence space.

    FOLDER holds captions.jsonl (one line per photo: {"image": "images/x.jpg", "captions": [...]})
    and the photos. Rows with "split": "dev" are the held-out set when present; otherwise a random
    --held-out fraction is. The result is searched with `--embedder trained:OUT`.

    \b
    Example:
      pictrieve train-embedder ~/captioned --out ~/heads/mine.npz
      pictrieve index ~/Photos --gallery ./g --embedder trained:~/heads/mine.npz
    """
    from pictrieve.evaluation.head_training import folder_training_data, train_head

    features, captions, rows = folder_training_data(folder, device=device)
    splits = np.array([r.get("split", "") for r in rows])
    held = np.flatnonzero(splits == "dev")
    if len(held) == 0:
        order = np.random.default_rng(seed).permutation(len(rows))
        held = np.sort(order[: max(2, round(held_out * len(rows)))])
    train = np.setdiff1d(np.arange(len(rows)), held)
    head, history = train_head(features, captions, train, held, HeadTraining(epochs=epochs, patience=patience, seed=seed))
    head.meta.update(train_photos=int(len(train)), held_out_photos=int(len(held)), folder=str(folder))
    head.save(out)
    click.echo(json.dumps({"out": str(out), "epochs_run": len(history),
                           "held_out_recall@10": round(head.meta["held_out_recall@10"], 4),
                           "embedder": f"trained:{out}"}))
