"""Does a move change a number? Per-query outputs of one pictrieve command, recorded per checkout, then compared.

Issue 29's rule: a pure move changes no number. ``record`` runs a ``pictrieve`` command (in this process, so
the checkout on ``PYTHONPATH`` is the one measured) and writes what each query got, compactly, as CSV:

- ``eval retrieval``: each caption's tie-aware rank statistics from the exact ranker (target, greater, ties,
  rank), in query order;
- ``eval visret`` (and any command scored by ``evaluation.generative.query_metrics``): for each scored ranking,
  in call order, the target's place in it (0: absent) and a digest of the whole ranked id list, so two runs
  agree only if every ranking is the same list.

``compare`` says whether two such files (or two ``eval interactive --dialogues`` files, gzipped or not, timings dropped) are
identical, and where they first differ. Run ``record`` once with each checkout::

    PYTHONPATH=/path/to/old-pkg python benchmarks/renovation_check.py record old.csv -- \\
        eval retrieval ../shared/datasets/flickr8k-dev --gallery /tmp/g-old --json
    PYTHONPATH=/path/to/new-pkg python benchmarks/renovation_check.py record new.csv -- \\
        eval retrieval ../shared/datasets/flickr8k-dev --gallery /tmp/g-new --json
    python benchmarks/renovation_check.py compare old.csv new.csv

(``old-pkg`` holds a symlink ``pictrieve`` to the old checkout, as in the helpers' PYTHONPATH trick.)
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import sys
from typing import Any

TIMING_WORDS = ("second", "time", "elapsed", "_ms", "latency")


def record(out: str, args: list[str]) -> None:
    """Run ``pictrieve ARGS`` with the evaluation's per-query scorers wrapped, then write their rows to ``out``."""
    from pictrieve.cli.main import cli
    from pictrieve.evaluation import generative, ranking

    rows: list[dict[str, Any]] = []
    exact_ranks = ranking.ExactRanker.ranks
    query_metrics = generative.query_metrics

    def ranks(self: Any, texts: Any, target_ids: Any) -> dict[str, Any]:
        stats = exact_ranks(self, texts, target_ids)
        for i, target in enumerate(target_ids):
            rows.append({"kind": "exact", "i": len(rows), "target": target,
                         **{name: float(values[i]) for name, values in sorted(stats.items())}})
        return stats

    def scored(ranked: Any, relevant: Any) -> dict[str, float]:
        ids = list(ranked)
        target = min(relevant) if relevant else ""
        rows.append({"kind": "ranked", "i": len(rows), "target": target,
                     "place": ids.index(target) + 1 if target in ids else 0, "depth": len(ids),
                     "ranking_sha1": hashlib.sha1("\n".join(ids).encode()).hexdigest()[:16]})
        return query_metrics(ranked, relevant)

    ranking.ExactRanker.ranks = ranks
    generative.query_metrics = scored
    try:
        cli(args, standalone_mode=False)
    finally:
        fields = sorted({key for row in rows for key in row}, key=lambda k: (k not in ("kind", "i", "target"), k))
        with open(out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        print(f"{len(rows)} per-query rows -> {out}", file=sys.stderr)


def without_timings(value: Any) -> Any:
    """A dialogues JSON without its timing fields (they differ between any two runs)."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if not any(w in k.lower() for w in TIMING_WORDS)}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def first_differences(old: Any, new: Any, path: str = "$", limit: int = 10) -> list[str]:
    """Up to ``limit`` paths where two JSON values differ, with both values."""
    if type(old) is not type(new):
        return [f"{path}: {type(old).__name__} -> {type(new).__name__}"]
    found: list[str] = []
    if isinstance(old, dict):
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new:
                found.append(f"{path}.{key}: only in {'new' if key in new else 'old'}")
            else:
                found += first_differences(old[key], new[key], f"{path}.{key}", limit - len(found))
            if len(found) >= limit:
                break
    elif isinstance(old, list):
        if len(old) != len(new):
            found.append(f"{path}: {len(old)} -> {len(new)} items")
        for i, (a, b) in enumerate(zip(old, new)):
            found += first_differences(a, b, f"{path}[{i}]", limit - len(found))
            if len(found) >= limit:
                break
    elif old != new:
        found.append(f"{path}: {str(old)[:120]!r} -> {str(new)[:120]!r}")
    return found[:limit]


def read_json(path: str) -> Any:
    """A JSON file, gzipped or not."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as handle:
        return json.load(handle)


def read_csv(path: str) -> list[dict[str, str]]:
    """A recorded CSV file's rows, gzipped or not."""
    with (gzip.open(path, "rt", newline="") if path.endswith(".gz") else open(path, newline="")) as handle:
        return list(csv.DictReader(handle))


def compare(old_path: str, new_path: str) -> bool:
    """Print whether two recorded files are identical; CSV row by row, JSON without timings."""
    if old_path.endswith((".json", ".json.gz")):
        old, new = without_timings(read_json(old_path)), without_timings(read_json(new_path))
        differences = first_differences(old, new)
        print("identical (timings dropped)" if not differences else "\n".join(["DIFFERENT:", *differences]))
        return not differences
    old, new = read_csv(old_path), read_csv(new_path)
    differing = [i for i, (x, y) in enumerate(zip(old, new)) if x != y]
    print(f"{len(old)} rows old, {len(new)} rows new, {len(differing)} differ")
    for i in differing[:5]:
        print(f"  row {i}: old {old[i]}\n          new {new[i]}")
    return not differing and len(old) == len(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="run a pictrieve command, writing its per-query rows as CSV")
    rec.add_argument("out")
    rec.add_argument("args", nargs=argparse.REMAINDER, help="-- then the pictrieve arguments")
    cmp = commands.add_parser("compare", help="are two recorded files (CSV, or --dialogues JSON) identical?")
    cmp.add_argument("old")
    cmp.add_argument("new")
    options = parser.parse_args()
    if options.command == "record":
        record(options.out, options.args[1:] if options.args[:1] == ["--"] else options.args)
    else:
        sys.exit(0 if compare(options.old, options.new) else 1)


if __name__ == "__main__":
    main()
