"""Does QC2's requested level change the completions' words? Distinct-word overlap, High vs Low.

Reads the completions recorded in ``benchmarks/qc2.md`` (no model is run: the trained QC2 models of
those runs are not kept): every table whose header starts with ``condition`` and whose rows are
``| <Relevance>, <Quality> | completion / completion / ... |``, the first sample for the queries
"a man", "a woman", "a dog", the same random numbers in every condition. For each query it pairs the
completion at High relevance with the one at Low relevance *at the same quality level* and reports
the Jaccard overlap of their distinct words (1: the same words; the query's own words count, so two
completions of "a dog" share at least "a" and "dog"). Flipping the Quality level (High vs Low at the
same relevance) is the control: the level-usage check found that the model ignores Quality (its loss
does not move), so its word changes show what any changed prompt word does to sampling with the same
seed, learned or not.

    python benchmarks/qc2_word_overlap.py --out benchmarks/results/qc2/word_overlap.json
"""

from __future__ import annotations

import argparse
import json
import re
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
LEVELS = ("Low", "Medium", "High")
QUERIES = ("a man", "a woman", "a dog")  # the first three of examples/qc2_queries.txt, as the tables say
CONDITION = re.compile(r"^(Low|Medium|High), (Low|Medium|High)$")


def recorded_completions(markdown: str) -> list[dict[str, Any]]:
    """``{"run", "relevance", "quality", "query", "completion"}`` for every completion in the tables.

    A table is named by the last ``## ``/``### `` heading above it and its second header cell (so
    the 1-epoch and 3-epoch runs stay apart).
    """
    records, heading, table = [], "", None
    for line in markdown.splitlines():
        if line.startswith("#"):
            heading, table = line.lstrip("#").strip(), None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) == 2 and cells[0].lower().startswith("condition"):
            table = f"{heading}: {cells[1]}"
            continue
        if not cells:
            table = None
            continue
        match = CONDITION.match(cells[0]) if table and len(cells) == 2 else None
        if match:
            texts = [t.strip() for t in cells[1].split(" / ")]
            for query, text in zip(QUERIES, texts):
                if not text.lower().startswith(query):
                    raise ValueError(f"{table}: {text!r} does not complete {query!r}")
                records.append({"run": table, "relevance": match[1], "quality": match[2], "query": query,
                                "completion": text})
    return records


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def jaccard(a: str, b: str) -> float:
    first, second = words(a), words(b)
    return len(first & second) / len(first | second)


def pairs(records: list[dict[str, Any]], axis: str) -> list[dict[str, Any]]:
    """High vs Low on ``axis`` ("relevance" or "quality"), the other level and the query held fixed."""
    other = "quality" if axis == "relevance" else "relevance"
    found = {(r["run"], r["query"], r[axis], r[other]): r["completion"] for r in records}
    out = []
    for run, query, level in sorted({(r["run"], r["query"], r[other]) for r in records}):
        high, low = found.get((run, query, "High", level)), found.get((run, query, "Low", level))
        if high is None or low is None:
            continue
        out.append({"run": run, "axis": axis, "query": query, other: level, "high": high, "low": low,
                    "jaccard": jaccard(high, low), "identical": high == low,
                    "only_high": sorted(words(high) - words(low)), "only_low": sorted(words(low) - words(high))})
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {"pairs": 0}
    values = np.array([row["jaccard"] for row in rows])
    return {"pairs": len(rows), "mean_jaccard": round(float(values.mean()), 3),
            "min_jaccard": round(float(values.min()), 3), "identical": int(sum(row["identical"] for row in rows))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=Path, default=HERE / "qc2.md", help="the markdown holding the tables")
    parser.add_argument("--out", type=Path, default=None, help="write the pairs and summaries here (JSON)")
    args = parser.parse_args()
    records = recorded_completions(args.completions.read_text(encoding="utf-8"))
    source = args.completions.resolve()
    shown = source.relative_to(HERE.parent) if source.is_relative_to(HERE.parent) else source
    result: dict[str, Any] = {"source": str(shown), "completions": len(records), "runs": {}}
    for run in dict.fromkeys(r["run"] for r in records):
        of_run = [r for r in records if r["run"] == run]
        by_axis = {axis: pairs(of_run, axis) for axis in ("relevance", "quality")}
        conditions = sorted({(r["relevance"], r["quality"]) for r in of_run},
                            key=lambda c: (LEVELS.index(c[0]), LEVELS.index(c[1])))
        result["runs"][run] = {"conditions": [", ".join(c) for c in conditions],
                               **{f"{axis} High vs Low": summary(rows) for axis, rows in by_axis.items()},
                               "pairs": [row for rows in by_axis.values() for row in rows]}
        print(run)
        for axis, rows in by_axis.items():
            print(f"  {axis:9s} High vs Low: {json.dumps(summary(rows))}")
            for row in rows:
                print(f"    {row['query']:8s} at {'quality' if axis == 'relevance' else 'relevance'} "
                      f"{row.get('quality', row.get('relevance'))}: {row['jaccard']:.2f}  "
                      f"-{row['only_low']} +{row['only_high']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
