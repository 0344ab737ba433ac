"""Does NEEDLE's learned trust help? Learn on feedback queries, freeze, test against equal weights.

The paper (§5.1.2) learns per-topic embedder weights from results a person marks irrelevant
(multiplicative weights, Eq. 5) and fuses rankings with them (Eq. 4). This experiment checks its claim
on a captioned folder:

1. The photos are split once (seeded) into ``test_queries`` test photos and ``feedback_queries`` other
   photos; each photo's first caption is its query.
2. **Learn.** Every *learner* (a set of embedders and a way of marking) runs NEEDLE's real feedback
   path on the feedback queries in order: the graph pauses at ``review_results``, a simulated person
   marks the shown results, the ``learn`` node updates the topic's weights in the gallery. Marking
   rules: ``person`` (:class:`~pictrieve.evaluation.relevance.CaptionJudge`: a shown photo whose own
   captions do not match the query) and ``all-but-target`` (the earlier simulation: every shown photo
   but the one the caption was written for, kept for comparison).
3. **Freeze, test.** On the test queries, with feedback off (nothing is learned), every row ranks:
   the text query alone, each embedder alone, the embedders with equal weights and with each
   learner's frozen weights. Paired comparisons on the same queries with bootstrap intervals
   (:func:`~pictrieve.evaluation.paired.paired_bootstrap`).

A planted control embedder (``random-projection:SEED``, :mod:`pictrieve.evaluation.controls`) can be
added: learned trust must push its weight down.

Every finished query is appended to a JSON-lines file (one ``config`` line, then ``feedback`` and
``test`` lines), so a stopped run resumes where it was: a re-run with the same settings skips done
queries and restores the learned weights from the file. :func:`summarise` recomputes the whole report
from that file alone. Tiles are not used (whole photos only).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from pictrieve.evaluation.generative import feedback_round, query_metrics, timed_run
from pictrieve.evaluation.paired import paired_bootstrap
from pictrieve.evaluation.relevance import MATCH_THRESHOLD, CaptionJudge

logger = logging.getLogger(__name__)

RULES = ("person", "all-but-target")
SHOWN = 10
"""Results shown to the simulated person per feedback query (a page of results)."""
DEPTH = 60
"""Results ranked per test query (AP is NEEDLE's, within the top 60)."""
METRICS = ("hit@1", "hit@10", "ndcg@10", "ap")
TEXT_ROW = "text only"


@dataclass(frozen=True)
class Learner:
    """A trust table learned on the feedback queries: which embedders, which marking rule, which loss."""

    name: str
    embedders: tuple[str, ...]
    rule: str = "person"
    loss: str = "eq5"
    eta: float = 0.05


def plan_rows(embedders: Sequence[str], control: str | None, trusts: Mapping[str, float]
              ) -> tuple[list[Learner], dict[str, tuple[tuple[str, ...], str | None]]]:
    """The learners and the test rows ``{row: (embedders, learner name or None for equal weights)}``.

    ``trusts`` maps each trust loss to learn with ("eq5", "share") to its learning rate.
    """
    real = tuple(embedders)
    n = len(real)
    rows: dict[str, tuple[tuple[str, ...], str | None]] = {f"only {name}": ((name,), None) for name in real}
    if control:
        rows[f"only {control} (planted)"] = ((control,), None)
    learners = [Learner(f"{n} embedders, trust {loss}", real, "person", loss, eta) for loss, eta in trusts.items()]
    rows[f"{n} embedders, equal weights"] = (real, None)
    if control:
        mixed = (*real, control)
        learners += [Learner(f"{n} + planted, trust {loss}", mixed, "person", loss, eta) for loss, eta in trusts.items()]
        if "eq5" in trusts:
            learners.append(Learner(f"{n} + planted, trust eq5 from all-but-target marks", mixed, "all-but-target",
                                    "eq5", trusts["eq5"]))
        rows[f"{n} + planted, equal weights"] = (mixed, None)
    for learner in learners:
        rows[learner.name] = (learner.embedders, learner.name)
    return learners, rows


def comparisons(embedders: Sequence[str], control: str | None, trusts: Mapping[str, float]) -> list[tuple[str, str]]:
    """The paired comparisons reported: ``(baseline row, candidate row)``."""
    n = len(embedders)
    pairs = [(TEXT_ROW, f"{n} embedders, equal weights")]
    pairs += [(f"{n} embedders, equal weights", f"{n} embedders, trust {loss}") for loss in trusts]
    if control:
        pairs.append((f"{n} embedders, equal weights", f"{n} + planted, equal weights"))
        pairs += [(f"{n} + planted, equal weights", f"{n} + planted, trust {loss}") for loss in trusts]
        pairs += [(f"{n} embedders, equal weights", f"{n} + planted, trust {loss}") for loss in trusts]
        if "eq5" in trusts:
            pairs.append((f"{n} + planted, equal weights", f"{n} + planted, trust eq5 from all-but-target marks"))
    if "eq5" in trusts and "share" in trusts:
        pairs.append((f"{n} embedders, trust eq5", f"{n} embedders, trust share"))
        if control:
            pairs.append((f"{n} + planted, trust eq5", f"{n} + planted, trust share"))
    return pairs


def split_queries(pairs: Sequence[tuple[str, str]], test: int, feedback: int, seed: int = 0
                  ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(test pairs, feedback pairs)``: disjoint seeded samples of ``(query, target id)``, one per photo."""
    targets = [t for _, t in pairs]
    if len(set(targets)) != len(targets):
        raise ValueError("give one query per photo, so test and feedback photos cannot overlap")
    if test + feedback > len(pairs):
        raise ValueError(f"{test} test + {feedback} feedback queries need that many photos; the folder has {len(pairs)}")
    order = np.random.default_rng(seed).permutation(len(pairs))
    return [pairs[i] for i in order[:test]], [pairs[i] for i in order[test:test + feedback]]


def mark_irrelevant(rule: str, judge: CaptionJudge | None, query: str, target: str, shown: Sequence[str]) -> list[str]:
    """What the simulated person marks irrelevant among ``shown`` (see the module docstring)."""
    if rule == "person":
        if judge is None:
            raise ValueError("the 'person' rule needs a CaptionJudge")
        return judge.irrelevant(query, shown)
    if rule == "all-but-target":
        return [id_ for id_ in shown if id_ != target]
    raise ValueError(f"unknown marking rule {rule!r}; known: {', '.join(RULES)}")


class ResultsFile:
    """The per-query JSON-lines file: appended line by line, read back to resume."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):  # a line cut short by a crash: drop it, it is redone
            data = data[: data.rfind(b"\n") + 1]
            self.path.write_bytes(data)
        return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def topic_of(config: dict[str, Any], learner: str | None) -> str:
    """The gallery trust topic of a learner (``None``: equal weights, a topic nothing learns in)."""
    digest = hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
    return f"trust-experiment-{digest}:{learner or 'equal weights'}"


def restore_trust(gallery: Any, config: dict[str, Any], learners: Sequence[Learner], done: Sequence[dict[str, Any]]) -> None:
    """Set each learner's stored weights to those after its last recorded feedback query (none: uniform)."""
    from pictrieve.agents.needle.trust import load_trust, save_trust

    table = load_trust(gallery)
    for topic in [topic_of(config, None), *(topic_of(config, learner.name) for learner in learners)]:
        table.weights.pop(topic, None)
        table.updates.pop(topic, None)
    for learner in learners:
        if done:
            topic = topic_of(config, learner.name)
            table.weights[topic] = dict(done[-1]["learners"][learner.name]["weights"])
            table.updates[topic] = sum(bool(line["learners"][learner.name]["irrelevant"]) for line in done)
    save_trust(gallery, table)


def run_trust_experiment(
    folder: Any,
    *,
    visualizers: Sequence[Any],
    embedders: Sequence[str],
    control: str | None = None,
    text_embedder: str = "offline",
    test_queries: int = 100,
    feedback_queries: int = 200,
    guides: int = 4,
    trusts: Mapping[str, float] | None = None,
    threshold: float = MATCH_THRESHOLD,
    seed: int = 0,
    out: str | os.PathLike,
    gallery_location: Any = None,
    judge_encoder: Any = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run (or resume) the experiment, appending per-query lines to ``out``; return :func:`summarise`'s report.

    ``trusts``: ``{trust loss: learning rate}`` to learn with (default: the paper's Eq. 5 at the authors' 0.05).
    """
    trusts = dict(trusts or {"eq5": 0.05})
    from tqdm.auto import tqdm

    from pictrieve.agents.needle.trust import load_trust
    from pictrieve.evaluation.datasets import CaptionedFolder, eval_gallery
    from pictrieve.evaluation.generative import sample_queries
    from pictrieve.graphs.checkpoints import memory_checkpointer
    from pictrieve.graphs.needle import build_needle_graph
    from pictrieve.tools.models.visualizers import create_visualizer
    from pictrieve.vectorstore.chroma_store import path_id

    folder = folder if isinstance(folder, CaptionedFolder) else CaptionedFolder.load(folder)
    visualizers = [create_visualizer(v) if isinstance(v, str) else v for v in visualizers]
    config = {
        "folder": str(Path(folder.root).resolve()), "photos": len(folder.captions),
        "visualizers": [getattr(v, "name", str(v)) for v in visualizers], "embedders": list(embedders),
        "control": control, "text_embedder": text_embedder, "test_queries": test_queries,
        "feedback_queries": feedback_queries, "guides": guides, "trusts": trusts, "threshold": threshold, "seed": seed,
        "shown": SHOWN, "depth": DEPTH,
    }
    results = ResultsFile(out)
    lines = results.read()
    if lines and lines[0].get("config") != config:
        raise ValueError(f"{results.path} holds a run with other settings ({lines[0].get('config')}); "
                         "pass another --out to start a new one")
    if not lines:
        results.append({"kind": "config", "config": config})
        lines = results.read()
    learners, rows = plan_rows(embedders, control, trusts)
    indexed = list(dict.fromkeys([text_embedder, *embedders, *([control] if control else [])]))
    gallery = eval_gallery(folder, indexed, location=gallery_location, progress=progress)
    pairs = list(zip(*sample_queries(folder, gallery, None, seed)))
    tests, teach = split_queries(pairs, test_queries, feedback_queries, seed)
    judge = CaptionJudge({path_id(p): texts for p, texts in folder.captions.items()}, threshold, encoder=judge_encoder)

    done_feedback = [line for line in lines if line["kind"] == "feedback"]
    restore_trust(gallery, config, learners, done_feedback)
    teaching = build_needle_graph(gallery, visualizers=visualizers, checkpointer=memory_checkpointer(),
                                  name="needle-feedback")
    base = {"guides": guides, "tiles": False, "seed": seed}
    for n, (query, target) in enumerate(tqdm(teach, desc="feedback", disable=not progress)):
        if n < len(done_feedback):
            continue
        record: dict[str, Any] = {"kind": "feedback", "n": n, "query": query, "target": target, "learners": {}}
        for learner in learners:
            topic = topic_of(config, learner.name)
            context = {**base, "embedders": list(learner.embedders), "k": SHOWN, "eta": learner.eta,
                       "trust_loss": learner.loss}
            started = time.perf_counter()
            shown, irrelevant, _ = feedback_round(
                teaching, query, topic=topic, context=context, thread_id=f"{topic}-{n}",
                mark=lambda shown: mark_irrelevant(learner.rule, judge, query, target, shown))
            record["learners"][learner.name] = {
                "shown": shown, "irrelevant": irrelevant, "target_shown": target in shown,
                "weights": load_trust(gallery).for_topic(topic, list(learner.embedders)),
                "seconds": round(time.perf_counter() - started, 3),
            }
        results.append(record)

    done_tests = {line["n"] for line in results.read() if line["kind"] == "test"}
    testing = build_needle_graph(gallery, visualizers=visualizers, name="needle-test")  # no feedback: frozen
    for n, (query, target) in enumerate(tqdm(tests, desc="test", disable=not progress)):
        if n in done_tests:
            continue
        started = time.perf_counter()
        ranked = [hit.id for hit in gallery.search_text(query, k=DEPTH)]
        record = {"kind": "test", "n": n, "query": query, "target": target, "rows": {
            TEXT_ROW: {**query_metrics(ranked, {target}), "top10": ranked[:10],
                       "seconds": round(time.perf_counter() - started, 3)}}}
        for row, (names, learner) in rows.items():
            context = {**base, "embedders": list(names), "k": DEPTH, "feedback": "off"}
            values, seconds = timed_run(testing, {"query": query, "topic": topic_of(config, learner)}, context)
            ranked = [hit.id for hit in values["hits"]]
            record["rows"][row] = {**query_metrics(ranked, {target}), "top10": ranked[:10],
                                   "weights": values.get("weights"), "seconds": round(sum(seconds.values()), 3)}
        results.append(record)
    return summarise(results.read())


def summarise(lines: Iterable[dict[str, Any]], *, samples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """The report from a per-query file's lines: row means, learned weights, paired comparisons."""
    lines = list(lines)
    config = next(line["config"] for line in lines if line["kind"] == "config")
    feedback = sorted((line for line in lines if line["kind"] == "feedback"), key=lambda line: line["n"])
    tests = sorted((line for line in lines if line["kind"] == "test"), key=lambda line: line["n"])
    learners, rows = plan_rows(config["embedders"], config["control"], config["trusts"])
    report: dict[str, Any] = {"config": config, "feedback_done": len(feedback), "test_done": len(tests)}
    report["rows"] = {
        name: {**{m: float(np.mean([t["rows"][name][m] for t in tests])) for m in METRICS},
               "seconds": float(np.mean([t["rows"][name]["seconds"] for t in tests]))}
        for name in [TEXT_ROW, *rows] if tests
    }
    report["learners"] = {}
    for learner in learners:
        steps = [line["learners"][learner.name] for line in feedback]
        report["learners"][learner.name] = {
            "rule": learner.rule, "loss": learner.loss, "eta": learner.eta,
            "weights": steps[-1]["weights"] if steps else None,
            "trajectory": {str(i + 1): steps[i]["weights"] for i in range(len(steps)) if (i + 1) % 50 == 0},
            "marked_per_query": float(np.mean([len(s["irrelevant"]) for s in steps])) if steps else None,
            "target_shown": float(np.mean([s["target_shown"] for s in steps])) if steps else None,
        }
    pairs = comparisons(config["embedders"], config["control"], config["trusts"])
    report["comparisons"] = [compare(tests, a, b, m, samples=samples, seed=seed) for a, b in pairs for m in METRICS] \
        if tests else []
    return report


def compare(tests: Sequence[dict[str, Any]], baseline: str, candidate: str, metric: str, *, samples: int = 10_000,
            seed: int = 0) -> dict[str, Any]:
    """One paired comparison of two rows on the same test queries, with its bootstrap interval."""
    a = np.array([t["rows"][baseline][metric] for t in tests], dtype=float)
    b = np.array([t["rows"][candidate][metric] for t in tests], dtype=float)
    difference, low, high = paired_bootstrap(b - a, samples=samples, seed=seed)
    return {"baseline": baseline, "candidate": candidate, "metric": metric, "baseline_mean": float(a.mean()),
            "candidate_mean": float(b.mean()), "difference": difference, "low": low, "high": high,
            "confidence": 0.95, "queries": len(a), "better": int((b > a).sum()), "worse": int((b < a).sum())}
