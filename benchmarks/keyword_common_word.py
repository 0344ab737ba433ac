"""The keyword side of a hybrid search for a word most photos carry, at gallery scale (issue 40.4).

Builds a :class:`~pictrieve.vectorstore.keywords.KeywordIndex` over ``--photos`` synthetic records whose words
are a shared word ("dog"), a folder word from 50 and a file-name word, and times, interleaved in one process:

- ``objects``: :meth:`KeywordIndex.rank`, one :class:`KeywordRank` per matching photo (what a hybrid search
  built before the ranking was kept as arrays);
- ``arrays``: what a hybrid search does now: :meth:`KeywordIndex.ranking` and the cut to the ``--depth`` photos
  the fusion reads (``_passing``).

Both return the same first ``--depth`` photos (checked). Writes one JSON line per round to ``--out``.

    python benchmarks/keyword_common_word.py --photos 100000 --rounds 7 \\
        --out benchmarks/results/keyword_common_word/run.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from pictrieve.vectorstore import keywords


def build(photos: int) -> keywords.KeywordIndex:
    documents = [["dog", f"folder{i % 50}", f"img{i}"] + (["beach"] if i % 7 == 0 else []) for i in range(photos)]
    return keywords.KeywordIndex([f"id{i}" for i in range(photos)], documents)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--depth", type=int, default=keywords.POOL)
    parser.add_argument("--query", default="dog beach")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    index = build(args.photos)
    runs: dict[str, list[float]] = {"objects": [], "arrays": []}
    for round_ in range(args.rounds):
        started = time.perf_counter()
        old = index.rank(args.query)[: args.depth]
        runs["objects"].append(time.perf_counter() - started)
        started = time.perf_counter()
        new = keywords._passing(None, index.ranking(args.query), None, args.depth)
        runs["arrays"].append(time.perf_counter() - started)
        assert [r.id for r in new[: len(old)]] == [r.id for r in old], "the two paths disagree"
        if args.out:
            with args.out.open("a") as out:
                out.write(json.dumps({"round": round_, "photos": args.photos, "query": args.query,
                                      "objects_ms": runs["objects"][-1] * 1e3,
                                      "arrays_ms": runs["arrays"][-1] * 1e3}) + "\n")
    for arm, times in runs.items():
        print(f"{arm:8s} median {statistics.median(times) * 1e3:7.1f} ms  (min {min(times) * 1e3:.1f}, "
              f"max {max(times) * 1e3:.1f}; {args.rounds} rounds, {args.photos:,} photos, "
              f"{len(index.rank(args.query)):,} match '{args.query}')")


if __name__ == "__main__":
    main()
