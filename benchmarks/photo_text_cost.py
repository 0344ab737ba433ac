"""What reading the text in photos (``index --ocr``) adds to indexing, per 1,000 photos (issue 30).

On the same decoded photos (indexing's draft decode, page cache warm), interleaved chunk by chunk so a loaded
machine weighs on every arm alike:

- **ocr**: :class:`pictrieve.tools.models.photo_text.PhotoTextReader` as indexing runs it (longest side at most
  960 px for detection), on one thread;
- **ocr, RapidOCR's default size**: the same model with RapidOCR's own setting (shortest side scaled up to 736),
  on a subset: why pictrieve caps the size instead;
- **embed**: the default embedder (``offline``) on the same photos in batches of 32, what indexing already costs.

Photos: flickr8k-dev's (read in place; few have text) and pictures with text made here (signs and screenshots
rendered with matplotlib's DejaVu Sans), whose key words must be read back (reported as the share read).

Run:  OMP_NUM_THREADS=1 python benchmarks/photo_text_cost.py ../shared/datasets/flickr8k-dev --photos 200 \
          --json benchmarks/results/photo_text/cost.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import matplotlib
from PIL import Image, ImageDraw, ImageFont

from pictrieve.tools.core.images import is_image_path, load_image
from pictrieve.tools.models.photo_text import PhotoTextReader
from pictrieve.vectorstore.indexing import DRAFT_SIZE

FONT = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
WORDS = ["bakery", "pharmacy", "station", "museum", "parking", "exit", "harbor", "garden", "library", "market",
         "password", "network", "battery", "settings", "meeting", "invoice", "ticket", "platform", "coffee", "hotel"]


def text_pictures(folder: Path, count: int, seed: int = 0) -> list[tuple[Path, list[str]]]:
    """``count`` pictures with words: signs (a word or two on a board, 640x480 JPEG) and screenshots (four lines of
    small text, 750x1334 PNG, a phone's screen), each with the words it shows."""
    rng = random.Random(seed)
    made = []
    for i in range(count):
        words = rng.sample(WORDS, 2 if i % 2 == 0 else 4)
        if i % 2 == 0:
            picture = Image.new("RGB", (640, 480), tuple(rng.randrange(40, 120) for _ in range(3)))
            draw = ImageDraw.Draw(picture)
            draw.rectangle((40, 120, 600, 360), fill=(235, 235, 225))
            draw.text((70, 150), words[0].upper(), font=ImageFont.truetype(str(FONT), 72), fill=(150, 20, 20))
            draw.text((70, 260), words[1], font=ImageFont.truetype(str(FONT), 44), fill=(10, 10, 10))
            path = folder / f"sign{i:03d}.jpg"
            picture.save(path, quality=88)
        else:
            picture = Image.new("RGB", (750, 1334), "white")
            draw = ImageDraw.Draw(picture)
            for j, word in enumerate(words):
                draw.text((40, 200 + 90 * j), f"{word.title()}: {rng.randint(10, 9999)}",
                          font=ImageFont.truetype(str(FONT), 30), fill="black")
            path = folder / f"screen{i:03d}.png"
            picture.save(path)
        made.append((path, words))
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="flickr8k-dev (its images/ are read in place)")
    parser.add_argument("--photos", type=int, default=200, help="flickr8k-dev photos to use")
    parser.add_argument("--text", type=int, default=20, help="pictures with text to make")
    parser.add_argument("--default-size-photos", type=int, default=30,
                        help="photos for RapidOCR's default-size arm (slow)")
    parser.add_argument("--json", type=Path, help="write the figures and per-picture results here")
    args = parser.parse_args(argv)

    from pictrieve.tools.models.embedders.factory import create_embedder

    flickr = sorted(p for p in (args.folder / "images").iterdir() if is_image_path(p))[: args.photos]
    with tempfile.TemporaryDirectory() as scratch:
        made = text_pictures(Path(scratch), args.text)
        paths = flickr + [path for path, _ in made]
        images = [load_image(p, draft_size=DRAFT_SIZE) for p in paths]

    reader = PhotoTextReader(threads=1)
    default_size = PhotoTextReader(threads=1)
    default_size.detect_side = 736
    load_began = time.perf_counter()
    reader.read(images[0])
    reader_load = time.perf_counter() - load_began
    default_size._engine = _default_engine()
    embedder = create_embedder()
    embedder.embed_images(images[:2])  # loaded and warm

    ocr_s, embed_s, default_s = [0.0] * len(images), 0.0, []
    texts = [""] * len(images)
    for start in range(0, len(images), 32):  # interleaved: embed a chunk, read its text, next chunk
        chunk = images[start:start + 32]
        began = time.perf_counter()
        embedder.embed_preprocessed([embedder.preprocess(image) for image in chunk])
        embed_s += time.perf_counter() - began
        for offset, image in enumerate(chunk):
            began = time.perf_counter()
            texts[start + offset] = reader.read(image)
            ocr_s[start + offset] = time.perf_counter() - began
            if start + offset < args.default_size_photos:
                began = time.perf_counter()
                default_size._engine(image.convert("RGB"))
                default_s.append(time.perf_counter() - began)

    n_flickr = len(flickr)
    found = [set(w.strip(":").lower() for w in texts[n_flickr + i].split()) for i in range(len(made))]
    read_back = sum(all(word in seen for word in words) for seen, (_, words) in zip(found, made))
    with_text = sum(1 for t in texts[:n_flickr] if t)
    figures = {
        "flickr_photos": n_flickr,
        "text_pictures": len(made),
        "ocr_s_per_1000_flickr": round(1000 * sum(ocr_s[:n_flickr]) / n_flickr, 1),
        "ocr_s_per_1000_text_pictures": round(1000 * sum(ocr_s[n_flickr:]) / max(1, len(made)), 1),
        "ocr_s_per_1000_rapidocr_default_size": round(1000 * sum(default_s) / max(1, len(default_s)), 1),
        "rapidocr_default_size_photos": len(default_s),
        "embed_s_per_1000": round(1000 * embed_s / len(images), 1),
        "embedder": embedder.name,
        "reader_load_s": round(reader_load, 2),
        "text_pictures_all_words_read": f"{read_back}/{len(made)}",
        "flickr_photos_with_text_read": f"{with_text}/{n_flickr}",
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        rows = [{"file": p.name, "ocr_s": round(s, 4), "text": t} for p, s, t in zip(paths, ocr_s, texts)]
        args.json.write_text(json.dumps({"figures": figures, "per_picture": rows}, indent=1) + "\n")
    return 0


def _default_engine():
    """RapidOCR with its own detection size (shortest side scaled up to 736), one thread, quiet."""
    from rapidocr import RapidOCR

    return RapidOCR(params={"Global.log_level": "error", "EngineConfig.onnxruntime.intra_op_num_threads": 1,
                            "EngineConfig.onnxruntime.inter_op_num_threads": 1})


if __name__ == "__main__":
    sys.exit(main())
