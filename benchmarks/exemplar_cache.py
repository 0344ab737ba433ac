"""First use and later starts of the exemplar visualizer on a captioned folder (e.g. flickr8k-train).

Each measurement is a new Python process that builds ``exemplar:DIR`` and picks the photos for one
prompt, with its own empty pictrieve cache for the first use; the second process finds the caption
matrix on disk. Wall seconds include importing pictrieve and loading MiniLM:

    OMP_NUM_THREADS=1 python benchmarks/exemplar_cache.py ../shared/datasets/flickr8k-train --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = """
import sys
from pictrieve.tools.models.visualizers import create_visualizer
visualizer = create_visualizer("exemplar:" + sys.argv[1], progress=False)
print(len(visualizer.caption_vectors), visualizer.best_matches("a dog runs on the beach", 1)[0][0].name)
"""


def timed_start(folder: str, cache: str) -> dict:
    """Seconds for one new process to build the visualizer and answer one prompt."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, folder], env={**os.environ, "PICTRIEVE_CACHE": cache},
                          capture_output=True, text=True, check=True)
    captions, best = done.stdout.split()
    return {"seconds": round(time.perf_counter() - start, 1), "captions": int(captions), "best": best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a captioned folder (captions.jsonl + images)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="exemplar-cache-") as cache:
        first = timed_start(args.folder, cache)
        second = timed_start(args.folder, cache)
    result = {"folder": args.folder, "threads": os.environ.get("OMP_NUM_THREADS", "default"),
              "first_use": first, "second_start": second}
    print(json.dumps(result, indent=2) if args.json else
          f"{first['captions']} captions: first use {first['seconds']} s, second start {second['seconds']} s")


if __name__ == "__main__":
    main()
