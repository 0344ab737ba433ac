"""Train the head shipped as ``tools/models/embedders/weights/flickr8k_head.npz`` and measure it on flickr8k-dev.

Features are extracted once and cached outside the repository (``--cache``, default
``$PICTRIEVE_CACHE/offline-features``, made by ``extract_offline_features.py``): EfficientNet-Lite0 pooled features
and ImageNet logits of every flickr8k-train photo (squashed 224x224, and mirrored) and MiniLM
embeddings of every caption. The recipe (``--config``, a name from ``offline_head_sweep.py``) and
the label-bridge weight were chosen there on the ``dev`` split rows of flickr8k-train only. With
``--all-rows`` the head is then trained on every flickr8k-train photo (those rows included) with
the same fixed schedule, keeping the last epoch: nothing is selected on what it trains on.

flickr8k-dev is read only by ``--report-dev``, once per final candidate: every inference
preprocessing (squash / letterbox / centre crop, with and without the mirrored view), the head
alone and the ensemble, and ``offline-labels`` (the previous default) for comparison.

    OMP_NUM_THREADS=1 nice python benchmarks/train_offline_head.py --config e25-all-captions-reg-bs128 --label-weight 0.25 \\
        --all-rows --out tools/models/embedders/weights/flickr8k_head.npz --report-dev
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from offline_head_sweep import BASE, CONFIGS, head_vectors, label_bridge, load, score
from pictrieve.evaluation.head_training import train_head
from pictrieve.tools.core.pypi_assets import cache_root
from pictrieve.tools.models.embedders.base import l2_normalize
from pictrieve.tools.models.embedders.trained import ProjectionHead


def dev_views(cache: Path, mode: str, flips: bool) -> tuple[np.ndarray, np.ndarray]:
    """flickr8k-dev features and logits ``(500, views, ...)`` for one preprocessing."""
    files = [np.load(cache / f"dev-{mode}{suffix}.npz") for suffix in ([""] + (["-flip"] if flips else []))]
    return (np.stack([f["feats"].astype(np.float32) for f in files], axis=1),
            np.stack([f["logits"].astype(np.float32) for f in files], axis=1))


def report_dev(head: ProjectionHead, cache: Path, label_weight: float) -> list[dict]:
    captions = np.load(cache / "dev-captions.npz")["emb"].astype(np.float32)
    rows = []
    _, center_logits = dev_views(cache, "center", False)
    rows.append({"embedder": "offline-labels (previous default)", "preprocessing": "center", "flips": False,
                 **score(label_bridge(center_logits), captions)})
    for mode in ("squash", "letterbox", "center"):
        for flips in (False, True):
            feats, logits = dev_views(cache, mode, flips)
            vectors = head_vectors(head, feats)
            rows.append({"embedder": "head", "preprocessing": mode, "flips": flips, **score(vectors, captions)})
            if label_weight > 0:
                ensemble = l2_normalize(vectors + label_weight * label_bridge(logits))
                rows.append({"embedder": f"head + {label_weight} x labels", "preprocessing": mode, "flips": flips,
                             **score(ensemble, captions)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=cache_root() / "offline-features")
    parser.add_argument("--config", default="e25-all-captions-reg-bs128", choices=list(CONFIGS))
    parser.add_argument("--label-weight", type=float, default=0.25, help="weight of the offline-labels vector")
    parser.add_argument("--all-rows", action="store_true", help="train on every flickr8k-train photo, keep the last epoch")
    parser.add_argument("--head", type=Path, default=None, help="report on this head instead of training one")
    parser.add_argument("--out", type=Path, default=None, help="where to write the head (float16)")
    parser.add_argument("--report-dev", action="store_true", help="measure on flickr8k-dev (final candidates only)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.head:
        head = ProjectionHead.load(args.head)
    else:
        overrides = dict(CONFIGS[args.config])
        flips = overrides.pop("_flips", True)
        config = replace(BASE, seed=args.seed, **overrides, **({"keep_best": False} if args.all_rows else {}))
        feats, _, caps, splits = load(args.cache, flips)
        held = np.flatnonzero(splits == "dev")
        train = np.arange(len(splits)) if args.all_rows else np.flatnonzero(splits != "dev")
        print(f"training {args.config} on {len(train)} photos; held-out rows: {len(held)} (flickr8k-train dev split"
              + (", also trained on)" if args.all_rows else ")"), flush=True)
        head, history = train_head(feats, caps, train, held, config)
        head.meta.update(config=args.config, train_photos=int(len(train)), label_weight=args.label_weight,
                         trained_on="flickr8k-train" + (" (all rows)" if args.all_rows else " (train+none rows)"))
        print(json.dumps(history[-1]), flush=True)
    if args.out:
        head.meta["label_weight"] = args.label_weight
        head.save(args.out, dtype=np.float16)
        head = ProjectionHead.load(args.out)  # report what was shipped (float16)
        print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")
    if args.report_dev:
        for row in report_dev(head, args.cache, args.label_weight):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
