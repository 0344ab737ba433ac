"""Small real galleries for tests that run graphs: photos with captions, indexed with the tiny random CLIP."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers import make_photo
from helpers.cli import CLI
from helpers.stores import STORES
from pictrieve.vectorstore.gallery import Gallery


@pytest.fixture(scope="module")
def captioned_cli_gallery(tmp_path_factory, tiny_clip_name) -> tuple[str, Path]:
    """(gallery, captioned folder) of six photos indexed by ``pictrieve index`` with the tiny random CLIP: for tests
    that run the command line on it (the folder's ``captions.jsonl`` also makes it an exemplar visualizer)."""
    root = tmp_path_factory.mktemp("captioned")
    photos = root / "photos"
    rows = []
    for i in range(6):
        make_photo(photos / f"{i}.png", seed=i)
        rows.append(json.dumps({"image": f"{i}.png", "captions": [f"a photo of thing number {i}"]}))
    (photos / "captions.jsonl").write_text("\n".join(rows) + "\n")
    gallery = str(root / "g")
    indexed = subprocess.run([*CLI, "index", str(photos), "-g", gallery, "-e", tiny_clip_name],
                             capture_output=True, text=True, timeout=600)
    assert indexed.returncode == 0, indexed.stderr
    return gallery, photos


@pytest.fixture(scope="module")
def tiny_gallery(tmp_path_factory, tiny_clip_embedder):
    """Four captioned photos (two dogs, children, a bike) in a gallery: what every method can run on."""
    root = tmp_path_factory.mktemp("contract")
    for i, caption in enumerate(["a black dog runs", "a brown dog jumps", "two children play", "a man rides a bike"]):
        make_photo(root / "photos" / f"p{i}.png", seed=i)
        (root / "photos" / f"p{i}.txt").write_text(caption + "\n")
    gallery = Gallery.open(root / "g", tiny_clip_embedder)
    gallery.add(root / "photos", progress=False)
    return gallery


@pytest.fixture(scope="module", params=STORES)
def tiny_store(request, tiny_gallery, tiny_clip_embedder):
    """``tiny_gallery``'s photos in each store (Chroma: ``tiny_gallery`` itself; the in-memory store: indexed
    afresh from the same files), so that a test runs every method on both."""
    if request.param == "chroma":
        return tiny_gallery
    from pictrieve.vectorstore.memory_store import MemoryStore

    store = MemoryStore(tiny_clip_embedder, location="memory:contract")
    store.add(Path(next(iter(tiny_gallery.items())).path).parent, progress=False)
    assert sorted(store.ids()) == sorted(tiny_gallery.ids())
    return store
