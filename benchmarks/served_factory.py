"""What a served graph request costs the server once its parts are loaded, before and after the load log.

LangGraph's server calls a method's factory for every run and every read of a graph (its schema, a thread's
state). Since 76b648b the factory builds through ``graphs.serving._graph_for_run``, which wraps
:func:`~pictrieve.graphs.serving.served_graph` in :func:`~pictrieve.tools.core.model_cache.recording_builds` to log
any part a request had to load. This measures both in one process, interleaved, after a warm-up that loads every
part: ``served_graph`` (what the factory ran before) and ``_graph_for_run`` (what it runs now), the time of one call
on one thread (median and p95 over ``--calls``, in rounds that alternate the two), for each method that builds with
the operator's settings given here (a gallery of ``--photos`` indexed with ``--embedder`` into a temporary folder; no
chat endpoint, so the offline chat model where a method needs one).

Run:  OMP_NUM_THREADS=1 python benchmarks/served_factory.py ../shared/datasets/flickr8k-dev/images \\
          [--limit 20] [--calls 400] [--out benchmarks/results/served_factory]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

log = logging.getLogger("served_factory")


def time_calls(call: Callable[[], Any], calls: int) -> np.ndarray:
    """Seconds of each of ``calls`` calls."""
    times = np.empty(calls)
    for i in range(calls):
        started = time.perf_counter()
        call()
        times[i] = time.perf_counter() - started
    return times


def measure(method: str, calls: int, rounds: int) -> dict[str, Any]:
    """Both arms for ``method``, alternating in ``rounds`` rounds of ``calls // rounds`` calls each."""
    from pictrieve.graphs import serving

    arms: dict[str, Callable[[], Any]] = {"served_graph (before)": lambda: serving.served_graph(method),
                                          "_graph_for_run (after)": lambda: serving._graph_for_run(method, {})}
    for call in arms.values():  # warm: every part loaded, every import done
        call()
    found: dict[str, list[np.ndarray]] = {name: [] for name in arms}
    for _ in range(rounds):
        for name, call in arms.items():
            found[name].append(time_calls(call, max(1, calls // rounds)))
    result = {}
    for name, parts in found.items():
        times = np.concatenate(parts) * 1000
        result[name] = {"calls": int(times.size), "median_ms": round(float(np.median(times)), 3),
                        "p95_ms": round(float(np.percentile(times, 95)), 3)}
    before, after = (result[name]["median_ms"] for name in arms)
    result["after_minus_before_median_ms"] = round(after - before, 3)
    return result


def build_gallery(photos: Path, limit: int, embedder: str, folder: Path) -> str:
    from pictrieve.vectorstore.gallery import Gallery

    picked = folder / "photos"
    picked.mkdir()
    for path in sorted(p for p in photos.iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png"})[:limit]:
        (picked / path.name).symlink_to(path.resolve())
    location = folder / "bench.gallery"
    Gallery.open(location, embedder).add(picked, progress=False)
    return str(location)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("photos", type=Path, help="a folder of photos for the served gallery")
    parser.add_argument("--limit", type=int, default=20, help="photos indexed (default 20)")
    parser.add_argument("--embedder", default="offline")
    parser.add_argument("--methods", default="search,plugir,vsa", help="comma-separated served methods")
    parser.add_argument("--calls", type=int, default=400, help="calls per arm and method (default 400)")
    parser.add_argument("--rounds", type=int, default=8, help="alternations of the two arms (default 8)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/served_factory"))
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    when = dt.datetime.now(dt.timezone.utc)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="served-factory-") as folder:
        log.info("indexing %d photos with %s ...", args.limit, args.embedder)
        os.environ["PICTRIEVE_GALLERY"] = build_gallery(args.photos, args.limit, args.embedder, Path(folder))
        for method in args.methods.split(","):
            log.info("%s ...", method)
            try:
                results[method] = measure(method, args.calls, args.rounds)
            except Exception as exc:  # noqa: BLE001 - a method this setup cannot build is reported, not measured
                results[method] = {"not built": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}
            log.info("%s: %s", method, json.dumps(results[method]))
    command = shlex.join(["python", "benchmarks/served_factory.py", *(sys.argv[1:] if argv is None else argv)])
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{when:%Y-%m-%d-%H%M}.json"
    out.write_text(json.dumps({"command": command, "date": when.isoformat(timespec="seconds"),
                               "load_average": os.getloadavg(), "results": results}, indent=1) + "\n")
    log.info("written %s", out)
    return results


if __name__ == "__main__":
    main()
