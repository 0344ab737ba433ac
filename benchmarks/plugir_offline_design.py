"""Design check of the offline PlugIR questioner, on photos the evaluation never uses.

Runs the ``offline`` arm with the caption user on a captioned folder and prints BRI, Hits@10,
Recall@10 and the mean rank per round, for variants of two choices the questioner makes:

- ``default``: denied terms stay out of the query; candidates contradicting an answer keep 0.2 of
  their probability when the next question is chosen;
- ``no-reweight``: answers do not reweight the candidates (only the query moves);
- ``say-denied``: denied terms enter the query as "no <term>".

Choose on flickr8k-train rows (never flickr8k-dev), and with an embedder that was not trained on
them: the trained ``offline`` head saw flickr8k-train, so every target is found at round 0 there.

    python benchmarks/plugir_offline_design.py --folder ../shared/datasets/flickr8k-train --split dev \\
        --limit 500 --embedder offline-labels --gallery /tmp/g-train-dev500 --targets 60
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
    parser.add_argument("--targets", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", default="default,no-reweight,say-denied")
    args = parser.parse_args()

    import pictrieve.agents.plugir.offline_questioner as questioner
    from pictrieve.evaluation.interactive import open_eval_gallery, run_ablation
    from pictrieve.vectorstore.gallery import path_id

    folder = _selected_rows(args.folder, args.split, args.limit) if args.split or args.limit else args.folder
    gallery, captions = open_eval_gallery(folder, args.embedder, args.gallery)
    targets = {path_id(p): (p, texts) for p, texts in captions.items()}
    weight, confirmed = questioner.INCONSISTENT_WEIGHT, questioner.confirmed_phrase

    def say_denied(question, answer):
        phrase = confirmed(question, answer)
        if phrase is None and question.kind == "yes_no" and questioner.read_answer(question, answer) == 0:
            return f"no {question.phrase}"
        return phrase

    for variant in args.variants.split(","):
        questioner.INCONSISTENT_WEIGHT = 1.0 if variant == "no-reweight" else weight
        questioner.confirmed_phrase = say_denied if variant == "say-denied" else confirmed
        result = run_ablation(gallery, targets, None, targets=args.targets, rounds=args.rounds,
                              arms=["offline"], progress=False)["arms"]["offline"]
        print(json.dumps({"variant": variant, "bri": round(result["bri"], 3),
                          **{k: np.round(result[k], 3).tolist() for k in ("hits@10", "recall@10", "mean_rank")}}))


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
