"""Per-round PlugIR metrics of several ``pictrieve eval interactive --dialogues`` files, on the targets
they share, so a short run of a slow arm can be set beside a long run of a fast one.

The evaluation draws targets as a prefix of one seeded order, so the first N targets of every run
with the same seed are the same photos with the same first description (checked here). Metrics come
from the stored expected ranks (ties counted by their expected rank, not the tie-aware fraction the
evaluation itself prints; with real-valued scores ties are rare).

    python benchmarks/plugir_table.py zs50.json offline50.json llm10.json --targets 10

Each arm also gets a paired bootstrap interval of Recall@K at the last round minus round 0 (the same
targets, so the pairing is per target), and with ``--against ARM`` every arm's BRI and last-round
Recall@K minus that arm's.
"""

from __future__ import annotations

import argparse
import gzip
import json

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dialogues", nargs="+",
                        help="--dialogues files of `pictrieve eval interactive`; FILE=NAME names its arm")
    parser.add_argument("--targets", type=int, default=None, help="first N shared targets (default: all shared)")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--against", default=None, help="an arm to pair every other arm with")
    args = parser.parse_args()

    from pictrieve.evaluation.bri import bri, bri_per_query, hits_at_k, recall_at_k
    from pictrieve.evaluation.paired import paired_bootstrap

    arms: dict[str, list[dict]] = {}
    for spec in args.dialogues:
        path, _, label = spec.partition("=")  # "file.json=name" names the file's arm(s)
        opener = gzip.open if path.endswith(".gz") else open  # the 500-target files are kept gzipped
        with opener(path, "rt", encoding="utf-8") as handle:
            for arm, dialogues in json.load(handle)["dialogues"].items():
                arms[label or arm] = dialogues
    shared = min(len(d) for d in arms.values())
    n = min(args.targets or shared, shared)
    reference = [(d["target"], d["description"]) for d in next(iter(arms.values()))[:n]]
    for arm, dialogues in arms.items():
        if [(d["target"], d["description"]) for d in dialogues[:n]] != reference:
            raise SystemExit(f"{arm}: its first {n} targets differ from the others' (different seed or folder?)")
    print(f"{n} shared targets, k = {args.k}")
    print(f"{'arm':<10} {'BRI':>6}  Hits@{args.k} per round{'':<18} Recall@{args.k} per round")
    all_ranks = {arm: np.array([d["ranks"] for d in dialogues[:n]], dtype=np.float64) for arm, dialogues in arms.items()}
    for arm, ranks in all_ranks.items():
        hits = " ".join(f"{v:.2f}" for v in hits_at_k(ranks, args.k))
        recall = " ".join(f"{v:.2f}" for v in recall_at_k(ranks, args.k))
        print(f"{arm:<10} {bri(ranks):>6.3f}  {hits:<34} {recall}")
    print(f"\nRecall@{args.k} last round minus round 0, paired bootstrap 95% interval over targets:")
    for arm, ranks in all_ranks.items():
        mean, low, high = paired_bootstrap((ranks[:, -1] <= args.k).astype(float) - (ranks[:, 0] <= args.k))
        print(f"{arm:<10} {mean:+.3f} [{low:+.3f}, {high:+.3f}]")
    if args.against:
        base = all_ranks[args.against]
        print(f"\nagainst {args.against} (paired bootstrap 95% intervals): BRI difference (lower is better), "
              f"last-round Recall@{args.k} difference")
        for arm, ranks in all_ranks.items():
            if arm == args.against:
                continue
            b = paired_bootstrap(bri_per_query(ranks) - bri_per_query(base))
            r = paired_bootstrap((ranks[:, -1] <= args.k).astype(float) - (base[:, -1] <= args.k))
            print(f"{arm:<10} BRI {b[0]:+.3f} [{b[1]:+.3f}, {b[2]:+.3f}]   Recall@{args.k} {r[0]:+.3f} [{r[1]:+.3f}, {r[2]:+.3f}]")


if __name__ == "__main__":
    main()
