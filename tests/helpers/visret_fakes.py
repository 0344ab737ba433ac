"""VisRet's test parts: five captioned photos in a small real gallery (tiny random CLIP), a visualizer that
returns given photos as the guides, the fusion computed by hand, and a chat model that records what it is
sent (control flow only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from helpers import make_photo
from pictrieve.vectorstore.gallery import Gallery

CAPTIONS = ["a black dog runs", "a brown dog jumps", "two children play", "a man rides a bike", "a red square"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """A folder of five random photos, captioned ``CAPTIONS`` in a captions.jsonl."""
    root = tmp_path_factory.mktemp("visret") / "photos"
    lines = []
    for i, caption in enumerate(CAPTIONS):
        make_photo(root / f"p{i}.png", seed=i)
        lines.append(json.dumps({"image": f"p{i}.png", "captions": [caption]}))
    (root / "captions.jsonl").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def gallery(photos, tiny_clip_embedder, tmp_path_factory):
    """``photos`` indexed with the tiny random CLIP model."""
    store = Gallery.open(tmp_path_factory.mktemp("g") / "g", tiny_clip_embedder)
    store.add(photos, progress=False)
    return store


class PhotoVisualizer:
    """Finds given gallery photos as the guides, as the exemplar visualizer finds its photos: used where
    they are, nothing cached (control flow only)."""

    name = "photos"
    generates = False

    def __init__(self, paths):
        self.paths = list(paths)
        self.prompts = []

    def source_paths(self, prompt, n=1):
        self.prompts.append(prompt)
        return self.paths[:n]

    def visualize(self, prompt, *, n=1, seed=None):
        return [Image.open(p).convert("RGB") for p in self.source_paths(prompt, n)]


def hand_fused(gallery, guides, query, weight, k=5):
    """VisRet's fusion computed by hand: 1/(1 + rank) per guide ranking, weight/(1 + rank) for the text's."""
    scores = {}
    rankings = [([h.id for h in gallery.search_image(str(g), k=100)], 1.0) for g in guides]
    if weight:
        rankings.append(([h.id for h in gallery.search_text(query, k=100)], weight))
    for ranking, w in rankings:
        for rank, id_ in enumerate(ranking, start=1):
            scores[id_] = scores.get(id_, 0.0) + w / (1.0 + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])[:k]


class RecordingChat:
    """A chat model stand-in that records the messages and replies with fixed text (control flow only)."""

    def __init__(self, reply, refuse_images=False):
        self.reply, self.refuse_images, self.calls, self.bound = reply, refuse_images, [], []

    def bind(self, **kwargs):
        self.bound.append(kwargs)
        return self

    def invoke(self, messages):
        from langchain_core.messages import AIMessage

        from pictrieve.tools.models.chat_models import UnsupportedContentError

        if self.refuse_images and any(isinstance(m.content, list) for m in messages):
            raise UnsupportedContentError("text only")
        self.calls.append(messages)
        return AIMessage(self.reply)
