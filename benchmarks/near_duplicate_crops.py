"""How large a crop `pictrieve duplicates` still groups with its original (issue 37: README said cropped copies
are grouped, and a copy cropped 6% per side was not).

For each of the first ``--photos`` photos of a captioned folder's ``images/`` (flickr8k-dev: evaluation only), a
copy is cropped by each ``--shares`` share of its width and height on every side, and the pair (original, copy)
is put to the shipped rule (:func:`pictrieve.vectorstore.duplicates.confirmed_groups`: hashes within 10 bits and
cosine >= 0.9, or within 4 bits and cosine >= 0.65) with the ``--embedder``'s vectors. Prints, per share, the
share of pairs grouped, of pairs within the hash distance, and the median hash bits and cosine; ``--rows FILE``
keeps one JSON line per photo and share.

    python benchmarks/near_duplicate_crops.py ../shared/datasets/flickr8k-dev --photos 100 \\
        --rows benchmarks/results/near_duplicates/crops-dev.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def measure(folder: Path, photos: int, shares: list[float], embedder_name: str) -> list[dict]:
    from pictrieve.tools.core.images import load_image
    from pictrieve.tools.core.perceptual_hash import hamming, perceptual_hash
    from pictrieve.tools.models.embedders.factory import create_embedder
    from pictrieve.vectorstore.duplicates import confirmed_groups

    embedder = create_embedder(embedder_name)
    rows = []
    for path in sorted((folder / "images").glob("*.jpg"))[:photos]:
        image = load_image(path)
        width, height = image.size
        crops = [image.crop((round(width * s), round(height * s), width - round(width * s), height - round(height * s)))
                 for s in shares]
        vectors = np.asarray(embedder.embed_images([image, *crops]), dtype=np.float32)
        base = perceptual_hash(image)
        for share, crop, vector in zip(shares, crops, vectors[1:]):
            copy_hash = perceptual_hash(crop)
            grouped = bool(confirmed_groups([base, copy_hash], np.stack([vectors[0], vector])))
            rows.append({"photo": path.name, "share": share, "bits": hamming(base, copy_hash),
                         "cosine": round(float(vectors[0] @ vector), 4), "grouped": grouped})
    return rows


def summary(rows: list[dict]) -> dict[str, dict[str, float]]:
    from pictrieve.vectorstore.duplicates import DEFAULT_MAX_DISTANCE

    out = {}
    for share in sorted({row["share"] for row in rows}):
        at = [row for row in rows if row["share"] == share]
        out[f"{share:.3f}"] = {"pairs": len(at), "grouped": round(sum(r["grouped"] for r in at) / len(at), 3),
                               "within_hash_distance": round(sum(r["bits"] <= DEFAULT_MAX_DISTANCE for r in at) / len(at), 3),
                               "median_bits": float(np.median([r["bits"] for r in at])),
                               "median_cosine": round(float(np.median([r["cosine"] for r in at])), 4)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--photos", type=int, default=100)
    parser.add_argument("--shares", default="0.025,0.04,0.05,0.06,0.08", help="crop per side, as shares")
    parser.add_argument("--embedder", default="offline")
    parser.add_argument("--rows", type=Path, default=None, help="write one JSON line per photo and share here")
    args = parser.parse_args()
    rows = measure(args.folder, args.photos, [float(s) for s in args.shares.split(",")], args.embedder)
    if args.rows:
        args.rows.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(json.dumps({"photos": args.photos, "embedder": args.embedder, "by_share": summary(rows)}, indent=1))


if __name__ == "__main__":
    main()
