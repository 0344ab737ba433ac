"""Peak memory and time to decode a network caller's picture: the service decoder against the indexer's loader.

Side by side in one run, each decode in a fresh Python process whose kernel peak-RSS counter is reset just
before it (``/proc/self/clear_refs``), so a row is the memory that one picture adds:

- **indexer** (:func:`pictrieve.tools.core.images.load_image`, the 180 MP cap): what the MCP server, the page
  and the served graphs decoded a caller's picture with before issue 27;
- **service** (:func:`pictrieve.tools.core.images.load_service_image`): a JPEG decoded reduced (draft mode)
  to 1536 px, any other format above 50 MP refused from its header, two large decodes at a time.

Pictures: the issue's 13000x13000 grey PNG (169 MP, a few hundred kB), a 13000x13000 JPEG, a 12 MP photo-like
JPEG and a 40 MP RGB PNG (under the budget), and ``--concurrent`` threads each decoding the 40 MP PNG at once
(what that many callers sending it together cost).

Run:  OMP_NUM_THREADS=1 python benchmarks/caller_picture_memory.py \
          --json benchmarks/results/picture_memory/caller-pictures.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

CHILD = textwrap.dedent("""
    import json, sys, threading, time
    from pathlib import Path
    from pictrieve.tools.core.images import load_image, load_service_image
    decode = {"indexer": load_image, "service": load_service_image}[sys.argv[1]]
    paths, threads = sys.argv[2], int(sys.argv[3])
    def status(field):
        return next(int(l.split()[1]) * 1024 for l in Path("/proc/self/status").read_text().splitlines()
                    if l.startswith(field + ":"))
    Path("/proc/self/clear_refs").write_text("5")
    start, began, outcome = status("VmRSS"), time.perf_counter(), []
    def one():
        try:
            outcome.append("x".join(map(str, decode(paths).size)))
        except Exception as exc:
            outcome.append("refused: " + type(exc).__name__)
    workers = [threading.Thread(target=one) for _ in range(threads)]
    [w.start() for w in workers]
    [w.join() for w in workers]
    print(json.dumps({"peak_added_mib": round((status("VmHWM") - start) / 2**20),
                      "seconds": round(time.perf_counter() - began, 2), "outcome": sorted(set(outcome))}))
""")


def pictures(folder: Path) -> dict[str, Path]:
    import numpy as np
    from PIL import Image

    from helpers.big_pictures import flat_jpeg, flat_png

    rng = np.random.default_rng(0)
    photo = Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)).resize((4000, 3000))
    photo.save(folder / "photo-12mp.jpg", quality=90)
    big = Image.fromarray(rng.integers(0, 255, (100, 160, 3), dtype=np.uint8)).resize((8000, 5000))
    big.save(folder / "rgb-40mp.png", compress_level=1)
    return {"13000x13000 grey PNG (169 MP)": flat_png(folder / "flat.png", 13000, 13000),
            "13000x13000 JPEG": flat_jpeg(folder / "flat.jpg", 13000, 13000),
            "4000x3000 JPEG (12 MP)": folder / "photo-12mp.jpg",
            "8000x5000 RGB PNG (40 MP)": folder / "rgb-40mp.png"}


def measure(decoder: str, path: Path, threads: int = 1) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, decoder, str(path), str(threads)], capture_output=True,
                          text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrent", type=int, default=4, help="threads decoding the 40 MP PNG at once")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        made = pictures(Path(scratch))
        cases = [(name, path, 1) for name, path in made.items()]
        cases.append((f"{args.concurrent} x the 40 MP PNG at once", made["8000x5000 RGB PNG (40 MP)"], args.concurrent))
        for name, path, threads in cases:
            row = {"picture": name, "file_kb": round(path.stat().st_size / 1024)}
            for decoder in ("indexer", "service"):
                row[decoder] = measure(decoder, path, threads)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| picture | file | indexer: peak added, time | service: peak added, time | service outcome |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        i, s = row["indexer"], row["service"]
        print(f"| {row['picture']} | {row['file_kb']:,} kB | {i['peak_added_mib']:,} MiB, {i['seconds']} s | "
              f"{s['peak_added_mib']:,} MiB, {s['seconds']} s | {', '.join(s['outcome'])} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"load_average": os.getloadavg(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
