"""Training the ``offline`` embedder's projection head (``pictrieve train-embedder``, the benchmarks).

The embedder that *loads* a head is :class:`pictrieve.tools.models.embedders.trained.TrainedEmbedder`;
this module makes one: the pooled EfficientNet-Lite0 features and MiniLM caption vectors of a captioned
folder (:func:`folder_training_data`), then a small MLP trained with symmetric InfoNCE and a learned
temperature, stopped on held-out Recall@10 (:func:`train_head`). The recipe and its numbers:
``benchmarks/trained_embedder.md``. The photos go through :func:`~pictrieve.tools.models.embedders.backbone.squash_pixels`,
Pillow's bicubic squash, as a query photo and the CPU indexer get (the indexer's torch resize on a GPU, since
issue 40, is the same filter to 0.05 of a level, and both give the same pixels for photos already 224x224, as
flickr8k-train's are).

Randomness stays inside the training: torch's generator is forked and seeded for it
(:func:`~pictrieve.tools.core.seeding.torch_seeded`) and numpy's is a local ``default_rng``, both from
``HeadTraining.seed``, so the same seed gives the same head and training never reseeds the caller's process.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from pictrieve.evaluation.retrieval import retrieval_metrics
from pictrieve.tools.core.devices import pick_device
from pictrieve.tools.core.model_cache import shared_model
from pictrieve.tools.core.seeding import torch_seeded
from pictrieve.tools.models.embedders.backbone import pooled_features, squash_pixels
from pictrieve.tools.models.embedders.base import l2_normalize
from pictrieve.tools.models.embedders.trained import HeadFileError, ProjectionHead
from pictrieve.tools.models.sentence_encoder import SentenceEncoder

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeadTraining:
    """Hyperparameters of :func:`train_head`.

    The defaults are the recipe of the packaged head, chosen on flickr8k-train's ``dev`` rows
    (``benchmarks/offline_head_sweep.py``); the packaged head was then trained on all rows with
    ``keep_best=False``.
    """

    hidden: int = 1024
    epochs: int = 25  # one-cycle schedule: the learning rate anneals to ~0 by the last epoch
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.05
    dropout: float = 0.4
    feature_noise: float = 0.3  # Gaussian noise on standardised features: augmentation on cached features
    patience: int = 8  # epochs without a better held-out Recall@10 before stopping
    all_captions: bool = True  # every caption of each photo in each step (multi-positive), else one at random
    keep_best: bool = True  # keep the epoch with the best held-out Recall@10; False: the last epoch
    seed: int = 0


def caption_recall_at_10(image_vectors: np.ndarray, caption_vectors: np.ndarray) -> float:
    """Tie-aware Recall@10 of finding each image from each of its captions (``(n, c, d)`` captions)."""
    n, per = caption_vectors.shape[:2]
    scores = caption_vectors.reshape(n * per, -1) @ image_vectors.T
    return retrieval_metrics(scores, np.repeat(np.arange(n), per), ks=(10,))["recall@10"]


def train_head(
    features: np.ndarray,
    captions: np.ndarray,
    train_rows: np.ndarray,
    held_out_rows: np.ndarray,
    config: HeadTraining = HeadTraining(),
    progress: bool = True,
) -> tuple[ProjectionHead, list[dict]]:
    """Train a projection head with symmetric InfoNCE and a learned temperature.

    ``features``: ``(n, views, 1280)`` pooled image features (views: the photo and its mirror);
    ``captions``: ``(n, c, 384)`` frozen MiniLM caption embeddings. Each step draws, for every
    photo of the batch, one of its views and one of its captions at random (so all captions and
    both views are used across epochs). Early stopping keeps the head with the best held-out
    Recall@10 (captions of ``held_out_rows`` searching among those photos only).
    """
    # Forked and seeded: the weights' initialisation, dropout and feature noise repeat with the seed,
    # and the caller's own torch randomness is left as it was.
    with torch_seeded(config.seed):
        return _train(features, captions, train_rows, held_out_rows, config, progress)


def _train(features: np.ndarray, captions: np.ndarray, train_rows: np.ndarray, held_out_rows: np.ndarray,
           config: HeadTraining, progress: bool) -> tuple[ProjectionHead, list[dict]]:
    import torch
    from tqdm.auto import tqdm

    rng = np.random.default_rng(config.seed)
    feats = np.asarray(features, dtype=np.float32)
    caps = torch.from_numpy(np.asarray(captions, dtype=np.float32))
    flat = feats[train_rows].reshape(-1, feats.shape[-1])
    mean, std = flat.mean(0), flat.std(0) + 1e-6
    x_all = torch.from_numpy((feats - mean) / std)
    model = torch.nn.Sequential(
        torch.nn.Dropout(config.dropout), torch.nn.Linear(feats.shape[-1], config.hidden), torch.nn.GELU(),
        torch.nn.Dropout(config.dropout), torch.nn.Linear(config.hidden, caps.shape[-1]),
    )
    log_scale = torch.nn.Parameter(torch.tensor(np.log(1 / 0.07), dtype=torch.float32))
    optimiser = torch.optim.AdamW([*model.parameters(), log_scale], lr=config.lr, weight_decay=config.weight_decay)
    batch_size = max(2, min(config.batch_size, len(train_rows)))
    steps = config.epochs * max(1, len(train_rows) // batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, config.lr, total_steps=steps, pct_start=0.1)

    def snapshot() -> ProjectionHead:
        first, second = model[1], model[4]
        return ProjectionHead(
            mean=mean, std=std, w1=first.weight.detach().numpy().copy(), b1=first.bias.detach().numpy().copy(),
            w2=second.weight.detach().numpy().copy(), b2=second.bias.detach().numpy().copy(),
            meta={"recipe": "efficientnet-lite0 pooled, squash 224, mirror-averaged -> MLP -> all-MiniLM-L6-v2",
                  "training": config.__dict__},
        )

    history, best, best_score, stale, step, last_loss = [], None, -1.0, 0, 0, float("nan")
    bar = tqdm(range(config.epochs), desc="training head", disable=not progress)
    for epoch in bar:
        model.train()
        order = rng.permutation(train_rows)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            if step >= steps:
                break
            rows = torch.from_numpy(order[start : start + batch_size])
            view = torch.from_numpy(rng.integers(0, feats.shape[1], len(rows)))
            x = x_all[rows, view] + config.feature_noise * torch.randn(len(rows), feats.shape[-1])
            image = torch.nn.functional.normalize(model(x), dim=-1)
            scale = log_scale.exp().clamp(max=100)
            if config.all_captions:
                loss = _multi_caption_loss(scale, image, caps[rows])
            else:
                which = torch.from_numpy(rng.integers(0, caps.shape[1], len(rows)))
                logits = scale * image @ caps[rows, which].T
                target = torch.arange(len(rows))
                loss = (torch.nn.functional.cross_entropy(logits, target) + torch.nn.functional.cross_entropy(logits.T, target)) / 2
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            step += 1
            last_loss = float(loss.detach())
        model.eval()
        head = snapshot()
        held = head(feats[held_out_rows].reshape(-1, feats.shape[-1])).reshape(len(held_out_rows), feats.shape[1], -1)
        score = caption_recall_at_10(l2_normalize(held.mean(1)), captions[held_out_rows])
        history.append({"epoch": epoch + 1, "loss": last_loss, "held_out_recall@10": score,
                        "temperature": float(1 / log_scale.detach().exp())})
        bar.set_postfix(loss=f"{last_loss:.3f}", r10=f"{score:.3f}")
        if score > best_score or not config.keep_best:
            best, best_score, stale = head, max(score, best_score), 0
        else:
            stale += 1
            if stale >= config.patience:
                logger.info("early stop after epoch %d (best held-out Recall@10 %.4f)", epoch + 1, best_score)
                break
    assert best is not None
    best.meta["held_out_recall@10"] = best_score if config.keep_best else history[-1]["held_out_recall@10"]
    best.meta["epochs_run"] = len(history)
    return best, history


def _multi_caption_loss(scale: "torch.Tensor", image: "torch.Tensor", captions: "torch.Tensor") -> "torch.Tensor":
    """Symmetric InfoNCE with all ``c`` captions of each of the ``b`` photos in the batch.

    Caption -> photo: each of the ``b * c`` captions picks its photo among the ``b``. Photo ->
    caption: each photo's probability mass on its own ``c`` captions among all ``b * c``
    (multi-positive: ``-log sum_own softmax``).
    """
    import torch

    b, c, _ = captions.shape
    logits = scale * captions.reshape(b * c, -1) @ image.T  # (b*c, b)
    owner = torch.arange(b).repeat_interleave(c)
    text_to_image = torch.nn.functional.cross_entropy(logits, owner)
    log_probs = torch.log_softmax(logits.T, dim=1).reshape(b, b, c)  # photo i, captions of photo j
    image_to_text = -torch.logsumexp(log_probs[torch.arange(b), torch.arange(b)], dim=1).mean()
    return (text_to_image + image_to_text) / 2


def folder_training_data(
    root: str | Path, *, device: str | None = None, flips: bool = True, progress: bool = True, batch_size: int = 32
) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """Features ``(n, views, 1280)``, caption embeddings ``(n, c, 384)`` and rows of a captioned folder.

    The folder holds ``captions.jsonl`` (``{"image": "images/x.jpg", "captions": [...]}`` per line),
    as flickr8k-train. Photos with fewer captions than the most common count are skipped.
    """
    import torch
    from tqdm.auto import tqdm

    from pictrieve.tools.models.imagenet_classifier import ImageNetClassifier

    root = Path(root)
    listing = root / "captions.jsonl"
    if not listing.is_file():
        raise HeadFileError(f"{root} has no captions.jsonl; write one line per photo: {{\"image\": ..., \"captions\": [...]}}")
    rows = [json.loads(line) for line in listing.read_text().splitlines() if line.strip()]
    counts = [len(r.get("captions", [])) for r in rows]
    per = max(set(counts), key=counts.count) if counts else 0
    rows = [r for r in rows if len(r.get("captions", [])) >= per > 0]
    if len(rows) < 8:
        raise HeadFileError(f"{root}: only {len(rows)} captioned photos; training a head needs dozens at least")
    model = shared_model(("imagenet-classifier", pick_device(device)), lambda: ImageNetClassifier(device)).model
    chunks = []
    for start in tqdm(range(0, len(rows), batch_size), desc="image features", disable=not progress):
        views = []
        for row in rows[start : start + batch_size]:
            with Image.open(root / row["image"]) as image:
                views.append(torch.stack([squash_pixels(image)] + ([squash_pixels(image, flip=True)] if flips else [])))
        stacked = torch.stack(views)
        chunks.append(pooled_features(model, stacked.flatten(0, 1)).reshape(stacked.shape[0], stacked.shape[1], -1))
    encoder = shared_model(("sentence-encoder",), SentenceEncoder)
    texts = [c for r in rows for c in r["captions"][:per]]
    captions = encoder.encode(texts).reshape(len(rows), per, -1)
    return np.concatenate(chunks), captions, rows
