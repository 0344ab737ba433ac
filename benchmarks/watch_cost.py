"""What `pictrieve index DIR --watch` costs while it waits, and how soon a copied photo is searchable.

1. Idle CPU of the event source on a folder tree of real photos, inotify (watchdog's Observer) against
   polling (watchdog's PollingObserver, what ``--poll`` and the fallback use), interleaved A, B, A, B: polling
   stats every file on every pass, inotify costs nothing until something changes.
2. Latency: a photo copied into the watched folder until its record can be read from the gallery (the
   watch's quiet and settle waits, then reading, embedding with the given embedder and writing), for ``--n``
   photos one after another, with the watch running in this process (:class:`FolderWatch`).

    python benchmarks/watch_cost.py --tree ../shared/datasets/flickr8k-train/images \\
        --photos ../shared/datasets/flickr8k-dev/images --embedder offline --seconds 20 --n 10

The tree is only watched (read, never written); the latency run works in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path


def idle_cpu(tree: Path, polling: bool, seconds: float, interval: float) -> float:
    """CPU seconds per minute this process spends while a watchdog observer watches ``tree`` and nothing changes."""
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer
    from watchdog.observers.polling import PollingObserver

    observer = PollingObserver(timeout=interval) if polling else Observer()
    observer.schedule(FileSystemEventHandler(), str(tree), recursive=True)
    observer.start()
    time.sleep(min(5.0, seconds / 4))  # the polling observer's first snapshot, inotify's watches: set-up, not idling
    before = time.process_time()
    time.sleep(seconds)
    used = time.process_time() - before
    observer.stop()
    observer.join()
    return used * 60.0 / seconds


def latency(photos: list[Path], embedder: str) -> list[float]:
    """Seconds from each photo's copy into a watched folder until the gallery holds its record."""
    from pictrieve.vectorstore.chroma_store import path_id
    from pictrieve.vectorstore.gallery import Gallery
    from pictrieve.vectorstore.watching import FolderWatch

    with tempfile.TemporaryDirectory() as work:
        folder, location = Path(work) / "photos", Path(work) / "gallery"
        folder.mkdir()
        gallery = Gallery.open(location, embedder)
        ready = threading.Event()
        watch = FolderWatch(gallery.views(), [folder], on_batch=lambda batch: ready.set(), on_note=lambda line: None)
        runner = threading.Thread(target=watch.run)
        runner.start()
        try:
            if not ready.wait(600):
                raise SystemExit("the watch did not catch up in 10 minutes")
            times = []
            for photo in photos:
                target = folder / photo.name
                started = time.perf_counter()
                shutil.copyfile(photo, target)
                while not gallery.metadata_of([path_id(target)]):
                    time.sleep(0.02)
                times.append(time.perf_counter() - started)
            return times
        finally:
            watch.stop()
            runner.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, required=True, help="a folder of photos to watch idle (read only)")
    parser.add_argument("--photos", type=Path, required=True, help="photos to copy in, one by one, for latency")
    parser.add_argument("--embedder", default="offline")
    parser.add_argument("--seconds", type=float, default=20.0, help="idle time measured per run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--poll", type=float, default=2.0, help="the polling observer's interval")
    parser.add_argument("--n", type=int, default=10, help="photos copied in for the latency")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()

    files = sum(1 for _ in args.tree.rglob("*") if _.is_file())
    cpu: dict[str, list[float]] = {"inotify": [], "polling": []}
    for _ in range(args.rounds):  # interleaved: the machine's load changes under both alike
        cpu["inotify"].append(idle_cpu(args.tree, False, args.seconds, args.poll))
        cpu["polling"].append(idle_cpu(args.tree, True, args.seconds, args.poll))
    photos = sorted(p for p in args.photos.iterdir() if p.is_file())[: args.n]
    waits = latency(photos, args.embedder)
    result = {
        "files_watched": files, "poll_interval_s": args.poll, "idle_seconds": args.seconds,
        "idle_cpu_s_per_min": {mode: [round(v, 3) for v in values] for mode, values in cpu.items()},
        "embedder": args.embedder, "latency_s": [round(v, 2) for v in waits],
        "latency_median_s": round(statistics.median(waits), 2), "latency_max_s": round(max(waits), 2),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
