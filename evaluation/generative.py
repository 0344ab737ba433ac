"""Evaluating generation-augmented retrieval (VisRet, NEEDLE) on a captioned folder.

Metrics, each named for what it is (binary relevance; ``ranked`` = returned ids, best first):

- ``hit@k``: 1 if any relevant image is in the top k (what VisRet's code calls "Recall@k").
- ``recall@k``: the fraction of relevant images in the top k (the standard one).
- ``ndcg@k``: standard nDCG, gains 1/log2(rank+1), ideal over min(k, number relevant).
- ``visret_ndcg@k``: the number VisRet's code reports as "NDCG@k", whose ideal ranking is the
  *retrieved* list sorted (so it ignores how many relevant images exist; for k = 1 it equals hit@1).
  Closed form from the implementation notes: with R hits in the top k and c of them among the first
  R positions, ``[c/R * D(1..R) + (R-c)/(k-R) * D(R+1..k)] / D(1..R)``. Use it only to set our numbers
  beside the paper's.
- ``ap``: NEEDLE's average precision, truncated to ``R = min(10, number relevant)`` hits within the
  top ``k = 60`` (hits after the R-th ignored; missing hits count 0).

With a captioned folder each caption is a query whose one relevant image is its own photo, so hit@k
= recall@k and AP = reciprocal rank within the top 60 (targeted queries, NEEDLE's mHR/mAP setting).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


def _discount(start: int, stop: int) -> float:
    """D(start..stop) = sum of 1/log2(r+1) for r in [start, stop] (0 when empty)."""
    return sum(1.0 / math.log2(r + 1) for r in range(start, stop + 1))


def hit_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    return float(any(item in relevant for item in ranked[:k]))


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    if not relevant:
        return 0.0
    return sum(item in relevant for item in dict.fromkeys(ranked[:k])) / len(relevant)


def ndcg_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Standard binary nDCG@k."""
    if not relevant:
        return 0.0
    dcg = sum(1.0 / math.log2(r + 1) for r, item in enumerate(ranked[:k], start=1) if item in relevant)
    return dcg / _discount(1, min(k, len(relevant)))


def visret_ndcg_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """The "NDCG@k" of VisRet's code (see the module docstring); equals hit@1 for k = 1."""
    flags = [item in relevant for item in ranked[:k]]
    hits = sum(flags)
    if hits == 0:
        return 0.0
    if k == 1:
        return 1.0
    early = sum(flags[:hits])
    tail = (hits - early) / (k - hits) * _discount(hits + 1, k) if k > hits else 0.0
    return (early / hits * _discount(1, hits) + tail) / _discount(1, hits)


def average_precision(ranked: Sequence[str], relevant: Collection[str], *, r_max: int = 10, k: int = 60) -> float:
    """NEEDLE's AP: mean precision at the first ``R = min(r_max, |relevant|)`` hits within the top ``k``."""
    r = min(r_max, len(relevant))
    if r == 0:
        return 0.0
    found, total = 0, 0.0
    for position, item in enumerate(ranked[:k], start=1):
        if item in relevant:
            found += 1
            total += found / position
            if found == r:
                break
    return total / r


def query_metrics(ranked: Sequence[str], relevant: Collection[str]) -> dict[str, float]:
    """Every metric above for one query, at the cut-offs we report."""
    return {
        "hit@1": hit_at_k(ranked, relevant, 1), "hit@10": hit_at_k(ranked, relevant, 10),
        "recall@10": recall_at_k(ranked, relevant, 10), "ndcg@10": ndcg_at_k(ranked, relevant, 10),
        "visret_ndcg@10": visret_ndcg_at_k(ranked, relevant, 10), "ap": average_precision(ranked, relevant),
    }


def mean_metrics(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {name: float(np.mean([row[name] for row in rows])) for name in rows[0]} if rows else {}


def timed_run(graph: Any, inputs: dict[str, Any], context: dict[str, Any], config: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, float]]:
    """Run ``graph`` once, streaming node updates: ``(final values, seconds per node)``.

    A node's time is the wall time between the previous update and its own, so it includes the
    framework's small overhead between nodes.
    """
    seconds: dict[str, float] = {}
    values: dict[str, Any] = {}
    last = time.perf_counter()
    for update in graph.stream(inputs, config, context=context, stream_mode="updates"):
        now = time.perf_counter()
        for node, change in update.items():
            seconds[node] = seconds.get(node, 0.0) + now - last
            if isinstance(change, dict):
                values.update(change)
        last = now
    return values, seconds


def evaluate_runs(
    graph: Any,
    queries: Sequence[str],
    targets: Sequence[str],
    context: dict[str, Any],
    *,
    depth: int = 60,
    progress: bool = True,
    desc: str = "queries",
    topic: str | None = None,
) -> dict[str, Any]:
    """Run ``graph`` on every query (returning ``depth`` hits) and average the metrics and node times."""
    from tqdm.auto import tqdm

    rows, times = [], []
    for n, (query, target) in enumerate(tqdm(list(zip(queries, targets)), desc=desc, disable=not progress)):
        inputs = {"query": query, **({"topic": topic} if topic else {})}
        config = {"configurable": {"thread_id": f"{desc}-{n}"}}  # for graphs compiled with a checkpointer
        values, seconds = timed_run(graph, inputs, {**context, "k": depth}, config)
        rows.append(query_metrics([hit.id for hit in values["hits"]], {target}))
        times.append(seconds)
    nodes = sorted({node for row in times for node in row})
    cost = {node: float(np.mean([row.get(node, 0.0) for row in times])) for node in nodes}
    return {**mean_metrics(rows), "queries": len(rows), "seconds_per_query": sum(cost.values()),
            "seconds_by_node": cost}


def evaluate_text_baseline(gallery: Any, queries: Sequence[str], targets: Sequence[str], *, depth: int = 60,
                           progress: bool = True) -> dict[str, Any]:
    """The text query's own ranking through the gallery's default (text-image) embedder."""
    from tqdm.auto import tqdm

    rows, seconds = [], 0.0
    for query, target in tqdm(list(zip(queries, targets)), desc="text", disable=not progress):
        started = time.perf_counter()
        hits = gallery.search_text(query, k=depth)
        seconds += time.perf_counter() - started
        rows.append(query_metrics([hit.id for hit in hits], {target}))
    return {**mean_metrics(rows), "queries": len(rows), "seconds_per_query": seconds / max(1, len(rows))}


def feedback_round(graph: Any, query: str, *, topic: str, context: dict[str, Any], thread_id: str,
                   mark: Callable[[list[str]], list[str]]) -> tuple[list[str], list[str], dict[str, Any]]:
    """One query through NEEDLE's result-feedback path: the graph pauses at ``review_results``,
    ``mark(shown ids)`` says which are irrelevant, the graph learns. Returns ``(shown, marked, final values)``.
    ``graph`` needs a checkpointer; the thread is deleted afterwards when the checkpointer can."""
    from langgraph.types import Command

    config = {"configurable": {"thread_id": thread_id}}
    run_context = {**context, "feedback": "results", "learn": True}
    paused = graph.invoke({"query": query, "topic": topic}, config, context=run_context)
    shown = [hit["id"] for hit in paused["__interrupt__"][0].value["hits"]]
    marked = mark(shown)
    done = graph.invoke(Command(resume={"irrelevant": marked}), config, context=run_context)
    if graph.checkpointer is not None and hasattr(graph.checkpointer, "delete_thread"):
        graph.checkpointer.delete_thread(thread_id)
    return shown, marked, done


def simulate_result_feedback(graph: Any, queries: Sequence[str], context: dict[str, Any], *, topic: str,
                             judge: Any, progress: bool = True) -> dict[str, float]:
    """Teach NEEDLE's trust weights: for each query a simulated person (``judge``, a
    :class:`~pictrieve.evaluation.relevance.CaptionJudge`) marks the shown results whose own captions do
    not match it, and the graph learns from that; return the final weights."""
    from tqdm.auto import tqdm

    weights: dict[str, float] = {}
    for n, query in enumerate(tqdm(list(queries), desc="feedback", disable=not progress)):
        _, _, done = feedback_round(graph, query, topic=topic, context=context, thread_id=f"{topic}-feedback-{n}",
                                    mark=lambda shown: judge.irrelevant(query, shown))
        weights = done.get("weights", weights)
    return weights


def sample_queries(folder: Any, gallery: Any, limit: int | None, seed: int = 0) -> tuple[list[str], list[str]]:
    """``(queries, target ids)``: the first caption of each indexed image, or a seeded sample of ``limit``."""
    from pictrieve.vectorstore.chroma_store import path_id

    stored = set(gallery.ids())
    pairs = [(texts[0], path_id(path)) for path, texts in folder.captions.items() if texts and path_id(path) in stored]
    if limit is not None and limit < len(pairs):
        chosen = sorted(np.random.default_rng(seed).choice(len(pairs), size=limit, replace=False))
        pairs = [pairs[i] for i in chosen]
    return [q for q, _ in pairs], [t for _, t in pairs]


def reference_overlap(folder: Any, visualizers: Sequence[Any]) -> int:
    """How many evaluated photos an exemplar visualizer could return as guides (same file, or same name
    and size). The exemplar visualizer does not know what is being searched: given the evaluated
    photos' own captions it returns those photos, and the measurement is then of nothing. Generators
    (no ``items``) count 0."""
    evaluated = {path.resolve() for path in folder.paths}
    named = {(path.name, path.stat().st_size) for path in folder.paths}
    overlap: set[Path] = set()
    for visualizer in visualizers:
        for path, _ in getattr(visualizer, "items", ()):
            path = Path(path)
            if path.resolve() in evaluated or (path.is_file() and (path.name, path.stat().st_size) in named):
                overlap.add(path.resolve())
    return len(overlap)


def evaluate_generative(
    method: str,
    folder: Any,
    *,
    embedders: Sequence[str],
    visualizers: Sequence[Any],
    configs: dict[str, dict[str, Any]],
    queries: int | None = None,
    seed: int = 0,
    gallery_location: Any = None,
    tile: bool = False,
    feedback_queries: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate ``method`` ("visret" or "needle") on a captioned folder under several run settings.

    ``embedders``: the gallery's embedders, the first a text-image one (the text baseline and VisRet's
    text fusion use it). ``configs``: ``{row name: run settings}``. With ``tile`` the gallery's tiles are
    made first. With ``feedback_queries`` (NEEDLE), captions of that many *other* photos (none of the
    evaluated ones) teach the trust weights by simulated feedback (relevance from captions), and each
    config is evaluated again with the weights it learned ("+trust"). The simulated person marks the
    shown photos whose captions do not match the query (:mod:`pictrieve.evaluation.relevance`).
    """
    from pictrieve.evaluation.datasets import CaptionedFolder, eval_gallery
    from pictrieve.graphs.checkpoints import memory_checkpointer
    from pictrieve.graphs.registry import get_method

    from pictrieve.tools.models.visualizers import create_visualizer

    folder = folder if isinstance(folder, CaptionedFolder) else CaptionedFolder.load(folder)
    visualizers = [create_visualizer(v) if isinstance(v, str) else v for v in visualizers]
    gallery = eval_gallery(folder, list(embedders), location=gallery_location, progress=progress)
    if tile:
        from pictrieve.vectorstore.tiles import index_tiles

        index_tiles(gallery, list(embedders), progress=progress)
    texts, targets = sample_queries(folder, gallery, queries, seed)
    overlap = reference_overlap(folder, visualizers)
    if overlap:
        logger.warning("%d evaluated photos are also exemplar reference photos: guides can be the query's own "
                       "photo, so these numbers measure nothing; use a reference folder without them", overlap)
    report: dict[str, Any] = {"method": method, "images": gallery.count(), "embedders": list(embedders),
                              "reference_overlap": overlap,
                              "visualizers": [getattr(v, "name", str(v)) for v in visualizers],
                              "generates": [bool(getattr(v, "generates", True)) for v in visualizers],
                              "rows": {}}
    report["rows"]["text only"] = evaluate_text_baseline(gallery, texts, targets, progress=progress)
    graph = get_method(method).build(gallery, checkpointer=memory_checkpointer(), visualizers=list(visualizers))
    for name, settings in configs.items():
        report["rows"][name] = evaluate_runs(graph, texts, targets, settings, progress=progress, desc=name)
    if feedback_queries and method == "needle":
        from pictrieve.evaluation.relevance import CaptionJudge
        from pictrieve.vectorstore.chroma_store import path_id

        topic = f"eval-{int(time.time())}"
        tested = set(targets)
        pool_texts, pool_targets = sample_queries(folder, gallery, None, seed)
        teach = [(q, t) for q, t in zip(pool_texts, pool_targets) if t not in tested]  # other photos only
        if not teach:
            raise ValueError("no photos left to teach trust weights on: evaluate fewer --queries than photos")
        picks = np.random.default_rng(seed + 1).permutation(len(teach))[:feedback_queries]
        teach = [teach[i] for i in sorted(picks)]
        report["feedback_queries"] = len(teach)
        judge = CaptionJudge({path_id(p): texts for p, texts in folder.captions.items()})
        for name, settings in configs.items():
            weights = simulate_result_feedback(graph, [q for q, _ in teach], settings, topic=f"{topic}-{name}",
                                               judge=judge, progress=progress)
            row = evaluate_runs(graph, texts, targets, settings, progress=progress, desc=f"{name}+trust",
                                topic=f"{topic}-{name}")
            report["rows"][f"{name} +trust"] = {**row, "weights": weights}
    return report
