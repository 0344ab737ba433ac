"""Whether Chroma builds the same approximate (HNSW) index twice from the same vectors written the same way.

The sameness check (`benchmarks/renovation_check.py`) saw one of VisRet's 200 ranked lists differ between two runs of
one commit. This builds a collection from fixed random vectors (batches of 256, as a gallery writes), four times per
configuration, and counts the queries whose top 10 differ from the first build's. A non-zero count means the index,
not pictrieve, varies from run to run.

    python benchmarks/hnsw_build_determinism.py [--rows 3000] [--dim 64] [--queries 100]
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np


def build_and_query(vectors: np.ndarray, queries: np.ndarray, hnsw: dict, batch: int = 256) -> list[tuple[str, ...]]:
    """The top-10 ids of each query in a fresh persistent collection built from ``vectors`` with ``hnsw``."""
    import chromadb

    with tempfile.TemporaryDirectory() as folder:
        collection = chromadb.PersistentClient(path=folder).create_collection("determinism",
                                                                              configuration={"hnsw": hnsw})
        for start in range(0, len(vectors), batch):
            part = vectors[start:start + batch]
            collection.add(ids=[str(i) for i in range(start, start + len(part))], embeddings=part)
        found = collection.query(query_embeddings=queries, n_results=10)["ids"]
    return [tuple(ids) for ids in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--builds", type=int, default=4)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(args.rows, args.dim)).astype(np.float32)
    queries = rng.normal(size=(args.queries, args.dim)).astype(np.float32)
    for hnsw in ({"space": "cosine", "ef_search": 200}, {"space": "cosine", "ef_search": 200, "num_threads": 1}):
        builds = [build_and_query(vectors, queries, hnsw) for _ in range(args.builds)]
        differing = [sum(a != b for a, b in zip(builds[0], other)) for other in builds[1:]]
        print(f"{hnsw}: queries whose top 10 differ from the first build's, per later build: {differing} "
              f"(of {args.queries})")


if __name__ == "__main__":
    main()
