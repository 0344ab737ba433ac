"""GPU indexing and search, ready to measure: open_clip ViT-B-32 images/s on CUDA and search p95.

Run it whenever a GPU machine is at hand; it appends one row per run to BENCHMARKS.md's section
"GPU indexing and search (issue 31)" (``--write``), with the device, the torch and CUDA versions and
the command. Until a row from CUDA is there, that section says "GPU: not measured".

Three indexing arms over the same photos (each file repeated ``--repeat`` times, as distinct files,
so that a fast GPU runs long enough for a stable number), all with pictrieve's own code. Each repeat is a
copy with a few bytes appended after the image data (decoders ignore them): its content hash differs, so
``Gallery.add`` embeds it instead of copying the first one's vector (it copies the vector of a file whose
content it has already stored, which would time that shortcut instead of indexing):

- ``model-only``: the embedder's ``embed_preprocessed`` on tensors decoded and preprocessed
  beforehand, in batches of ``--batch``: the bound for any indexer with this model on this device;
- ``decode+embed``: pictrieve's indexing pipeline minus the database: :func:`prepare_file` (hash,
  metadata, decode once, preprocess) in ``--workers`` threads, ``window = 4 x batch`` in flight,
  beside batched model calls (what ``Gallery.add`` does, without the Chroma writes);
- ``pictrieve index``: ``Gallery.add`` into a fresh embedded gallery, end to end (writes included).

The last two run twice: with the photos decoded on the CPU (on CUDA the decode threads stop at resized bytes, which
go to the GPU through pinned memory without waiting and are scaled there: ``pixels_on_device``), and with the JPEGs
decoded on the device (``decode_on_device``: torchvision's nvJPEG ``decode_jpeg``; the threads read bytes, hash
them and decode a small draft for the perceptual hash): issue 40's "GPU decoding where it pays", measured.

Then a gallery of ``--gallery-size`` synthetic unit vectors (clustered like image embeddings, see
``search_latency.py``) of the model's dimension is stored, and ``Gallery.search_text`` (the text
tower on the device plus the HNSW query) and ``Gallery.search_vector`` (the query alone) are timed.

On CUDA pictrieve's open_clip embedder holds its weights in fp16 (open_clip's ``precision="fp16"``),
so every arm runs in fp16 there: the arithmetic of fp16 autocast without its per-op casts. Random
weights (``ViT-B-32/random``, the default) cost exactly what the real ones do: speed does not depend
on the weights, and none can be downloaded here.

Run (GPU):   python benchmarks/gpu_indexing.py ../shared/datasets/flickr8k-dev/images --write BENCHMARKS.md
Dry run (CPU, every arm and code path, the GPU paths on the CPU): python benchmarks/gpu_indexing.py \\
                 ../shared/datasets/flickr8k-dev/images --dry-run [--write /tmp/rows.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from search_latency import percentiles, synthetic_vectors

logger = logging.getLogger("gpu_indexing")

DEFAULT_MODEL = "open_clip:ViT-B-32/random"
DRY_RUN_MODEL = f"open_clip:{Path(__file__).resolve().parents[1] / 'tests' / 'data' / 'pictrieve-tiny-clip.json'}/random"
"""The tests' tiny random CLIP: a dry run checks that every arm runs, not how fast."""
SECTION = "## GPU indexing and search (issue 31)"
ROWS_BEGIN = "<!-- gpu_indexing rows: benchmarks/gpu_indexing.py --write appends here -->"
ROWS_END = "<!-- /gpu_indexing rows -->"
NOT_MEASURED = "| GPU: not measured (no GPU machine was lent) | | | | | | | | | |"
HEADER = (
    "| run (UTC) | device | torch / CUDA | model, precision, runtime | images x repeat, batch, workers "
    "| model-only img/s | decode+embed img/s (CPU / GPU decode) | `pictrieve index` img/s (CPU / GPU decode) "
    "| search p50 / p95 ms (vectors) | command |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


@dataclass
class Setup:
    """What one run measures with: the photos (repeated), the model, the batch and the decode workers."""

    paths: list[Path]
    repeat: int
    batch: int
    workers: int
    device: str
    model: str
    dry_run: bool = False


def repeated_copies(paths: Sequence[Path], repeat: int, folder: Path) -> list[Path]:
    """``repeat`` files of distinct content per photo in ``folder``, each decoding to the same pixels.

    Indexing skips a path seen before and copies the stored vector of a file whose content (sha256) it
    already has, so neither a repeated path nor a hard link would be embedded again. Each copy ends with a
    marker of its own after the image data, which decoders ignore: the same decoding work, another hash."""
    out = []
    for k in range(repeat):
        for path in paths:
            target = folder / f"r{k}-{path.name}"
            shutil.copyfile(path, target)
            with target.open("ab") as file:
                file.write(f"pictrieve-benchmark-copy-{k}".encode())
            out.append(target)
    return out


def model_only_arm(embedder: Any, paths: Sequence[Path], repeat: int, batch: int) -> float:
    """images/s of ``embed_preprocessed`` on tensors prepared beforehand (the model's bound)."""
    from pictrieve.tools.core.images import load_image
    from pictrieve.vectorstore.indexing import DRAFT_SIZE

    tensors = [embedder.preprocess(load_image(p, draft_size=DRAFT_SIZE)) for p in paths]
    embedder.embed_preprocessed(tensors[:batch])  # warm-up: kernels chosen, memory allocated
    work = tensors * repeat
    start = time.perf_counter()
    for i in range(0, len(work), batch):
        embedder.embed_preprocessed(work[i : i + batch])  # returns numpy: the device has finished
    return len(work) / (time.perf_counter() - start)


def decode_embed_arm(embedder: Any, paths: Sequence[Path], batch: int, workers: int) -> float:
    """images/s of pictrieve's decode pool (``prepare_file`` in threads) beside batched model calls."""
    import functools

    from pictrieve.vectorstore.chroma_store import path_id
    from pictrieve.vectorstore.indexing import FailedImage, PlannedFile, _prefetch, prepare_file

    name = embedder.name
    todo = [PlannedFile(str(p), path_id(p), [name]) for p in paths]
    prepare = functools.partial(prepare_file, embedders={name: embedder})
    done, pending = 0, []
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="bench-decode") as pool:
        for _, prepared in _prefetch(pool, todo, prepare, window=4 * batch):
            if isinstance(prepared, FailedImage):
                raise RuntimeError(f"benchmark photo unreadable: {prepared.error}")
            pending.append(prepared.inputs[name])
            if len(pending) >= batch:
                done += len(embedder.embed_preprocessed(pending))
                pending = []
        if pending:
            done += len(embedder.embed_preprocessed(pending))
    return done / (time.perf_counter() - start)


def index_arm(embedder: Any, paths: Sequence[Path], batch: int, workers: int, scratch: Path) -> float:
    """images/s of ``Gallery.add`` into a new embedded gallery (decode, embed and Chroma writes)."""
    from pictrieve.vectorstore.gallery import Gallery

    gallery = Gallery.open(scratch / "index-arm", embedder)
    start = time.perf_counter()
    report = gallery.add(paths, batch_size=batch, workers=workers, progress=False)
    elapsed = time.perf_counter() - start
    if report.indexed != len(paths):
        raise RuntimeError(f"indexed {report.indexed} of {len(paths)}: {report.failed[:3]}")
    if report.copied:
        raise RuntimeError(f"{report.copied} of {len(paths)} photos had a stored twin and were copied, not embedded")
    return len(paths) / elapsed


def search_arm(embedder: Any, size: int, queries: int, scratch: Path) -> dict[str, Any]:
    """p50/p95 of ``search_text`` and ``search_vector`` over ``size`` stored synthetic vectors."""
    from pictrieve.vectorstore.gallery import Gallery

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(min(2000, max(1, size // 10)), embedder.dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    vectors = synthetic_vectors(size, np.random.default_rng(size), centres)
    gallery = Gallery.open(scratch / "search-arm", embedder)
    step = 5000
    for i in range(0, size, step):
        ids = range(i, min(size, i + step))
        gallery.upsert([f"v{j}" for j in ids], vectors[i : i + step], [{"path": f"/synthetic/{j}.jpg"} for j in ids])
    texts = [f"a photo of scene number {i} with a dog" for i in range(queries)]
    query_vectors = synthetic_vectors(queries, np.random.default_rng(size + 1), centres)
    gallery.search_text(texts[0], k=10)  # warm-up
    text_s, vector_s = [], []
    for text, vector in zip(texts, query_vectors):
        t0 = time.perf_counter()
        gallery.search_text(text, k=10)
        text_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        gallery.search_vector(vector, k=10)
        vector_s.append(time.perf_counter() - t0)
    return {"vectors": size, "queries": queries, "search_text": percentiles(text_s),
            "search_vector": percentiles(vector_s)}


def device_name(device: str) -> str:
    """The GPU's name, or the CPU's model and core count."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    model = ""
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    except OSError:
        pass
    return f"CPU {model} ({os.cpu_count()} cores, torch threads {torch.get_num_threads()})".replace("  ", " ")


def image_runtime(embedder: Any) -> str:
    """``"onnx"`` when the image tower runs on ONNX Runtime (a CPU, by default), else ``"torch"``."""
    return "onnx" if getattr(embedder, "image_runtime", None) is not None else "torch"


def versions() -> str:
    import torch

    return f"torch {torch.__version__} / CUDA {torch.version.cuda or 'none'}"


def markdown_row(results: dict[str, Any], command: str) -> str:
    """One table row of a run (see :data:`HEADER`)."""
    search = results["search"]
    return "| " + " | ".join([
        results["run_utc"], results["device"], results["versions"], f"{results['model']}, {results['precision']}, {results['runtime']}",
        f"{results['images']} x {results['repeat']}, {results['batch']}, {results['workers']}",
        f"{results['model_only_images_per_s']:.1f}",
        f"{results['decode_embed_images_per_s']:.1f} / {results['gpu_decode_embed_images_per_s']:.1f}",
        f"{results['index_images_per_s']:.1f} / {results['gpu_decode_index_images_per_s']:.1f}",
        f"{search['search_text']['p50_ms']} / {search['search_text']['p95_ms']} "
        f"(vector alone {search['search_vector']['p95_ms']}; {search['vectors']:,})",
        f"`{command}`",
    ]) + " |"


def section_text(rows: Sequence[str]) -> str:
    """The section as written when a file has none yet."""
    return "\n".join([
        SECTION, "",
        "Written by `benchmarks/gpu_indexing.py --write` (see its docstring: the three indexing arms and the search).",
        "open_clip ViT-B-32 with random weights: speed does not depend on the weights, and none can be",
        "downloaded here. On CUDA the embedder runs in fp16.", "",
        HEADER, ROWS_BEGIN, *rows, ROWS_END, "",
    ])


def write_row(path: Path, row: str, measured_gpu: bool) -> None:
    """Append ``row`` to the section's table in ``path`` (created with the section when missing). A row
    measured on a GPU removes the "not measured" line."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if ROWS_BEGIN not in text or ROWS_END not in text:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section_text([row])
    else:
        head, rest = text.split(ROWS_BEGIN, 1)
        rows, tail = rest.split(ROWS_END, 1)
        kept = [line for line in rows.strip("\n").splitlines()
                if line.strip() and not (measured_gpu and line.strip() == NOT_MEASURED)]
        text = head + ROWS_BEGIN + "\n" + "\n".join([*kept, row]) + "\n" + ROWS_END + tail
    path.write_text(text, encoding="utf-8")


def run(setup: Setup, gallery_size: int, queries: int) -> dict[str, Any]:
    """Every arm once, on one model loaded once; the results as a dict."""
    from pictrieve.tools.core.devices import pick_device
    from pictrieve.tools.models.embedders.factory import create_embedder

    device = pick_device(setup.device)
    embedder = create_embedder(setup.model, device=device)
    if setup.dry_run:  # the CUDA paths (resized bytes scaled by torch, JPEGs decoded by torchvision) on this CPU
        embedder.pixels_on_device = True
    results: dict[str, Any] = {
        "run_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "device": device_name(device), "versions": versions(), "model": embedder.name,
        "precision": getattr(embedder, "precision", "fp32"), "runtime": image_runtime(embedder),
        "images": len(setup.paths),
        "repeat": setup.repeat, "batch": setup.batch, "workers": setup.workers,
    }
    with tempfile.TemporaryDirectory(prefix="gpu-indexing-") as scratch_name:
        scratch = Path(scratch_name)
        copies = scratch / "photos"
        copies.mkdir()
        repeated = repeated_copies(setup.paths, setup.repeat, copies)
        # Each arm's number is logged as soon as it is measured, so a run cut short (a device lease ending)
        # still reports the arms it finished.
        logger.info("model-only: %d images in batches of %d", len(repeated), setup.batch)
        results["model_only_images_per_s"] = model_only_arm(embedder, setup.paths, setup.repeat, setup.batch)
        logger.info("model-only: %.1f images/s", results["model_only_images_per_s"])
        logger.info("decode+embed: %d workers", setup.workers)
        results["decode_embed_images_per_s"] = decode_embed_arm(embedder, repeated, setup.batch, setup.workers)
        logger.info("decode+embed: %.1f images/s", results["decode_embed_images_per_s"])
        logger.info("pictrieve index (Gallery.add)")
        results["index_images_per_s"] = index_arm(embedder, repeated, setup.batch, setup.workers, scratch)
        logger.info("pictrieve index: %.1f images/s", results["index_images_per_s"])
        embedder.decode_on_device = True  # the same two arms, the JPEGs decoded on the device
        logger.info("decode+embed, JPEGs decoded on %s", device)
        results["gpu_decode_embed_images_per_s"] = decode_embed_arm(embedder, repeated, setup.batch, setup.workers)
        logger.info("decode+embed, device decode: %.1f images/s", results["gpu_decode_embed_images_per_s"])
        results["gpu_decode_index_images_per_s"] = index_arm(embedder, repeated, setup.batch, setup.workers,
                                                             scratch / "device-decode")
        logger.info("pictrieve index, device decode: %.1f images/s", results["gpu_decode_index_images_per_s"])
        embedder.decode_on_device = False
        logger.info("search over %d vectors", gallery_size)
        results["search"] = search_arm(embedder, gallery_size, queries, scratch)
        logger.info("search: %s", results["search"])
    results["load"] = os.getloadavg()[0]
    for key in ("model_only_images_per_s", "decode_embed_images_per_s", "index_images_per_s",
                "gpu_decode_embed_images_per_s", "gpu_decode_index_images_per_s"):
        results[key] = round(results[key], 2)
    return results


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("images", type=Path, help="folder of photos (e.g. ../shared/datasets/flickr8k-dev/images)")
    parser.add_argument("--device", default="cuda", help="torch device (default cuda; cpu for a smoke run)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"embedder name (default {DEFAULT_MODEL})")
    parser.add_argument("--limit", type=int, default=500, help="photos taken from the folder (default 500)")
    parser.add_argument("--repeat", type=int, default=8, help="times each photo is indexed (default 8)")
    parser.add_argument("--batch", type=int, default=256, help="images per model call (default 256)")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                        help="decode threads (default: the cores, at most 8)")
    parser.add_argument("--gallery-size", type=int, default=100_000, help="vectors searched (default 100,000)")
    parser.add_argument("--queries", type=int, default=200, help="timed searches (default 200)")
    parser.add_argument("--write", type=Path, default=None, help="append the run's row to this markdown file")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--dry-run", action="store_true",
                        help=f"every arm on this CPU, small: --device cpu --model {DRY_RUN_MODEL} --limit 16 --batch 8 "
                             "--repeat 1 --gallery-size 2000 --queries 20, the GPU paths run by torch on the CPU")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.device, args.model = "cpu", DRY_RUN_MODEL
        args.limit, args.batch, args.repeat = min(args.limit, 16), min(args.batch, 8), 1
        args.gallery_size, args.queries = min(args.gallery_size, 2000), min(args.queries, 20)
    for name in ("limit", "repeat", "batch", "workers", "gallery_size", "queries"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not args.images.is_dir():
        parser.error(f"{args.images} is not a folder of photos")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logger.setLevel(logging.INFO)  # our progress lines; open_clip's INFO chatter (root logger) stays quiet
    logging.getLogger("pictrieve").setLevel(logging.ERROR)
    paths = sorted(p for p in args.images.iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png"})[: args.limit]
    if not paths:
        raise SystemExit(f"no .jpg/.png photos in {args.images}")
    setup = Setup(paths, args.repeat, args.batch, args.workers, args.device, args.model, args.dry_run)
    results = run(setup, args.gallery_size, args.queries)
    command = "python " + " ".join(shlex.quote(a) for a in ["benchmarks/gpu_indexing.py", *(argv or sys.argv[1:])])
    if args.write:
        write_row(args.write, markdown_row(results, command), measured_gpu=args.device.startswith("cuda"))
        logger.info("row written to %s", args.write)
    print(json.dumps(results, indent=2) if args.json else results)
    return results


if __name__ == "__main__":
    main()
