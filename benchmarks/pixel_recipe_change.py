"""The offline default's pixel recipe before and after f16f8d8: Pillow's bicubic resize against torch's, paired.

Since f16f8d8 (issue 40.1) the indexer squashes a photo to 224x224 for the offline default on a GPU with
:func:`~pictrieve.tools.models.embedders.backbone.squash_bytes`, torch's antialiased bicubic on uint8 pixels (the
same filter as Pillow's ``resize((224, 224), Image.BICUBIC)``, other fixed-point rounding), for speed. Everything
else (a query photo, a tile, training, the indexer on a CPU) keeps Pillow's
(:func:`~pictrieve.tools.models.embedders.backbone.pillow_squash_bytes`: no 2-3 s torch import), so the "before" arm
here is also what a query photo gets, and the cosines below are how alike a photo embeds as a query and as a photo
indexed on a GPU. Everything around the
resize stayed: the scaling to [-1, 1] and the mirror view are the same arithmetic (this script checks that the
current :func:`~pictrieve.tools.models.embedders.backbone.scaled_views` of Pillow's bytes equals the old
``squash_views`` bit for bit, so the resize is the only difference measured). On a flickr8k-style folder
(``captions.jsonl``), from the same decoded photos (the indexer's decode: :func:`load_pixels` at ``DRAFT_SIZE``):

- the resized pixels: the fraction of uint8 values that differ, the mean and largest difference in levels;
- the offline default's vectors: cosine of each photo's two vectors (min, mean, percentiles);
- caption retrieval both ways, each recipe's vectors against the same caption vectors: every caption a query whose
  one target is its photo (text to image), and every photo a query whose targets are its own captions, its rank
  that of the best-placed one (image to text); tie-aware ranks (:mod:`pictrieve.evaluation.retrieval`), Recall@1/5/10
  and median rank, and the paired difference (after minus before) of each Recall@K with a 95% bootstrap interval
  (:func:`~pictrieve.evaluation.paired.paired_bootstrap`), resampling photos (a photo's captions move together:
  only the image vectors changed);
- the time per photo of each resize on one thread, interleaved over ``--rounds`` (median round): Pillow's ``resize``
  of a PIL image made beforehand (what the old recipe timed), and ``squash_bytes`` of the decoded array.

Per-query results (both recipes' ranks for every caption and every photo, each photo's cosine and pixel difference)
go to ``--out`` as one JSON file with the command and the date.

Run:  nice python benchmarks/pixel_recipe_change.py /work/shared/datasets/flickr8k-dev
      [--limit N] [--write BENCHMARKS.md] [--json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image

import indexing_stages  # its markdown table writer (benchmarks/ is on sys.path when a script there runs)

logger = logging.getLogger("pixel_recipe_change")

RESULTS = Path(__file__).resolve().parent / "results" / "pixel_recipe"
SECTION = "### The pixel recipe's resize, Pillow against torch (issue 40.1)"
ROWS_BEGIN = "<!-- pixel_recipe rows: benchmarks/pixel_recipe_change.py --write appends here -->"
ROWS_END = "<!-- /pixel_recipe rows -->"
HEADER = ("| run (UTC) | load (1 min) | photos, captions | values differing, mean / max levels | cosine min / mean "
          "| text to image R@1, R@5, R@10 before -> after | R@10 after - before [95%] | image to text R@1, R@5, R@10 "
          "before -> after | R@10 after - before [95%] | resize ms a photo, Pillow / torch | results | command |\n"
          + "| --- " * 12 + "|")
KS = (1, 5, 10)


def pillow_squash_bytes(image: Image.Image) -> np.ndarray:
    """The resize before f16f8d8, and still a query photo's: Pillow's bicubic to 224x224, no aspect kept:
    ``(224, 224, 3)`` uint8 (:func:`~pictrieve.tools.models.embedders.backbone.pillow_squash_bytes`)."""
    from pictrieve.tools.models.embedders.backbone import pillow_squash_bytes as squash

    return squash(image)


def pillow_squash_views(image: Image.Image, flips: bool = True) -> np.ndarray:
    """``squash_views`` as it was before f16f8d8 (``git show f16f8d8^:tools/models/embedders/backbone.py``): one
    Pillow resize, scaled to [-1, 1] in place, then the mirror view: ``(views, 3, 224, 224)`` float32."""
    from pictrieve.tools.models.embedders.backbone import IMAGE_SIZE

    resized = pillow_squash_bytes(image)
    views = np.empty((2 if flips else 1, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)
    pixels = views[0]
    pixels[...] = resized.transpose(2, 0, 1)
    pixels /= np.float32(255.0)
    pixels -= np.float32(0.5)
    pixels /= np.float32(0.5)
    if flips:
        views[1] = pixels[:, :, ::-1]
    return views


def load_folder(folder: Path, limit: int | None) -> tuple[list[Path], list[str], np.ndarray]:
    """The photos (sorted), every caption, and each caption's photo index, from ``captions.jsonl``."""
    from pictrieve.evaluation.datasets import CaptionedFolder

    captioned = CaptionedFolder.load(folder, limit=limit)
    captions = [text for texts in captioned.captions.values() for text in texts]
    targets = np.array([i for i, texts in enumerate(captioned.captions.values()) for _ in texts])
    return captioned.paths, captions, targets


def decode(paths: Sequence[Path]) -> list[np.ndarray]:
    """Each photo's upright ``(h, w, 3)`` uint8 pixels, decoded as the indexer decodes them."""
    from pictrieve.tools.core.images import load_pixels
    from pictrieve.vectorstore.indexing import DRAFT_SIZE

    return [load_pixels(path, draft_size=DRAFT_SIZE) for path in paths]


def resize_times(photos: Sequence[np.ndarray], rounds: int) -> dict[str, Any]:
    """ms a photo of each resize on one thread, the two interleaved per round; the median round and every round."""
    import torch

    from pictrieve.tools.models.embedders.backbone import squash_bytes

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    images = [Image.fromarray(photo) for photo in photos]  # the old path resized a PIL image: made outside the clock
    try:
        squash_bytes(photos[0])  # the first call picks the kernel
        per_round: dict[str, list[float]] = {"pillow": [], "torch": []}
        for _ in range(rounds):
            start = time.perf_counter()
            for image in images:
                pillow_squash_bytes(image)
            per_round["pillow"].append((time.perf_counter() - start) / len(images) * 1e3)
            start = time.perf_counter()
            for photo in photos:
                squash_bytes(photo)
            per_round["torch"].append((time.perf_counter() - start) / len(photos) * 1e3)
    finally:
        torch.set_num_threads(threads)
    return {"ms_per_photo": {name: statistics.median(values) for name, values in per_round.items()},
            "ms_per_photo_per_round": per_round}


def embed(embedder: Any, resized: Sequence[np.ndarray], batch: int) -> np.ndarray:
    """The offline default's unit vectors of already resized ``(224, 224, 3)`` uint8 photos, in batches."""
    return np.concatenate([embedder.embed_preprocessed(list(resized[i : i + batch]))
                           for i in range(0, len(resized), batch)])


def image_to_text_statistics(similarities: np.ndarray, targets: np.ndarray) -> dict[str, np.ndarray]:
    """Tie-aware statistics of each photo's best-placed own caption: ``similarities`` is ``(photos, captions)``;
    a photo's other captions are left out of its ranking, so its rank counts only other photos' captions above."""
    from pictrieve.evaluation.retrieval import rank_statistics

    scores = np.array(similarities, dtype=np.float64)
    own = targets[None, :] == np.arange(scores.shape[0])[:, None]
    best = np.where(own, scores, -np.inf).argmax(axis=1)
    scores[own] = -np.inf
    scores[np.arange(len(best)), best] = np.asarray(similarities, dtype=np.float64)[np.arange(len(best)), best]
    return rank_statistics(scores, best)


def direction(before: dict[str, np.ndarray], after: dict[str, np.ndarray], groups: np.ndarray) -> dict[str, Any]:
    """Recall@K and median rank of both recipes, and each Recall@K's paired difference (after - before) with its
    bootstrap interval over ``groups`` (each query's photo: a photo's queries are resampled together)."""
    from pictrieve.evaluation.bri import in_top_k
    from pictrieve.evaluation.paired import paired_bootstrap

    result: dict[str, Any] = {"queries": int(len(groups))}
    for name, stats in (("before", before), ("after", after)):
        result[name] = {f"recall@{k}": float(in_top_k(stats["greater"], stats["ties"], k).mean()) for k in KS}
        result[name]["median_rank"] = float(np.median(stats["ranks"]))
        result[name]["mean_rank"] = float(np.mean(stats["ranks"]))
    _, group_index = np.unique(groups, return_inverse=True)
    counts = np.bincount(group_index)
    for k in KS:
        hits = in_top_k(after["greater"], after["ties"], k) - in_top_k(before["greater"], before["ties"], k)
        result[f"recall@{k}_difference"] = paired_bootstrap(np.bincount(group_index, weights=hits) / counts)
    result["queries_rank_changed"] = int((after["ranks"] != before["ranks"]).sum())
    return result


def measure(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The summary and the per-query rows."""
    from pictrieve.evaluation.retrieval import rank_statistics
    from pictrieve.tools.models.embedders.backbone import scaled_views, squash_bytes
    from pictrieve.tools.models.embedders.factory import create_embedder

    paths, captions, targets = load_folder(args.folder, args.limit)
    logger.info("%d photos, %d captions: decoding", len(paths), len(captions))
    photos = decode(paths)
    before = [pillow_squash_bytes(Image.fromarray(photo)) for photo in photos]
    after = [squash_bytes(photo) for photo in photos]
    for photo, resized in zip(photos[:8], before[:8]):  # the scaling and mirror are unchanged: the resize is all
        if not np.array_equal(scaled_views([resized]), pillow_squash_views(Image.fromarray(photo))):
            raise RuntimeError("scaled_views of Pillow's bytes is not the old squash_views: the comparison is unsound")
    difference = np.abs(np.stack(before).astype(np.int16) - np.stack(after).astype(np.int16))
    per_photo_pixels = difference.reshape(len(photos), -1)
    logger.info("timing both resizes (%d rounds, one thread)", args.rounds)
    times = resize_times(photos, args.rounds)
    embedder = create_embedder("offline")
    logger.info("embedding with %s: Pillow's resize", embedder.name)
    vectors_before = embed(embedder, before, args.batch)
    logger.info("embedding: torch's resize")
    vectors_after = embed(embedder, after, args.batch)
    cosines = (vectors_before.astype(np.float64) * vectors_after).sum(axis=1)
    text_vectors = embedder.embed_texts(captions)
    t2i = {name: rank_statistics(text_vectors @ vectors.T, targets)
           for name, vectors in (("before", vectors_before), ("after", vectors_after))}
    i2t = {name: image_to_text_statistics(vectors @ text_vectors.T, targets)
           for name, vectors in (("before", vectors_before), ("after", vectors_after))}
    summary = {
        "folder": str(args.folder), "photos": len(paths), "captions": len(captions), "embedder": embedder.name,
        "load": os.getloadavg()[0], "cores": os.cpu_count(),
        "pixels": {"values": int(difference.size), "fraction_differing": float((difference > 0).mean()),
                   "mean_levels": float(difference.mean()), "max_levels": int(difference.max()),
                   "photos_differing": int((per_photo_pixels.max(axis=1) > 0).sum())},
        "cosine": {"min": float(cosines.min()), "mean": float(cosines.mean()),
                   **{f"p{q:g}": float(np.percentile(cosines, q)) for q in (0.1, 1, 5, 50)}},
        "text_to_image": direction(t2i["before"], t2i["after"], targets),
        "image_to_text": direction(i2t["before"], i2t["after"], np.arange(len(paths))),
        "resize": times,
    }
    for stats in (*t2i.values(), *i2t.values()):
        stats["rank"] = stats["ranks"]  # the per-query rows' name for the expected rank
    rows = {
        "captions": [{"caption": i, "photo": int(targets[i]), "text": captions[i],
                      **{f"{name}_{field}": _number(t2i[name][field][i]) for name in ("before", "after")
                         for field in ("rank", "greater", "ties")}} for i in range(len(captions))],
        "photos": [{"photo": i, "image": str(paths[i].relative_to(args.folder)), "cosine": round(float(cosines[i]), 7),
                    "pixels_differing": int((per_photo_pixels[i] > 0).sum()),
                    "max_levels": int(per_photo_pixels[i].max()),
                    **{f"{name}_{field}": _number(i2t[name][field][i]) for name in ("before", "after")
                       for field in ("rank", "greater", "ties")}} for i in range(len(paths))],
    }
    return summary, rows


def _number(value: Any) -> float | int:
    value = float(value)
    return int(value) if value.is_integer() else value


def write_results(out: Path, summary: dict[str, Any], rows: dict[str, Any], command: str, when: dt.datetime) -> Path:
    """The summary and one line per query in ``out/<date>-<folder>-<photos>.json``; written whole or not at all."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{when:%Y-%m-%d-%H%M}-{Path(summary['folder']).name}-{summary['photos']}.json"
    head = json.dumps({"command": command, "date": when.isoformat(timespec="seconds"), "summary": summary}, indent=1)
    parts = [head[:-2] + ","]
    for key, values in rows.items():
        lines = ",\n  ".join(json.dumps(row, ensure_ascii=False) for row in values)
        parts.append(f' "{key}": [\n  {lines}\n ]' + ("," if key != list(rows)[-1] else ""))
    partial = path.with_suffix(".json.partial")
    partial.write_text("\n".join(parts) + "\n}\n", encoding="utf-8")
    partial.replace(path)
    return path


def markdown_row(summary: dict[str, Any], results: str, command: str, when: dt.datetime) -> str:
    pixels, cosine, t2i, i2t = summary["pixels"], summary["cosine"], summary["text_to_image"], summary["image_to_text"]
    ms = summary["resize"]["ms_per_photo"]
    cells = [
        f"{when:%Y-%m-%d %H:%M}", f"{summary['load']:.1f} ({summary['cores']} cores)",
        f"{summary['photos']}, {summary['captions']}",
        f"{pixels['fraction_differing']:.1%}, {pixels['mean_levels']:.3f} / {pixels['max_levels']}",
        f"{cosine['min']:.5f} / {cosine['mean']:.5f}",
        _recalls(t2i), _interval(t2i["recall@10_difference"]), _recalls(i2t), _interval(i2t["recall@10_difference"]),
        f"{ms['pillow']:.2f} / {ms['torch']:.2f}", f"`{results}`", f"`{command}`",
    ]
    return "| " + " | ".join(cells) + " |"


def _recalls(result: dict[str, Any]) -> str:
    return ", ".join(f"{result['before'][f'recall@{k}']:.4f} -> {result['after'][f'recall@{k}']:.4f}" for k in KS)


def _interval(found: Sequence[float]) -> str:
    mean, low, high = found
    return f"{mean:+.4f} [{low:+.4f}, {high:+.4f}]"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a folder with captions.jsonl (e.g. /work/shared/datasets/flickr8k-dev)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N photos (sorted by path)")
    parser.add_argument("--batch", type=int, default=32, help="photos per model call (default 32)")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds of the two resizes (default 5)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"folder for the per-query results (default {RESULTS})")
    parser.add_argument("--write", type=Path, default=None, help="append the run's row to this markdown file")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    if not (args.folder / "captions.jsonl").is_file():
        parser.error(f"{args.folder} has no captions.jsonl: give a flickr8k-style folder")
    for name in ("limit", "batch", "rounds"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.json else logging.INFO, format="%(message)s")
    when = dt.datetime.now(dt.timezone.utc)
    command = "python benchmarks/pixel_recipe_change.py " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    summary, rows = measure(args)
    written = write_results(args.out, summary, rows, command, when)
    logger.info("per-query results: %s", written)
    summary["results"] = str(written)
    if args.write is not None:
        shown = os.path.relpath(written, Path(__file__).resolve().parent.parent)
        indexing_stages.write_row(args.write, markdown_row(summary, shown, command, when), section=SECTION,
                                  header=HEADER, begin=ROWS_BEGIN, end=ROWS_END)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['photos']} photos, {summary['captions']} captions; pixels: {summary['pixels']}")
        print(f"cosine: {summary['cosine']}")
        for key in ("text_to_image", "image_to_text"):
            found = summary[key]
            print(f"{key}: {_recalls(found)}; median rank {found['before']['median_rank']} -> "
                  f"{found['after']['median_rank']}; " + "; ".join(
                      f"R@{k} {_interval(found[f'recall@{k}_difference'])}" for k in KS))
        print(f"resize ms a photo (one thread): {summary['resize']['ms_per_photo']}")
    return summary


if __name__ == "__main__":
    main()
