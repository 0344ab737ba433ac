"""Hybrid search (BM25 over the photos' words, fused with the vectors) against vectors alone, on captioned photos.

Every caption of a captioned folder (flickr8k format) is a query whose one relevant photo is its own. Per query
the vector ranking is exact (numpy over every stored vector, as ``pictrieve eval retrieval``), the keyword
ranking is :class:`~pictrieve.vectorstore.keywords.KeywordIndex`'s, and the two are fused by the shipped
:func:`~pictrieve.vectorstore.keywords.fuse` at the shipped depth (:data:`~pictrieve.vectorstore.keywords.POOL`).
Two settings of the keyword fields:

- ``no-captions``: folder, file name, place, photo text; the captions are kept out, since the queries *are*
  captions (indexing them would measure a leak). What hybrid search costs a gallery whose words say nothing.
- ``other-captions``: as above plus the photo's *other* captions (the query's own caption slot is left out of
  every photo's words): a gallery whose photos carry people's descriptions. Used on flickr8k-train to choose
  the fusion constant and the keyword weight (``sweep``), and reported on flickr8k-dev as a second row.

    OMP_NUM_THREADS=1 python benchmarks/hybrid_search.py sweep --folder ../shared/datasets/flickr8k-train \\
        --gallery RUNS/train-gallery --queries 4000 --out benchmarks/results/hybrid/sweep-flickr8k-train.json
    OMP_NUM_THREADS=1 python benchmarks/hybrid_search.py report --folder ../shared/datasets/flickr8k-dev \\
        --gallery RUNS/dev-gallery --out benchmarks/results/hybrid

A gallery at ``--gallery`` is indexed from ``--folder`` first when it is empty (a copy of one made before may
hold a sample of the folder). The per-query file holds each query's rank of its photo by vectors alone and by
hybrid (``null``: below the depth); paired bootstrap intervals (``evaluation/paired.py``) are over queries.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger("hybrid_search")

NO_CAPTIONS = ("folder", "name", "place", "photo_text")
OTHER_CAPTIONS = (*NO_CAPTIONS, "captions")
RRF_KS = (1, 2, 5, 10, 20, 30, 60, 100)
WEIGHTS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


def load(folder: Path, location: Path, limit: int | None, seed: int = 0) -> dict[str, Any]:
    """The gallery's ids, vectors and records, and the queries: ``(text, target id, caption slot)``."""
    from pictrieve.vectorstore.gallery import Gallery

    gallery = Gallery.open(location)
    if gallery.count() == 0:
        gallery.add(folder, progress=True)
    items = list(gallery.items())
    ids = [item.id for item in items]
    vectors = gallery.embeddings(ids)
    queries = [(text, item.id, slot) for item in items for slot, text in enumerate(item.captions)]
    if limit and limit < len(queries):
        rng = np.random.default_rng(seed)
        queries = [queries[i] for i in sorted(rng.choice(len(queries), limit, replace=False))]
    texts = [q[0] for q in queries]
    cache = location / f"hybrid-queries-{len(texts)}.npy"  # the query vectors, kept beside the gallery copy
    if cache.is_file():
        text_vectors = np.load(cache)
    else:
        started = time.perf_counter()
        text_vectors = np.concatenate([gallery.embedder.embed_texts(texts[i : i + 256])
                                       for i in range(0, len(texts), 256)])
        logger.info("%d queries embedded in %.0f s", len(texts), time.perf_counter() - started)
        np.save(cache, text_vectors)
    return {"gallery": gallery, "items": items, "ids": ids, "vectors": np.asarray(vectors, np.float32),
            "queries": queries, "text_vectors": np.asarray(text_vectors, np.float32)}


def keyword_indexes(items: list[Any], fields: tuple[str, ...], slots: int = 5) -> list[Any]:
    """One index per caption slot, each leaving that slot's caption out of every photo's words."""
    from pictrieve.vectorstore.keywords import KeywordIndex

    if "captions" not in fields:
        index = KeywordIndex.from_records(((item.id, item.metadata) for item in items), fields)
        return [index] * slots
    out = []
    for slot in range(slots):
        records = [(item.id, {**item.metadata, "captions": [c for n, c in enumerate(item.captions) if n != slot]})
                   for item in items]
        out.append(KeywordIndex.from_records(records, fields))
    return out


def rankings(data: dict[str, Any], fields: tuple[str, ...], depth: int) -> list[tuple[list[str], list[Any], str]]:
    """Per query: the vector ranking's ids (best ``depth``), the keyword ranking, the target id."""
    indexes = keyword_indexes(data["items"], fields)
    ids = np.asarray(data["ids"])
    scores = data["text_vectors"] @ data["vectors"].T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
    return [(list(ids[row]), indexes[slot].rank(text), target)
            for (text, target, slot), row in zip(data["queries"], top)]


def ranks_of(ranked: list[tuple[list[str], list[Any], str]], *, depth: int, rrf_k: float | None = None,
             weight: float = 1.0, all_words_first: bool = True) -> np.ndarray:
    """Each query's 1-based rank of its photo (``depth + 1``: not within ``depth``); ``rrf_k`` None: vectors alone."""
    from pictrieve.vectorstore.keywords import fuse

    out = np.empty(len(ranked), dtype=np.int64)
    for n, (vector_ids, keyword, target) in enumerate(ranked):
        order = vector_ids if rrf_k is None else fuse(vector_ids, keyword[:depth], depth, rrf_k=rrf_k, weight=weight,
                                                         all_words_first=all_words_first)
        out[n] = order.index(target) + 1 if target in order else depth + 1
    return out


def _reciprocal(ranks: np.ndarray, depth: int) -> np.ndarray:
    return np.where(ranks <= depth, 1.0 / ranks, 0.0)


def metrics(ranks: np.ndarray, depth: int) -> dict[str, float]:
    return {"mrr": float(_reciprocal(ranks, depth).mean()), **{f"recall@{k}": float((ranks <= k).mean()) for k in (1, 5, 10)}}


def sweep(args: argparse.Namespace) -> None:
    data = load(args.folder, args.gallery, args.queries)
    ranked = rankings(data, OTHER_CAPTIONS, args.depth)
    base = ranks_of(ranked, depth=args.depth)
    rows = [{"rrf_k": None, "weight": 0.0, **metrics(base, args.depth)}]
    for first in (False, True):
        for rrf_k in RRF_KS:
            for weight in WEIGHTS:
                ranks = ranks_of(ranked, depth=args.depth, rrf_k=rrf_k, weight=weight, all_words_first=first)
                rows.append({"rrf_k": rrf_k, "weight": weight, "all_words_first": first, **metrics(ranks, args.depth)})
    best = max((row for row in rows[1:] if row["all_words_first"]), key=lambda row: row["mrr"])
    out = {"folder": str(args.folder), "queries": len(ranked), "fields": list(OTHER_CAPTIONS), "depth": args.depth,
           "criterion": "max MRR@depth over the all-words-first rows (the rule ships on), other-captions setting", "chosen": best, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps({"chosen": best, "vectors": rows[0]}, indent=1))


def report(args: argparse.Namespace) -> None:
    from pictrieve.evaluation.paired import paired_bootstrap
    from pictrieve.vectorstore.keywords import ALL_WORDS_FIRST, KEYWORD_WEIGHT, RRF_K

    data = load(args.folder, args.gallery, None)
    name = args.folder.resolve().name
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"folder": str(args.folder), "queries": len(data["queries"]), "depth": args.depth,
                               "rrf_k": RRF_K, "weight": KEYWORD_WEIGHT, "all_words_first": ALL_WORDS_FIRST,
                               "settings": {}}
    per_query: dict[str, dict[str, Any]] = {}
    for setting, fields in (("no-captions", NO_CAPTIONS), ("other-captions", OTHER_CAPTIONS)):
        ranked = rankings(data, fields, args.depth)
        vectors = ranks_of(ranked, depth=args.depth)
        hybrid = ranks_of(ranked, depth=args.depth, rrf_k=RRF_K, weight=KEYWORD_WEIGHT, all_words_first=ALL_WORDS_FIRST)
        mean, low, high = paired_bootstrap(_reciprocal(hybrid, args.depth) - _reciprocal(vectors, args.depth))
        hit10 = paired_bootstrap((hybrid <= 10).astype(float) - (vectors <= 10).astype(float))
        summary["settings"][setting] = {
            "fields": list(fields), "vectors": metrics(vectors, args.depth), "hybrid": metrics(hybrid, args.depth),
            "mrr_difference": {"mean": mean, "low": low, "high": high},
            "recall@10_difference": dict(zip(("mean", "low", "high"), hit10)),
            "queries_keyword_matched_target": int(sum(any(k.id == t for k in kw) for _, kw, t in ranked)),
            "queries_changed": int((vectors != hybrid).sum())}
        for (text, target, slot), v, h in zip(data["queries"], vectors, hybrid):
            row = per_query.setdefault(f"{target}:{slot}", {"query": text, "target": target})
            row[f"{setting}:vectors"] = int(v) if v <= args.depth else None
            row[f"{setting}:hybrid"] = int(h) if h <= args.depth else None
    (args.out / f"report-{name}.json").write_text(json.dumps(summary, indent=1))
    with (args.out / f"per-query-{name}.jsonl").open("w") as handle:
        for row in per_query.values():
            handle.write(json.dumps(row) + "\n")
    print(json.dumps(summary, indent=1))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("sweep", "report"):
        p = sub.add_parser(command)
        p.add_argument("--folder", type=Path, required=True)
        p.add_argument("--gallery", type=Path, required=True)
        p.add_argument("--depth", type=int, default=100)
        p.add_argument("--queries", type=int, default=None, help="sample this many queries (sweep)")
        p.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    {"sweep": sweep, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
