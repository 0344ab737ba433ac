"""The headroom of PlugIR's dialogue: an oracle that tells the query what a perfect questioner would learn.

For each target of the interactive evaluation's plan (same seeded targets and first descriptions as
`pictrieve eval interactive`), the oracle takes the three content words the target's *other* captions
use most (each caption counted once per word; words the description already has left out) and gives
them to the retrieval either appended to the description's text (``append``) or as separate query
vectors whose similarities are averaged and added to the description's (``per-fact``); and, the
ceiling of the free-text simulated user, all the other captions appended to the description
(``all-captions``). Recall@10 of
each against the description alone, with paired bootstrap intervals, all tie-aware and exact.

    python benchmarks/plugir_oracle.py ../shared/datasets/flickr8k-dev --targets 100
    python benchmarks/plugir_oracle.py ../shared/datasets/flickr8k-train --split dev --limit 500 \\
        --embedder offline-labels --gallery G-TRAIN-DEV500 --targets 100
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import numpy as np


def oracle_words(description: str, captions: list[str], n: int = 3) -> list[str]:
    """The ``n`` content words the captions use most that the description lacks (singular forms)."""
    from pictrieve.agents.plugir.caption_terms import _stop_words, singular, words

    stop = _stop_words()
    said = {singular(w) for w in words(description)}
    counts: Counter[str] = Counter()
    for caption in captions:
        counts.update({singular(w) for w in words(caption) if len(w) >= 3 and w not in stop} - said)
    first_seen = {w: i for i, w in reversed(list(enumerate(singular(x) for c in captions for x in words(c))))}
    return sorted(counts, key=lambda w: (-counts[w], first_seen.get(w, 0)))[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--split", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--embedder", default=None, help="default: offline")
    parser.add_argument("--gallery", default=None)
    parser.add_argument("--targets", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--words", type=int, default=3)
    parser.add_argument("--out", default=None, help="per-target results (JSON)")
    args = parser.parse_args()

    from plugir_offline_design import _selected_rows

    from pictrieve.evaluation.interactive import open_eval_gallery, target_plan
    from pictrieve.evaluation.paired import paired_bootstrap
    from pictrieve.evaluation.ranking import ExactRanker
    from pictrieve.evaluation.retrieval import rank_statistics
    from pictrieve.vectorstore.chroma_store import path_id

    folder = _selected_rows(args.folder, args.split, args.limit) if args.split or args.limit else args.folder
    gallery, captions = open_eval_gallery(folder, args.embedder, args.gallery)
    ranker = ExactRanker(gallery)
    by_id = {path_id(p): (p, texts) for p, texts in captions.items()}
    plan = target_plan(ranker.ids, by_id, args.targets, args.seed)
    embed = gallery.embedder.embed_texts
    rows, in_top = [], {"description": [], "append": [], "per-fact": [], "all-captions": []}
    for id_, description, visible in plan:
        said = oracle_words(description, visible, args.words)
        target = np.array([ranker.column[id_]])
        base = embed([description]) @ ranker.vectors.T
        appended = embed([description.rstrip(" .") + ", " + ", ".join(said)]) @ ranker.vectors.T if said else base
        facts = (embed(said) @ ranker.vectors.T).mean(axis=0, keepdims=True) if said else 0.0
        # what the free-text simulated user can tell in all: every other caption, appended
        told = embed([", ".join([description.rstrip(" .")] + [c.rstrip(" .") for c in visible])]) @ ranker.vectors.T
        row = {"target": str(by_id[id_][0]), "description": description, "words": said}
        for name, scores in (("description", base), ("append", appended), ("per-fact", base + facts),
                             ("all-captions", told)):
            stats = rank_statistics(scores, target)
            row[name] = float(stats["ranks"][0])
            in_top[name].append(float(np.clip((10 - stats["greater"][0]) / (stats["ties"][0] + 1), 0, 1)))
        rows.append(row)
    top = {k: np.array(v) for k, v in in_top.items()}
    print(f"{len(plan)} targets, {ranker.vectors.shape[0]} images, embedder {getattr(gallery.embedder, 'name', '')}")
    for name, values in top.items():
        line = f"{name:<12} Recall@10 {values.mean():.3f}"
        if name != "description":
            mean, low, high = paired_bootstrap(values - top["description"])
            line += f"   minus description {mean:+.3f} [{low:+.3f}, {high:+.3f}]"
        print(line)
    mean, low, high = paired_bootstrap(top["append"] - top["per-fact"])
    print(f"append minus per-fact {mean:+.3f} [{low:+.3f}, {high:+.3f}]")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
