"""NEEDLE's test parts: a visualizer stand-in that counts its calls, a small real gallery of flickr8k-dev
photos under two embedders with a reference folder for the exemplar visualizer, and a private cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from pictrieve.vectorstore.gallery import Gallery


class CountingVisualizer:
    """Makes plain coloured pictures and counts calls (a stand-in for a generator)."""

    name = "counting"
    generates = True

    def __init__(self, fail: bool = False):
        self.calls = 0
        self.fail = fail

    def visualize(self, prompt, *, n=1, seed=None):
        self.calls += 1
        if self.fail:
            raise RuntimeError("generator down")
        return [Image.new("RGB", (32, 32), (seed or 0, 10 * i, 0)) for i in range(n)]


@pytest.fixture(scope="module")
def needle_gallery(tiny_clip_embedder, tmp_path_factory, flickr_dir):
    """Twelve real flickr8k-dev photos indexed with two embedders, and a reference folder of six more
    (for the exemplar visualizer) whose captions are those photos' own."""
    rows = [json.loads(line) for line in (flickr_dir / "captions.jsonl").read_text().splitlines()[:18]]
    root = tmp_path_factory.mktemp("needle")
    photos = root / "photos"
    photos.mkdir()
    for row in rows[:12]:
        (photos / Path(row["image"]).name).symlink_to(flickr_dir / row["image"])
    reference = root / "reference"
    reference.mkdir()
    (reference / "captions.jsonl").write_text("\n".join(
        json.dumps({"image": str(flickr_dir / row["image"]), "captions": row["captions"]}) for row in rows[:6]
    ))
    gallery = Gallery.open(root / "g", tiny_clip_embedder)
    gallery.add(photos, embedders=["efficientnet-lite0"], progress=False)
    return gallery, reference, rows


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    """``$PICTRIEVE_CACHE`` in the test's own folder (where generated guides are cached)."""
    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def flickr_dir_of(reference: Path, row: int) -> Path:
    """The photo of the reference folder's ``row``-th caption line."""
    return Path(json.loads((reference / "captions.jsonl").read_text().splitlines()[row])["image"])
