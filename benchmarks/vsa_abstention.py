"""Answered-right / answered-wrong / abstained of ``pictrieve eval vsa`` result files, side by side.

    python benchmarks/vsa_abstention.py benchmarks/results/vsa-offline/honest-before.jsonl \
        benchmarks/results/vsa-offline/honest-after.jsonl

Each file is the per-question JSONL of ``pictrieve eval vsa --out``; a file written before the outcome
column existed is scored here the same way (:func:`pictrieve.cli.eval_vsa.outcome`: no citation is an
abstention, an unanswerable row is wrong whenever answered, an answerable one right by the key-term match).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pictrieve.cli.eval_vsa import OUTCOMES, outcome


def counts(path: Path) -> dict[str, dict[str, int]]:
    """``{"answerable": {outcome: n}, "unanswerable": {...}}`` for one result file."""
    out = {group: dict.fromkeys(OUTCOMES, 0) for group in ("answerable", "unanswerable")}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        got = row.get("outcome") or outcome(row, row["cited"], row["key_term_match"])
        out["answerable" if row.get("answerable", True) else "unanswerable"][got] += 1
    return out


def main(paths: list[str]) -> None:
    print("| file | questions | " + " | ".join(OUTCOMES) + " |")
    print("|---|---|" + "---|" * len(OUTCOMES))
    for name in paths:
        for group, n in counts(Path(name)).items():
            print(f"| {Path(name).name} ({group}) | {sum(n.values())} | " + " | ".join(str(n[o]) for o in OUTCOMES) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
