"""Interactive retrieval evaluation: the PlugIR ablation with a simulated user.

For each target photo of a captioned folder (``captions.jsonl``, the flickr8k-dev format), one of
its human captions is the initial description D_0 and a simulated user answers every question from
the *other* captions only: by default :class:`CaptionUser` (no language model: exact for the
offline questioner's questions, rule-based or the closest caption for free questions), ``user="free"``,
the same answers followed, as people type, by what one of those captions says (:class:`FreeTextCaptionUser`),
or ``user="llm"``, the chat model reading the captions (:class:`CaptionAnswerer`). Targets are the first
``targets`` of one seeded order of the photos, so a run on 10 targets uses the first 10 of a run on 50. Every arm (ZS, CR, CR+RCE, CR+RCE+F; :data:`ARMS`) runs the same graph
with different configuration over the same targets, descriptions and random seeds. Each round the
target's rank is read from the graph's own ranking, the order it shows (the ``ranking`` its
``retrieve`` node returns, which the offline arm re-ranks by the answers), not from re-embedding the
query text: the graph searches an exact view of the gallery (numpy over all stored vectors) and ranks
all of it (``ranked_k`` = the gallery's size); ties are scored by their expected rank. The run
reports BRI, Hits@10 and Recall@10 per round, and seconds per round split by graph node.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pictrieve.agents.plugir.simulated_user import Answerer, CaptionAnswerer, CaptionUser, FreeTextCaptionUser
from pictrieve.evaluation.bri import bri, hits_at_k, recall_at_k
from pictrieve.evaluation.ranking import ExactRanker
from pictrieve.agents.plugir.settings import ARMS, PlugIRSettings
from pictrieve.graphs.plugir import build_plugir_graph
from pictrieve.tools.core.seeding import torch_seeded

logger = logging.getLogger(__name__)

NODES = ("reformulation", "retrieval", "rce", "questioner", "filter")
AnswererFactory = Callable[[Path, list[str]], Answerer]
"""``answerer = factory(target_image_path, visible_captions)``; default: :class:`CaptionUser`."""
USERS = ("captions", "free", "llm")
"""The simulated users: ``captions`` answers yes, no or an option (:class:`CaptionUser`); ``free`` adds,
as people do, what one of the target's captions says (:class:`FreeTextCaptionUser`); ``llm`` has the
chat model read the captions (:class:`CaptionAnswerer`)."""


def open_eval_gallery(folder: str | os.PathLike, embedder: Any = None,
                      location: str | os.PathLike | None = None, limit: int | None = None):
    """The evaluation gallery of the images in ``folder/captions.jsonl`` (first ``limit``), as
    :func:`pictrieve.evaluation.datasets.eval_gallery` keeps it. Returns ``(gallery, captions)`` where
    ``captions`` maps image paths to their human captions."""
    from pictrieve.evaluation.datasets import CaptionedFolder, eval_gallery

    dataset = CaptionedFolder.load(folder, limit=limit)
    return eval_gallery(dataset, embedder, location=location), dataset.captions


def evaluate_interactive(
    folder: str | os.PathLike,
    *,
    targets: int = 10,
    rounds: int = 5,
    arms: Sequence[str] = tuple(ARMS),
    llm: Any = None,
    base_url: str | None = None,
    embedder: Any = None,
    gallery_location: str | os.PathLike | None = None,
    answerer_factory: AnswererFactory | None = None,
    user: str = "captions",
    seed: int = 0,
    top_k: int = 10,
    settings: dict[str, Any] | None = None,
    uncaptioned: bool = False,
    captioner: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the ablation; returns per-arm metrics, per-node latency and every dialogue.

    ``uncaptioned``: the graph sees the gallery as a user's own photos, without their captions, and
    describes candidates with ``captioner`` (a PlugIR captioner choice: ``"auto"``, ``"offline"``,
    ``"none"``, ...); the simulated user still answers from the target's human captions.

    ``settings`` are extra PlugIR run settings (``candidate_k`` or its old name ``top_n``, ``clusters``,
    ``questions_per_round``, ...). The result's ``arms[arm]`` holds ``bri``, ``hits@10`` and
    ``recall@10`` (lists over rounds 0..T), ``seconds_per_round``, ``node_seconds_per_round``
    and ``user_seconds_per_round``; ``dialogues[arm]`` holds each target's turns, queries and ranks.
    """
    from pictrieve.tools.models.chat_models import create_chat_model
    from pictrieve.vectorstore.chroma_store import path_id

    if user not in USERS:
        raise ValueError(f"unknown simulated user {user!r}; choose from {', '.join(USERS)}")
    needs_llm = user == "llm" or any(ARMS.get(a, {}).get("questioner") == "llm" for a in arms)
    chat = create_chat_model(llm, base_url=base_url) if needs_llm else None
    custom_user = answerer_factory is not None
    if answerer_factory is None:
        answerer_factory = {"llm": lambda path, visible: CaptionAnswerer(chat, visible),
                            "free": lambda path, visible: FreeTextCaptionUser(visible),
                            "captions": lambda path, visible: CaptionUser(visible)}[user]
    gallery, captions = open_eval_gallery(folder, embedder, gallery_location)
    targets_by_id = {path_id(p): (p, texts) for p, texts in captions.items()}
    results = run_ablation(gallery, targets_by_id, chat, targets=targets, rounds=rounds, arms=arms,
                           answerer_factory=answerer_factory, seed=seed, top_k=top_k,
                           settings=settings, uncaptioned=uncaptioned, captioner=captioner, progress=progress)
    results["config"]["folder"] = str(folder)
    results["config"]["user"] = "custom" if custom_user else user
    return results


def run_ablation(
    gallery: Any,
    captions_by_id: dict[str, tuple[Path, list[str]]],
    chat: Any,
    *,
    targets: int = 10,
    rounds: int = 5,
    arms: Sequence[str] = tuple(ARMS),
    answerer_factory: AnswererFactory | None = None,
    seed: int = 0,
    top_k: int = 10,
    settings: dict[str, Any] | None = None,
    uncaptioned: bool = False,
    captioner: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """:func:`evaluate_interactive` on an open gallery; ``captions_by_id[id] = (path, captions)``."""
    from tqdm import tqdm

    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ValueError(f"unknown arms {unknown}; choose from {', '.join(ARMS)}")
    if rounds < 1:
        raise ValueError("--rounds must be at least 1 (BRI needs round 0 and one more)")
    ranker = ExactRanker(gallery)
    exact = ExactSearch(gallery, ranker)
    seen = WithoutCaptions(exact) if uncaptioned else exact  # what the graph searches
    captioner_name = captioner
    if captioner is not None:
        from pictrieve.agents.plugir.candidates import resolve_captioner

        captioner = resolve_captioner(captioner, seen)  # built once: tag vectors are computed once
    ids = ranker.ids
    by_id = {id_: path for id_, (path, _) in captions_by_id.items()}
    plan = target_plan(ids, captions_by_id, targets, seed)

    answerer_factory = answerer_factory or (lambda path, visible: CaptionUser(visible))
    base_settings = {"shown_k": top_k, "max_rounds": rounds, "seed": seed, "ranked_k": len(ids),
                     **_renamed(settings or {})}
    results: dict[str, Any] = {"arms": {}, "dialogues": {}}
    bar = tqdm(total=len(arms) * len(plan), disable=not progress, desc="interactive eval")
    for arm in arms:
        rank_rows, greater_rows, tie_rows = [], [], []
        node_seconds: dict[str, float] = defaultdict(float)
        user_seconds, answered_rounds, dialogues = 0.0, 0, []
        for number, (id_, description, visible) in enumerate(plan):
            timed_user = _TimedAnswerer(answerer_factory(by_id[id_], visible))
            graph = build_plugir_graph(seen, llm=chat, answerer=timed_user, captioner=captioner)
            with torch_seeded(seed * 100_003 + number):  # same sampling per target in every arm
                state, rankings = run_and_record_rankings(graph, description,
                                                          PlugIRSettings(**base_settings, arm=arm))
            queries = list(state.get("queries", []))
            queries += [queries[-1]] * (rounds + 1 - len(queries))  # a run that stopped early
            rankings += [rankings[-1]] * (rounds + 1 - len(rankings))
            stats = target_rank_statistics(rankings, id_)
            rank_rows.append(stats["ranks"])
            greater_rows.append(stats["greater"])
            tie_rows.append(stats["ties"])
            for timing in state.get("timings", []):
                node_seconds[timing["node"]] += timing["seconds"]
            user_seconds += timed_user.seconds
            answered_rounds += len(state.get("dialogue", []))
            dialogues.append({
                "target": str(by_id[id_]), "description": description, "visible_captions": visible,
                "turns": state.get("dialogue", []), "queries": queries,
                "ranks": [float(r) for r in stats["ranks"]],
                "shown": [[id_ for id_, _ in ranking[:top_k]] for ranking in rankings],
            })
            bar.update(1)
        ranks = np.vstack(rank_rows)
        per_round = max(answered_rounds, 1)
        greater, ties = np.vstack(greater_rows), np.vstack(tie_rows)
        results["arms"][arm] = {
            "bri": bri(ranks),
            # Both tie-aware, so they agree at round 0 (Hits@K keeps each target's best round).
            f"hits@{top_k}": hits_at_k(ranks, top_k, greater=greater, ties=ties).tolist(),
            f"recall@{top_k}": recall_at_k(ranks, top_k, greater=greater, ties=ties).tolist(),
            "mean_rank": ranks.mean(axis=0).tolist(),
            "seconds_per_round": sum(node_seconds.values()) / per_round,
            "node_seconds_per_round": {n: node_seconds.get(n, 0.0) / per_round for n in NODES},
            "user_seconds_per_round": user_seconds / per_round,
        }
        results["dialogues"][arm] = dialogues
    bar.close()
    results["config"] = {
        "images": len(ids), "targets": len(plan), "rounds": rounds,
        "arms": list(arms), "seed": seed, "embedder": getattr(gallery.embedder, "name", ""),
        "llm": getattr(chat, "model_name", type(chat).__name__) if chat is not None else None,
        "top_k": top_k, "uncaptioned": uncaptioned, "captioner": captioner_name,
        **(settings or {}),
    }
    if hasattr(gallery, "embedder_name"):
        results["config"]["embedder"] = gallery.embedder_name
    return results


def target_plan(ids: Sequence[str], captions_by_id: dict[str, tuple[Path, list[str]]], targets: int,
                seed: int = 0) -> list[tuple[str, str, list[str]]]:
    """``(target id, first description, the captions the simulated user answers from)`` per target.

    One seeded order of the photos, and each target's description drawn from its own seed, so the
    first k targets of a longer run are exactly a shorter run's (the LLM arms run on a prefix)."""
    eligible = [id_ for id_ in ids if id_ in captions_by_id and len(captions_by_id[id_][1]) >= 2]
    if not eligible:
        raise ValueError("no gallery image has two or more captions to simulate a user with")
    order = np.random.default_rng(seed).permutation(len(eligible))
    plan = []
    for index in order[:targets]:
        id_ = eligible[index]
        texts = captions_by_id[id_][1]
        first = int(np.random.default_rng([seed, int(index)]).integers(len(texts)))
        plan.append((id_, texts[first], [t for i, t in enumerate(texts) if i != first]))
    return plan


def run_and_record_rankings(graph: Any, description: str, context: Any) -> tuple[dict[str, Any], list[list]]:
    """Run an unattended PlugIR graph; return its final state and the ``ranking`` of every round."""
    rankings: list[list] = []
    state: dict[str, Any] = {}
    for mode, chunk in graph.stream({"description": description}, context=context,
                                    stream_mode=["updates", "values"]):
        if mode == "values":
            state = chunk
        elif "retrieve" in chunk and chunk["retrieve"].get("ranking") is not None:
            rankings.append(chunk["retrieve"]["ranking"])
    return state, rankings


def target_rank_statistics(rankings: Sequence[Sequence[tuple[str, float]]], target: str) -> dict[str, np.ndarray]:
    """Tie-aware ``ranks``, ``greater`` and ``ties`` of ``target`` in each round's ranking (the
    graph's ``(id, score)`` list). A ranking must hold the target: the evaluation ranks the whole
    gallery."""
    greater, ties = [], []
    for ranking in rankings:
        scores = {id_: score for id_, score in ranking}
        if target not in scores:
            raise ValueError(f"the graph's ranking of {len(ranking)} images lacks the target {target}; "
                             "set ranked_k to the gallery's size")
        values = np.fromiter(scores.values(), dtype=np.float64)
        greater.append(int((values > scores[target]).sum()))
        ties.append(int((values == scores[target]).sum()) - 1)
    greater_array, ties_array = np.array(greater), np.array(ties)
    return {"greater": greater_array, "ties": ties_array, "ranks": 1.0 + greater_array + ties_array / 2.0}


class ExactSearch:
    """A gallery whose ``search_vector`` scores every stored vector exactly (numpy, the evaluation's
    :class:`ExactRanker`), so the graph's ranking never depends on the HNSW index's recall."""

    def __init__(self, gallery: Any, ranker: ExactRanker | None = None) -> None:
        self.gallery = gallery
        self.ranker = ranker or ExactRanker(gallery)
        self._hits: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:  # embedder, embeddings, count, ...
        return getattr(self.gallery, name)

    def _records(self) -> dict[str, Any]:
        """Every image's hit (path, captions), read once."""
        if self._hits is None:
            everything = self.gallery.search_vector(self.ranker.vectors[0], k=len(self.ranker.ids))
            self._hits = {hit.id: hit for hit in everything}
            missing = [id_ for id_ in self.ranker.ids if id_ not in self._hits]
            if missing:  # an approximate index may leave some out of one query: read them directly
                from pictrieve.vectorstore.hits import ImageHit

                for id_, meta in self.gallery.metadata_of(missing).items():
                    self._hits[id_] = ImageHit.from_record(id_, meta, score=0.0, rank=0)
        return self._hits

    def search_vector(self, vector: np.ndarray, k: int = 10) -> list[Any]:
        scores = self.ranker.vectors @ np.asarray(vector, dtype=self.ranker.vectors.dtype).reshape(-1)
        order = np.argsort(-scores, kind="stable")[:k]
        records = self._records()
        return [records[self.ranker.ids[i]].model_copy(update={"score": float(scores[i]), "rank": rank})
                for rank, i in enumerate(order, 1)]


class WithoutCaptions:
    """A gallery as PlugIR sees a user's own photos: the same search, hits without stored captions."""

    def __init__(self, gallery: Any) -> None:
        self.gallery = gallery

    def __getattr__(self, name: str) -> Any:  # embedder, embeddings, count, ...
        return getattr(self.gallery, name)

    def search_vector(self, vector: np.ndarray, k: int = 10) -> list[Any]:
        return [hit.model_copy(update={"captions": []}) for hit in self.gallery.search_vector(vector, k=k)]


def plot_interactive(results: dict[str, Any], path: str | os.PathLike, top_k: int = 10) -> Path:
    """Per-round Recall@K (solid) and Hits@K (dotted) per arm, like the paper's Figure 5."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for i, (arm, metrics) in enumerate(results["arms"].items()):
        color = f"C{i}"
        recall, hits = metrics[f"recall@{top_k}"], metrics[f"hits@{top_k}"]
        rounds = range(len(recall))
        ax.plot(rounds, recall, "-o", color=color, label=f"{arm} Recall@{top_k}", markersize=3)
        ax.plot(rounds, hits, ":", color=color, label=f"{arm} Hits@{top_k}")
    cfg = results.get("config", {})
    ax.set_xticks(range(int(cfg.get("rounds", len(recall) - 1)) + 1))
    ax.set_xlabel("round")
    ax.set_ylabel("fraction of targets")
    ax.set_title(f"PlugIR ablation: {cfg.get('targets', '?')} targets, {cfg.get('images', '?')} images",
                 fontsize=10)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


class _TimedAnswerer:
    """Wraps an answerer to add up the time the simulated user takes."""

    def __init__(self, answerer: Answerer):
        self.answerer = answerer
        self.seconds = 0.0

    def __call__(self, question: str, state: Any) -> str:
        started = time.perf_counter()
        try:
            return self.answerer(question, state)
        finally:
            self.seconds += time.perf_counter() - started


_OLD_NAMES = {"top_n": "candidate_k", "top_k": "shown_k"}


def _renamed(settings: dict[str, Any]) -> dict[str, Any]:
    """PlugIR settings under their current names (``top_n`` became ``candidate_k``)."""
    return {_OLD_NAMES.get(key, key): value for key, value in settings.items()}
