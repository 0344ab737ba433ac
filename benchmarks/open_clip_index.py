"""`pictrieve index` with open_clip ViT-B-32 on torch, ONNX Runtime fp32 and int8, beside Chroma's own multimodal path.

Every arm is a new process over the same photos, as a user runs it, so imports, model loading, decoding and the
Chroma writes are all in the time; the arms take turns (round r starts with arm r):

- ``torch`` / ``onnx-fp32`` / ``onnx-int8``: ``pictrieve index PHOTOS -g NEW_GALLERY -e MODEL --runtime R
  [--quantize int8] --json``;
- ``chroma``: Chroma's documented multimodal path in a new process: a ``PersistentClient`` collection with
  ``OpenCLIPEmbeddingFunction(model_name="ViT-B-32", checkpoint=None)`` (the same architecture with random
  weights: its constructor builds its own model from a name and a checkpoint tag and takes no model object)
  and ``ImageLoader``, fed ``uris`` in batches of ``--batch``.

images/s is the photo count over the process's wall time. ``--startup-runs N`` also indexes a folder of one photo
into a new gallery, N times per arm (interleaved), to measure what a run pays before its photos (imports, model
loading, opening the store: start-up plus one photo); ``images_per_s_after_start`` is then the photo count over
the median wall time minus that median, the rate a much larger run approaches. Then the cold start of ``pictrieve search`` in a new
process on each runtime's gallery, a text query and an image query (``--image``, which runs the image tower),
``--search-runs`` times, interleaved. The ONNX files are exported (and quantised) beforehand in this run's own
cache; the seconds that took are the one-time cost a first ``pictrieve index`` pays. Per-run rows go to ``--out``.

    python benchmarks/open_clip_index.py ../shared/datasets/flickr8k-dev/images --rounds 1 --search-runs 2 \\
        --out benchmarks/results/open_clip_index --json

Threads: what pictrieve chooses (``OMP_NUM_THREADS`` when set, else the usable CPUs); torch picks its own in the
Chroma arm. Random weights cost what real ones cost: speed does not depend on the weights.
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
from typing import Any

MODEL = "open_clip:ViT-B-32/random"
ARMS = {  # name -> `pictrieve index` options, or None for Chroma's own path
    "torch": ["--runtime", "torch"],
    "onnx-fp32": ["--runtime", "onnx", "--quantize", "none"],
    "onnx-int8": ["--runtime", "onnx", "--quantize", "int8"],
    "chroma": None,
}
TEXT_QUERY = "a dog running on the grass"
CLI = [sys.executable, "-m", "pictrieve.cli.main"]
SUFFIXES = {".jpg", ".jpeg", ".png"}

CHROMA_CODE = """
import sys, time, chromadb
from chromadb.config import Settings
from chromadb.utils.data_loaders import ImageLoader
from chromadb.utils.embedding_functions import OpenCLIPEmbeddingFunction
folder, store, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
from pathlib import Path
paths = sorted(str(p) for p in Path(folder).iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png"})
function = OpenCLIPEmbeddingFunction(model_name="ViT-B-32", checkpoint=None, device="cpu")
client = chromadb.PersistentClient(store, settings=Settings(anonymized_telemetry=False))
collection = client.create_collection("bench", embedding_function=function, data_loader=ImageLoader(),
                                      configuration={"hnsw": {"space": "cosine"}})
for i in range(0, len(paths), batch):
    chunk = paths[i:i + batch]
    collection.add(ids=[str(i + j) for j in range(len(chunk))], uris=chunk)
assert collection.count() == len(paths), collection.count()
print(collection.count())
"""


def timed(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-2000:]}")
    return wall, done.stdout


def prepare_exports(env: dict[str, str], model: str) -> dict[str, Any]:
    """Export the tower (fused) and quantise it in this run's cache, in a new process; the seconds each took."""
    code = ("import time, json\nfrom pictrieve.tools.models.embedders.factory import create_embedder\n"
            "from pictrieve.tools.models.onnx_runtime import ensure_exported\n"
            f"e = create_embedder({model!r}, device='cpu'); x = e.image_export()\n"
            "t = time.perf_counter(); ensure_exported(x); a = time.perf_counter() - t\n"
            "t = time.perf_counter(); ensure_exported(x, 'int8'); b = time.perf_counter() - t\n"
            "print(json.dumps({'export_s': round(a, 1), 'quantize_int8_s': round(b, 1), "
            "'fused': x.fusion is not None}))\n")
    wall, out = timed([sys.executable, "-c", code], env)
    return json.loads(out.strip().splitlines()[-1]) | {"process_s": round(wall, 1)}


def index_once(arm: str, images: Path, gallery: Path, env: dict[str, str], model: str, batch: int,
               photos: int) -> float:
    if ARMS[arm] is None:
        wall, out = timed([sys.executable, "-c", CHROMA_CODE, str(images), str(gallery), str(batch)], env)
        indexed = int(out.strip().splitlines()[-1])
    else:
        wall, out = timed([*CLI, "index", str(images), "-g", str(gallery), "-e", model, "--batch-size", str(batch),
                           "--json", *ARMS[arm]], env)
        indexed = json.loads(out)["indexed"]
    if indexed != photos:
        raise SystemExit(f"{arm}: indexed {indexed} of {photos}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("images", type=Path, help="a folder of photos (e.g. ../shared/datasets/flickr8k-dev/images)")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma list of {', '.join(ARMS)}")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--search-runs", type=int, default=2)
    parser.add_argument("--startup-runs", type=int, default=0, help="index one photo this many times per arm")
    parser.add_argument("--out", type=Path, default=None, help="folder for the per-run rows (JSON)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or any(a not in ARMS for a in arms):
        parser.error(f"--arms takes some of {', '.join(ARMS)}")

    work = Path(tempfile.mkdtemp(prefix="pictrieve-open-clip-index-"))
    env = {k: v for k, v in os.environ.items() if k not in ("PICTRIEVE_RUNTIME", "PICTRIEVE_QUANTIZE",
                                                              "PICTRIEVE_ONNX_CACHE")}
    env["PICTRIEVE_CACHE"] = str(work / "cache")
    photos = sum(1 for p in args.images.iterdir() if p.suffix.lower() in SUFFIXES)
    result: dict[str, Any] = {
        "command": "python benchmarks/open_clip_index.py " + " ".join(sys.argv[1:]), "model": args.model,
        "photos": photos, "cpus": len(os.sched_getaffinity(0)), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "load_avg_before": os.getloadavg(),
        "index_runs": [], "search_runs": [], "startup_runs": [],
    }

    def save() -> None:
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "runs.json").write_text(json.dumps(result, indent=2) + "\n")

    try:
        if any(ARMS[a] and "onnx" in ARMS[a] for a in arms):
            result["one_time"] = prepare_exports(env, args.model)
            print(json.dumps(result["one_time"]), file=sys.stderr, flush=True)
        galleries: dict[str, Path] = {}
        for round_ in range(args.rounds):
            order = arms[round_ % len(arms):] + arms[: round_ % len(arms)]
            for arm in order:
                gallery = work / f"gallery-{arm}-{round_}"
                wall = index_once(arm, args.images, gallery, env, args.model, args.batch, photos)
                galleries.setdefault(arm, gallery)
                row = {"arm": arm, "round": round_, "wall_s": round(wall, 2), "images_per_s": round(photos / wall, 3),
                       "load_avg": [round(x, 2) for x in os.getloadavg()]}
                result["index_runs"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                save()
        photo = sorted(p for p in args.images.iterdir() if p.suffix.lower() in SUFFIXES)[0]
        if args.startup_runs:
            single = work / "one-photo"
            single.mkdir()
            (single / photo.name).symlink_to(photo.resolve())
        for run in range(args.startup_runs):
            for arm in arms[run % len(arms):] + arms[: run % len(arms)]:
                wall = index_once(arm, single, work / f"gallery-one-{arm}-{run}", env, args.model, args.batch, 1)
                row = {"arm": arm, "run": run, "wall_s": round(wall, 2)}
                result["startup_runs"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                save()
        searchable = [a for a in arms if ARMS[a] is not None]
        for run in range(args.search_runs):
            order = searchable[run % len(searchable):] + searchable[: run % len(searchable)]
            for arm in order:
                for kind, query in (("text", [TEXT_QUERY]), ("image", ["--image", str(photo)])):
                    wall, _ = timed([*CLI, "search", *query, "-g", str(galleries[arm]), "-k", "5", *ARMS[arm]], env)
                    row = {"arm": arm, "kind": kind, "run": run, "wall_s": round(wall, 2)}
                    result["search_runs"].append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
                    save()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["load_avg_after"] = os.getloadavg()
    reference = [r["images_per_s"] for r in result["index_runs"] if r["arm"] == "torch"]
    result["summary"] = {}
    for arm in arms:
        rates = [r["images_per_s"] for r in result["index_runs"] if r["arm"] == arm]
        row: dict[str, Any] = {"images_per_s_median": statistics.median(rates)}
        if reference:
            row["x_torch"] = round(row["images_per_s_median"] / statistics.median(reference), 3)
        starts = [r["wall_s"] for r in result["startup_runs"] if r["arm"] == arm]
        if starts:
            row["startup_s_median"] = statistics.median(starts)
            walls = [r["wall_s"] for r in result["index_runs"] if r["arm"] == arm]
            after = statistics.median(walls) - row["startup_s_median"]
            if after > 0:  # else the folder was too small to tell
                row["images_per_s_after_start"] = round(photos / after, 3)
        for kind in ("text", "image"):
            walls = [r["wall_s"] for r in result["search_runs"] if r["arm"] == arm and r["kind"] == kind]
            if walls:
                row[f"search_{kind}_s_median"] = statistics.median(walls)
        result["summary"][arm] = row
    after_start = result["summary"].get("torch", {}).get("images_per_s_after_start")
    for row in result["summary"].values():
        if after_start and "images_per_s_after_start" in row:
            row["x_torch_after_start"] = round(row["images_per_s_after_start"] / after_start, 3)
    save()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for arm, row in result["summary"].items():
        print(arm, row)


if __name__ == "__main__":
    main()
