"""How many vectors per second one ``chroma run`` server accepts: the write ceiling of a server gallery.

Precomputed 512-d unit vectors (random: the server neither knows nor cares) are added in batches of 256
by 1, 2 and 4 concurrent writer processes, each through chromadb's own ``HttpClient``, into a fresh
collection per configuration, configured as a gallery's (cosine HNSW, pictrieve's ``ef_search``) and
with metadata shaped like a gallery record's (path, size, mtime, content hash). Each writer makes its
vectors and connects before a common start; the clock runs from the start until the last writer's last
``add`` returned (each writer also notes its own CPU time per batch: what the client spends encoding
the request, apart from waiting for the server). After that, the script times the first query (Chroma
may still be folding the write-ahead log into the index) and checks that the collection holds every
vector once.

This is what the Ray index path (issue 22) writes through: workers embed, the server stores. Compare
the rates here with a worker's embedding rate to see how many workers one server can take.

Run (BENCHMARKS.md, "The Chroma server's write ceiling"):

    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
    python benchmarks/chroma_write_ceiling.py --chroma-data /work/scale-bench/chroma-write \\
        --vectors 30000 --writers 1,2,4 --out benchmarks/results/scale/write-ceiling
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import multiprocessing as mp
import shutil
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from loopback_servers import start_chroma  # beside this script, on its sys.path

log = logging.getLogger("chroma_write_ceiling")
DIM = 512
BATCH = 256


def http_client(url: str):
    import chromadb
    from chromadb.config import Settings

    parsed = urlparse(url)
    return chromadb.HttpClient(host=parsed.hostname, port=parsed.port, settings=Settings(anonymized_telemetry=False))


def create_collection(url: str, name: str):
    """A fresh collection configured as a gallery's embedder collection."""
    from pictrieve.vectorstore.gallery import DEFAULT_HNSW

    return http_client(url).create_collection(
        name, embedding_function=None, configuration={"hnsw": {**DEFAULT_HNSW, "space": "cosine"}},
        metadata={"embedder": "benchmark:random-512", "dim": DIM})


def writer(url: str, name: str, number: int, count: int, batch: int, start, results) -> None:
    """One writer process: ``count`` vectors in batches of ``batch``, after ``start`` (a barrier)."""
    rng = np.random.default_rng(number)
    vectors = rng.normal(size=(count, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = [f"w{number}-{i}" for i in range(count)]
    metadatas = [{"path": f"/archive/{number}/{i:08d}.jpg", "size": 123456 + i, "mtime": 1.7e9 + i,
                  "sha1": uuid.uuid4().hex} for i in range(count)]
    collection = http_client(url).get_collection(name, embedding_function=None)
    start.wait()
    batches = []
    for i in range(0, count, batch):
        t0, cpu0 = time.perf_counter(), time.process_time()
        collection.add(ids=ids[i:i + batch], embeddings=vectors[i:i + batch], metadatas=metadatas[i:i + batch])
        batches.append((number, i // batch, min(batch, count - i), time.perf_counter() - t0,
                        time.process_time() - cpu0))
    results.put(batches)


def measure(url: str, writers: int, vectors: int, batch: int = BATCH) -> dict:
    """``vectors`` written by ``writers`` processes into a fresh collection: the rate and the batches."""
    name = f"ceiling-{writers}w-{uuid.uuid4().hex[:8]}"
    collection = create_collection(url, name)
    context = mp.get_context("spawn")
    start, results = context.Barrier(writers + 1), context.Queue()
    share = vectors // writers
    processes = [context.Process(target=writer, args=(url, name, n, share, batch, start, results))
                 for n in range(writers)]
    for process in processes:
        process.start()
    start.wait()
    t0 = time.perf_counter()
    batches = [row for _ in processes for row in results.get()]
    elapsed = time.perf_counter() - t0
    for process in processes:
        process.join()
        if process.exitcode:
            raise RuntimeError(f"a writer failed (exit {process.exitcode})")
    t1 = time.perf_counter()
    collection.query(query_embeddings=[np.ones(DIM, dtype=np.float32) / np.sqrt(DIM)], n_results=10)
    first_query_s = time.perf_counter() - t1
    stored = collection.count()
    if stored != share * writers:
        raise RuntimeError(f"{stored} vectors stored, {share * writers} written")
    latencies = np.asarray([row[3] for row in batches]) * 1000
    summary = {"writers": writers, "vectors": stored, "batch": batch, "seconds": round(elapsed, 2),
               "vectors_per_s": round(stored / elapsed), "batch_p50_ms": round(float(np.percentile(latencies, 50)), 1),
               "batch_p95_ms": round(float(np.percentile(latencies, 95)), 1),
               "writer_cpu_per_batch_ms": round(float(np.median([row[4] for row in batches])) * 1000, 1),
               "first_query_after_s": round(first_query_s, 2)}
    log.info("%s", summary)
    return {"summary": summary, "batches": batches, "collection": name}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--gallery", help="a running Chroma server, http://127.0.0.1:PORT")
    where.add_argument("--chroma-data", type=Path, help="start `chroma run` on this folder (emptied first)")
    parser.add_argument("--vectors", type=int, default=30000, help="vectors per configuration")
    parser.add_argument("--writers", default="1,2,4")
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--out", type=Path, help="write batches.csv and summary.json here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)

    runs = []
    with tempfile.TemporaryDirectory(prefix="write-ceiling-") as scratch, ExitStack() as stack:
        url = args.gallery
        if url is None:
            shutil.rmtree(args.chroma_data, ignore_errors=True)  # every configuration starts from nothing
            server = start_chroma(args.chroma_data, Path(scratch))
            stack.callback(server.stop)
            url = server.url
        for writers in (int(w) for w in args.writers.split(",")):
            runs.append(measure(url, writers, args.vectors, args.batch))
            http_client(url).delete_collection(runs[-1]["collection"])
    print("| writers | vectors | seconds | vectors/s | batch p50 / p95 ms | writer CPU per batch | first query after |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for s in (run["summary"] for run in runs):
        print(f"| {s['writers']} | {s['vectors']} | {s['seconds']} | {s['vectors_per_s']} | "
              f"{s['batch_p50_ms']} / {s['batch_p95_ms']} | {s['writer_cpu_per_batch_ms']} ms | "
              f"{s['first_query_after_s']} s |")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        with open(args.out / "batches.csv", "w", newline="") as handle:
            rows = csv.writer(handle)
            rows.writerow(["writers", "writer", "batch", "vectors", "seconds", "writer_cpu_seconds"])
            for run in runs:
                rows.writerows([run["summary"]["writers"], *row] for row in run["batches"])
        (args.out / "summary.json").write_text(json.dumps(
            {"argv": sys.argv[1:], "results": [run["summary"] for run in runs]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
