"""Caption-to-image retrieval quality and image throughput of embedders on a flickr8k-style folder.

Every caption is a query whose single target is its own image; ranks are tie-aware expected ranks
(:mod:`pictrieve.evaluation.retrieval`) from exact dot products of unit vectors.

    python benchmarks/offline_embedder_quality.py ../shared/datasets/flickr8k-dev offline offline-labels offline-labels:detect

Prints one Markdown table row per embedder name (any name ``create_embedder`` accepts).
Images/s counts embedding already-decoded images (preprocess + models, batch 32) in wall-clock time;
images per CPU-second divides by the process's CPU time instead, which is what to compare on a
shared machine (wall-clock speed then depends on the other jobs).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
from PIL import Image

from pictrieve.evaluation.retrieval import retrieval_metrics
from pictrieve.tools.models.embedders.factory import create_embedder


def load_dataset(folder: Path, limit: int | None = None) -> tuple[list[Image.Image], list[str], np.ndarray]:
    """Images, captions and each caption's image index from ``captions.jsonl``."""
    records = [json.loads(line) for line in (folder / "captions.jsonl").read_text().splitlines() if line.strip()]
    records = records[:limit] if limit else records
    images = [Image.open(folder / r["image"]).convert("RGB") for r in records]
    captions = [c for r in records for c in r["captions"]]
    targets = np.array([i for i, r in enumerate(records) for _ in r["captions"]])
    return images, captions, targets


def evaluate(name: str, images, captions, targets, device: str | None = None) -> dict[str, float]:
    embedder = create_embedder(name, device=device)
    embedder.embed_images(images[:2])  # warm-up (lazy initialisation, kernels)
    start, cpu_start = time.perf_counter(), time.process_time()
    image_vectors = embedder.embed_images(images)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    text_vectors = embedder.embed_texts(captions)
    metrics = retrieval_metrics(text_vectors @ image_vectors.T, targets)
    metrics["images_per_s"] = len(images) / seconds
    metrics["images_per_cpu_s"] = len(images) / cpu_seconds
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="folder with captions.jsonl and the images")
    parser.add_argument("embedders", nargs="+", help="embedder names, e.g. offline offline-labels")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N images")
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    images, captions, targets = load_dataset(args.dataset, args.limit)
    print(f"{len(images)} images, {len(captions)} caption queries")
    print("| embedder | R@1 | R@5 | R@10 | median rank | images/s | images/CPU-s |")
    print("|---|---|---|---|---|---|---|")
    for name in args.embedders:
        m = evaluate(name, images, captions, targets, args.device)
        print(
            f"| `{name}` | {m['recall@1']:.3f} | {m['recall@5']:.3f} | {m['recall@10']:.3f} "
            f"| {m['median_rank']:.1f} | {m['images_per_s']:.1f} | {m['images_per_cpu_s']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
