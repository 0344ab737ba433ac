"""``pictrieve tile`` for several checkouts on copies of one gallery: wall and CPU seconds, progress cadence.

Issue 40 item 4: tiling 66 photos with three embedders took 3 min 29 s, with 48 s between progress updates. This
indexes the first ``--images`` photos once (``-e offline -e efficientnet-lite0 -e offline-labels:detect``, README's
NEEDLE example), then runs ``pictrieve tile`` of each checkout on its own copy of that gallery, the checkouts taking
turns round by round (so they share the machine's load), and records per run the wall and CPU seconds, the number of
progress updates the command wrote (each ``\\r`` or line of its bar on stderr) and the longest time between two of
them (from the start to the first and from the last to the end included). Each ``--code`` is a folder holding a
``pictrieve`` package (a symlink named ``pictrieve`` to a ``git worktree`` at an older commit, say)::

    git worktree add /tmp/tile-before 63207d0 && mkdir /tmp/pp-before && ln -s /tmp/tile-before /tmp/pp-before/pictrieve
    python benchmarks/tile_speed.py ../shared/datasets/flickr8k-dev/images --work /tmp/tile-speed \\
        --code before=/tmp/pp-before --code after=/tmp/pp-after --rounds 1 --json

The tile vectors of the arms are compared too (``--compare``): the largest cosine distance between the same tile
record in two arms' galleries, per embedder.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

EMBEDDERS = ("offline", "efficientnet-lite0", "offline-labels:detect")


def run_timed(command: list[str], env: dict[str, str]) -> dict[str, float]:
    """Run ``command``; its wall and CPU seconds, progress updates on stderr and the longest silence between them."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stamps: list[float] = [started]
    said: list[str] = ["(start)"]
    tail: list[bytes] = []

    def read_stderr() -> None:
        assert process.stderr is not None
        while chunk := process.stderr.read1(4096):
            updates = chunk.count(b"\r") + chunk.count(b"\n")
            stamps.extend([time.perf_counter()] * updates)
            said.extend([chunk.decode(errors="replace").strip()[-90:]] * updates)
            tail[:] = (tail + [chunk])[-20:]

    reader = threading.Thread(target=read_stderr)
    reader.start()
    out = process.stdout.read() if process.stdout else b""
    process.wait()
    reader.join()
    ended = time.perf_counter()
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {b''.join(tail).decode(errors='replace')[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    gaps = [b - a for a, b in zip(stamps, stamps[1:] + [ended])]
    widest = max(range(len(gaps)), key=gaps.__getitem__)
    return {"wall_s": round(ended - started, 1),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
            "updates": len(stamps) - 1, "longest_silence_s": round(max(gaps), 1),
            "silence_after": said[widest], "silence_at_s": round(stamps[widest] - started, 1),
            "stdout": out.decode(errors="replace").strip().splitlines()[-4:]}


def compare(first: Path, second: Path, code: str, env: dict[str, str]) -> dict[str, float]:
    """Per embedder, the largest cosine distance between a tile record of ``first`` and the same one of ``second``."""
    script = f"""
import json, sys, numpy as np, chromadb
a, b = (chromadb.PersistentClient(path=p) for p in sys.argv[1:3])
out = {{}}
for c in a.list_collections():
    if not c.name.startswith("tiles__"):
        continue
    x, y = a.get_collection(c.name).get(include=["embeddings"]), b.get_collection(c.name).get(include=["embeddings"])
    assert sorted(x["ids"]) == sorted(y["ids"]), c.name
    vx = dict(zip(x["ids"], np.asarray(x["embeddings"]))); vy = dict(zip(y["ids"], np.asarray(y["embeddings"])))
    cos = [float(vx[i] @ vy[i] / np.linalg.norm(vx[i]) / np.linalg.norm(vy[i])) for i in vx]
    out[c.name] = {{"records": len(cos), "max_distance": round(1 - min(cos), 6),
                   "differ_1e-4": sum(1 - v > 1e-4 for v in cos)}}
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", script, str(first), str(second)], env=dict(env, PYTHONPATH=code),
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("photos", type=Path)
    parser.add_argument("--work", type=Path, required=True, help="a folder outside the repo (galleries and cache)")
    parser.add_argument("--code", action="append", required=True, help="NAME=FOLDER holding a pictrieve package")
    parser.add_argument("--images", type=int, default=66)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--compare", action="store_true", help="compare the tile vectors of the arms' galleries")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sides = dict(item.split("=", 1) for item in args.code)
    args.work.mkdir(parents=True, exist_ok=True)
    photos = args.work / "photos"
    if not photos.exists():
        photos.mkdir()
        for path in sorted(args.photos.glob("*.jpg"))[: args.images]:
            (photos / path.name).symlink_to(path.resolve())
    env = dict(os.environ, OMP_NUM_THREADS="1")
    gallery = args.work / "gallery"
    first, last = list(sides.values())[0], list(sides.values())[-1]
    if not gallery.exists():
        embedders = [flag for name in EMBEDDERS for flag in ("-e", name)]
        subprocess.run([sys.executable, "-m", "pictrieve.cli.main", "index", str(photos), "-g", str(gallery),
                        *embedders], env=dict(env, PYTHONPATH=first), check=True, capture_output=True)
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    for round_ in range(args.rounds):
        for name, code in sides.items():
            copy = args.work / f"gallery-{name}-{round_}"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(gallery, copy)
            result = run_timed([sys.executable, "-m", "pictrieve.cli.main", "tile", "-g", str(copy)],
                               dict(env, PYTHONPATH=code))
            result["load_average"] = open("/proc/loadavg").read().split()[:3]
            runs[name].append(result)
            print(name, round_, result, file=sys.stderr, flush=True)
    report: dict = {"images": args.images, "rounds": args.rounds, "runs": runs}
    if args.compare:
        names = list(sides)
        report["vectors"] = {f"{names[0]} vs {other}": compare(args.work / f"gallery-{names[0]}-0",
                                                               args.work / f"gallery-{other}-0", last, env)
                             for other in names[1:]}
    print(json.dumps(report, indent=2) if args.json else report)


if __name__ == "__main__":
    main()
