"""Why PlugIR's offline dialogue gains little, round by round, from `pictrieve eval interactive --dialogues`.

For every answered offline question, per round:

- **positive**: the answer was "yes" or named an option (else "no" / "none of these" / unknown);
- **new**: a confirmed term that the first description does not already imply;
- **others holding it**: of the other images shown that round (the top 10 before the answer), the share
  whose description implies the asked term. A "yes" separates the target when few of them hold it;
  a "no" lowers the ones that do;
- **target's description holds a denied term**: a "no" that lowers the target itself (its description
  says what the user denied: possible only when descriptions are a captioner's guesses);
- **rank change**: the mean change of log rank over the round (negative is better).

Descriptions are what the graph read: the stored first caption (captioned run) or the zero-shot tags
(`--uncaptioned`, `tags` on the gallery's stored vectors).

    python benchmarks/plugir_diagnosis.py run.json ../shared/datasets/flickr8k-dev [--uncaptioned]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dialogues", help="a --dialogues file")
    parser.add_argument("folder", help="the evaluated folder (captions.jsonl)")
    parser.add_argument("--uncaptioned", action="store_true", help="the run described photos with tags")
    parser.add_argument("--split", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--embedder", default=None)
    parser.add_argument("--gallery", default=None)
    parser.add_argument("--arm", default="offline")
    args = parser.parse_args()

    from plugir_offline_design import _selected_rows

    from pictrieve.agents.plugir.caption_terms import caption_terms, settled_by
    from pictrieve.agents.plugir.offline_answers import answered_facts, read_answer
    from pictrieve.agents.plugir.offline_questions import Question
    from pictrieve.evaluation.interactive import open_eval_gallery
    from pictrieve.vectorstore.chroma_store import path_id

    with open(args.dialogues, encoding="utf-8") as handle:
        dialogues = json.load(handle)["dialogues"][args.arm]
    folder = _selected_rows(args.folder, args.split, args.limit) if args.split or args.limit else args.folder
    gallery, captions = open_eval_gallery(folder, args.embedder, args.gallery)
    ids = gallery.ids()
    if args.uncaptioned:
        from pictrieve.tools.models.image_tags import ZeroShotTagger

        texts = ZeroShotTagger(gallery.embedder).describe_vectors(gallery.embeddings(ids))
        description_of = dict(zip(ids, texts))
    else:
        description_of = {path_id(p): texts[0] for p, texts in captions.items()}
    implied = {id_: settled_by(caption_terms(text).keys) for id_, text in description_of.items()}

    stats: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for dialogue in dialogues:
        target = path_id(dialogue["target"])
        said = settled_by(caption_terms(dialogue["description"]).keys)
        ranks = dialogue["ranks"]
        for t, turn in enumerate(dialogue["turns"]):
            s = stats[t + 1]
            s["log rank change"].append(float(np.log(ranks[t + 1]) - np.log(ranks[t])))
            if not turn.get("spec"):
                s["unstructured"].append(1.0)
                continue
            question = Question.from_json(turn["spec"])
            outcome = read_answer(question, turn["answer"])
            negative = 0 if question.kind == "yes_no" else len(question.options)
            positive = outcome is not None and outcome != negative
            s["positive"].append(float(positive))
            confirmed, denied = answered_facts([turn])
            keys = confirmed if positive else denied
            others = [i for i in dialogue["shown"][t] if i != target][:10]
            for key in keys:
                share = float(np.mean([key in implied[i] for i in others])) if others else 0.0
                if positive:
                    s["new"].append(float(key not in said))
                    s["others holding a confirmed term"].append(share)
                else:
                    s["others holding a denied term"].append(share)
                    s["target's description holds a denied term"].append(float(key in implied[target]))
            if positive:
                s["log rank change after a positive answer"].append(s["log rank change"][-1])
            else:
                s["log rank change after a negative answer"].append(s["log rank change"][-1])
    names = ["positive", "new", "others holding a confirmed term", "others holding a denied term",
             "target's description holds a denied term", "log rank change",
             "log rank change after a positive answer", "log rank change after a negative answer"]
    print(f"{len(dialogues)} dialogues ({args.dialogues})")
    print("| round | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for t in sorted(stats):
        cells = [f"{np.mean(stats[t][n]):.2f} ({len(stats[t][n])})" if stats[t][n] else "-" for n in names]
        print(f"| {t} | " + " | ".join(cells) + " |")
    every = {n: [v for t in stats for v in stats[t][n]] for n in names}
    print("| all | " + " | ".join(f"{np.mean(v):.2f} ({len(v)})" if v else "-" for v in every.values()) + " |")


if __name__ == "__main__":
    main()
