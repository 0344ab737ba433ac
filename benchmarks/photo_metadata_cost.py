"""What reading a photo's own metadata adds to indexing, per 1,000 photos (issue 30).

Side by side in one run, on the same files (page cache warm: each arm reads every file once first):

- **metadata**: :func:`pictrieve.tools.core.photo_metadata.read_photo_metadata` (header, EXIF, place name);
- **hash**: :func:`pictrieve.tools.core.images.file_sha256`, which indexing already does for every file;
- **decode**: :func:`pictrieve.tools.core.images.load_image` with indexing's draft size, what every embedded
  file costs before the model.

Photo sets: flickr8k-dev's photos read in place (little EXIF: no dates, GPS or camera), and as many JPEGs
written here with full EXIF (date, offset, GPS spread over Europe, camera), so the gazetteer lookup is counted.
The gazetteer's one-off load (GeoNames cities1000 into a KD-tree) is reported apart.

Run:  OMP_NUM_THREADS=1 python benchmarks/photo_metadata_cost.py ../shared/datasets/flickr8k-dev \
          --json benchmarks/results/photo_metadata/cost.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from PIL import Image
from PIL.TiffImagePlugin import IFDRational

from pictrieve.tools.core import photo_metadata
from pictrieve.tools.core.images import file_sha256, is_image_path, load_image
from pictrieve.vectorstore.indexing import DRAFT_SIZE


def _rational(value: float) -> IFDRational:
    return IFDRational(round(value * 10000), 10000)


def write_exif_photos(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` 640x480 JPEGs with a capture date and offset, a GPS position in Europe and a camera."""
    rng = random.Random(seed)
    paths = []
    for i in range(count):
        exif = Image.Exif()
        exif[0x010F], exif[0x0110], exif[0x0112] = "Canon", "Canon EOS 5D", rng.choice([1, 6, 8])
        sub = exif.get_ifd(0x8769)
        sub[0x9003], sub[0x9011] = f"2021:0{rng.randint(1, 9)}:1{rng.randint(0, 9)} 12:00:00", "+01:00"
        gps = exif.get_ifd(0x8825)
        gps[1], gps[2] = "N", (_rational(rng.uniform(36, 60)), _rational(0), _rational(0))
        gps[3], gps[4] = "E", (_rational(rng.uniform(0, 25)), _rational(0), _rational(0))
        path = folder / f"exif{i:04d}.jpg"
        Image.new("RGB", (640, 480), tuple(rng.randrange(256) for _ in range(3))).save(path, exif=exif, quality=85)
        paths.append(path)
    return paths


def time_per_1000(paths: list[Path], work: Callable[[Path], object]) -> float:
    began = time.perf_counter()
    for path in paths:
        work(path)
    return (time.perf_counter() - began) / len(paths) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a folder of photos read in place (flickr8k-dev)")
    parser.add_argument("--exif-photos", type=int, default=500, help="JPEGs with full EXIF written to a temp folder")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    flickr = sorted(p for p in args.folder.rglob("*") if is_image_path(p))
    began = time.perf_counter()
    photo_metadata.place_fields(38.72, -9.14)
    gazetteer_load_s = time.perf_counter() - began
    results: dict[str, object] = {"gazetteer_load_s": round(gazetteer_load_s, 2)}
    with tempfile.TemporaryDirectory() as tmp:
        sets = {"flickr8k-dev": flickr, "written with EXIF": write_exif_photos(Path(tmp), args.exif_photos)}
        arms: dict[str, Callable[[Path], object]] = {
            "metadata": photo_metadata.read_photo_metadata,
            "hash": file_sha256,
            "decode": lambda p: load_image(p, draft_size=DRAFT_SIZE),
        }
        for name, paths in sets.items():
            for path in paths:
                path.read_bytes()  # warm the page cache for every arm alike
            row = {arm: round(time_per_1000(paths, work), 2) for arm, work in arms.items()}
            row["photos"] = len(paths)
            results[name] = row
            print(f"{name} ({len(paths)} photos): seconds per 1,000 photos "
                  + ", ".join(f"{arm} {row[arm]:.2f}" for arm in arms), file=sys.stderr)
    print(f"gazetteer load (once per process): {gazetteer_load_s:.2f} s", file=sys.stderr)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
