"""Start-up of the commands a person waits on: when the first line comes, the longest silence, the whole run.

    OMP_NUM_THREADS=1 python benchmarks/startup_steps.py PHOTOS CAPTIONED_FOLDER \\
        --code before=/path/to/old/checkout --code after=/path/to/this/checkout [--rounds 3] \\
        [--json benchmarks/results/startup/startup-steps.json]

Each ``--code NAME=DIR`` is a pictrieve checkout (a ``git worktree`` at an older commit, say), run through
``PYTHONPATH`` in new processes, one after another within each round (A, B, A, B, ...) so a loaded machine
weighs on every version alike. The commands, each a new process as a person types it:

- ``visret`` / ``needle``: ``pictrieve search --method visret|needle QUERY -g G --visualizer exemplar:CAPTIONED_FOLDER``
- ``search``: plain ``pictrieve search QUERY -g G -k 5`` (the cold start of the offline default);
- ``ask``: ``pictrieve ask PHOTO QUESTION --search local:examples/vsa-offline/pages``.

The gallery holds the first ``--images`` photos of PHOTOS, indexed once with the offline default (by the
last ``--code``). Every version first runs each command once untimed, so caches (the caption matrix, the
ONNX export, the detector) are warm: the numbers are a person's second and later runs. Reported per run:
seconds to the first line on stderr, to the first graph step line (``[ 0.1s] name...``; ask: its first
step), the longest time with no new line (from the start to the exit), and the whole run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUERY = "a dog running on a beach"
QUESTION = "what animal is this and how many teeth does it have?"
STEP_LINE = re.compile(rb"^\[ *[\d.]+s\] (\w+)\.\.\.$")  # a graph step of search --method: "[   0.1s] retrieve..."
ASK_FIRST_STEP = re.compile(rb"^\[ *[\d.]+s\] finding regions")  # ask's first step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("photos", type=Path)
    parser.add_argument("captioned", type=Path, help="a captioned folder (captions.jsonl) for the exemplar visualizer")
    parser.add_argument("--code", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--images", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commands", default="visret,needle,search,ask")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    versions = dict(item.split("=", 1) for item in args.code)
    work = Path(tempfile.mkdtemp(prefix="pictrieve-startup-"))
    try:
        envs = {name: _env(work, name, Path(root)) for name, root in versions.items()}
        folder = work / "photos"
        folder.mkdir()
        photos = sorted(p for p in args.photos.iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png"})[: args.images]
        for path in photos:
            (folder / path.name).symlink_to(path.resolve())
        gallery = work / "gallery"
        last = list(envs)[-1]
        subprocess.run([sys.executable, "-m", "pictrieve.cli.main", "index", str(folder), "-g", str(gallery)],
                       env=envs[last], check=True, capture_output=True)
        pages = Path(versions[last]) / "examples" / "vsa-offline" / "pages"
        commands = {
            "visret": ["search", "--method", "visret", QUERY, "-g", str(gallery), "--visualizer", f"exemplar:{args.captioned}"],
            "needle": ["search", "--method", "needle", QUERY, "-g", str(gallery), "--visualizer", f"exemplar:{args.captioned}"],
            "search": ["search", QUERY, "-g", str(gallery), "-k", "5"],
            "ask": ["ask", str(photos[0]), QUESTION, "--search", f"local:{pages}"],
        }
        chosen = [c.strip() for c in args.commands.split(",") if c.strip()]
        for command in chosen:  # warm every cache once per version, untimed
            for name, env in envs.items():
                _timed(commands[command], env)
        runs = []
        for round_ in range(args.rounds):
            for command in chosen:
                for name, env in envs.items():
                    runs.append({"round": round_, "command": command, "code": name, **_timed(commands[command], env)})
                    print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = _summary(runs, chosen, list(versions))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"versions": versions, "images": args.images, "rounds": args.rounds,
                                         "load_average": os.getloadavg(), "runs": runs, "summary": summary},
                                        indent=1) + "\n")
    for row in summary:
        print("| {command} | {code} | {first_line_s} | {first_step_s} | {longest_silence_s} | {total_s} | {ok} |".format(**row))


def _env(work: Path, name: str, root: Path) -> dict[str, str]:
    """An environment that imports pictrieve from ``root`` (a link named ``pictrieve`` on PYTHONPATH)."""
    link_dir = work / f"code-{name}"
    link_dir.mkdir()
    (link_dir / "pictrieve").symlink_to(root.resolve())
    return dict(os.environ, PYTHONPATH=str(link_dir), PYTHONUNBUFFERED="1")


def _timed(arguments: list[str], env: dict[str, str]) -> dict[str, float | None]:
    """Run one command, stamping every line it writes (stdout and stderr merged, tqdm's \\r too)."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "pictrieve.cli.main", *arguments], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    stamps: list[float] = []
    first_step: float | None = None
    buffer = b""
    while True:
        chunk = process.stdout.read1(65536)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = re.split(rb"[\r\n]", buffer)
        now = time.perf_counter() - started
        for line in lines:
            if not line.strip():
                continue
            stamps.append(now)
            if first_step is None and (STEP_LINE.match(line) or ASK_FIRST_STEP.match(line)):
                first_step = now
    code = process.wait()
    total = time.perf_counter() - started
    edges = [0.0, *stamps, total]
    return {"ok": code == 0, "first_line_s": round(stamps[0], 2) if stamps else None,
            "first_step_s": round(first_step, 2) if first_step is not None else None,
            "longest_silence_s": round(max(b - a for a, b in zip(edges, edges[1:])), 2), "total_s": round(total, 2)}


def _summary(runs: list[dict], commands: list[str], versions: list[str]) -> list[dict]:
    rows = []
    for command in commands:
        for code in versions:
            mine = [r for r in runs if r["command"] == command and r["code"] == code]
            row = {"command": command, "code": code, "ok": f"{sum(r['ok'] for r in mine)}/{len(mine)}"}
            for key in ("first_line_s", "first_step_s", "longest_silence_s", "total_s"):
                values = [r[key] for r in mine if r[key] is not None]
                row[key] = round(statistics.median(values), 1) if values else "-"
            rows.append(row)
    return rows


if __name__ == "__main__":
    main()
