"""Local indexing vs ``--engine ray`` on one machine: what the Ray engine costs (issue 22).

Each arm runs the real command as a user does, into a fresh ``chroma run`` server on 127.0.0.1:

- ``local``: ``pictrieve index PHOTOS --gallery URL -e EMBEDDER`` (torch on ``--cores`` threads, 2
  decode threads beside it);
- ``ray-N``: the same with ``--engine ray --ray-workers N`` on a local Ray instance: each of the N
  workers gets ``cores / N`` CPUs (torch threads and decode threads), so every arm uses the same cores.

Reported per arm: the command's wall time; Ray's start-up (the ``Ray ready in`` line), apart;
images/s after Ray is up (photos / (wall - start-up): model loading, planning and writing included);
and the steady rate, photos / time between the first and the last record reaching the server (the
benchmark polls the server's count twice a second), which leaves out every fixed cost. The machine's
load average is recorded before and after: on a shared machine only ratios within one run mean much.

Run:  python benchmarks/ray_engine.py ../shared/datasets/flickr8k-dev --embedder offline --repeats 2 \\
          --out benchmarks/results/ray-engine/offline-500.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from loopback_servers import start_chroma  # beside this script, on its sys.path


class CountWatcher(threading.Thread):
    """Polls the server's record count; remembers when the first and the last record arrived."""

    def __init__(self, url: str, total: int) -> None:
        super().__init__(daemon=True)
        self.url, self.total = url, total
        self.first: tuple[float, int] | None = None
        self.last: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        import chromadb

        host, port = self.url.removeprefix("http://").split(":")
        client = chromadb.HttpClient(host=host, port=int(port))
        while not self.stop.wait(0.5):
            try:
                count = sum(c.count() for c in client.list_collections() if c.name.startswith("images__"))
            except Exception:  # noqa: BLE001 - the collection may not exist yet
                continue
            now = time.monotonic()
            if count and self.first is None:
                self.first = (now, count)
            if count >= self.total and self.last is None:
                self.last = now
                return


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def run_arm(name: str, photos: Path, embedder: str, cores: int, workers: int | None, batch_size: int,
            total: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as scratch:
        chroma = start_chroma(Path(scratch) / "chroma", Path(scratch))
        url = chroma.url
        command = [sys.executable, "-m", "pictrieve.cli.main", "index", str(photos), "--gallery", url,
                   "-e", embedder, "--batch-size", str(batch_size), "--json"]
        env = dict(os.environ, OMP_NUM_THREADS=str(cores), MKL_NUM_THREADS=str(cores))
        if workers:
            command += ["--engine", "ray", "--ray-workers", str(workers),
                        "--cpus-per-worker", str(cores // workers)]
        watcher = CountWatcher(url, total)
        watcher.start()
        started = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            wall = time.monotonic() - started
        finally:
            watcher.stop.set()
            chroma.stop()
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout)
    assert report["indexed"] == total, report
    ready = re.search(r"Ray ready in ([0-9.]+) s", done.stderr)
    startup = float(ready.group(1)) if ready else 0.0
    row: dict[str, Any] = {"arm": name, "wall_s": round(wall, 2), "ray_startup_s": round(startup, 2),
                           "images_per_s": round(total / (wall - startup), 2)}
    if watcher.first and watcher.last and watcher.last > watcher.first[0]:
        row["steady_images_per_s"] = round((total - watcher.first[1]) / (watcher.last - watcher.first[0]), 2)
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("photos", type=Path, help="folder of photos (flickr8k-dev: 500 photos and captions.jsonl)")
    parser.add_argument("--embedder", default="offline")
    parser.add_argument("--cores", type=int, default=2, help="cores every arm uses")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--arms", default="local,ray-1,ray-2")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of all arms, interleaved")
    parser.add_argument("--out", type=Path, default=None, help="write every row and the summary here (JSON)")
    args = parser.parse_args()

    from pictrieve.vectorstore.indexing import list_images

    total = len(list_images(args.photos).paths)
    before = load_average()
    rows = []
    for _ in range(args.repeats):
        for arm in args.arms.split(","):
            workers = int(arm.split("-")[1]) if arm.startswith("ray-") else None
            rows.append(run_arm(arm, args.photos, args.embedder, args.cores, workers, args.batch_size, total))
    summary: dict[str, Any] = {"photos": total, "embedder": args.embedder, "cores": args.cores,
                               "batch_size": args.batch_size, "load_average_before": before,
                               "load_average_after": load_average(), "rows": rows}
    for arm in args.arms.split(","):
        mine = [row for row in rows if row["arm"] == arm]
        summary[arm] = {key: round(sum(row.get(key, 0.0) for row in mine) / len(mine), 2)
                        for key in ("wall_s", "ray_startup_s", "images_per_s", "steady_images_per_s")}
    if "local" in summary:
        for arm in args.arms.split(","):
            if arm != "local":
                summary[arm]["vs_local"] = round(summary[arm]["images_per_s"] / summary["local"]["images_per_s"], 3)
                summary[arm]["steady_vs_local"] = round(
                    summary[arm]["steady_images_per_s"] / max(summary["local"]["steady_images_per_s"], 1e-9), 3)
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
