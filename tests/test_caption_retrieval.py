"""The caption-retrieval evaluator pairs every caption with its own image.

A transparent embedder makes the right answer known: image i is a flat grey of level 40*i and
embeds to the one-hot vector e_i; the text "photo number i" embeds to e_i too. Correct pairing
gives Recall@1 = 1; a mismatch anywhere between captions, images and targets lowers it.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from PIL import Image

from pictrieve.evaluation.caption_retrieval import evaluate_caption_retrieval

N = 5


class GreyLevelEmbedder:
    name, dim = "test:grey-level", N

    def preprocess(self, image):
        return int(round(np.asarray(image.convert("L")).mean() / 40))

    def embed_preprocessed(self, batch):
        return np.eye(N, dtype=np.float32)[list(batch)]

    def embed_images(self, images):
        return self.embed_preprocessed([self.preprocess(im) for im in images])

    def embed_texts(self, texts):
        return np.eye(N, dtype=np.float32)[[int(re.search(r"\d+", t).group()) for t in texts]]


def _folder(tmp_path, caption_of):
    folder = tmp_path / "set"
    (folder / "images").mkdir(parents=True)
    lines = []
    for i in range(N):
        Image.new("RGB", (8, 8), (40 * i,) * 3).save(folder / "images" / f"{i}.png")
        lines.append(json.dumps({"image": f"images/{i}.png", "captions": [f"photo number {caption_of(i)}"] * 2}))
    (folder / "captions.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_correct_pairs_rank_first(tmp_path):
    metrics = evaluate_caption_retrieval(_folder(tmp_path, lambda i: i), GreyLevelEmbedder(), progress=False)
    assert metrics["queries"] == 2 * N and metrics["images"] == N
    assert metrics["recall@1"] == pytest.approx(1.0) and metrics["median_rank"] == 1.0


def test_mismatched_captions_are_caught(tmp_path):
    shifted = evaluate_caption_retrieval(_folder(tmp_path, lambda i: (i + 1) % N), GreyLevelEmbedder(), progress=False)
    assert shifted["recall@1"] == pytest.approx(0.0)
