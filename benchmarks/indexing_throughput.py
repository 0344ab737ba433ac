"""Indexing throughput: pictrieve's indexer vs Chroma's own multimodal path vs the model-only bound.

All three arms embed the same image files with the same architecture (open_clip ViT-B-32 with random
weights: the same compute as the real model, no download), on the same machine, in one run:

- ``pictrieve``: ``Gallery.add`` (threaded decode + preprocess beside batched model calls, batch
  commits to an embedded Chroma);
- ``chroma``: a Chroma collection with ``OpenCLIPEmbeddingFunction`` and ``ImageLoader``, fed
  ``uris`` in batches of the same size (Chroma's documented multimodal path);
- ``model-only``: ``encode_image`` on tensors decoded and preprocessed beforehand, at the best batch
  size: an upper bound for any indexer on this model and machine.

Run:  python benchmarks/indexing_throughput.py ../shared/datasets/flickr8k-dev/images --json
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import numpy as np

ARCH = "ViT-B-32"


def pictrieve_arm(paths: list[Path], batch_size: int, workers: int) -> float:
    from pictrieve.vectorstore.gallery import Gallery

    with tempfile.TemporaryDirectory() as scratch:
        gallery = Gallery.open(scratch, f"open_clip:{ARCH}/random")
        gallery.embedder  # load the model outside the timed region, as the other arms do
        start = time.perf_counter()
        report = gallery.add(paths, batch_size=batch_size, workers=workers, progress=False)
        elapsed = time.perf_counter() - start
        assert report.indexed == len(paths), report
    return len(paths) / elapsed


def chroma_arm(paths: list[Path], batch_size: int) -> float:
    import chromadb
    from chromadb.config import Settings
    from chromadb.utils.data_loaders import ImageLoader
    from chromadb.utils.embedding_functions import OpenCLIPEmbeddingFunction

    function = OpenCLIPEmbeddingFunction(model_name=ARCH, checkpoint=None, device="cpu")
    with tempfile.TemporaryDirectory() as scratch:
        client = chromadb.PersistentClient(scratch, settings=Settings(anonymized_telemetry=False))
        collection = client.create_collection(
            "bench", embedding_function=function, data_loader=ImageLoader(),
            configuration={"hnsw": {"space": "cosine"}},
        )
        start = time.perf_counter()
        for i in range(0, len(paths), batch_size):
            chunk = paths[i : i + batch_size]
            collection.add(ids=[str(i + j) for j in range(len(chunk))], uris=[str(p) for p in chunk])
        elapsed = time.perf_counter() - start
        assert collection.count() == len(paths)
    return len(paths) / elapsed


def model_only_arm(paths: list[Path], batch_sizes: list[int]) -> tuple[float, int]:
    import open_clip
    import torch
    from PIL import Image

    model, _, preprocess = open_clip.create_model_and_transforms(ARCH, pretrained=None)
    model.eval()
    tensors = torch.stack([preprocess(Image.open(p).convert("RGB")) for p in paths])
    best = (0.0, 0)
    for batch_size in batch_sizes:
        with torch.inference_mode():
            model.encode_image(tensors[:batch_size])  # warm-up
            start = time.perf_counter()
            for i in range(0, len(tensors), batch_size):
                model.encode_image(tensors[i : i + batch_size])
            rate = len(tensors) / (time.perf_counter() - start)
        logging.info("model-only batch %d: %.1f images/s", batch_size, rate)
        best = max(best, (rate, batch_size))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("images", type=Path, help="folder of images (e.g. flickr8k-dev/images)")
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--arms", default="pictrieve,chroma,model-only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("pictrieve").setLevel(logging.ERROR)

    import torch

    paths = sorted(args.images.glob("*.jpg"))[: args.limit]
    arms = args.arms.split(",")
    results: dict[str, float | int | str] = {
        "images": len(paths), "arch": ARCH, "batch_size": args.batch_size,
        "torch_threads": torch.get_num_threads(),
    }
    if "model-only" in arms:
        rate, batch = model_only_arm(paths, [16, 32, 64, 128])
        results.update({"model_only_images_per_s": round(rate, 2), "model_only_best_batch": batch})
    if "pictrieve" in arms:
        results["pictrieve_images_per_s"] = round(pictrieve_arm(paths, args.batch_size, args.workers), 2)
    if "chroma" in arms:
        results["chroma_images_per_s"] = round(chroma_arm(paths, args.batch_size), 2)
    if "pictrieve_images_per_s" in results and "chroma_images_per_s" in results:
        results["speedup_vs_chroma"] = round(
            float(results["pictrieve_images_per_s"]) / float(results["chroma_images_per_s"]), 2
        )
    if "pictrieve_images_per_s" in results and "model_only_images_per_s" in results:
        results["fraction_of_model_bound"] = round(
            float(results["pictrieve_images_per_s"]) / float(results["model_only_images_per_s"]), 3
        )
    print(json.dumps(results, indent=2) if args.json else results)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
