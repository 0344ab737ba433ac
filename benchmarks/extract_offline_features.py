"""Cache what training and measuring the ``offline`` head need, once (about 15 CPU-minutes).

For flickr8k-train (squashed 224x224 already, and mirrored) and flickr8k-dev (squash, letterbox,
centre crop, each also mirrored): EfficientNet-Lite0's pooled features and ImageNet logits, float16,
in 32-photo chunks so an interrupted run resumes; and the MiniLM embeddings of the five captions of
every photo (``{train,dev}-captions.npz``, with flickr8k-train's ``split`` column).

    PICTRIEVE_FLICKR8K_DEV=../shared/datasets/flickr8k-dev \\
        nice python benchmarks/extract_offline_features.py   # into $PICTRIEVE_CACHE/offline-features (--out DIR)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps

from pictrieve.tools.core.pypi_assets import cache_root
from pictrieve.tools.models.embedders.backbone import squash_pixels
from pictrieve.tools.models.imagenet_classifier import load_efficientnet_lite0, preprocess_image


def letterbox_pixels(image: Image.Image) -> torch.Tensor:
    """The whole photo scaled to fit 224x224 on a grey canvas, normalised like the classifier's input."""
    image = image.convert("RGB")
    scale = 224 / max(image.size)
    resized = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))), Image.BICUBIC)
    canvas = Image.new("RGB", (224, 224), (128, 128, 128))
    canvas.paste(resized, ((224 - resized.width) // 2, (224 - resized.height) // 2))
    return squash_pixels(canvas)


MODES = {"squash": squash_pixels, "letterbox": letterbox_pixels, "center": preprocess_image}


def extract(model, out: Path, name: str, root: Path, mode: str, flip: bool) -> None:
    tag = f"{name}-{mode}{'-flip' if flip else ''}"
    if (out / f"{tag}.npz").exists():
        return
    rows = [json.loads(line) for line in (root / "captions.jsonl").read_text().splitlines() if line.strip()]
    feats, logits, start_time = [], [], time.time()
    for start in range(0, len(rows), 32):
        chunk = out / "chunks" / f"{tag}-{start:05d}.npz"
        if not chunk.exists():
            images = [Image.open(root / r["image"]).convert("RGB") for r in rows[start:start + 32]]
            images = [ImageOps.mirror(i) for i in images] if flip else images
            batch = torch.stack([MODES[mode](i) for i in images]).contiguous(memory_format=torch.channels_last)
            with torch.inference_mode():
                maps = model.forward_features(batch)
                f, lg = maps.mean((2, 3)), model.forward_head(maps)
            chunk.parent.mkdir(parents=True, exist_ok=True)
            np.savez(chunk, f=f.numpy().astype(np.float16), l=lg.numpy().astype(np.float16))
        data = np.load(chunk)
        feats.append(data["f"])
        logits.append(data["l"])
    np.savez(out / f"{tag}.npz", feats=np.concatenate(feats), logits=np.concatenate(logits),
             images=np.array([r["image"] for r in rows]))
    print("done", tag, f"{time.time() - start_time:.0f}s", flush=True)


def captions(out: Path, name: str, root: Path) -> None:
    from pictrieve.tools.models.sentence_encoder import SentenceEncoder

    if (out / f"{name}-captions.npz").exists():
        return
    rows = [json.loads(line) for line in (root / "captions.jsonl").read_text().splitlines() if line.strip()]
    assert all(len(r["captions"]) >= 5 for r in rows)
    vectors = SentenceEncoder().encode([c for r in rows for c in r["captions"][:5]], batch_size=128)
    np.savez(out / f"{name}-captions.npz", emb=vectors.reshape(len(rows), 5, -1),
             splits=np.array([r.get("split", "") for r in rows]), images=np.array([r["image"] for r in rows]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=cache_root() / "offline-features")
    parser.add_argument("--train", type=Path, default=Path("../shared/datasets/flickr8k-train"))
    parser.add_argument("--dev", type=Path, default=Path(os.environ.get("PICTRIEVE_FLICKR8K_DEV", "../shared/datasets/flickr8k-dev")))
    parser.add_argument("--dev-modes", nargs="+", choices=list(MODES), default=list(MODES),
                        help="flickr8k-dev preprocessings to cache (squash alone is what the shipped embedder uses)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load_efficientnet_lite0().eval().to(memory_format=torch.channels_last)
    for flip in (False, True):
        extract(model, args.out, "train", args.train, "squash", flip)
        for mode in args.dev_modes:
            extract(model, args.out, "dev", args.dev, mode, flip)
    captions(args.out, "train", args.train)
    captions(args.out, "dev", args.dev)


if __name__ == "__main__":
    main()
