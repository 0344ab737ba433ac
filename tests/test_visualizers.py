"""The visualizer factory and the offline exemplar visualizer (real MiniLM, real photos)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pictrieve.tools.visualizers import (
    VISUALIZERS,
    UnknownVisualizerError,
    VisualizerUnavailableError,
    create_visualizer,
)

CAPTIONS = {
    "red.png": ["a plain red square", "a red block of colour"],
    "dog.png": ["a black dog running on the grass", "a dog runs in a park"],
    "beach.png": ["children play in the sea at the beach", "kids splash in the waves"],
}


def _reference(tmp_path: Path, flickr_dir: Path | None = None) -> Path:
    root = tmp_path / "reference"
    (root / "images").mkdir(parents=True)
    lines = []
    if flickr_dir is not None:
        records = [json.loads(l) for l in (flickr_dir / "captions.jsonl").read_text().splitlines()[:4]]
        for record in records:
            shutil.copy(flickr_dir / record["image"], root / "images" / Path(record["image"]).name)
            lines.append({"image": f"images/{Path(record['image']).name}", "captions": record["captions"]})
    else:
        from conftest import make_photo

        for i, (name, caps) in enumerate(CAPTIONS.items()):
            make_photo(root / "images" / name, seed=i)
            lines.append({"image": f"images/{name}", "captions": caps})
    (root / "captions.jsonl").write_text("\n".join(json.dumps(l) for l in lines) + "\n")
    return root


def test_exemplar_returns_the_photo_whose_caption_matches(tmp_path, monkeypatch):
    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    visualizer = create_visualizer(f"exemplar:{_reference(tmp_path)}")
    assert visualizer.generates is False and visualizer.name.startswith("exemplar:")
    assert visualizer.best_matches("a puppy sprinting across a lawn", 1)[0][0].name == "dog.png"
    assert len(visualizer.best_matches("a puppy", 10)) == 3  # never more than the collection holds
    assert visualizer.best_matches("kids swimming in the ocean", 1)[0][0].name == "beach.png"
    images = visualizer.visualize("a red square", n=2, seed=7)
    assert len(images) == 2 and images[0].mode == "RGB"
    assert np.array_equal(np.asarray(images[0]), np.asarray(visualizer.visualize("a red square", n=1)[0]))
    assert list((tmp_path / "cache" / "exemplar").glob("*.npy")), "caption vectors are cached on disk"


def test_exemplar_on_real_photos(tmp_path, monkeypatch, flickr_dir):
    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    root = _reference(tmp_path, flickr_dir)
    records = [json.loads(l) for l in (root / "captions.jsonl").read_text().splitlines()]
    visualizer = create_visualizer(f"exemplar:{root}")
    for record in records:
        assert visualizer.best_matches(record["captions"][0], 1)[0][0] == root / record["image"]
    again = create_visualizer(f"exemplar:{root}")  # from the disk cache
    assert np.allclose(again.caption_vectors, visualizer.caption_vectors)


def test_errors_are_clear(tmp_path):
    with pytest.raises(UnknownVisualizerError, match="exemplar"):
        create_visualizer("dall-e-9000")
    for name in ("diffusers:stabilityai/sd-turbo", "openai:gpt-image-1", "tiny-random"):
        with pytest.raises(VisualizerUnavailableError, match="exemplar:"):
            create_visualizer(name)
    with pytest.raises(VisualizerUnavailableError, match="captions.jsonl"):
        create_visualizer(f"exemplar:{tmp_path}")
    with pytest.raises(VisualizerUnavailableError, match="reference collection"):
        create_visualizer("exemplar")
    assert "exemplar" in VISUALIZERS.families()
