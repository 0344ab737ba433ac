"""Does a trained QC2 model use its level words? Caption loss under true, opposite and random levels.

Usage (after `pictrieve quality train --captions-from FOLDER --out MODEL`):

    python benchmarks/qc2_level_check.py --model MODEL --gallery MODEL.work/heldout-gallery -n 250
    python benchmarks/qc2_level_check.py --model MODEL --history     # the per-epoch check saved in training

The gallery must be annotated (relevance + the model's quality score); its captions get levels from
the *model's* thresholds (those of its training captions). The loss is the mean next-token loss over
caption and end tokens, with the output softmax restricted to the model's caption vocabulary (tokens
outside it are not scored), computed through the saved and reloaded model's ordinary forward. A model
that uses the levels has a clearly lower loss with the true levels than with the opposite or random
ones; ``opposite_<axis>`` flips one axis only, which says which axis it reads.
"""

from __future__ import annotations

import argparse
import json
import logging
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="saved QC2 model folder (qc2.json + adapter)")
    parser.add_argument("--gallery", default=None, help="annotated gallery whose captions to score")
    parser.add_argument("-n", type=int, default=250, help="captions (seeded sample)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--history", action="store_true", help="print the per-epoch check stored at training")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    import torch

    from pictrieve.agents.qc2.annotation import build_training_data
    from pictrieve.agents.qc2.bundle import load_qc2_model, read_bundle_info
    from pictrieve.agents.qc2.level_check import level_usage, level_variants, sample_examples, separation
    from pictrieve.cli.quality import format_level_check
    from pictrieve.vectorstore.gallery import Gallery

    torch.set_num_threads(args.threads)
    if args.history:
        history = read_bundle_info(args.model).get("training", {}).get("probe_losses") or []
        print(json.dumps(history, indent=1) if args.json else format_level_check(history))
        if not args.gallery:
            return
    if not args.gallery:
        parser.error("give --gallery (captions to score) or --history")
    model = load_qc2_model(args.model, device="cpu")
    gallery = Gallery.open(args.gallery, create=False)
    keys = [axis.score_key for axis in model.axes[1:]]
    examples, _ = build_training_data(list(gallery.items()), keys, axes=model.axes)
    examples = sample_examples(examples, args.n, seed=args.seed)
    started = time.perf_counter()
    losses = level_usage(model.model, model.tokenizer, level_variants(examples, model.axes, seed=args.seed),
                         model.axis_names, allowed_token_ids=model.allowed_token_ids,
                         max_length=(model.training.get("config") or {}).get("max_length", 64))
    result = {"model": args.model, "gallery": args.gallery, "captions": len(examples), "losses": losses,
              "minus_true": separation(losses), "seconds": round(time.perf_counter() - started, 1)}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{len(examples)} captions of {args.gallery}, levels from the model's thresholds "
          f"({result['seconds']} s)")
    print("| levels | loss | minus true |\n|---|---|---|")
    for name, value in losses.items():
        print(f"| {name} | {value:.4f} | {result['minus_true'].get(name, 0.0):+.4f} |")


if __name__ == "__main__":
    main()
