from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pictrieve.tools.models.embedders.base import Embedder
from pictrieve.tools.models.embedders.factory import UnknownEmbedderError, create_embedder
from pictrieve.tools.models.embedders.open_clip import parse_open_clip_spec


def test_unknown_embedder_names_the_known_families():
    with pytest.raises(UnknownEmbedderError, match="known: .*open_clip"):
        create_embedder("clipz:ViT")


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("ViT-B-32/laion2b_s34b_b79k", ("ViT-B-32", "laion2b_s34b_b79k")),
        ("ViT-B-32//ckpt/model.bin", ("ViT-B-32", "/ckpt/model.bin")),
        ("ViT-B-32", ("ViT-B-32", None)),
        ("/cfg/tiny.json/random", ("/cfg/tiny.json", "random")),
        ("hf-hub:laion/CLIP-ViT-B-32", ("hf-hub:laion/CLIP-ViT-B-32", None)),
    ],
)
def test_open_clip_spec_parsing(spec, expected):
    assert parse_open_clip_spec(spec) == expected


def test_tiny_open_clip_follows_the_protocol(tiny_clip_embedder, tiny_clip_name):
    embedder = tiny_clip_embedder
    assert isinstance(embedder, Embedder)
    assert embedder.name == tiny_clip_name and embedder.dim == 32
    images = [Image.new("RGB", (50, 30), "red"), Image.new("L", (20, 20), 128)]
    vectors = embedder.embed_images(images)
    texts = embedder.embed_texts(["a dog", "a cat", "a bird"])
    assert vectors.shape == (2, 32) and texts.shape == (3, 32)
    assert vectors.dtype == np.float32 and texts.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(texts, axis=1), 1.0, atol=1e-5)
    # preprocess + embed_preprocessed is the same computation the indexer uses
    np.testing.assert_allclose(
        embedder.embed_preprocessed([embedder.preprocess(im) for im in images]), vectors, atol=1e-5
    )


def test_embed_texts_rejects_a_bare_string(tiny_clip_embedder):
    with pytest.raises(TypeError, match="list of strings"):
        tiny_clip_embedder.embed_texts("a dog")


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        create_embedder(f"open_clip:{tmp_path}/nothing.json/random")


def test_model_configs_are_read_as_open_clip_reads_them(tiny_clip_name):
    """The open_clip embedder reads an architecture's config from its JSON file without importing open_clip (the key
    of a cached export is computed from it before any torch): the same dict open_clip gives, for every built-in
    architecture and for a config file."""
    open_clip = pytest.importorskip("open_clip")
    from pictrieve.tools.models.embedders.open_clip import model_config

    shipped = Path(open_clip.__file__).parent / "model_configs"  # list_models() also holds configs tests registered
    names = sorted(path.stem for path in shipped.glob("*.json"))
    assert len(names) > 50
    for name in names:
        assert model_config(name) == open_clip.get_model_config(name), name
    assert model_config("no-such-architecture") is None and model_config("hf-hub:org/repo") is None
    config_file = tiny_clip_name.split(":", 1)[1].rsplit("/", 1)[0]
    open_clip.add_model_config(config_file)
    assert model_config(config_file) == open_clip.get_model_config("pictrieve-tiny-clip")
