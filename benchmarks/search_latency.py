"""Search latency and HNSW recall on galleries of 10k, 100k and 1M stored 512-d vectors.

Vectors are synthetic but structured like image embeddings: unit vectors scattered around 2,000
cluster centres (noise norm about 0.6). Uniformly random high-dimensional vectors would be an
unrealistically hard case for any approximate index. For every size we report, over the same queries:

- p50/p95 of encoding the query text alone (the open_clip ViT-B-32 text tower, random weights, same
  compute as the real one, whose output is 512-d);
- p50/p95 of ``Gallery.search_vector`` (the store's query alone, text encoding excluded);
- p50/p95 of ``Gallery.search_text`` (text encoding included);
- p50/p95 of exact search with numpy (one matrix-vector product + argpartition over all vectors);
- recall@10 of the HNSW top 10 against the exact top 10.

The store is an embedded (folder) gallery; with ``--server URL`` or ``--server-data DIR`` (a ``chroma
run`` started on that folder and stopped at the end) the same vectors are stored in a server gallery
too, and every query goes to both in turn, so the two columns share the machine's load.

Run:  python benchmarks/search_latency.py --sizes 10000,100000,1000000 --json
      python benchmarks/search_latency.py --sizes 100000 --store DIR --server-data DIR2 --json
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from contextlib import ExitStack
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
    dim = centres.shape[1]  # DIM here; the model's own dimension in gpu_indexing.py
    picks = rng.integers(0, len(centres), size=n)
    vectors = centres[picks] + rng.normal(scale=0.6 / np.sqrt(dim), size=(n, dim)).astype(np.float32)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2)}


def run_size(n: int, queries: int, ef_search: int | None, text_embedder, centres, store: Path | None,
             server: str | None = None) -> dict:
    """Store ``n`` vectors (in ``store``, else a temporary folder; and on ``server`` when given) and
    measure every gallery over the same queries."""
    vectors = synthetic_vectors(n, np.random.default_rng(n), centres)
    with ExitStack() as stack:
        folder = store / f"synthetic-{n}" if store else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        galleries = {"embedded": build(folder, vectors, ef_search, text_embedder)}
        if server:
            galleries["http"] = build(server, vectors, ef_search, text_embedder, name=f"{SyntheticEmbedder.name}-{n}")
        return measure(galleries, vectors, queries, centres, text_embedder)


def build(location: Path | str, vectors: np.ndarray, ef_search: int | None, text_embedder,
          name: str = SyntheticEmbedder.name) -> tuple:
    """Store ``vectors`` in a gallery at ``location`` (a folder or a server URL; on a server, one
    collection per ``name``); resumes (or reuses) a partly built store. The gallery and its build time."""
    from pictrieve.vectorstore.gallery import Gallery, chroma_collection

    hnsw = {"ef_search": ef_search} if ef_search else None
    gallery = Gallery.open(location, SyntheticEmbedder(text_embedder, name=name), hnsw=hnsw)
    n, step = len(vectors), 5000
    start = time.perf_counter()
    for i in range(gallery.count(), n, step):
        chroma_collection(gallery).add(
            ids=[f"v{j}" for j in range(i, min(n, i + step))],
            embeddings=vectors[i : i + step],
            metadatas=[{"path": f"/synthetic/{j}.jpg"} for j in range(i, min(n, i + step))],
        )
    build_s = time.perf_counter() - start
    logging.info("%d vectors stored in %s (%.0f s)", n, location, build_s)
    return gallery, build_s


def measure(galleries: dict[str, tuple], vectors: np.ndarray, queries: int, centres, text_embedder) -> dict:
    """Every query to every gallery in turn (``galleries``: name -> (gallery, build seconds))."""
    query_vectors = synthetic_vectors(queries, np.random.default_rng(len(vectors) + 1), centres)
    for gallery, _ in galleries.values():
        gallery.search_vector(query_vectors[0], k=10)  # warm-up
    exact_times: list[float] = []
    hnsw_times: dict[str, list[float]] = {name: [] for name in galleries}
    recalls: dict[str, list[float]] = {name: [] for name in galleries}
    for q in query_vectors:
        t0 = time.perf_counter()
        top = np.argpartition(-(vectors @ q), 10)[:10]
        exact_times.append(time.perf_counter() - t0)
        for name, (gallery, _) in galleries.items():
            t0 = time.perf_counter()
            hits = gallery.search_vector(q, k=10)
            hnsw_times[name].append(time.perf_counter() - t0)
            recalls[name].append(len({f"v{j}" for j in top} & {h.id for h in hits}) / 10)
    encode_times: list[float] = []
    text_times: dict[str, list[float]] = {name: [] for name in galleries}
    for i in range(min(queries, 50)):
        text = f"a photo of scene number {i} with a dog"
        t0 = time.perf_counter()
        text_embedder.embed_texts([text])
        encode_times.append(time.perf_counter() - t0)
        for name, (gallery, _) in galleries.items():
            t0 = time.perf_counter()
            gallery.search_text(text, k=10)
            text_times[name].append(time.perf_counter() - t0)
    return {
        "vectors": len(vectors),
        "text_encoding_alone": percentiles(encode_times),
        "exact_numpy": percentiles(exact_times),
        **{name: {"search_excluding_text": percentiles(hnsw_times[name]),
                  "search_including_text": percentiles(text_times[name]),
                  "recall@10_vs_exact": round(float(np.mean(recalls[name])), 4),
                  "build_s": round(build_s, 1)}
           for name, (_, build_s) in galleries.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef-search", type=int, default=None, help="HNSW ef_search (default: Chroma's)")
    parser.add_argument("--store", type=Path, default=None,
                        help="keep the built galleries here and reuse them on the next run")
    server = parser.add_mutually_exclusive_group()
    server.add_argument("--server", help="also store and search the vectors on this Chroma server (http://HOST:PORT)")
    server.add_argument("--server-data", type=Path,
                        help="start `chroma run` on this folder (kept between runs) and use it as --server")
    parser.add_argument("--build-only", action="store_true", help="build the stores, measure nothing")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("pictrieve").setLevel(logging.ERROR)
    logging.getLogger("httpx").setLevel(logging.WARNING)

    from pictrieve.tools.models.embedders.factory import create_embedder

    centres = np.random.default_rng(0).normal(size=(2000, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    with tempfile.TemporaryDirectory(prefix="search-latency-") as scratch, ExitStack() as stack:
        server = args.server
        if args.server_data:
            from loopback_servers import start_chroma

            started = start_chroma(args.server_data, Path(scratch))
            stack.callback(started.stop)
            server = started.url
        if args.build_only:
            if args.store is None:
                parser.error("--build-only needs --store")
            for n in args.sizes.split(","):
                vectors = synthetic_vectors(int(n), np.random.default_rng(int(n)), centres)
                build(args.store / f"synthetic-{n}", vectors, args.ef_search, None)
                if server:
                    build(server, vectors, args.ef_search, None, name=f"{SyntheticEmbedder.name}-{n}")
            return
        text_embedder = create_embedder("open_clip:ViT-B-32/random")
        results = [
            run_size(int(n), args.queries, args.ef_search, text_embedder, centres, args.store, server)
            for n in args.sizes.split(",")
        ]
    print(json.dumps(results, indent=2) if args.json else results)


if __name__ == "__main__":
    main()
