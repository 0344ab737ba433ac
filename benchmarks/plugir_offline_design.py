"""Choosing the offline PlugIR questioner's settings, on photos the evaluation never uses.

Runs the ``offline`` arm with the caption user on a captioned folder for each variant (a JSON object
of PlugIR run settings) and prints BRI, Hits@10, Recall@10 per round and the paired bootstrap interval
of round T minus round 0; per-target ranks go to ``--out`` (one JSON line per variant).

Choose on flickr8k-train's ``dev`` rows (never flickr8k-dev), with an embedder that was not trained on
them: the packaged ``offline`` head saw all of flickr8k-train (every target is found at round 0 there),
so choices are made with ``offline-labels``.

    python benchmarks/plugir_offline_design.py --folder ../shared/datasets/flickr8k-train --split dev \\
        --limit 500 --embedder offline-labels --gallery G-TRAIN-DEV500 \\
        --targets 100 --variants '{"deny_weight": 0}' '{"deny_weight": 0.05}' [--uncaptioned]
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", required=True, help="captioned folder (captions.jsonl)")
    parser.add_argument("--split", default=None, help="only rows whose 'split' field is this (flickr8k-train: dev)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N of those rows")
    parser.add_argument("--embedder", default="offline-labels")
    parser.add_argument("--gallery", default=None, help="where to keep the index")
    parser.add_argument("--targets", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--uncaptioned", action="store_true", help="describe candidates with zero-shot tags")
    parser.add_argument("--variants", nargs="+", default=["{}"], help="JSON objects of PlugIR run settings")
    parser.add_argument("--user", choices=["captions", "free"], default="captions",
                        help="the simulated user: yes/no/option answers, or those with a caption's words (free)")
    parser.add_argument("--out", default=None, help="append per-target ranks here (JSON lines)")
    args = parser.parse_args()

    from pictrieve.evaluation.bri import bri, hits_at_k, recall_at_k
    from pictrieve.agents.plugir.simulated_user import CaptionUser, FreeTextCaptionUser
    from pictrieve.evaluation.interactive import open_eval_gallery, run_ablation
    from pictrieve.evaluation.paired import paired_bootstrap
    from pictrieve.vectorstore.chroma_store import path_id

    folder = _selected_rows(args.folder, args.split, args.limit) if args.split or args.limit else args.folder
    gallery, captions = open_eval_gallery(folder, args.embedder, args.gallery)
    targets = {path_id(p): (p, texts) for p, texts in captions.items()}
    user = FreeTextCaptionUser if args.user == "free" else CaptionUser
    for variant in args.variants:
        settings = json.loads(variant)
        result = run_ablation(gallery, targets, None, targets=args.targets, rounds=args.rounds, arms=["offline"],
                              settings=settings, uncaptioned=args.uncaptioned,
                              captioner="auto" if args.uncaptioned else None, progress=False,
                              answerer_factory=lambda path, visible: user(visible))
        ranks = np.array([d["ranks"] for d in result["dialogues"]["offline"]])
        recall = recall_at_k(ranks, 10)
        gain = paired_bootstrap((ranks[:, -1] <= 10).astype(float) - (ranks[:, 0] <= 10))
        print(json.dumps({"variant": settings, "uncaptioned": args.uncaptioned, "user": args.user,
                          "bri": round(bri(ranks), 4),
                          "hits@10": np.round(hits_at_k(ranks, 10), 3).tolist(),
                          "recall@10": np.round(recall, 3).tolist(),
                          "recall@10 gain": [round(v, 3) for v in gain]}), flush=True)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"variant": settings, "uncaptioned": args.uncaptioned, "user": args.user,
                                         "ranks": ranks.tolist()}) + "\n")


def _selected_rows(folder: str, split: str | None, limit: int | None) -> str:
    """A temporary captioned folder listing the chosen rows of ``folder`` by absolute path."""
    import tempfile
    from pathlib import Path

    root = Path(folder).resolve()
    rows = [json.loads(line) for line in (root / "captions.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if split is None or r.get("split") == split][:limit]
    out = Path(tempfile.mkdtemp(prefix="plugir-design-"))
    with open(out / "captions.jsonl", "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps({**row, "image": str(root / row["image"])}) + "\n")
    return str(out)


if __name__ == "__main__":
    main()
