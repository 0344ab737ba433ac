"""The offline default on torch, ONNX Runtime fp32 and ONNX Runtime int8: indexing speed, recall, cold start.

One run measures the arms side by side, interleaved (round r starts with arm r, so no arm always runs
first on a machine whose load drifts):

- **indexing**: ``pictrieve index PHOTOS -g NEW_GALLERY --runtime R [--quantize int8] --json`` in a new
  process, as a user runs it (imports, model loading and the Chroma writes included); images/s is the
  photo count over the command's wall time;
- **recall**: every caption of ``FOLDER/captions.jsonl`` as a text query against each arm's first
  gallery (tie-aware Recall@1/5/10, the same ranker as ``pictrieve eval retrieval``); per-query results go
  to ``--out``, and each arm's per-query Recall@10 is compared with torch's by a paired bootstrap;
- **cold start**: ``pictrieve search`` in a new process on that gallery, a text query and an image query
  (the image query runs the trunk), ``--search-runs`` times per arm, interleaved.

The ONNX files are exported (and quantised) once before the timed runs, into this run's own cache; the
time that took is reported as the one-time cost a first indexing pays.

    python benchmarks/indexing_runtimes.py ../shared/datasets/flickr8k-dev --rounds 2 --search-runs 3 \\
        --out benchmarks/results/indexing-runtimes --json

Threads: the arms use what pictrieve chooses (``OMP_NUM_THREADS`` when set, else the usable CPUs).
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

import numpy as np

ARMS = {  # name -> extra command-line options
    "torch": ["--runtime", "torch"],
    "onnx-fp32": ["--runtime", "onnx", "--quantize", "none"],
    "onnx-int8": ["--runtime", "onnx", "--quantize", "int8"],
}
TEXT_QUERY = "a dog running on the grass"
CLI = [sys.executable, "-m", "pictrieve.cli.main"]


def timed(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-2000:]}")
    return wall, done.stdout


def prepare_exports(env: dict[str, str]) -> dict[str, float]:
    """Export the trunk and quantise it in this run's cache; the seconds each took (in a new process)."""
    code = ("import time, json\nfrom pictrieve.tools.models.embedders.backbone import trunk_export\n"
            "from pictrieve.tools.models.onnx_runtime import ensure_exported\n"
            "t = time.perf_counter(); ensure_exported(trunk_export()); a = time.perf_counter() - t\n"
            "t = time.perf_counter(); ensure_exported(trunk_export(), 'int8'); b = time.perf_counter() - t\n"
            "print(json.dumps({'export_s': round(a, 1), 'quantize_int8_s': round(b, 1)}))\n")
    wall, out = timed([sys.executable, "-c", code], env)
    return json.loads(out.strip().splitlines()[-1]) | {"process_s": round(wall, 1)}


def recall_rows(folder: Path, galleries: dict[str, Path], out: Path | None) -> dict[str, dict]:
    """Tie-aware recall of every arm's gallery on the same caption queries, paired against torch's."""
    from pictrieve.evaluation.datasets import CaptionedFolder
    from pictrieve.evaluation.harness import caption_queries
    from pictrieve.evaluation.paired import paired_bootstrap
    from pictrieve.evaluation.retrieval import rank_statistics, recall_at
    from pictrieve.vectorstore.gallery import Gallery

    captioned = CaptionedFolder.load(folder)
    stores = {arm: Gallery.open(path, create=False) for arm, path in galleries.items()}
    reference = stores["torch"]
    texts, targets = caption_queries(captioned, reference)
    queries = reference.embedder.embed_texts(texts)  # the text side is the same for every arm
    ids = reference.ids()
    torch_vectors = reference.embeddings(ids)
    column = {id_: i for i, id_ in enumerate(ids)}
    target_columns = np.array([column[t] for t in targets])
    hits: dict[str, np.ndarray] = {}
    rows: dict[str, dict] = {}
    for arm, store in stores.items():
        vectors = store.embeddings(ids)
        stats = rank_statistics(queries @ vectors.T, target_columns)
        greater, ties = np.asarray(stats["greater"], float), np.asarray(stats["ties"], float)
        hits[arm] = np.clip((10 - greater) / (ties + 1.0), 0.0, 1.0)
        rows[arm] = {"queries": len(texts), "images": len(ids),
                     **{f"recall@{k}": round(recall_at(stats, k), 4) for k in (1, 5, 10)},
                     "max_abs_diff_from_torch": float(np.abs(vectors - torch_vectors).max())}
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            with open(out / f"{arm}.jsonl", "w", encoding="utf-8") as handle:
                for i, (text, target) in enumerate(zip(texts, targets)):
                    handle.write(json.dumps({"query": text, "target": target, "rank": float(stats["ranks"][i]),
                                             "hit@10": float(hits[arm][i])}) + "\n")
    for arm in stores:
        if arm != "torch":
            mean, low, high = paired_bootstrap(hits[arm] - hits["torch"])
            rows[arm]["recall@10_minus_torch"] = {"mean": round(mean, 4), "ci95": [round(low, 4), round(high, 4)]}
    if "onnx-int8" in stores and "onnx-fp32" in stores:
        mean, low, high = paired_bootstrap(hits["onnx-int8"] - hits["onnx-fp32"])
        rows["onnx-int8"]["recall@10_minus_fp32"] = {"mean": round(mean, 4), "ci95": [round(low, 4), round(high, 4)]}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a captioned folder (captions.jsonl + images/)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma list of {', '.join(ARMS)}")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--search-runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="folder for the per-query results and the JSON")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if "torch" not in arms:
        raise SystemExit("the torch arm is the reference: keep it in --arms")

    work = Path(tempfile.mkdtemp(prefix="pictrieve-runtimes-"))
    env = {k: v for k, v in os.environ.items() if k not in ("PICTRIEVE_RUNTIME", "PICTRIEVE_QUANTIZE")}
    env["PICTRIEVE_CACHE"] = str(work / "cache")
    images = args.folder / "images"
    photo_count = sum(1 for p in images.iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png"})
    load_before = os.getloadavg()
    result: dict = {"command": "python benchmarks/indexing_runtimes.py " + " ".join(sys.argv[1:]),
                    "photos": photo_count, "cpus": len(os.sched_getaffinity(0)),
                    "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "load_avg_before": load_before,
                    "index_runs": [], "search_runs": []}
    try:
        result["one_time"] = prepare_exports(env)
        galleries: dict[str, Path] = {}
        for round_ in range(args.rounds):
            order = arms[round_ % len(arms):] + arms[: round_ % len(arms)]
            for arm in order:
                gallery = work / f"gallery-{arm}-{round_}"
                wall, out = timed([*CLI, "index", str(images), "-g", str(gallery), "--json", *ARMS[arm]], env)
                report = json.loads(out)
                if report["indexed"] != photo_count:
                    raise SystemExit(f"{arm}: indexed {report['indexed']} of {photo_count}")
                galleries.setdefault(arm, gallery)
                row = {"arm": arm, "round": round_, "wall_s": round(wall, 2),
                       "images_per_s": round(photo_count / wall, 2), "load_avg": os.getloadavg()[0]}
                result["index_runs"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        photo = sorted(images.iterdir())[0]
        for run in range(args.search_runs):
            order = arms[run % len(arms):] + arms[: run % len(arms)]
            for arm in order:
                for kind, query in (("text", [TEXT_QUERY]), ("image", ["--image", str(photo)])):
                    wall, _ = timed([*CLI, "search", *query, "-g", str(galleries[arm]), "-k", "5", *ARMS[arm]], env)
                    row = {"arm": arm, "kind": kind, "run": run, "wall_s": round(wall, 2)}
                    result["search_runs"].append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
        result["recall"] = recall_rows(args.folder, galleries, args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["load_avg_after"] = os.getloadavg()
    result["summary"] = {
        arm: {
            "images_per_s_median": statistics.median(r["images_per_s"] for r in result["index_runs"] if r["arm"] == arm),
            **{f"search_{kind}_s_median": statistics.median(
                r["wall_s"] for r in result["search_runs"] if r["arm"] == arm and r["kind"] == kind)
               for kind in ("text", "image") if args.search_runs},
            "recall@10": result["recall"][arm]["recall@10"],
        }
        for arm in arms
    }
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print("| arm | images/s (median) | Recall@10 | search text s | search image s |")
    print("| --- | --- | --- | --- | --- |")
    for arm, row in result["summary"].items():
        print(f"| {arm} | {row['images_per_s_median']:.2f} | {row['recall@10']:.4f} | "
              f"{row.get('search_text_s_median', float('nan')):.2f} | {row.get('search_image_s_median', float('nan')):.2f} |")


if __name__ == "__main__":
    main()
