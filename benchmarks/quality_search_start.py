"""``pictrieve quality search`` in a new process: wall and CPU seconds and the longest silence, first and second run.

Issue 40 item 4: ``quality search`` was silent for 19 s and took about 40 s to start on a busy machine. This runs the
same search with each ``--code`` checkout (a folder holding a ``pictrieve`` package, as in ``tile_speed.py``), taking
turns round by round, and with ``--again NAME`` that checkout a second time right after (``NAME:again``: what its
first run left on disk and in the page cache). Records wall and CPU seconds and the longest time between two progress
lines. Needs a gallery with a trained QC2 model (``pictrieve quality annotate`` then ``quality train``)::

    python benchmarks/quality_search_start.py --gallery G --code before=/tmp/pp-before --code after=/tmp/pp-after \\
        --again after --rounds 2 --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from tile_speed import run_timed  # noqa: E402  (the same timing of a command and its progress lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gallery", required=True)
    parser.add_argument("--code", action="append", required=True, help="NAME=FOLDER holding a pictrieve package")
    parser.add_argument("--again", action="append", default=[], help="NAME of a checkout to run twice in a row")
    parser.add_argument("--query", default="a dog runs")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sides = dict(item.split("=", 1) for item in args.code)
    command = [sys.executable, "-m", "pictrieve.cli.main", "quality", "search", args.query, "-g", args.gallery,
               "--quality", "high"]
    runs: dict[str, list[dict]] = {}
    for _ in range(args.rounds):
        for name, code in sides.items():
            env = dict(os.environ, PYTHONPATH=code, OMP_NUM_THREADS="1")
            arms = [name, f"{name}:again"] if name in args.again else [name]
            for arm in arms:
                result = run_timed(command, env)
                result.pop("stdout")
                result["load_average"] = open("/proc/loadavg").read().split()[:3]
                runs.setdefault(arm, []).append(result)
                print(arm, result, file=sys.stderr, flush=True)
    print(json.dumps(runs, indent=2) if args.json else runs)


if __name__ == "__main__":
    main()
