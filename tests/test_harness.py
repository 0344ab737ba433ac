"""The one evaluation harness: captioned folders, the cached evaluation gallery, the exact ranker,
and evaluate_method over registered methods."""

from __future__ import annotations

from pathlib import Path
import json

import numpy as np
import pytest

from helpers import make_photo
from pictrieve.evaluation.datasets import CaptionedFolder, embedder_fingerprint, eval_gallery
from pictrieve.evaluation.harness import caption_queries, evaluate_method
from pictrieve.evaluation.ranking import ExactRanker

WORDS = ["a red square", "a blue circle", "a green field", "two dogs", "a snowy street", "a beach at dusk"]


@pytest.fixture
def captioned(tmp_path):
    root = tmp_path / "set"
    lines = []
    for i, text in enumerate(WORDS):
        make_photo(root / "images" / f"p{i}.png", seed=i)
        lines.append(json.dumps({"image": f"images/p{i}.png", "captions": [text, text + " photo"]}))
    lines.append(json.dumps({"image": "images/missing.png", "captions": ["gone"]}))
    (root / "captions.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_captioned_folder_skips_missing_images_and_limits(captioned):
    folder = CaptionedFolder.load(captioned)
    assert len(folder.paths) == 6 and all(p.is_file() for p in folder.paths)
    assert len(CaptionedFolder.load(captioned, limit=2).paths) == 2
    before = folder.fingerprint()
    (captioned / "images" / "p0.png").write_bytes((captioned / "images" / "p1.png").read_bytes())
    assert CaptionedFolder.load(captioned).fingerprint() != before


def test_eval_gallery_is_keyed_by_embedder_content_not_name(captioned, tiny_clip_embedder, tmp_path, monkeypatch):
    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))

    class SameNameOtherWeights:
        name, dim = tiny_clip_embedder.name, tiny_clip_embedder.dim

        def preprocess(self, image):
            return tiny_clip_embedder.preprocess(image)

        def embed_preprocessed(self, batch):
            return -tiny_clip_embedder.embed_preprocessed(batch)

        def embed_images(self, images):
            return -tiny_clip_embedder.embed_images(images)

        def embed_texts(self, texts):
            return -tiny_clip_embedder.embed_texts(texts)

    first = eval_gallery(captioned, tiny_clip_embedder)
    again = eval_gallery(captioned, tiny_clip_embedder)
    other = eval_gallery(captioned, SameNameOtherWeights())
    assert first.location == again.location != other.location
    assert embedder_fingerprint(tiny_clip_embedder) != embedder_fingerprint(SameNameOtherWeights())
    np.testing.assert_allclose(other.embeddings(first.ids()), -first.embeddings(), atol=1e-5)
    assert str(tmp_path / "cache") in str(first.location)  # never the user's home in tests
    elsewhere = eval_gallery(captioned, tiny_clip_embedder, cache_dir=tmp_path / "other-cache")
    assert Path(elsewhere.location).parent == tmp_path / "other-cache"
    assert Path(elsewhere.location).name == Path(first.location).name  # same content key under another root


def test_search_through_the_harness_matches_the_exact_ranker_and_the_graph(captioned, tiny_clip_embedder, tmp_path):
    folder = CaptionedFolder.load(captioned)
    exact = evaluate_method("search", folder, embedders=tiny_clip_embedder, gallery_location=tmp_path / "g",
                            progress=False)
    gallery = eval_gallery(folder, tiny_clip_embedder, location=tmp_path / "g")
    texts, targets = caption_queries(folder, gallery)
    assert exact["queries"] == len(texts) == 12 and exact["images"] == 6
    ranks = ExactRanker(gallery).ranks(texts, targets)["ranks"]
    assert exact["recall@1"] == pytest.approx(float(np.mean(ranks <= 1)))
    assert exact["median_rank"] == pytest.approx(float(np.median(ranks)))
    # the same method run as a graph (HNSW search, top-k hits): on six images it agrees with exact ranks
    from pictrieve.evaluation.harness import _run_graph
    from pictrieve.graphs.registry import get_method

    graph_run = _run_graph(get_method("search"), gallery, texts, targets, {"k": 1}, False, {})
    assert graph_run["recall@1"] == pytest.approx(exact["recall@1"])
    assert graph_run["settings"] == {"k": 1, "only_relevant": False} and graph_run["mrr"] == pytest.approx(graph_run["recall@1"])
    sample = evaluate_method("search", folder, embedders=tiny_clip_embedder, gallery_location=tmp_path / "g",
                             queries=5, progress=False)
    assert sample["queries"] == 5
