"""Model selection for the trained offline head, on flickr8k-train's own ``dev`` split only.

Every configuration is trained on the other rows of flickr8k-train (5,328 photos: `train` and `none`) from cached
features (see ``train_offline_head.py`` for the cache) and scored on the 887 ``dev`` rows of
flickr8k-train (4,435 caption queries among those 887 photos). flickr8k-dev is never read here.

Also scores the ensemble with ``offline-labels`` (today's label bridge: the ImageNet class mixture
computed from the same squashed photo's logits) at several weights, so the weight is chosen on the
same held-out rows.

    nice python benchmarks/offline_head_sweep.py --out sweep.jsonl [NAME ...]

Each result is one JSON line (configuration, epochs run, held-out metrics); rerunning skips the
configurations already in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from pictrieve.evaluation.head_training import HeadTraining, train_head
from pictrieve.evaluation.retrieval import retrieval_metrics
from pictrieve.tools.core.pypi_assets import cache_root
from pictrieve.tools.models.embedders.base import l2_normalize
from pictrieve.tools.models.embedders.trained import ProjectionHead

BASE = HeadTraining(epochs=60, dropout=0.2, feature_noise=0.1, all_captions=False)  # the defaults before this sweep
CONFIGS: dict[str, dict] = {
    # the defaults of HeadTraining before this sweep: 60-epoch one-cycle schedule, stopped early
    "base": {"patience": 8},
    # a schedule that ends (the learning rate anneals) near where "base" peaked
    "e15": {"epochs": 15, "patience": 99},
    "e15-all-captions": {"epochs": 15, "patience": 99, "all_captions": True},
    "e15-all-captions-no-flip": {"epochs": 15, "patience": 99, "all_captions": True, "_flips": False},
    "e15-all-captions-reg": {"epochs": 15, "patience": 99, "all_captions": True, "dropout": 0.4, "feature_noise": 0.3},
    "e15-all-captions-reg2": {"epochs": 15, "patience": 99, "all_captions": True, "dropout": 0.5, "feature_noise": 0.6},
    "e15-all-captions-reg-no-flip": {"epochs": 15, "patience": 99, "all_captions": True, "dropout": 0.4, "feature_noise": 0.3,
                                     "_flips": False},
    "e15-reg": {"epochs": 15, "patience": 99, "dropout": 0.4, "feature_noise": 0.3},
    "e15-all-captions-drop0.4": {"epochs": 15, "patience": 99, "all_captions": True, "dropout": 0.4},
    "e15-all-captions-noise0.3": {"epochs": 15, "patience": 99, "all_captions": True, "feature_noise": 0.3},
    "e15-all-captions-reg-h2048": {"epochs": 15, "patience": 99, "all_captions": True, "dropout": 0.4,
                                   "feature_noise": 0.3, "hidden": 2048},
    "e25-all-captions-reg": {"epochs": 25, "patience": 99, "all_captions": True, "dropout": 0.4, "feature_noise": 0.3},
    "e15-all-captions-reg-bs128": {"epochs": 15, "patience": 99, "all_captions": True, "dropout": 0.4,
                                   "feature_noise": 0.3, "batch_size": 128},
    "e25-all-captions-reg-bs128": {"epochs": 25, "patience": 99, "all_captions": True, "dropout": 0.4,
                                   "feature_noise": 0.3, "batch_size": 128},
    "e15-all-captions-wd0.2": {"epochs": 15, "patience": 99, "all_captions": True, "weight_decay": 0.2},
    "e15-all-captions-h2048": {"epochs": 15, "patience": 99, "all_captions": True, "hidden": 2048},
    "e10-all-captions": {"epochs": 10, "patience": 99, "all_captions": True},
    "e25-all-captions": {"epochs": 25, "patience": 99, "all_captions": True},
}


def load(cache: Path, flips: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Features ``(n, views, 1280)``, logits ``(n, views, 1000)``, captions ``(n, 5, 384)``, splits."""
    caps = np.load(cache / "train-captions.npz")
    tags = ["train-squash"] + (["train-squash-flip"] if flips else [])
    files = [np.load(cache / f"{t}.npz") for t in tags]
    feats = np.stack([f["feats"].astype(np.float32) for f in files], axis=1)
    logits = np.stack([f["logits"].astype(np.float32) for f in files], axis=1)
    return feats, logits, caps["emb"].astype(np.float32), caps["splits"]


def label_bridge(logits: np.ndarray) -> np.ndarray:
    """``offline-labels``' image vectors from ImageNet logits ``(n, views, 1000)`` (views averaged)."""
    from pictrieve.tools.models.embedders.offline import OfflineEmbedder

    bridge = OfflineEmbedder("", device="cpu")
    z = logits / bridge.recipe.temperature
    probs = np.exp(z - z.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    per_view = bridge._class_mixture(probs.reshape(-1, probs.shape[-1]))
    return l2_normalize(per_view.reshape(len(logits), logits.shape[1], -1).mean(1))


def score(image_vectors: np.ndarray, captions: np.ndarray) -> dict[str, float]:
    n, per = captions.shape[:2]
    metrics = retrieval_metrics(captions.reshape(n * per, -1) @ image_vectors.T, np.repeat(np.arange(n), per))
    return {k: round(float(v), 4) for k, v in metrics.items() if k != "queries"}


def head_vectors(head: ProjectionHead, feats: np.ndarray) -> np.ndarray:
    return l2_normalize(head(feats.reshape(-1, feats.shape[-1])).reshape(len(feats), feats.shape[1], -1).mean(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"configurations to run (default: all): {', '.join(CONFIGS)}")
    parser.add_argument("--cache", type=Path, default=cache_root() / "offline-features")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-heads", type=Path, default=None, help="folder to keep each trained head in")
    args = parser.parse_args()
    done = set()
    if args.out.exists():
        done = {json.loads(line)["name"] for line in args.out.read_text().splitlines() if line.strip()}
    for name in args.names or list(CONFIGS):
        tag = f"{name}@seed{args.seed}"
        if tag in done:
            continue
        overrides = dict(CONFIGS[name])
        flips = overrides.pop("_flips", True)
        config = replace(BASE, seed=args.seed, **overrides)
        feats, logits, caps, splits = load(args.cache, flips)
        train_rows, held_rows = np.flatnonzero(splits != "dev"), np.flatnonzero(splits == "dev")
        start = time.time()
        head, history = train_head(feats, caps, train_rows, held_rows, config, progress=False)
        seconds = time.time() - start
        vectors = head_vectors(head, feats[held_rows])
        result = {"name": tag, "config": config.__dict__, "flips": flips, "epochs_run": len(history),
                  "best_epoch": int(np.argmax([h["held_out_recall@10"] for h in history]) + 1),
                  "seconds": round(seconds, 1), "train_dev": score(vectors, caps[held_rows])}
        bridge = label_bridge(logits[held_rows])
        result["labels_only"] = score(bridge, caps[held_rows])
        result["ensemble"] = {str(w): score(l2_normalize(vectors + w * bridge), caps[held_rows]) for w in (0.25, 0.5, 0.75, 1.0, 1.5)}
        if args.save_heads:
            head.save(args.save_heads / f"{tag}.npz")
        with args.out.open("a") as handle:
            handle.write(json.dumps(result) + "\n")
        print(tag, result["train_dev"], {w: m["recall@10"] for w, m in result["ensemble"].items()}, f"{seconds:.0f}s", flush=True)


if __name__ == "__main__":
    main()
