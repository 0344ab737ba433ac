"""The trained offline embedder: head file format, training on synthetic features, the CLI, the factory."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from pictrieve.tools.embedders.factory import EMBEDDERS, create_embedder
from pictrieve.tools.embedders.trained import (
    HeadFileError, HeadTraining, ProjectionHead, TrainedEmbedder, caption_recall_at_10, train_head,
)

skimage_data = pytest.importorskip("skimage.data")


def _random_head(rng, n_in=1280, hidden=16, out=384) -> ProjectionHead:
    return ProjectionHead(
        mean=rng.normal(size=n_in).astype(np.float32), std=np.ones(n_in, np.float32),
        w1=rng.normal(size=(hidden, n_in)).astype(np.float32) / 30, b1=np.zeros(hidden, np.float32),
        w2=rng.normal(size=(out, hidden)).astype(np.float32), b2=np.zeros(out, np.float32), meta={"note": "test"},
    )


def test_head_round_trips_through_its_file(tmp_path):
    head = _random_head(np.random.default_rng(0))
    head.save(tmp_path / "h.npz")
    loaded = ProjectionHead.load(tmp_path / "h.npz")
    x = np.random.default_rng(1).normal(size=(3, 1280)).astype(np.float32)
    np.testing.assert_allclose(loaded(x), head(x), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(loaded(x), axis=1), 1.0, rtol=1e-5)
    assert loaded.meta == {"note": "test"}


def test_bad_head_files_give_one_clear_error(tmp_path):
    with pytest.raises(HeadFileError, match="train-embedder"):
        ProjectionHead.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(HeadFileError, match="not a projection head"):
        ProjectionHead.load(tmp_path / "other.npz")


def test_training_learns_a_synthetic_pairing():
    """Captions are a hidden linear map of the features: a trained head must find them, a random one not."""
    rng = np.random.default_rng(0)
    n, d = 400, 64
    features = rng.normal(size=(n, 2, d)).astype(np.float32)
    mixing = rng.normal(size=(d, 384)).astype(np.float32)
    clean = features.mean(1) @ mixing
    captions = clean[:, None, :] + 0.5 * rng.normal(size=(n, 3, 384)).astype(np.float32)
    captions /= np.linalg.norm(captions, axis=-1, keepdims=True)
    train, held = np.arange(300), np.arange(300, 400)
    head, history = train_head(features, captions, train, held, HeadTraining(hidden=64, epochs=15, batch_size=64), progress=False)
    trained = caption_recall_at_10(head(features[held].mean(1)), captions[held])
    chance = caption_recall_at_10(_random_head(rng, n_in=d)(features[held].mean(1)), captions[held])
    assert trained > 0.8 > 0.3 > chance, (trained, chance)
    assert head.meta["held_out_recall@10"] == max(h["held_out_recall@10"] for h in history)


def test_factory_builds_trained_embedder_from_a_head_file(tmp_path):
    _random_head(np.random.default_rng(0)).save(tmp_path / "h.npz")
    assert "trained" in EMBEDDERS.families()
    embedder = create_embedder(f"trained:{tmp_path / 'h.npz'}", device="cpu")
    assert isinstance(embedder, TrainedEmbedder) and embedder.name == f"trained:{tmp_path / 'h.npz'}"
    photo = Image.fromarray(skimage_data.astronaut())
    vectors = embedder.embed_images([photo, photo.transpose(Image.FLIP_LEFT_RIGHT)])
    assert vectors.shape == (2, 384)
    # mirror-averaged: a photo and its mirror image embed alike
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-4)
    assert embedder.embed_texts(["an astronaut"]).shape == (1, 384)


def test_train_embedder_cli_writes_a_usable_head(tmp_path):
    from pictrieve.cli.main import cli

    folder = tmp_path / "photos"
    (folder / "images").mkdir(parents=True)
    names = ["astronaut", "coffee", "chelsea", "rocket", "camera", "horse", "moon", "page", "text", "clock",
             "hubble_deep_field", "immunohistochemistry"]
    lines = []
    for i, name in enumerate(names):
        array = getattr(skimage_data, name)()
        Image.fromarray(array).convert("RGB").resize((96, 96)).save(folder / "images" / f"{name}.jpg")
        lines.append(json.dumps({"image": f"images/{name}.jpg", "captions": [f"a photo of {name}", f"the {name}"]}))
    (folder / "captions.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "head.npz"
    result = CliRunner().invoke(cli, ["train-embedder", str(folder), "--out", str(out), "--epochs", "3", "--held-out", "0.25"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.rindex('{"out"'):].splitlines()[0])
    assert report["embedder"] == f"trained:{out}" and report["epochs_run"] <= 3
    assert ProjectionHead.load(out).meta["held_out_photos"] == 3
