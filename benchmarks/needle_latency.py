"""Latency of NEEDLE and VisRet after the guide pictures exist, on synthetic galleries.

What is timed is everything between "the guides are embedded" and "the ranked images are known":

- NEEDLE: 4 guides x 3 embedders (1280-d like efficientnet-lite0, two 384-d like offline and
  offline:detect). Per embedder one batched query of the image collection and one of its tiles
  collection (5 tiles per image, whole image included, as `pictrieve tile` stores them), best tile
  per image, then the trust-weighted reciprocal-rank fusion (Eq. 4) and the hits' metadata.
- VisRet: 3 guides through the 1280-d embedder, `Gallery.search_vector` each (full hits), reciprocal
  rank fusion.
- The exemplar visualizer (optional, ``--reference DIR``): choosing 4 photos for a prompt among a real
  captioned folder's captions (MiniLM text encoding included), caption vectors already cached.

Vectors are synthetic but clustered like image embeddings (see ``search_latency.py``); tiles of an
image lie near their image. Build once, then measure (the build is long at 100k images):

    python benchmarks/needle_latency.py --images 100000 --store STORE --build-only
    python benchmarks/needle_latency.py --images 100000 --store STORE --reference DIR --json
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

EMBEDDERS = {"bench:effnet-1280": 1280, "bench:labels-384": 384, "bench:detect-384": 384}
TILES_PER_IMAGE = 5  # whole image + 4 parts on average (flickr8k photos: 6.6 with the default settings)


@dataclass
class SyntheticEmbedder:
    """A name and a dimension: vectors are written directly."""

    name: str
    dim: int


def clustered(n: int, dim: int, rng: np.random.Generator, centres: np.ndarray, noise: float = 0.6) -> np.ndarray:
    picks = rng.integers(0, len(centres), size=n)
    vectors = centres[picks] + rng.normal(scale=noise / np.sqrt(dim), size=(n, dim)).astype(np.float32)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def build(store: Path, images: int, seed: int = 0, batch: int = 5000) -> None:
    from tqdm.auto import tqdm

    from pictrieve.vectorstore.gallery import Gallery, chroma_collection
    from pictrieve.vectorstore.tiles import TileIndex

    rng = np.random.default_rng(seed)
    ids = [f"img{i:07d}" for i in range(images)]
    for name, dim in EMBEDDERS.items():
        view = Gallery.open(store, SyntheticEmbedder(name, dim))
        centres = rng.normal(size=(2000, dim)).astype(np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        collection = chroma_collection(view)
        tiles = TileIndex(view).collection(create=True)
        for start in tqdm(range(0, images, batch), desc=f"{name} images+tiles"):
            chunk = ids[start : start + batch]
            whole = clustered(len(chunk), dim, rng, centres)
            collection.upsert(ids=chunk, embeddings=whole,
                              metadatas=[{"path": f"/photos/{i}.jpg"} for i in chunk])
            parts = whole.repeat(TILES_PER_IMAGE - 1, axis=0) + rng.normal(
                scale=0.8 / np.sqrt(dim), size=(len(chunk) * (TILES_PER_IMAGE - 1), dim)).astype(np.float32)
            parts /= np.linalg.norm(parts, axis=1, keepdims=True)
            tile_ids = [f"{i}#{n}" for i in chunk for n in range(1, TILES_PER_IMAGE)] + [f"{i}#0" for i in chunk]
            vectors = np.concatenate([parts, whole])
            meta = [{"parent": i, "tile": n} for i in chunk for n in range(1, TILES_PER_IMAGE)] + [
                {"parent": i, "tile": 0} for i in chunk]
            for s in range(0, len(tile_ids), batch):
                tiles.upsert(ids=tile_ids[s : s + batch], embeddings=vectors[s : s + batch], metadatas=meta[s : s + batch])


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2)}


def measure(store: Path, queries: int, seed: int, reference: str | None) -> dict[str, object]:
    from pictrieve.agents.needle.search import fuse, guide_rankings
    from pictrieve.agents.needle.nodes import fused_hits
    from pictrieve.vectorstore.fusion import fuse_hits
    from pictrieve.vectorstore.gallery import Gallery

    rng = np.random.default_rng(seed + 1)
    views = {name: Gallery.open(store, SyntheticEmbedder(name, dim)) for name, dim in EMBEDDERS.items()}
    first = next(iter(views.values()))
    report: dict[str, object] = {"images": first.count(), "tiles_per_image": TILES_PER_IMAGE}
    stored = {name: view.embeddings(first.ids()[:2000]) for name, view in views.items()} if queries else {}
    weights = {name: 1 / len(views) for name in views}
    needle, needle_rank, needle_fuse, visret = [], [], [], []
    for _ in range(queries + 3):  # the first 3 warm up
        picks = rng.integers(0, 2000, size=4)
        guides = {name: vectors[picks] for name, vectors in stored.items()}
        started = time.perf_counter()
        rankings = guide_rankings(views, guides, depth=40, tiles=True)
        ranked = time.perf_counter()
        fused_hits(first, fuse(rankings, weights, 10))
        done = time.perf_counter()
        needle.append(done - started)
        needle_rank.append(ranked - started)
        needle_fuse.append(done - ranked)
        effnet = views["bench:effnet-1280"]
        started = time.perf_counter()
        fuse_hits([effnet.search_vector(v, k=100) for v in guides["bench:effnet-1280"][:3]], k=10, rrf_k=1.0)
        visret.append(time.perf_counter() - started)
    report["needle_4x3_tiles"] = percentiles(needle[3:])
    report["needle_knn_part"] = percentiles(needle_rank[3:])
    report["needle_fusion_and_hits_part"] = percentiles(needle_fuse[3:])
    report["visret_3_guides"] = percentiles(visret[3:])
    if reference:
        from pictrieve.tools.models.visualizers import create_visualizer

        visualizer = create_visualizer(f"exemplar:{reference}")
        prompts = ["a dog runs on the beach", "two children play in the snow", "a man rides a bike up a hill",
                   "a girl in a red dress", "people sit at a cafe"]
        timings = []
        for n in range(queries + 3):
            started = time.perf_counter()
            visualizer.source_paths(f"{prompts[n % len(prompts)]} {n}", 4)
            timings.append(time.perf_counter() - started)
        report["exemplar_4_photos"] = percentiles(timings[3:]) | {"captions": int(len(visualizer.caption_vectors))}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=100_000)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference", default=None, help="A captioned folder for the exemplar timing.")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not args.store.exists():
        build(args.store, args.images, args.seed)
    if args.build_only:
        return
    report = measure(args.store, args.queries, args.seed, args.reference)
    print(json.dumps(report, indent=2) if args.json else report)


if __name__ == "__main__":
    main()
