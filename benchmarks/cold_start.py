"""Cold start of ``pictrieve search``: a new process per query, as a user runs it, on the offline default.

Indexes the first ``--images`` photos of a folder into a temporary gallery (offline embedder), then
times ``pictrieve search QUERY -g GALLERY`` in fresh processes (``--runs`` times) and, for
comparison, the search itself in one warm process (``Gallery.search_text`` after a first query).

    python benchmarks/cold_start.py ../shared/datasets/flickr8k-dev/images --images 40 --runs 5

Prints a Markdown table row, or JSON with ``--json``. The cache (``PICTRIEVE_CACHE``) is a
temporary folder unless ``--cache`` names one, so a first-run cost shows up in the first process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUERY = "a dog running on the grass"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("photos", type=Path)
    parser.add_argument("--images", type=int, default=40)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="pictrieve-cold-start-"))
    env = dict(os.environ, PICTRIEVE_CACHE=str(args.cache or work / "cache"))
    try:
        folder = work / "photos"
        folder.mkdir()
        for path in sorted(p for p in args.photos.iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png"})[: args.images]:
            (folder / path.name).symlink_to(path.resolve())
        gallery = work / "gallery"
        subprocess.run([sys.executable, "-m", "pictrieve.cli.main", "index", str(folder), "-g", str(gallery)],
                       env=env, check=True, capture_output=True)
        command = [sys.executable, "-m", "pictrieve.cli.main", "search", QUERY, "-g", str(gallery), "-k", "5"]
        walls = []
        for _ in range(args.runs):
            started = time.perf_counter()
            subprocess.run(command, env=env, check=True, capture_output=True)
            walls.append(time.perf_counter() - started)
        warm = _warm_search_ms(gallery, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "images": args.images, "runs": args.runs,
        "new_process_search_s_median": round(statistics.median(walls), 2),
        "new_process_search_s_first": round(walls[0], 2), "new_process_search_s_max": round(max(walls), 2),
        "warm_search_ms_median": warm,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"| {args.images} | {result['new_process_search_s_median']} s (first {result['new_process_search_s_first']} s, "
              f"max {result['new_process_search_s_max']} s) | {warm} ms |")


def _warm_search_ms(gallery: Path, env: dict[str, str]) -> float:
    """Median ms of ``search_text`` (text encoding included) in one process after a first query."""
    code = (
        "import statistics, time\n"
        "from pictrieve.vectorstore.gallery import Gallery\n"
        f"g = Gallery.open({str(gallery)!r})\n"
        f"g.search_text({QUERY!r}, k=5)\n"
        "times = []\n"
        "for _ in range(20):\n"
        "    t = time.perf_counter(); g.search_text('two children on a beach', k=5); times.append(time.perf_counter() - t)\n"
        "print(round(1000 * statistics.median(times), 1))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
