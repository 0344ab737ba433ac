"""Search latency and HNSW recall on galleries of 10k, 100k and 1M stored 512-d vectors.

Vectors are synthetic but structured like image embeddings: unit vectors scattered around 2,000
cluster centres (noise norm about 0.6). Uniformly random high-dimensional vectors would be an
unrealistically hard case for any approximate index. For every size we report, over the same queries:

- p50/p95 of ``Gallery.search_vector`` (text encoding excluded);
- p50/p95 of ``Gallery.search_text`` (text encoding included: the open_clip ViT-B-32 text tower,
  random weights, same compute as the real one, whose output is 512-d);
- p50/p95 of exact search with numpy (one matrix-vector product + argpartition over all vectors);
- recall@10 of the HNSW top 10 against the exact top 10.

Run:  python benchmarks/search_latency.py --sizes 10000,100000,1000000 --json
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DIM = 512


@dataclass
class SyntheticEmbedder:
    """Only a name and a dimension: vectors are written directly, queries come as vectors or text."""

    text_embedder: object | None = None
    name: str = "benchmark:synthetic-512"
    dim: int = DIM

    def embed_texts(self, texts):
        return self.text_embedder.embed_texts(texts)


def synthetic_vectors(n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    picks = rng.integers(0, len(centres), size=n)
    vectors = centres[picks] + rng.normal(scale=0.6 / np.sqrt(DIM), size=(n, DIM)).astype(np.float32)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2)}


def run_size(n: int, queries: int, ef_search: int | None, text_embedder, centres, store: Path | None) -> dict:
    vectors = synthetic_vectors(n, np.random.default_rng(n), centres)
    if store is None:
        with tempfile.TemporaryDirectory() as scratch:
            gallery, build_s = build(Path(scratch), vectors, ef_search, text_embedder)
            return measure(gallery, vectors, queries, centres) | {"build_s": round(build_s, 1)}
    gallery, build_s = build(store / f"synthetic-{n}", vectors, ef_search, text_embedder)
    return measure(gallery, vectors, queries, centres) | {"build_s": round(build_s, 1)}


def build(location: Path, vectors: np.ndarray, ef_search: int | None, text_embedder):
    """Store ``vectors`` in a gallery at ``location``; resumes (or reuses) a partly built store."""
    from pictrieve.vectorstore.gallery import Gallery

    hnsw = {"ef_search": ef_search} if ef_search else None
    gallery = Gallery.open(location, SyntheticEmbedder(text_embedder), hnsw=hnsw)
    n, step = len(vectors), 5000
    start = time.perf_counter()
    for i in range(gallery.count(), n, step):
        gallery.collection.add(
            ids=[f"v{j}" for j in range(i, min(n, i + step))],
            embeddings=vectors[i : i + step],
            metadatas=[{"path": f"/synthetic/{j}.jpg"} for j in range(i, min(n, i + step))],
        )
    build_s = time.perf_counter() - start
    logging.info("%d vectors stored in %s (%.0f s)", n, location, build_s)
    return gallery, build_s


def measure(gallery, vectors: np.ndarray, queries: int, centres) -> dict:
    query_vectors = synthetic_vectors(queries, np.random.default_rng(len(vectors) + 1), centres)
    gallery.search_vector(query_vectors[0], k=10)  # warm-up
    hnsw_times, exact_times, recalls = [], [], []
    for q in query_vectors:
        t0 = time.perf_counter()
        hits = gallery.search_vector(q, k=10)
        hnsw_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        top = np.argpartition(-(vectors @ q), 10)[:10]
        exact_times.append(time.perf_counter() - t0)
        recalls.append(len({f"v{j}" for j in top} & {h.id for h in hits}) / 10)
    text_times = []
    for i in range(min(queries, 50)):
        t0 = time.perf_counter()
        gallery.search_text(f"a photo of scene number {i} with a dog", k=10)
        text_times.append(time.perf_counter() - t0)
    return {
        "vectors": len(vectors),
        "search_excluding_text": percentiles(hnsw_times),
        "search_including_text": percentiles(text_times),
        "exact_numpy": percentiles(exact_times),
        "recall@10_vs_exact": round(float(np.mean(recalls)), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef-search", type=int, default=None, help="HNSW ef_search (default: Chroma's)")
    parser.add_argument("--store", type=Path, default=None,
                        help="keep the built galleries here and reuse them on the next run")
    parser.add_argument("--build-only", action="store_true", help="build the stores, measure nothing")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("pictrieve").setLevel(logging.ERROR)

    from pictrieve.tools.models.embedders.factory import create_embedder

    centres = np.random.default_rng(0).normal(size=(2000, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    if args.build_only:
        if args.store is None:
            parser.error("--build-only needs --store")
        for n in args.sizes.split(","):
            vectors = synthetic_vectors(int(n), np.random.default_rng(int(n)), centres)
            build(args.store / f"synthetic-{n}", vectors, args.ef_search, None)
        return
    text_embedder = create_embedder("open_clip:ViT-B-32/random")
    results = [
        run_size(int(n), args.queries, args.ef_search, text_embedder, centres, args.store)
        for n in args.sizes.split(",")
    ]
    print(json.dumps(results, indent=2) if args.json else results)


if __name__ == "__main__":
    main()
