"""Choose how NEEDLE's trust learns from feedback, on flickr8k-train only (never on flickr8k-dev).

NEEDLE's rankings do not depend on the trust weights (only their fusion does), so each query's
per-(embedder, guide) rankings are computed once through the real graph (paused at its result review)
and kept in a JSON-lines file; then every candidate update rule is replayed on them in pure Python with
the library's own pieces (:func:`~pictrieve.agents.needle.search.fuse` for Eq. 4,
:meth:`~pictrieve.agents.needle.trust.TrustTable.update` for the update,
:class:`~pictrieve.evaluation.relevance.CaptionJudge` for the simulated person): learn on feedback
queries, freeze, rank the test queries. Several seeded splits; the mean over them is reported.

Photos: flickr8k-train's "dev" rows (the gallery); guides: exemplars from its other rows (a caption
file listing them, so no evaluated photo is its own guide). Usage (CPU, resumable)::

    python benchmarks/needle_trust_variants.py rankings --gallery-folder ../shared/datasets/flickr8k-train \\
        --reference RUNS/exemplars-nodev --queries 600 --out RUNS/train-rankings.jsonl
    python benchmarks/needle_trust_variants.py replay --rankings RUNS/train-rankings.jsonl \\
        --gallery-folder ../shared/datasets/flickr8k-train --json benchmarks/results/needle/trust-variants-train.json

The replay skips guide screening's dependence on the weights (screening ran with equal weights when
the rankings were made); ``screened`` in the output counts the queries where it dropped a guide.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

EMBEDDERS = ["efficientnet-lite0", "offline", "offline-labels"]
CONTROL = "random-projection:0"
INDEXED = ["offline", "efficientnet-lite0", "offline-labels", CONTROL]  # the dev run's order
SHOWN, DEPTH, CANDIDATES = 10, 60, 40


def train_dev_folder(root: str) -> Any:
    from pictrieve.evaluation.datasets import CaptionedFolder

    return CaptionedFolder.load(root, split="dev")


def collect_rankings(args: argparse.Namespace) -> None:
    from tqdm.auto import tqdm

    from pictrieve.evaluation.datasets import eval_gallery
    from pictrieve.evaluation.generative import sample_queries
    from pictrieve.evaluation.needle_trust import ResultsFile
    from pictrieve.graphs.checkpoints import memory_checkpointer
    from pictrieve.graphs.needle import build_needle_graph

    folder = train_dev_folder(args.gallery_folder)
    gallery = eval_gallery(folder, INDEXED, progress=True)
    queries, targets = sample_queries(folder, gallery, args.queries, seed=0)
    out = ResultsFile(args.out)
    done = {line["target"] for line in out.read()}
    checkpointer = memory_checkpointer()
    graph = build_needle_graph(gallery, visualizers=[f"exemplar:{args.reference}"], checkpointer=checkpointer)
    context = {"embedders": [*EMBEDDERS, CONTROL], "guides": 4, "tiles": False, "k": SHOWN,
               "feedback": "results", "candidate_k": CANDIDATES}
    for n, (query, target) in enumerate(tqdm(list(zip(queries, targets)), desc="rankings")):
        if target in done:
            continue
        config = {"configurable": {"thread_id": f"r{n}"}}
        graph.invoke({"query": query, "topic": "variants-equal"}, config, context=context)
        state = graph.get_state(config).values
        out.append({"query": query, "target": target, "rankings": state["rankings"],
                    "screened": sum(g["status"] == "outlier" for g in state["guides"])})
        checkpointer.delete_thread(f"r{n}")


def replay(lines: list[dict[str, Any]], judge: Any, embedders: list[str], *, loss: str | None, eta: float,
           feedback: list[int], test: list[int]) -> dict[str, Any]:
    """Learn on ``feedback`` (line indices) with ``loss`` (None: equal weights), freeze, rank ``test``."""
    from pictrieve.agents.needle.search import fuse
    from pictrieve.agents.needle.trust import TrustTable
    from pictrieve.evaluation.generative import query_metrics

    table = TrustTable()
    if loss is not None:
        for i in feedback:
            rankings = {name: lines[i]["rankings"][name] for name in embedders}
            shown = [id_ for id_, _ in fuse(rankings, table.for_topic("t", embedders), SHOWN)]
            irrelevant = judge.irrelevant(lines[i]["query"], shown)
            table.update("t", rankings, irrelevant, eta=eta, depth=CANDIDATES, loss=loss, shown=shown)
    weights = table.for_topic("t", embedders)
    rows = []
    for i in test:
        ranked = [id_ for id_, _ in fuse({name: lines[i]["rankings"][name] for name in embedders}, weights, DEPTH)]
        rows.append(query_metrics(ranked, {lines[i]["target"]}))
    return {"weights": weights, **{m: float(np.mean([r[m] for r in rows])) for m in ("hit@1", "hit@10", "ap")},
            "per_query_ap": [r["ap"] for r in rows]}


def run_replay(args: argparse.Namespace) -> None:
    from pictrieve.evaluation.needle_trust import ResultsFile
    from pictrieve.evaluation.relevance import CaptionJudge
    from pictrieve.vectorstore.chroma_store import path_id

    lines = ResultsFile(args.rankings).read()
    folder = train_dev_folder(args.gallery_folder)
    judge = CaptionJudge({path_id(p): texts for p, texts in folder.captions.items()})
    variants: list[tuple[str, str | None, float]] = [("equal weights", None, 0.0)]
    variants += [(f"{loss}, eta {eta}", loss, eta) for loss in ("eq5", "share") for eta in args.etas]
    report: dict[str, Any] = {"queries": len(lines), "feedback": args.feedback, "splits": args.splits,
                              "screened": sum(line["screened"] > 0 for line in lines), "sets": {}, "alone": {}}
    for name in [*EMBEDDERS, CONTROL]:  # each embedder alone, on every split's test queries
        rows = [replay(lines, judge, [name], loss=None, eta=0.0, feedback=[],
                       test=list(np.random.default_rng(split).permutation(len(lines))[args.feedback:]))
                for split in range(args.splits)]
        report["alone"][name] = {m: float(np.mean([r[m] for r in rows])) for m in ("hit@1", "hit@10", "ap")}
        print(f"only {name:22s} hit@1 {report['alone'][name]['hit@1']:.3f} hit@10 {report['alone'][name]['hit@10']:.3f} "
              f"AP {report['alone'][name]['ap']:.3f}")
    for label, embedders in (("3 embedders", EMBEDDERS), ("3 + planted", [*EMBEDDERS, CONTROL])):
        results: dict[str, Any] = {}
        for split in range(args.splits):
            order = np.random.default_rng(split).permutation(len(lines))
            feedback, test = list(order[: args.feedback]), list(order[args.feedback:])
            for name, loss, eta in variants:
                row = replay(lines, judge, embedders, loss=loss, eta=eta, feedback=feedback, test=test)
                results.setdefault(name, []).append(row)
        summary = {}
        for name, rows in results.items():
            summary[name] = {m: float(np.mean([r[m] for r in rows])) for m in ("hit@1", "hit@10", "ap")}
            summary[name]["weights"] = {e: float(np.mean([r["weights"][e] for r in rows])) for e in embedders}
            base = results["equal weights"]
            diffs = [np.mean(np.array(r["per_query_ap"]) - np.array(b["per_query_ap"])) for r, b in zip(rows, base)]
            summary[name]["ap_minus_equal_per_split"] = [round(float(d), 4) for d in diffs]
        report["sets"][label] = summary
        print(f"== {label} ({len(lines) - args.feedback} test queries x {args.splits} splits)")
        for name, row in summary.items():
            weights = ", ".join(f"{e.split(':')[0][:14]} {w:.2f}" for e, w in row["weights"].items())
            print(f"{name:18s} hit@1 {row['hit@1']:.3f} hit@10 {row['hit@10']:.3f} AP {row['ap']:.3f}  "
                  f"AP-equal {row['ap_minus_equal_per_split']}  [{weights}]")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("rankings")
    r.add_argument("--gallery-folder", required=True)
    r.add_argument("--reference", required=True)
    r.add_argument("--queries", type=int, default=600)
    r.add_argument("--out", required=True)
    p = sub.add_parser("replay")
    p.add_argument("--rankings", required=True)
    p.add_argument("--gallery-folder", required=True)
    p.add_argument("--feedback", type=int, default=200)
    p.add_argument("--splits", type=int, default=5)
    p.add_argument("--etas", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.4])
    p.add_argument("--json", default=None)
    args = parser.parse_args()
    collect_rankings(args) if args.command == "rankings" else run_replay(args)


if __name__ == "__main__":
    main()
