"""How often the words a describer gives a photo are words its human captions use.

PlugIR's offline questioner asks about the terms of the candidates' descriptions; on a gallery
without captions those come from a describer. This compares, on a captioned folder whose captions
the describers never see:

- ``tags``: the zero-shot tags (:mod:`pictrieve.tools.models.image_tags`), top 1..5, from the gallery's
  stored vectors;
- ``imagenet``: the terms of the ``offline`` captioner's line (the ImageNet classes, 0.05 or more,
  the offline embedder's classifier sees: "a photo of a Vizsla (0.36) or a Malinois (0.13)");

Precision: the share of a photo's terms that its five human captions hold (a thing inside a
compound counts: "ball" in "a tennis ball"), averaged over photos. ``chance``: the share of photos
whose captions hold a given vocabulary word, averaged over the words (what a random tag scores).

    python benchmarks/image_tags_precision.py ../shared/datasets/flickr8k-dev --gallery G-DEV
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="captioned folder (captions.jsonl)")
    parser.add_argument("--embedder", default="offline")
    parser.add_argument("--gallery", default=None, help="where to keep the index")
    parser.add_argument("--limit", type=int, default=None, help="only the first N photos")
    parser.add_argument("--no-imagenet", action="store_true", help="skip the ImageNet describer (it re-reads every photo)")
    args = parser.parse_args()

    from tqdm import tqdm

    from pictrieve.agents.plugir.caption_terms import caption_terms
    from pictrieve.agents.plugir.simulated_user import CaptionUser
    from pictrieve.evaluation.interactive import open_eval_gallery
    from pictrieve.tools.models.captioners import create_captioner
    from pictrieve.tools.models.image_tags import ZeroShotTagger
    from pictrieve.vectorstore.chroma_store import path_id

    gallery, captions = open_eval_gallery(args.folder, args.embedder, args.gallery, limit=args.limit)
    paths = list(captions)
    users = [CaptionUser(captions[p]) for p in paths]  # .holds(term): the captions say it
    vectors = gallery.embeddings([path_id(p) for p in paths])
    tagger = ZeroShotTagger(gallery.embedder, k=5)
    tags = tagger.tags_of_vectors(vectors)
    report = {"photos": len(paths), "embedder": gallery.embedder_name}
    for k in range(1, 6):
        terms = [caption_terms(tagger.line(row[:k])).keys for row in tags]
        report[f"tags@{k}"] = _precision(terms, users)
    words = [caption_terms(tagger.line([w])).keys for w in tagger.vocabulary.words]
    report["chance"] = float(np.mean([np.mean([any(u.holds(t) for t in w) for u in users]) for w in words]))
    if not args.no_imagenet:
        describer = create_captioner("offline", embedder=gallery.embedder)
        lines = [describer.caption([p])[0] for p in tqdm(paths, desc="imagenet describer")]
        report["imagenet"] = _precision([caption_terms(line).keys for line in lines], users)
        report["imagenet_terms_per_photo"] = float(np.mean([len(caption_terms(line).keys) for line in lines]))
        report["examples"] = [{"captions": captions[p][:1], "tags": tagger.line(t[:4]), "imagenet": line}
                              for p, t, line in list(zip(paths, tags, lines))[:5]]
    print(json.dumps(report, indent=2))


def _precision(terms: list[set[str]], users: list) -> float:
    scores = [np.mean([user.holds(t) for t in keys]) for keys, user in zip(terms, users) if keys]
    return float(np.mean(scores)) if scores else 0.0


if __name__ == "__main__":
    main()
