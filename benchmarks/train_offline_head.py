"""Train the head shipped as ``tools/embedders/weights/flickr8k_head.npz`` and measure it on flickr8k-dev.

Features are extracted once and cached outside the repository (``--cache``, default
/work/cache-offline): EfficientNet-Lite0 pooled features of every flickr8k-train photo (squashed
224x224, and mirrored) and MiniLM embeddings of every caption. Model selection (early stopping)
uses only the ``dev`` split rows of flickr8k-train; flickr8k-dev is read once at the end to report.

    python benchmarks/train_offline_head.py --cache /work/cache-offline --out tools/embedders/weights/flickr8k_head.npz
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

import numpy as np

from pictrieve.evaluation.retrieval import retrieval_metrics
from pictrieve.tools.embedders.base import l2_normalize
from pictrieve.tools.embedders.trained import HeadTraining, train_head, ProjectionHead


def load_views(cache: Path, name: str, mode: str, n: int) -> np.ndarray | None:
    """``(rows, views, 1280)`` from the full file or as many 32-photo chunks as exist."""
    views = []
    for tag in (f"{name}-{mode}", f"{name}-{mode}-flip"):
        full = cache / f"{tag}.npz"
        if full.exists():
            views.append(np.load(full)["feats"].astype(np.float32))
            continue
        chunks = sorted(glob.glob(str(cache / "chunks" / f"{tag}-*.npz")))
        if chunks:
            views.append(np.concatenate([np.load(c)["f"] for c in chunks]).astype(np.float32))
    if not views:
        return None
    rows = min(len(v) for v in views)
    return np.stack([v[:rows] for v in views], axis=1)[: min(rows, n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path("/work/cache-offline"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=HeadTraining.epochs)
    args = parser.parse_args()
    train_caps = np.load(args.cache / "train-captions.npz")
    feats = load_views(args.cache, "train", "squash", len(train_caps["emb"]))
    caps = train_caps["emb"][: len(feats)]
    splits = train_caps["splits"][: len(feats)]
    train_rows = np.flatnonzero(splits != "dev")
    held_rows = np.flatnonzero(splits == "dev")
    print(f"training on {len(train_rows)} photos, selecting on {len(held_rows)} (flickr8k-train dev split)")
    head, history = train_head(feats, caps, train_rows, held_rows, HeadTraining(epochs=args.epochs))
    head.meta["train_photos"] = int(len(train_rows))
    head.save(args.out)
    print(json.dumps(history[-1]), "best held-out", head.meta["held_out_recall@10"])
    dev_caps = np.load(args.cache / "dev-captions.npz")["emb"]
    queries = dev_caps.reshape(-1, dev_caps.shape[-1])
    targets = np.repeat(np.arange(len(dev_caps)), dev_caps.shape[1])
    for mode in ("squash", "center", "letterbox"):
        dev = load_views(args.cache, "dev", mode, len(dev_caps))
        if dev is None or len(dev) < len(dev_caps):
            print(f"flickr8k-dev {mode}: features not extracted")
            continue
        for flips in ((False, True) if dev.shape[1] > 1 else (False,)):
            used = dev if flips else dev[:, :1]
            vectors = l2_normalize(head(used.reshape(-1, used.shape[-1])).reshape(len(dev), used.shape[1], -1).mean(1))
            metrics = retrieval_metrics(queries @ vectors.T, targets)
            print(f"flickr8k-dev {mode} flips={flips}: " + json.dumps({k: round(v, 4) for k, v in metrics.items()}))


if __name__ == "__main__":
    main()
