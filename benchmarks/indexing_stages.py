"""Indexing, stage by stage: decode+preprocess, model, writes, and end to end, side by side in one run.

Each arm times one stage of ``Gallery.add`` on the same photos, with pictrieve's own code:

- ``decode (threads)``: :func:`prepare_file` (hash, photo metadata, JPEG draft decode, perceptual hash and the
  offline default's pixel recipe) in ``--workers`` threads, ``window = 4 x batch`` in flight: no model, no store;
- ``decode (processes)``: the same calls in a pool of ``--workers`` processes (the results pickled back), to see
  whether the decode threads are held back by the GIL;
- ``model-only``: the offline default's ``embed_preprocessed`` on inputs preprocessed beforehand, in batches of
  ``--batch``: the bound for any indexer with this model on this machine;
- ``write-only``: ``Gallery.upsert`` of ready vectors and metadata into a new embedded gallery, in batches of
  ``--batch`` (as indexing writes);
- ``index, no model``: ``Gallery.add`` with a do-nothing embedder (the offline default's pixel recipe, constant
  unit vectors): the pipeline without a model;
- ``index, offline``: ``Gallery.add`` with the offline default, end to end.

The arms run interleaved, ``--rounds`` times (one of each per round), and each row gives the median round, so
that a machine shared with other work slows every arm alike; read the rows side by side, not against another
run's. Each arm also reports the CPU time spent per photo (:func:`cpu_seconds`: every thread, Chroma's own
included, and the decode processes), which a loaded machine changes far less than the wall-clock rate. ``--baseline DIR`` (one
or more) runs the two ``Gallery.add`` arms again in a subprocess that imports pictrieve from ``DIR`` (a folder
holding a ``pictrieve`` checkout, e.g. one of main before a change) in the same rounds: the before and after of a
change to indexing, measured together. ``write-only`` writes in upserts of ``--write-rows`` records (default: what
indexing gathers, ``WRITE_ROWS``).

Run:  python benchmarks/indexing_stages.py ../shared/datasets/flickr8k-dev/images
      [--baseline /path/holding/an/older/pictrieve] [--write BENCHMARKS.md] [--json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import logging
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

logger = logging.getLogger("indexing_stages")

SECTION = "## Indexing stages (issue 40)"
ROWS_BEGIN = "<!-- indexing_stages rows: benchmarks/indexing_stages.py --write appends here -->"
ROWS_END = "<!-- /indexing_stages rows -->"
ARMS = ("decode-threads", "decode-processes", "model-only", "write-only", "index-null", "index-offline")
BASELINE_ARMS = ("index-null", "index-offline")
LABELS = {
    "decode-threads": "decode (threads)", "decode-processes": "decode (processes)", "model-only": "model-only",
    "write-only": "write-only", "index-null": "index, no model", "index-offline": "index, offline",
}
HEADER = ("| run (UTC) | load (1 min) | photos, batch, workers, rounds | "
          + " | ".join(f"{LABELS[arm]} img/s (CPU ms/photo)" for arm in ARMS)
          + " | before: index, no model / offline img/s (CPU ms/photo) | command |\n"
          + "| --- " * (len(ARMS) + 5) + "|")


WARM_UP_PHOTOS = 40
"""Photos a warm-up ``Gallery.add`` indexes before the timed rounds, in each process."""


class NullEmbedder:
    """An embedder that costs nothing: the offline default's pixel recipe (so decoding and preprocessing are
    the real work), and one constant unit vector per photo instead of a model.

    A model that costs nothing stands for a fast one, on a GPU, where the offline default takes the decoded pixels
    through torch's resize kernel (``TrainedEmbedder.preprocess_pixels``); ``resize = "pillow"`` (``--resize
    pillow``) takes the CPU's route instead, a PIL image through Pillow's resize."""

    name = "bench-null"
    dim = 384
    flips = True  # as the offline default: the photo and its mirror image
    resize = "torch"

    def preprocess(self, image: Any) -> np.ndarray:
        from pictrieve.tools.models.embedders.trained import TrainedEmbedder

        return TrainedEmbedder.preprocess(self, image)  # the recipe of the checkout imported (see --baseline)

    @property
    def preprocess_pixels(self) -> Callable[[np.ndarray], np.ndarray] | None:
        """The offline default's route for decoded pixels on a GPU (``None`` with ``resize = "pillow"``, and in
        checkouts before it existed, whose indexer never asks)."""
        if self.resize != "torch":
            return None
        from pictrieve.tools.models.embedders import backbone

        return getattr(backbone, "squash_bytes", None)

    def embed_preprocessed(self, batch: Sequence[Any]) -> np.ndarray:
        vectors = np.zeros((len(batch), self.dim), dtype=np.float32)
        vectors[:, 0] = 1.0
        return vectors

    def embed_images(self, images: Sequence[Any]) -> np.ndarray:
        return self.embed_preprocessed([self.preprocess(image) for image in images])

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_preprocessed(list(texts))


def offline_embedder() -> Any:
    from pictrieve.tools.models.embedders.factory import create_embedder

    return create_embedder("offline")


def planned(paths: Sequence[Path], name: str) -> list[Any]:
    from pictrieve.vectorstore.chroma_store import path_id
    from pictrieve.vectorstore.indexing import PlannedFile

    return [PlannedFile(str(path), path_id(path), [name]) for path in paths]


def decode_arm(paths: Sequence[Path], batch: int, workers: int, pool_kind: str) -> tuple[float, list[Any]]:
    """images/s of :func:`prepare_file` for every photo in a pool (threads or processes); the prepared files."""
    from pictrieve.vectorstore.indexing import FailedImage, _prefetch, prepare_file

    embedder = NullEmbedder()
    prepare = functools.partial(prepare_file, embedders={embedder.name: embedder})
    pool_type: Callable[..., Executor] = ThreadPoolExecutor if pool_kind == "threads" else ProcessPoolExecutor
    prepared = []
    with pool_type(max_workers=max(1, workers)) as pool:
        if pool_kind == "processes":  # start the workers outside the timed region
            list(pool.map(abs, range(workers)))
        start = time.perf_counter()
        for _, item in _prefetch(pool, planned(paths, embedder.name), prepare, window=4 * batch):
            if isinstance(item, FailedImage):
                raise RuntimeError(f"benchmark photo unreadable: {item.error}")
            prepared.append(item)
        elapsed = time.perf_counter() - start
    return len(paths) / elapsed, prepared


def model_only_arm(embedder: Any, inputs: Sequence[Any], batch: int) -> float:
    """images/s of ``embed_preprocessed`` on inputs preprocessed beforehand."""
    embedder.embed_preprocessed(inputs[:batch])  # warm-up: sessions made, memory allocated
    start = time.perf_counter()
    for i in range(0, len(inputs), batch):
        embedder.embed_preprocessed(inputs[i : i + batch])
    return len(inputs) / (time.perf_counter() - start)


def write_arm(prepared: Sequence[Any], batch: int, scratch: Path) -> float:
    """images/s of ``Gallery.upsert`` of ready vectors and metadata, in batches, into a new gallery."""
    from pictrieve.vectorstore.gallery import Gallery

    embedder = NullEmbedder()
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(len(prepared), embedder.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    gallery = Gallery.open(scratch, embedder)
    gallery.create()
    start = time.perf_counter()
    with gallery.writing():
        for i in range(0, len(prepared), batch):
            chunk = prepared[i : i + batch]
            gallery.upsert([p.id for p in chunk], vectors[i : i + batch], [dict(p.metadata) for p in chunk])
    elapsed = time.perf_counter() - start
    if gallery.count() != len(prepared):
        raise RuntimeError(f"wrote {gallery.count()} of {len(prepared)} records")
    return len(prepared) / elapsed


def index_arm(embedder: Any, paths: Sequence[Path], batch: int, workers: int, scratch: Path) -> float:
    """images/s of ``Gallery.add`` into a new embedded gallery (decode, embed and writes)."""
    from pictrieve.vectorstore.gallery import Gallery

    gallery = Gallery.open(scratch, embedder)
    start = time.perf_counter()
    report = gallery.add(list(paths), batch_size=batch, workers=workers, progress=False)
    elapsed = time.perf_counter() - start
    if report.indexed != len(paths) or gallery.count() != len(paths):
        raise RuntimeError(f"indexed {report.indexed} (stored {gallery.count()}) of {len(paths)}: {report.failed[:3]}")
    return len(paths) / elapsed


def run_round(arms: Sequence[str], paths: Sequence[Path], batch: int, workers: int,
              offline: Any | None, write_rows: int) -> dict[str, float]:
    """One of each arm in ``arms``, in order; images/s by arm, and CPU ms a photo by ``"ARM cpu_ms"``."""
    rates: dict[str, float] = {}
    prepared: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="indexing-stages-") as scratch:
        for arm in arms:
            folder = Path(scratch) / arm
            if arm == "write-only" and not prepared:
                _, prepared = decode_arm(paths, batch, workers, "threads")  # its input, outside its CPU time
            if arm == "model-only":
                inputs = [offline.preprocess(_load(path)) for path in paths]
            began = cpu_seconds()
            if arm == "decode-threads":
                rates[arm], prepared = decode_arm(paths, batch, workers, "threads")
            elif arm == "decode-processes":
                rates[arm], _ = decode_arm(paths, batch, workers, "processes")
            elif arm == "model-only":
                rates[arm] = model_only_arm(offline, inputs, batch)
            elif arm == "write-only":
                rates[arm] = write_arm(prepared, write_rows, folder)
            elif arm == "index-null":
                rates[arm] = index_arm(NullEmbedder(), paths, batch, workers, folder)
            elif arm == "index-offline":
                rates[arm] = index_arm(offline, paths, batch, workers, folder)
            rates[f"{arm} cpu_ms"] = (cpu_seconds() - began) / len(paths) * 1e3
            logger.info("%s: %.1f images/s, %.2f ms of CPU a photo", arm, rates[arm], rates[f"{arm} cpu_ms"])
    return rates


def cpu_seconds() -> float:
    """CPU time of this process (every thread; ``time.process_time``, to the nanosecond: ``os.times`` counts this
    process in 10 ms ticks, which a tiny run's arm could stay under and report 0) and of its finished children (the
    decode processes, once joined)."""
    children = os.times()
    return time.process_time() + children.children_user + children.children_system


def _load(path: Path) -> Any:
    from pictrieve.tools.core.images import load_image
    from pictrieve.vectorstore.indexing import DRAFT_SIZE

    return load_image(path, draft_size=DRAFT_SIZE)


def baseline_round(baseline: Path, arms: Sequence[str], args: argparse.Namespace) -> dict[str, float]:
    """The ``Gallery.add`` arms, run by this script in a subprocess importing pictrieve from ``baseline``."""
    command = [sys.executable, str(Path(__file__).resolve()), str(args.images), "--limit", str(args.limit),
               "--batch", str(args.batch), "--workers", str(args.workers), "--rounds", "1",
               "--arms", ",".join(arms), "--write-rows", str(write_rows_of(args)), "--resize", args.resize, "--json"]
    env = {**os.environ, "PYTHONPATH": str(baseline)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"baseline run failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)["rates"]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import pictrieve

    paths = sorted(path for path in args.images.iterdir() if path.suffix.lower() in {".jpg", ".jpeg", ".png"})
    paths = paths[: args.limit]
    arms = [arm for arm in args.arms.split(",") if arm]
    offline = offline_embedder() if {"model-only", "index-offline"} & set(arms) else None
    if offline is not None:
        offline.embed_preprocessed([offline.preprocess(_load(paths[0]))])  # load the model outside the timings
    NullEmbedder.resize = args.resize
    pixels_route = NullEmbedder().preprocess_pixels
    if pixels_route is not None:  # import torch outside the timings, as a GPU process has it loaded
        pixels_route(np.zeros((8, 8, 3), dtype=np.uint8))
    if "index-null" in arms:  # a process's first Gallery.add pays one-off costs (imports, checks made once per
        # process, Chroma's first client): paid here, so that every round (and every --baseline's one round, in a
        # process of its own) is timed warm
        with tempfile.TemporaryDirectory(prefix="indexing-stages-warm-") as scratch:
            index_arm(NullEmbedder(), paths[:WARM_UP_PHOTOS], args.batch, args.workers, Path(scratch) / "warm")
    rounds: list[dict[str, float]] = []
    baselines = list(args.baseline or [])
    before: dict[str, list[dict[str, float]]] = {str(folder): [] for folder in baselines}
    loads: list[float] = []
    for k in range(args.rounds):
        rounds.append(run_round(arms, paths, args.batch, args.workers, offline, write_rows_of(args)))
        for folder in baselines:
            before[str(folder)].append(baseline_round(folder, [a for a in BASELINE_ARMS if a in arms], args))
        loads.append(os.getloadavg()[0])
        logger.info("round %d of %d done (load %.1f)", k + 1, args.rounds, loads[-1])
    return {
        "photos": len(paths), "batch": args.batch, "workers": args.workers, "rounds": args.rounds,
        "write_rows": write_rows_of(args), "load": statistics.median(loads), "load_per_round": loads,
        "cores": os.cpu_count(), "pictrieve": str(Path(pictrieve.__file__).parent),
        "rates": {key: statistics.median(r[key] for r in rounds) for key in rounds[0]},
        "per_round": rounds,
        "before": {folder: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
                   for folder, runs in before.items()},
        "before_per_round": before,
    }


def write_rows_of(args: argparse.Namespace) -> int:
    """Records per upsert in the write-only arm: ``--write-rows``, else what this checkout's indexing gathers."""
    if args.write_rows:
        return args.write_rows
    from pictrieve.vectorstore import indexing

    return max(args.batch, int(getattr(indexing, "WRITE_ROWS", args.batch)))


def markdown_row(results: dict[str, Any], command: str) -> str:
    rates, before = results["rates"], results["before"]
    cells = [
        dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        f"{results['load']:.1f} ({results['cores']} cores)",
        f"{results['photos']}, {results['batch']}, {results['workers']}, {results['rounds']}",
        *(_rate_cell(rates, arm) for arm in ARMS),
        "; ".join(f"{Path(folder).name}: " + " / ".join(_rate_cell(found, arm) for arm in BASELINE_ARMS)
                  for folder, found in before.items()) or "-",
        f"`{command}`",
    ]
    return "| " + " | ".join(cells) + " |"


def _rate_cell(rates: dict[str, float], arm: str) -> str:
    if arm not in rates:
        return "-"
    cpu = rates.get(f"{arm} cpu_ms")
    return f"{rates[arm]:.0f}" + (f" ({cpu:.1f})" if cpu is not None else "")


def write_row(path: Path, row: str, *, section: str = SECTION, header: str = HEADER, begin: str = ROWS_BEGIN,
              end: str = ROWS_END) -> None:
    """Append ``row`` to the table between ``begin`` and ``end`` in ``path`` (the ``section`` heading, ``header``
    and markers are added at the end when missing): this benchmark's table by default, another's when given."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if end not in text:
        text = text.rstrip("\n") + f"\n\n{section}\n\n{header}\n{begin}\n{end}\n"
    head, tail = text.split(end, 1)
    path.write_text(f"{head}{row}\n{end}{tail}", encoding="utf-8")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("images", type=Path, help="folder of photos (e.g. ../shared/datasets/flickr8k-dev/images)")
    parser.add_argument("--limit", type=int, default=500, help="photos taken from the folder (default 500)")
    parser.add_argument("--batch", type=int, default=32, help="images per model call and write (default 32)")
    parser.add_argument("--workers", type=int, default=2, help="decode threads or processes (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; rows give the median (default 3)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms (default all: {','.join(ARMS)})")
    parser.add_argument("--baseline", type=Path, action="append", default=None,
                        help="a folder holding another pictrieve checkout: its Gallery.add arms run in the same rounds "
                             "(give it again for more checkouts)")
    parser.add_argument("--write-rows", type=int, default=0,
                        help="records per upsert in the write-only arm (default: what indexing gathers)")
    parser.add_argument("--write", type=Path, default=None, help="append the run's row to this markdown file")
    parser.add_argument("--resize", choices=("torch", "pillow"), default="torch",
                        help="the no-model arms' resize: torch's kernel on decoded pixels, as the offline default's "
                             "route on a GPU (default), or Pillow's on a PIL image, its route on a CPU")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if not args.images.is_dir():
        parser.error(f"{args.images} is not a folder of photos")
    for name in ("limit", "batch", "workers", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    unknown = set(args.arms.split(",")) - set(ARMS) - {""}
    if unknown:
        parser.error(f"unknown arms {sorted(unknown)}; choose from {', '.join(ARMS)}")
    for folder in args.baseline or []:
        if not (folder / "pictrieve").is_dir():
            parser.error(f"--baseline {folder} holds no pictrieve folder")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if not args.json else logging.WARNING, format="%(message)s")
    results = measure(args)
    command = "python benchmarks/indexing_stages.py " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    if args.write is not None:
        write_row(args.write, markdown_row(results, command))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for arm in ARMS:
            if arm in results["rates"]:
                print(f"{LABELS[arm]:>20}: {_rate_cell(results['rates'], arm)} images/s (CPU ms/photo)" + "".join(
                    f"   {Path(folder).name}: {_rate_cell(found, arm)}" for folder, found in results["before"].items()
                    if arm in found))
    return results


if __name__ == "__main__":
    main()
