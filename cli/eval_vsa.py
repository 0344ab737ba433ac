"""``pictrieve eval vsa DIR``: answer accuracy and citation checks of the Vision Search Assistant.

DIR is the folder the question set's image paths are relative to; ``--questions`` is a JSONL of
``{"image", "question", "reference", "sources"}`` (sources: page file names or URLs the answer must
rest on). Per question:

- **key-term match** (no model): the answer contains every number of the reference and at least
  60% of its other content words (plural "s" and possessive "'s" ignored). A string check, not a
  judgement: a verbose answer that quotes the right sentence passes, a correct paraphrase with
  other words fails.
- **LLM judge** (``--judge-llm``, default the ``--llm``; ``none`` skips it): yes/no against the
  reference (:mod:`pictrieve.agents.judge`, rubric ``same_fact``, at temperature 0). With the offline
  135M model as judge this verdict is noise; use a real model.
- **citation precision** = cited sources that are required / cited sources (citations of sources
  that were not read are removed by the graph before scoring and counted apart as ``dropped``);
  **source recall** = required sources among the sources read.

- **outcome** (``answered-right``, ``answered-wrong``, ``abstained``): an answer that cites no source read
  abstains (it quotes no page: "The pages read do not say ..."). A row with ``"answerable": false`` (no
  page holds its answer) is right only when abstained; any cited answer to it is wrong. An answerable row
  that cites is right when the key-term match passes. So "right" is the key-term match's judgement, with
  its limits (it is a string check), and "abstained" is read from the citations, not from the wording.

Time per node (the cost split) comes from the graph's own timings.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import click

from pictrieve.agents.vsa import METHOD as VSA
from pictrieve.cli.need_options import check_needs, method_need_options

_STOP = {"the", "and", "for", "was", "are", "is", "its", "with", "from", "that", "this", "about", "into", "than",
         "has", "have", "had", "a", "an", "of", "in", "to", "on", "at", "by", "or", "be", "it"}


def _matches(url: str, required: list[str]) -> bool:
    return any(url.endswith("/" + r) or url == r for r in required)


def _terms(text: str) -> tuple[set[str], set[str]]:
    """(numbers, content words) of ``text``, lower-cased, plural/possessive endings dropped."""
    numbers = set(re.findall(r"\d+(?:[.,]\d+)?", text))
    words = set()
    for word in re.findall(r"[a-z][a-z'/-]*", text.lower()):
        word = re.sub(r"'s$", "", word)
        word = word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word
        if len(word) > 2 and word not in _STOP:
            words.add(word)
    return numbers, words


def key_term_match(reference: str, answer: str, *, min_words: float = 0.6) -> bool:
    """The answer holds every number of ``reference`` and ``min_words`` of its content words."""
    ref_numbers, ref_words = _terms(reference)
    numbers, words = _terms(answer)
    if not ref_numbers <= numbers:
        return False
    return not ref_words or len(ref_words & words) / len(ref_words) >= min_words


OUTCOMES = ("answered-right", "answered-wrong", "abstained")


def outcome(row: dict[str, Any], cited: int, key_term: bool) -> str:
    """``abstained`` (no source cited), else ``answered-right`` or ``answered-wrong``: an answerable row by the
    key-term match, an unanswerable one (``"answerable": false``) is always wrong when answered."""
    if cited == 0:
        return "abstained"
    return "answered-right" if row.get("answerable", True) and key_term else "answered-wrong"


def outcome_counts(scored: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """``{"answerable": {outcome: n}, "unanswerable": {...}}`` over scored rows."""
    counts = {group: dict.fromkeys(OUTCOMES, 0) for group in ("answerable", "unanswerable")}
    for r in scored:
        counts["answerable" if r.get("answerable", True) else "unanswerable"][r["outcome"]] += 1
    return counts


def score_row(row: dict[str, Any], out: dict[str, Any], verdict: bool | None) -> dict[str, Any]:
    sources = {s["number"]: s["url"] for s in out.get("sources") or []}
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", out.get("answer", "")) if int(n) in sources}
    good = [n for n in cited if _matches(sources[n], row["sources"])]
    retrieved = [u for u in sources.values() if _matches(u, row["sources"])]
    key_term = key_term_match(row["reference"], out.get("answer", ""))
    return {"correct": verdict, "key_term_match": key_term, "outcome": outcome(row, len(cited), key_term),
            "cited": len(cited), "cited_required": len(good),
            "dropped_citations": len((out.get("citations") or {}).get("dropped") or []),
            "source_recall": len({r for r in row["sources"] if any(u.endswith('/' + r) for u in retrieved)})
            / max(len(row["sources"]), 1)}


@click.command("vsa")
@click.argument("root", type=click.Path(exists=True, file_okay=False))
@click.option("--questions", required=True, type=click.Path(exists=True, dir_okay=False), help="JSONL question set.")
@click.option("--answerer", type=click.Choice(["auto", "extractive", "llm"]), default="auto", show_default=True,
              help="auto: extractive (quoted page sentences) with the offline 135M model, llm otherwise.")
@click.option("--judge-llm", default=None, help="Judge model (default: --llm; 'none' skips the judge).")
@click.option("--limit", type=int, default=None, help="Only the first N questions.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None, help="Write per-question JSONL here.")
@method_need_options(VSA, also_required=("search",))
def vsa_eval(root: str, questions: str, answerer: str, judge_llm: str | None, limit: int | None,
             out_path: str | None, needs: dict[str, Any]) -> None:
    """Key-term match, LLM-judge accuracy, citation precision and source recall; cost per node."""
    from pictrieve.agents.judge import judge_answer
    from pictrieve.agents.needs import resolve_needs
    from pictrieve.tools.models.chat_models import create_chat_model

    check_needs(needs, methods=[VSA])  # a misspelt search, a dead endpoint: one line before the first question
    rows = [json.loads(line) for line in Path(questions).read_text().splitlines() if line.strip()][:limit]
    built = resolve_needs(VSA, needs)
    chat = built["llm"]
    # the judge is the evaluation's own model (default: the method's); the offline one judges greedily
    judge = judge_llm or needs.get("llm") or "offline"
    grader = None if judge.lower() == "none" else create_chat_model(
        judge, base_url=needs.get("base_url"), **({"max_tokens": 160, "temperature": 0.0} if judge == "offline" else {}))
    graph = VSA.build(None, **built)
    # with the offline 135M model the graph skips its optional LLM steps (plan, rewrites) by itself
    context: dict[str, Any] = {"answerer": answerer}
    if answerer == "llm":  # before any step runs: the small model's words would be the answer
        from pictrieve.agents.vsa.nodes import refuse_small_answerer

        refuse_small_answerer(chat)
    totals: dict[str, float] = defaultdict(float)
    scored = []
    for row in rows:
        start = time.perf_counter()
        out = graph.invoke({"image": str(Path(root) / row["image"]), "question": row["question"]}, context=context)
        elapsed = time.perf_counter() - start
        verdict = None if grader is None else judge_answer(
            grader, row["question"], row["reference"], out["answer"], rubric="same_fact")[0] == 1.0
        result = score_row(row, out, verdict)
        for node, seconds in (out.get("timings") or {}).items():
            totals[node] += seconds
        scored.append({**row, "answer": out["answer"], "answerer": out.get("answerer"),
                       "sources_found": out.get("sources"), "seconds": round(elapsed, 1), **result})
        click.echo(f"{result['outcome']:14} judge={verdict} {elapsed:5.1f}s "
                   f"{row['question'][:60]}", err=True)
    n = max(len(scored), 1)
    cited = sum(r["cited"] for r in scored)
    judged = [r["correct"] for r in scored if r["correct"] is not None]
    summary = {
        "questions": len(scored),
        "answerer": scored[0]["answerer"] if scored else None,
        "outcomes": outcome_counts(scored),
        "key_term_match": round(sum(r["key_term_match"] for r in scored if r.get("answerable", True))
                                / max(sum(r.get("answerable", True) for r in scored), 1), 3),
        "judge_accuracy": round(sum(judged) / len(judged), 3) if judged else None,
        "judge": None if grader is None else judge,
        "citation_precision": round(sum(r["cited_required"] for r in scored) / cited, 3) if cited else None,
        "answers_citing_something": round(sum(r["cited"] > 0 for r in scored) / n, 3),
        "dropped_citations": sum(r["dropped_citations"] for r in scored),
        "source_recall": round(sum(r["source_recall"] for r in scored) / n, 3),
        "seconds_per_question": round(sum(r["seconds"] for r in scored) / n, 1),
        "seconds_by_node": {k: round(v / n, 2) for k, v in sorted(totals.items())},
    }
    if out_path:
        Path(out_path).write_text("".join(json.dumps(r, default=str) + "\n" for r in scored))
    click.echo(json.dumps(summary, indent=2))
