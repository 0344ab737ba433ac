"""The first filtered search of a new process at 100k records: filter columns saved at index time vs read from
every record.

Issue 40 item 4: a new process's first filtered search read every record's filter fields from Chroma's table
(about 15 s at 100k). Writes now bring the columns up to date at the end of each write turn and save them
(:func:`~pictrieve.vectorstore.filter_index.refresh_written`), so a new process loads them. This builds (or reuses)
the 100k gallery of ``filtered_search_p95.py`` through ``Gallery.upsert`` (the writes indexing makes, without a
model), with ``PICTRIEVE_CACHE`` in ``--work``, then times, each in a new process and taking turns round by round:

- ``saved``: the cache the writes left: open the gallery and run one filtered search (a camera);
- ``every record``: an empty cache, as every first search in a new process found it before (the same search).

Each child reports its seconds importing, opening the gallery (Chroma's client and a count), getting the filter
columns (what the first filtered search does first: ``columns_s``, the part this is about) and the filtered search
itself (Chroma loading its vector index, which any first search pays, and the vector search); the parent the whole
process's wall seconds::

    python benchmarks/filter_columns_first_open.py --store /tmp/pictrieve-filtered-100k-w --work /tmp/fc-work --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import sys, time, json
import numpy as np
started = time.perf_counter()
from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.filter_index import filter_columns
from pictrieve.vectorstore.photo_filter import PhotoFilter
imported = time.perf_counter()
class Synthetic:  # filtered_search_p95.SyntheticEmbedder: vectors are written directly, queries come as vectors
    name, dim = "benchmark:synthetic-384", 384
gallery = Gallery.open(sys.argv[1], Synthetic())
gallery.count()
opened = time.perf_counter()
filter_columns(gallery)  # what the first filtered search does first (the search below then finds them in memory)
columns = time.perf_counter()
vector = np.random.default_rng(0).normal(size=384).astype(np.float32)
hits = gallery.search_vector(vector, k=10, where=PhotoFilter(camera="Canon EOS R6"))
done = time.perf_counter()
print(json.dumps({"import_s": imported - started, "open_s": opened - imported, "columns_s": columns - opened,
                  "search_s": done - columns, "hits": len(hits)}))
"""

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, required=True, help="the gallery folder (kept and reused; not in the repo)")
    parser.add_argument("--work", type=Path, required=True, help="the cache the writes save the columns in")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cache = args.work / "cache"
    os.environ["PICTRIEVE_CACHE"] = str(cache)
    sys.path.insert(0, str(Path(__file__).parent))
    import filtered_search_p95 as p95

    started = time.perf_counter()
    gallery, _ = p95.build(args.store, p95.make_records(args.records))
    build_s = time.perf_counter() - started
    runs: dict[str, list[dict]] = {"saved": [], "every record": []}
    for _ in range(args.rounds):
        for arm in runs:
            arm_cache = cache
            if arm == "every record":
                arm_cache = args.work / "empty-cache"
                shutil.rmtree(arm_cache, ignore_errors=True)
            began = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", CHILD, str(args.store)], capture_output=True, text=True,
                                  env=dict(os.environ, PICTRIEVE_CACHE=str(arm_cache)), check=True)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row["process_s"] = time.perf_counter() - began
            row["load_average"] = open("/proc/loadavg").read().split()[:3]
            runs[arm].append(row)
            print(arm, row, file=sys.stderr, flush=True)
    summary = {arm: {key: round(statistics.median(r[key] for r in rows), 2)
                     for key in ("import_s", "open_s", "columns_s", "search_s", "process_s")} for arm, rows in runs.items()}
    print(json.dumps({"records": gallery.count(), "build_s": round(build_s, 1), "median": summary, "runs": runs},
                     indent=2))


if __name__ == "__main__":
    main()
