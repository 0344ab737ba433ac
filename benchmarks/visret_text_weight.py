"""VisRet's text weight: learn it on flickr8k-train's dev rows, report it on flickr8k-dev.

VisRet fuses the m guides' image-to-image rankings (weight 1 each) and, with ``text_weight > 0``, the
text query's own ranking, by reciprocal rank fusion (``pictrieve.graphs.visret``). Which weight is
right depends on how good the guides are next to the text search. This script measures it for the
offline ``exemplar`` visualizer (BENCHMARKS.md, "VisRet's text weight"):

1. ``train-head``: the shipped ``offline`` head was trained on *all* flickr8k-train photos, the dev
   rows included, so its text search is in-sample there and would pull the weight towards text. This
   trains the same recipe (``HeadTraining`` defaults, fixed schedule, last epoch, label bridge 0.25)
   on the other rows only: an ``offline`` that never saw the dev rows.
2. ``exemplars``: a caption index (no image copies) of flickr8k-train's rows other than ``dev``, the
   exemplar folder while tuning, so a guide is never the query's own photo.
3. ``rankings``: per query (the first caption of each photo, its one relevant image), the text
   ranking and each guide's ranking (ids, best first), stored once so every weight is fused from the
   same lists (fusing is exact and cheap; visualizing and searching is not).
4. ``sweep``: fuse at every weight of a grid; the chosen weight maximises mean nDCG@10 (declared
   before looking). ``report``: text only, guides only and fused at given weights, with paired
   bootstrap intervals against text only, and a per-query file (each row's rank of the target).

    OMP_NUM_THREADS=1 python benchmarks/visret_text_weight.py train-head --out RUNS/head-nodev.npz
    ...   (the full sequence is in BENCHMARKS.md, "VisRet's text weight")
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger("visret_text_weight")

TRAIN = Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets" / "flickr8k-train"
WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0, 16.0)
LABEL_WEIGHT = 0.25  # the shipped `offline` ensemble's label bridge (chosen on the dev rows by issue 11's sweep)
DEPTH = 60  # AP looks this deep; hit@10 and nDCG@10 only the top 10


def train_head(args: argparse.Namespace) -> None:
    """The shipped recipe on flickr8k-train's non-dev rows; the dev rows only report held-out R@10."""
    from dataclasses import replace

    from pictrieve.evaluation.head_training import HeadTraining, folder_training_data, train_head as fit

    features, captions, rows = folder_training_data(args.train)
    splits = np.array([r.get("split", "") for r in rows])
    held = np.flatnonzero(splits == "dev")
    train = np.flatnonzero(splits != "dev")
    head, history = fit(features, captions, train, held, replace(HeadTraining(), keep_best=False))
    head.meta.update(label_weight=LABEL_WEIGHT, train_photos=int(len(train)), held_out_photos=int(len(held)),
                     trained_on="flickr8k-train rows whose split is not dev")
    head.save(args.out)
    print(json.dumps({"out": str(args.out), "train_photos": int(len(train)), "dev_rows": int(len(held)),
                      "dev_recall@10_head_alone": round(history[-1]["held_out_recall@10"], 4)}))


def write_exemplars(args: argparse.Namespace) -> None:
    """``OUT/captions.jsonl`` listing flickr8k-train's rows whose split is not ``exclude``, absolute paths."""
    source = Path(args.train).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    kept = 0
    with open(args.out / "captions.jsonl", "w", encoding="utf-8") as out:
        for line in (source / "captions.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("split") == args.exclude:
                continue
            record["image"] = str(source / record["image"])
            out.write(json.dumps(record) + "\n")
            kept += 1
    print(json.dumps({"out": str(args.out), "photos": kept, "excluded_split": args.exclude}))


def collect_rankings(args: argparse.Namespace) -> None:
    """Text and per-guide rankings of every query, appended to ``--out`` (resumes where it stopped)."""
    from tqdm.auto import tqdm

    from pictrieve.evaluation.datasets import CaptionedFolder, eval_gallery
    from pictrieve.evaluation.generative import reference_overlap, sample_queries
    from pictrieve.tools.models.visualizers import create_visualizer

    folder = CaptionedFolder.load(args.folder, split=args.split)
    visualizer = create_visualizer(args.visualizer)
    if reference_overlap(folder, [visualizer]):
        sys.exit(f"{args.visualizer} holds photos of {args.folder}: a guide could be the query's own photo")
    gallery = eval_gallery(folder, [args.text_embedder, args.image_embedder], location=args.gallery, progress=True)
    images_view = gallery.with_embedder(args.image_embedder)
    queries, targets = sample_queries(folder, gallery, args.queries, args.seed)
    done = set()
    if args.out.is_file():
        done = {json.loads(line)["target"] for line in args.out.read_text().splitlines() if line.strip()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a", encoding="utf-8") as out:
        for query, target in tqdm(list(zip(queries, targets)), desc="queries"):
            if target in done:
                continue
            started = time.perf_counter()
            sources = [str(path) for path in visualizer.source_paths(query, args.m)]
            images = visualizer.visualize(query, n=args.m)
            guides = [[hit.id for hit in images_view.search_image(image, k=args.candidate_k)] for image in images]
            text = [hit.id for hit in gallery.search_text(query, k=args.candidate_k)]
            out.write(json.dumps({"query": query, "target": target, "guide_photos": [Path(s).name for s in sources],
                                  "text": text, "guides": guides,
                                  "seconds": round(time.perf_counter() - started, 3)}) + "\n")
            out.flush()


def fused_ids(record: dict[str, Any], weight: float, rrf_k: float = 1.0) -> list[str]:
    """The ranking VisRet returns at ``text_weight = weight`` (text only when ``weight`` is inf)."""
    from pictrieve.vectorstore.fusion import reciprocal_rank_fusion

    if math.isinf(weight):
        return record["text"]
    rankings = list(record["guides"]) + ([record["text"]] if weight > 0 else [])
    weights = [1.0] * len(record["guides"]) + ([weight] if weight > 0 else [])
    return [id_ for id_, _ in reciprocal_rank_fusion(rankings, k=rrf_k, weights=weights)]


def target_rank(ranked: list[str], target: str, depth: int = DEPTH) -> int | None:
    """1-based rank of ``target`` within the top ``depth`` (``None`` beyond it)."""
    try:
        rank = ranked.index(target) + 1
    except ValueError:
        return None
    return rank if rank <= depth else None


def metrics_of_rank(rank: int | None) -> dict[str, float]:
    """hit@10, nDCG@10 and AP (within the top 60) of a query whose one relevant image is at ``rank``."""
    return {"hit@10": float(rank is not None and rank <= 10),
            "ndcg@10": 1.0 / math.log2(rank + 1) if rank is not None and rank <= 10 else 0.0,
            "ap": 1.0 / rank if rank is not None else 0.0}


def read_rankings(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def row_ranks(records: list[dict[str, Any]], weights: list[float]) -> dict[str, list[int | None]]:
    """Target ranks per row: ``text only``, ``guides only`` and ``fused w=W`` for each weight."""
    rows = {"text only": [target_rank(r["text"], r["target"]) for r in records],
            "guides only": [target_rank(fused_ids(r, 0.0), r["target"]) for r in records]}
    for weight in weights:
        if weight > 0:
            rows[f"fused w={weight:g}"] = [target_rank(fused_ids(r, weight), r["target"]) for r in records]
    return rows


def summarise(ranks: list[int | None]) -> dict[str, float]:
    per_query = [metrics_of_rank(rank) for rank in ranks]
    return {name: float(np.mean([m[name] for m in per_query])) for name in ("hit@10", "ndcg@10", "ap")}


def sweep(args: argparse.Namespace) -> None:
    """Mean metrics at every weight of the grid; the weight with the best nDCG@10 is chosen."""
    records = read_rankings(args.rankings)
    rows = row_ranks(records, list(args.weights))
    table = {name: summarise(ranks) for name, ranks in rows.items()}
    fused = {name: row for name, row in table.items() if name.startswith("fused")}
    best = max(fused, key=lambda name: (fused[name]["ndcg@10"], -float(name.split("=")[1])))
    result = {"rankings": str(args.rankings), "queries": len(records), "criterion": "mean nDCG@10 (ties: smaller weight)",
              "best_weight": float(best.split("=")[1]), "rows": table}
    _write(args.json_out, result)
    _print_table(table, best=best)


def report(args: argparse.Namespace) -> None:
    """Rows at the given weights, paired bootstrap of each fused row against text only, per-query ranks."""
    from pictrieve.evaluation.paired import paired_bootstrap

    records = read_rankings(args.rankings)
    rows = row_ranks(records, list(args.weights))
    table = {name: summarise(ranks) for name, ranks in rows.items()}
    baseline = [metrics_of_rank(rank) for rank in rows["text only"]]
    intervals: dict[str, dict[str, Any]] = {}
    for name, ranks in rows.items():
        if name == "text only":
            continue
        candidate = [metrics_of_rank(rank) for rank in ranks]
        intervals[name] = {}
        for metric in ("hit@10", "ndcg@10", "ap"):
            differences = np.array([c[metric] - b[metric] for b, c in zip(baseline, candidate)])
            mean, low, high = paired_bootstrap(differences)
            intervals[name][metric] = {"difference": mean, "low": low, "high": high, "confidence": 0.95,
                                       "better": int((differences > 0).sum()), "worse": int((differences < 0).sum())}
    _write(args.json_out, {"rankings": str(args.rankings), "queries": len(records), "rows": table,
                           "minus_text_only": intervals})
    if args.per_query:
        names: dict[str, str] = {}
        if args.folder:
            from pictrieve.evaluation.datasets import CaptionedFolder
            from pictrieve.vectorstore.chroma_store import path_id

            names = {path_id(path): path.name for path in CaptionedFolder.load(args.folder, split=args.split).paths}
        args.per_query.parent.mkdir(parents=True, exist_ok=True)
        with open(args.per_query, "w", encoding="utf-8") as out:
            for i, record in enumerate(records):
                out.write(json.dumps({"query": record["query"], "photo": names.get(record["target"], record["target"]),
                                      "guide_photos": record["guide_photos"],
                                      "rank": {name: ranks[i] for name, ranks in rows.items()}}) + "\n")
    _print_table(table)
    for name, by_metric in intervals.items():
        print(f"{name} - text only: " + "; ".join(
            f"{metric} {iv['difference']:+.3f} [{iv['low']:+.3f}, {iv['high']:+.3f}] ({iv['better']} better, "
            f"{iv['worse']} worse)" for metric, iv in by_metric.items()))


def check_graph(args: argparse.Namespace) -> None:
    """The stored rankings fused here give what the VisRet graph itself returns (first ``--queries``)."""
    from pictrieve.evaluation.datasets import CaptionedFolder, eval_gallery
    from pictrieve.graphs.visret import build_visret_graph

    records = read_rankings(args.rankings)[: args.queries]
    folder = CaptionedFolder.load(args.folder, split=args.split)
    gallery = eval_gallery(folder, [args.text_embedder, args.image_embedder], location=args.gallery)
    graph = build_visret_graph(gallery, visualizers=args.visualizer)
    for record in records:
        for weight in args.weights:
            context = {"guides": len(record["guides"]), "k": DEPTH, "image_embedder": args.image_embedder,
                       "text_weight": weight}
            hits = graph.invoke({"query": record["query"]}, context=context)["hits"]
            expected = fused_ids(record, weight)[:DEPTH]
            if [hit.id for hit in hits] != expected:
                sys.exit(f"graph and stored rankings differ for {record['query']!r} at weight {weight}")
    print(f"graph == stored rankings for {len(records)} queries at weights {list(args.weights)}")


def _write(path: Path | None, value: dict[str, Any]) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


def _print_table(table: dict[str, dict[str, float]], best: str | None = None) -> None:
    print(f"{'row':18s} {'hit@10':>7s} {'nDCG@10':>8s} {'AP':>7s}")
    for name, row in table.items():
        mark = "  <- best nDCG@10" if name == best else ""
        print(f"{name:18s} {row['hit@10']:7.4f} {row['ndcg@10']:8.4f} {row['ap']:7.4f}{mark}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    head = commands.add_parser("train-head", help="the offline head's recipe on flickr8k-train's non-dev rows")
    head.add_argument("--train", type=Path, default=TRAIN)
    head.add_argument("--out", type=Path, required=True)

    exemplars = commands.add_parser("exemplars", help="a caption index of flickr8k-train without one split")
    exemplars.add_argument("--train", type=Path, default=TRAIN)
    exemplars.add_argument("--exclude", default="dev")
    exemplars.add_argument("--out", type=Path, required=True)

    def search_args(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--folder", type=Path, required=True, help="the captioned folder searched")
        sub.add_argument("--split", default=None, help="only its rows with this split (flickr8k-train: dev)")
        sub.add_argument("--visualizer", required=True, help="exemplar:DIR (never the folder searched)")
        sub.add_argument("--text-embedder", default="offline")
        sub.add_argument("--image-embedder", default="efficientnet-lite0")
        sub.add_argument("--gallery", type=Path, default=None, help="keep the evaluation index here")

    rankings = commands.add_parser("rankings", help="text and per-guide rankings of every query -> jsonl")
    search_args(rankings)
    rankings.add_argument("--m", type=int, default=3)
    rankings.add_argument("--candidate-k", type=int, default=100)
    rankings.add_argument("--queries", type=int, default=None, help="a seeded sample (default: every photo)")
    rankings.add_argument("--seed", type=int, default=0)
    rankings.add_argument("--out", type=Path, required=True)

    for name, function in (("sweep", sweep), ("report", report)):
        sub = commands.add_parser(name)
        sub.add_argument("--rankings", type=Path, required=True)
        sub.add_argument("--weights", type=float, nargs="+", default=list(WEIGHTS))
        sub.add_argument("--json-out", type=Path, default=None)
        if name == "report":
            sub.add_argument("--per-query", type=Path, default=None, help="each query's target rank per row (jsonl)")
            sub.add_argument("--folder", type=Path, default=None, help="the folder searched: name targets by file")
            sub.add_argument("--split", default=None)

    check = commands.add_parser("check-graph", help="the graph returns what the stored rankings fuse to")
    search_args(check)
    check.add_argument("--rankings", type=Path, required=True)
    check.add_argument("--queries", type=int, default=5)
    check.add_argument("--weights", type=float, nargs="+", default=[0.0, 1.0])

    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    {"train-head": train_head, "exemplars": write_exemplars, "rankings": collect_rankings, "sweep": sweep,
     "report": report, "check-graph": check_graph}[args.command](args)


if __name__ == "__main__":
    main()
