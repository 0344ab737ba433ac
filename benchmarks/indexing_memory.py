"""Peak memory while indexing stays flat as the gallery grows.

The photos of a folder are copied ``--copies`` times (distinct files, so each is embedded) and
indexed into one gallery in chunks. Before each chunk the kernel's peak-RSS counter is reset
(``/proc/self/clear_refs``), so each row shows the peak resident memory *during that chunk* next to
the gallery size: with streaming decode and bounded batches it should not grow with the gallery.

Run:  python benchmarks/indexing_memory.py ../shared/datasets/flickr8k-dev/images --copies 4 --json
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
from pathlib import Path


def _peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def _reset_peak_rss() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("images", type=Path)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--chunk", type=int, default=250, help="files per measured chunk")
    parser.add_argument("--embedder", default="open_clip:ViT-B-32/random")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("pictrieve").setLevel(logging.ERROR)

    from pictrieve.vectorstore.gallery import Gallery

    sources = sorted(args.images.glob("*.jpg"))
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        files = []
        for copy in range(args.copies):
            for source in sources:
                target = root / "photos" / f"copy{copy}" / source.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
                files.append(target)
        gallery = Gallery.open(root / "gallery", args.embedder)
        gallery.embedder  # the model's own memory is loaded before the first measurement
        for start in range(0, len(files), args.chunk):
            _reset_peak_rss()
            gallery.add(files[start : start + args.chunk], batch_size=args.batch_size, progress=False)
            rows.append({"gallery_images": gallery.count(), "peak_rss_mib": round(_peak_rss_mib(), 1)})
            logging.info("%s", rows[-1])
    first, last = rows[0]["peak_rss_mib"], rows[-1]["peak_rss_mib"]
    result = {"embedder": args.embedder, "batch_size": args.batch_size, "chunks": rows,
              "growth_first_to_last_mib": round(last - first, 1)}
    print(json.dumps(result, indent=2) if args.json else result)


if __name__ == "__main__":
    main()
