"""Bulk MiniLM caption encoding: pictrieve's shared fast path beside sentence-transformers, same cores.

Encodes the same captions (flickr8k-train's, in file order) with
:meth:`SentenceEncoder.encode_bulk` (batched PyTorch on pictrieve's own weights), with
sentence-transformers' ``SentenceTransformer.encode`` on the same packaged model, and with the numpy
query path (:meth:`SentenceEncoder.encode`, which did the bulk work before), all with the same torch
thread count, interleaved over ``--rounds`` so machine load falls on all alike. Prints seconds per
encoder (best round), the ratio to sentence-transformers and the largest difference between vectors:

    python benchmarks/bulk_text_encoding.py ../shared/datasets/flickr8k-train --limit 4096 --threads 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def read_captions(folder: Path, limit: int | None) -> list[str]:
    texts = [c for line in (folder / "captions.jsonl").read_text().splitlines() if line.strip()
             for c in json.loads(line).get("captions", [])]
    return texts[:limit] if limit else texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a captioned folder (captions.jsonl)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N captions (default: all)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for all (default: bulk_threads())")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--numpy-limit", type=int, default=512,
                        help="captions for the numpy path (slow; its rate is scaled to the full count)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    from pictrieve.tools.models.sentence_encoder import SentenceEncoder, bulk_threads, minilm_model_dir

    threads = args.threads or bulk_threads()
    torch.set_num_threads(threads)
    texts = read_captions(args.folder, args.limit)
    ours = SentenceEncoder()
    peer = SentenceTransformer(str(minilm_model_dir()), device="cpu")
    ours.encode_bulk(texts[:64], threads=threads)  # warm both up alike
    peer.encode(texts[:64], batch_size=128)
    seconds: dict[str, list[float]] = {"pictrieve encode_bulk": [], "sentence-transformers": []}
    for _ in range(args.rounds):
        start = time.perf_counter()
        mine = ours.encode_bulk(texts, threads=threads)
        seconds["pictrieve encode_bulk"].append(time.perf_counter() - start)
        start = time.perf_counter()
        theirs = peer.encode(texts, batch_size=128, convert_to_numpy=True, normalize_embeddings=True)
        seconds["sentence-transformers"].append(time.perf_counter() - start)
    few = texts[: args.numpy_limit]
    start = time.perf_counter()
    old = ours.encode(few)
    numpy_seconds = (time.perf_counter() - start) * len(texts) / max(1, len(few))
    best = {name: min(values) for name, values in seconds.items()}
    result = {
        "captions": len(texts), "threads": threads, "rounds": args.rounds,
        "seconds": {**{k: round(v, 1) for k, v in best.items()},
                    f"numpy encode (old bulk path; {len(few)} captions, scaled)": round(numpy_seconds, 1)},
        "ratio_to_sentence_transformers": round(best["pictrieve encode_bulk"] / best["sentence-transformers"], 3),
        "max_abs_difference": {"vs sentence-transformers": float(np.abs(mine - theirs).max()),
                               "vs numpy encode": float(np.abs(mine[: len(few)] - old).max())},
    }
    print(json.dumps(result, indent=2) if args.json else
          f"{len(texts)} captions on {threads} threads: " + ", ".join(f"{k} {v} s" for k, v in result["seconds"].items())
          + f"; ratio {result['ratio_to_sentence_transformers']}")


if __name__ == "__main__":
    main()
