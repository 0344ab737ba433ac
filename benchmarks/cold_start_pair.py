"""Cold start of ``pictrieve search`` for two checkouts, interleaved: wall and CPU seconds of each new process.

``pictrieve search`` is hybrid by default, so a first search builds (or loads) the keyword index: this compares
two versions of the code on one gallery, each query a new process, A, B, A, B... so both share the machine's load.
CPU seconds (user + system, from ``getrusage``) move less with the load than wall seconds. Each ``--code`` is a
folder holding a ``pictrieve`` package (for instance a symlink named ``pictrieve`` to a ``git worktree``).

    python benchmarks/cold_start_pair.py ../shared/datasets/flickr8k-dev/images --work /tmp/cold-pair \\
        --code before=/tmp/before-pkg --code after=/tmp/after-pkg --runs 10
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

QUERY = "a dog running on the grass"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("photos", type=Path)
    parser.add_argument("--work", type=Path, required=True, help="a folder outside the repo (gallery and cache)")
    parser.add_argument("--code", action="append", required=True, help="NAME=FOLDER holding a pictrieve package")
    parser.add_argument("--images", type=int, default=40)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    sides = dict(item.split("=", 1) for item in args.code)
    args.work.mkdir(parents=True, exist_ok=True)
    photos = args.work / "photos"
    if not photos.exists():
        photos.mkdir()
        for path in sorted(args.photos.glob("*.jpg"))[: args.images]:
            (photos / path.name).symlink_to(path.resolve())
    env = dict(os.environ, PICTRIEVE_CACHE=str(args.work / "cache"), OMP_NUM_THREADS="1")
    gallery = args.work / "gallery"
    first = next(iter(sides.values()))
    if not gallery.exists():
        subprocess.run([sys.executable, "-m", "pictrieve.cli.main", "index", str(photos), "-g", str(gallery)],
                       env=dict(env, PYTHONPATH=first), check=True, capture_output=True)
    times: dict[str, dict[str, list[float]]] = {name: {"wall_s": [], "cpu_s": []} for name in sides}
    for _ in range(args.runs):
        for name, code in sides.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pictrieve.cli.main", "search", QUERY, "-g", str(gallery), "-k", "5"],
                           env=dict(env, PYTHONPATH=code), check=True, capture_output=True)
            times[name]["wall_s"].append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            times[name]["cpu_s"].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    print(json.dumps({"load_average": open("/proc/loadavg").read().split()[:3], "runs": args.runs,
                      **{name: {key: {"median": round(statistics.median(v), 2), "min": round(min(v), 2),
                                      "max": round(max(v), 2)} for key, v in row.items()}
                         for name, row in times.items()}}, indent=2))


if __name__ == "__main__":
    main()
