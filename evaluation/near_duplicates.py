"""Synthetic near-duplicates of real photos, and how well found duplicate groups match them.

:func:`write_copies` makes, from one photo, the copies a photo library gathers: a resized one, a JPEG
recompressed at low quality, a slight crop, and an EXIF-rotated one (pixels stored sideways with Orientation 6,
as a phone writes them; upright once the loader applies it). :func:`pair_scores` compares the pairs inside
found groups with the true pairs (copies of one original), for the precision/recall of a duplicate finder.
Used by ``benchmarks/near_duplicates.py`` (choosing the thresholds on flickr8k-train, reporting on
flickr8k-dev) and by the tests.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Iterable

from PIL import Image

COPY_KINDS = ("resized", "recompressed", "cropped", "rotated")
CROP_SHARE = 0.025
"""The slight crop takes this share off each side (5% of each dimension)."""
ORIENTATION_TAG = 0x0112


def write_copies(photo: str | Path, folder: str | Path, kinds: Iterable[str] = COPY_KINDS) -> dict[str, Path]:
    """Write the near-duplicate copies of ``photo`` into ``folder`` (``NAME.KIND.jpg``); returns them by kind."""
    photo, folder = Path(photo), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with Image.open(photo) as opened:
        image = opened.convert("RGB")
    width, height = image.size
    written: dict[str, Path] = {}
    for kind in kinds:
        target = folder / f"{photo.stem}.{kind}.jpg"
        if kind == "resized":
            image.resize((max(1, width // 2), max(1, height // 2)), Image.Resampling.LANCZOS).save(target, quality=90)
        elif kind == "recompressed":
            image.save(target, quality=35)
        elif kind == "cropped":
            dx, dy = round(width * CROP_SHARE), round(height * CROP_SHARE)
            image.crop((dx, dy, width - dx, height - dy)).save(target, quality=90)
        elif kind == "rotated":
            exif = Image.Exif()
            exif[ORIENTATION_TAG] = 6  # "turn 90 degrees clockwise to show": pixels stored turned the other way
            image.transpose(Image.Transpose.ROTATE_90).save(target, quality=90, exif=exif)
        else:
            raise ValueError(f"unknown copy kind {kind!r}; choose from {', '.join(COPY_KINDS)}")
        written[kind] = target
    return written


def true_pairs(groups: Iterable[Iterable[str]]) -> set[frozenset[str]]:
    """Every unordered pair of paths inside each group."""
    return {frozenset(pair) for group in groups for pair in itertools.combinations(sorted(set(group)), 2)}


def pair_scores(found: Iterable[Iterable[str]], truth: Iterable[Iterable[str]]) -> dict[str, float | int]:
    """Pairwise precision and recall of ``found`` groups against ``truth`` groups (both lists of paths)."""
    found_pairs, true = true_pairs(found), true_pairs(truth)
    hit = len(found_pairs & true)
    return {"pairs_found": len(found_pairs), "pairs_true": len(true), "pairs_right": hit,
            "precision": hit / len(found_pairs) if found_pairs else 1.0,
            "recall": hit / len(true) if true else 1.0}
