"""``pictrieve eval vsa DIR``: answer accuracy and citation checks of the Vision Search Assistant.

DIR is the folder the question set's image paths are relative to; ``--questions`` is a JSONL of
``{"image", "question", "reference", "sources"}`` (sources: page file names or URLs the answer must
rest on). Per question: the answer is graded by an LLM judge (yes/no against the reference), and the
sources are checked: *citation precision* = cited sources that are required / cited sources (an answer
citing no number counts as citing nothing), *source recall* = required sources among the retrieved
ones. Time per node (the cost split) comes from the graph's own timings.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import click


def _matches(url: str, required: list[str]) -> bool:
    return any(url.endswith("/" + r) or url == r for r in required)


def judge(llm: Any, question: str, reference: str, answer: str) -> bool:
    from pictrieve.agents.vsa.prompts import prompt
    from pictrieve.agents.vsa.steps import complete

    reply = complete(llm, prompt("judge").format(question=question, reference=reference, answer=answer))
    return reply.strip().lower().startswith("yes")


def score_row(row: dict[str, Any], out: dict[str, Any], verdict: bool) -> dict[str, Any]:
    sources = {s["number"]: s["url"] for s in out.get("sources") or []}
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", out.get("answer", "")) if int(n) in sources}
    good = [n for n in cited if _matches(sources[n], row["sources"])]
    retrieved = [u for u in sources.values() if _matches(u, row["sources"])]
    return {"correct": verdict, "cited": len(cited), "cited_required": len(good),
            "source_recall": len({r for r in row["sources"] if any(u.endswith('/' + r) for u in retrieved)})
            / max(len(row["sources"]), 1)}


@click.command("vsa")
@click.argument("root", type=click.Path(exists=True, file_okay=False))
@click.option("--questions", required=True, type=click.Path(exists=True, dir_okay=False), help="JSONL question set.")
@click.option("--search", required=True, help="ddgs or local:DIR.")
@click.option("--llm", default="offline", show_default=True)
@click.option("--judge-llm", default=None, help="Judge model (default: --llm).")
@click.option("--base-url", default=None)
@click.option("--limit", type=int, default=None, help="Only the first N questions.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None, help="Write per-question JSONL here.")
def vsa_eval(root: str, questions: str, search: str, llm: str, judge_llm: str | None, base_url: str | None,
             limit: int | None, out_path: str | None) -> None:
    """Accuracy (LLM judge), citation precision and source recall on a question set; cost per node."""
    from pictrieve.graphs.vision_search import build_vision_search_graph
    from pictrieve.tools.chat_models import create_chat_model

    rows = [json.loads(line) for line in Path(questions).read_text().splitlines() if line.strip()][:limit]
    offline = {"max_tokens": 160, "temperature": 0.0}
    chat = create_chat_model(llm, base_url=base_url, **(offline if llm == "offline" else {}))
    grader = chat if not judge_llm else create_chat_model(judge_llm, base_url=base_url)
    graph = build_vision_search_graph(None, llm=chat, search=search)
    context = {"correlate": False, "plan_with_llm": False, "summarize_regions": False} if llm == "offline" else {}
    totals: dict[str, float] = defaultdict(float)
    scored = []
    for row in rows:
        start = time.perf_counter()
        out = graph.invoke({"image": str(Path(root) / row["image"]), "question": row["question"]}, context=context)
        elapsed = time.perf_counter() - start
        result = score_row(row, out, judge(grader, row["question"], row["reference"], out["answer"]))
        for node, seconds in (out.get("timings") or {}).items():
            totals[node] += seconds
        scored.append({**row, "answer": out["answer"], "sources_found": out.get("sources"), "seconds": round(elapsed, 1),
                       **result})
        click.echo(f"{'OK ' if result['correct'] else 'BAD'} {elapsed:5.1f}s {row['question'][:60]}", err=True)
    n = max(len(scored), 1)
    cited = sum(r["cited"] for r in scored)
    summary = {
        "questions": len(scored),
        "accuracy": round(sum(r["correct"] for r in scored) / n, 3),
        "citation_precision": round(sum(r["cited_required"] for r in scored) / cited, 3) if cited else None,
        "answers_citing_something": round(sum(r["cited"] > 0 for r in scored) / n, 3),
        "source_recall": round(sum(r["source_recall"] for r in scored) / n, 3),
        "seconds_per_question": round(sum(r["seconds"] for r in scored) / n, 1),
        "seconds_by_node": {k: round(v / n, 2) for k, v in sorted(totals.items())},
    }
    if out_path:
        Path(out_path).write_text("".join(json.dumps(r, default=str) + "\n" for r in scored))
    click.echo(json.dumps(summary, indent=2))
