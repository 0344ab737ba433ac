"""Per-round PlugIR metrics of several ``pictrieve eval interactive --dialogues`` files, on the targets
they share, so a short run of a slow arm can be set beside a long run of a fast one.

The evaluation draws targets as a prefix of one seeded order, so the first N targets of every run
with the same seed are the same photos with the same first description (checked here). Metrics come
from the stored expected ranks (ties counted by their expected rank, not the tie-aware fraction the
evaluation itself prints; with real-valued scores ties are rare).

    python benchmarks/plugir_table.py zs50.json offline50.json llm10.json --targets 10
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dialogues", nargs="+", help="--dialogues files of `pictrieve eval interactive`")
    parser.add_argument("--targets", type=int, default=None, help="first N shared targets (default: all shared)")
    parser.add_argument("-k", type=int, default=10)
    args = parser.parse_args()

    from pictrieve.evaluation.bri import bri, hits_at_k, recall_at_k

    arms: dict[str, list[dict]] = {}
    for path in args.dialogues:
        with open(path, encoding="utf-8") as handle:
            for arm, dialogues in json.load(handle)["dialogues"].items():
                arms[arm] = dialogues
    shared = min(len(d) for d in arms.values())
    n = min(args.targets or shared, shared)
    reference = [(d["target"], d["description"]) for d in next(iter(arms.values()))[:n]]
    for arm, dialogues in arms.items():
        if [(d["target"], d["description"]) for d in dialogues[:n]] != reference:
            raise SystemExit(f"{arm}: its first {n} targets differ from the others' (different seed or folder?)")
    print(f"{n} shared targets, k = {args.k}")
    print(f"{'arm':<10} {'BRI':>6}  Hits@{args.k} per round{'':<18} Recall@{args.k} per round")
    for arm, dialogues in arms.items():
        ranks = np.array([d["ranks"] for d in dialogues[:n]], dtype=np.float64)
        hits = " ".join(f"{v:.2f}" for v in hits_at_k(ranks, args.k))
        recall = " ".join(f"{v:.2f}" for v in recall_at_k(ranks, args.k))
        print(f"{arm:<10} {bri(ranks):>6.3f}  {hits:<34} {recall}")


if __name__ == "__main__":
    main()
