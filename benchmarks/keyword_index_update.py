"""What one added (or deleted) photo costs the keyword index of hybrid search, at 1k, 10k and 100k records.

Before (the ``bm25s`` index, up to commit a1fb873): the next hybrid search after any write rebuilt the index from
every record (read every record's metadata through Chroma, split the words, ``bm25s.BM25.index``). After
(:func:`~pictrieve.vectorstore.keywords.keyword_index`): the next search reads the records written since from
Chroma's change feed and applies them. Both are timed on the same embedded gallery after the same write, the two
interleaved (before, after, before, after...), each write followed by a delete of the same photo (also timed).

The galleries hold the synthetic 384-d records of ``filtered_search_p95.py`` (folders, file names and places as
indexing stores them); the 100k one is that benchmark's store (``--store-100k``), built once outside the repo.

    python benchmarks/keyword_index_update.py --stores /tmp/kw-update --store-100k /tmp/pictrieve-filtered-100k \\
        --sizes 1000 10000 100000 --rounds 3 --json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from filtered_search_p95 import build, make_records, metadata  # noqa: E402


def rebuild_as_before(gallery: Any) -> int:
    """What the old ``keyword_index`` did after any write: every record's words, then a new ``bm25s`` index."""
    import bm25s

    from pictrieve.vectorstore.keywords import BM25_B, BM25_K1, record_words

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    documents = [record_words(item.metadata) for item in gallery.items()]
    model = bm25s.BM25(k1=BM25_K1, b=BM25_B, backend="numpy")
    model.index(documents, show_progress=False)
    return len(documents)


def one_size(store: Path, n: int, rounds: int, skip_before: bool) -> dict[str, Any]:
    from pictrieve.vectorstore import keywords

    if not skip_before:
        import bm25s  # noqa: F401  (imported before the clock runs: the rebuilds alone are timed)
    records = make_records(n)
    gallery, _ = build(store, records)
    keywords._cache.clear()
    started = time.perf_counter()
    keywords.keyword_index(gallery)  # the first build (or the saved index, when it is there)
    first = time.perf_counter() - started
    extra = make_records(1, seed=7)
    meta = metadata(extra, 0) | {"folder": "/photos/new/porto", "name": "porto_beach.jpg", "path": "/photos/new/porto/porto_beach.jpg"}
    rows: dict[str, list[float]] = {"write_s": [], "after_add_s": [], "after_delete_s": [], "before_s": []}
    for _ in range(rounds):
        if not skip_before:
            started = time.perf_counter()
            rebuild_as_before(gallery)
            rows["before_s"].append(time.perf_counter() - started)
        started = time.perf_counter()
        gallery.upsert(["bench-new"], extra.vectors, [meta])
        rows["write_s"].append(time.perf_counter() - started)
        started = time.perf_counter()
        found = keywords.keyword_index(gallery).rank("porto beach")
        rows["after_add_s"].append(time.perf_counter() - started)
        assert found and found[0].id == "bench-new"
        gallery.delete(["bench-new"])
        started = time.perf_counter()
        keywords.keyword_index(gallery)
        rows["after_delete_s"].append(time.perf_counter() - started)
    return {"records": gallery.count(), "first_build_or_load_s": round(first, 3),
            **{key: round(statistics.median(value), 4) for key, value in rows.items() if value},
            "all": {key: [round(v, 4) for v in value] for key, value in rows.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", type=Path, required=True, help="folder for the smaller galleries (not in the repo)")
    parser.add_argument("--store-100k", type=Path, default=None, help="the 100k gallery of filtered_search_p95.py")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-before", action="store_true", help="skip the bm25s rebuild (bm25s not installed)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("pictrieve").setLevel(logging.ERROR)
    out = {}
    for n in args.sizes:
        store = args.store_100k if n == 100_000 and args.store_100k else args.stores / f"records-{n}"
        out[n] = one_size(store, n, args.rounds, args.no_before)
        logging.info("%d records: %s", n, out[n])
    print(json.dumps(out, indent=2) if args.json else out)


if __name__ == "__main__":
    main()
