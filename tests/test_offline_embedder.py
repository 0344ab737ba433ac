"""The label-bridge embedder ``offline-labels`` (the offline default until the trained head) and its parts:
real packaged weights, real photos, no network."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from PIL import Image

from pictrieve.evaluation.retrieval import retrieval_metrics
from pictrieve.tools.core.model_cache import forget_shared_models, is_shared
from pictrieve.tools.models.embedders.base import Embedder
from pictrieve.tools.models.embedders.factory import create_embedder
from pictrieve.tools.models.embedders.offline import (
    OfflineEmbedder, class_embeddings_cache_path, count_phrase, objects_in_tile)
from pictrieve.tools.models.protocols import Detection
from conftest import USER_CACHE  # only read (already-fetched detector files); tests cache under tmp
from pictrieve.tools.core.pypi_assets import SSD_MOBILENET_V2_COCO, cache_root

skimage_data = pytest.importorskip("skimage.data")


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    """This module caches (class embeddings, the detector) in a temporary folder, never the home.

    Detector files already fetched into the user's cache are linked in, read-only, so the detector
    tests run where it was fetched once, and skip elsewhere: tests never download.
    """
    cache = tmp_path_factory.mktemp("pictrieve-cache")
    fetched = USER_CACHE / SSD_MOBILENET_V2_COCO.key
    if fetched.is_dir():
        (cache / SSD_MOBILENET_V2_COCO.key).symlink_to(fetched)
    patch = pytest.MonkeyPatch()
    patch.setenv("PICTRIEVE_CACHE", str(cache))
    forget_shared_models(lambda key: key[0].startswith("offline-"))
    yield cache
    patch.undo()
    forget_shared_models(lambda key: key[0].startswith("offline-"))


def _photo(name: str) -> Image.Image:
    """A scikit-image sample photo (these ship inside the wheel: no download)."""
    return Image.fromarray(getattr(skimage_data, name)()).convert("RGB")


@pytest.fixture(scope="module")
def offline() -> OfflineEmbedder:
    return create_embedder("offline-labels", device="cpu")


@pytest.fixture(scope="module")
def offline_detect(detector_cached) -> OfflineEmbedder:
    return create_embedder("offline-labels:detect", device="cpu")


@pytest.fixture(scope="module")
def photos() -> dict[str, Image.Image]:
    return {"cat": _photo("chelsea"), "coffee": _photo("coffee"), "rocket": _photo("rocket")}


def test_label_embedder_follows_the_protocol(offline, photos):
    assert isinstance(offline, Embedder)
    assert offline.name == "offline-labels" and offline.dim == 384
    assert create_embedder(offline.name).name == "offline-labels"
    images = offline.embed_images(list(photos.values()))
    texts = offline.embed_texts(["a cat", "coffee", "a rocket", "a dog on the beach"])
    for vectors, rows in ((images, 3), (texts, 4)):
        assert vectors.shape == (rows, 384) and vectors.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert offline.embed_images([]).shape == (0, 384)
    with pytest.raises(TypeError):
        offline.embed_texts("a single string")


def test_photos_match_their_own_description(offline, photos):
    texts = ["a photo of a cat", "a cup of coffee", "a rocket launch"]
    similarity = offline.embed_texts(texts) @ offline.embed_images(list(photos.values())).T
    # each text prefers its own photo, and each photo its own text
    assert (similarity.argmax(axis=1) == [0, 1, 2]).all(), similarity
    assert (similarity.argmax(axis=0) == [0, 1, 2]).all(), similarity
    cat_vs_unrelated = offline.embed_texts(["a cat", "a red sports car"]) @ offline.embed_images([photos["cat"]]).T
    assert cat_vs_unrelated[0, 0] > cat_vs_unrelated[1, 0] + 0.2


def test_describe_says_what_the_classifier_sees(offline, photos):
    assert "cat" in offline.describe(photos["cat"]).lower()
    assert "espresso" in offline.describe(photos["coffee"]).lower()
    top = offline.analyze(photos["cat"]).classes
    assert len(top) == 5 and "cat" in top[0][0].lower()
    assert [p for _, p in top] == sorted((p for _, p in top), reverse=True)


def test_preprocess_is_thread_safe_and_deterministic(offline, photos):
    images = [photos["cat"], photos["coffee"]] * 4
    serial = [offline.preprocess(im).crops for im in images]
    with ThreadPoolExecutor(4) as pool:
        threaded = [p.crops for p in pool.map(offline.preprocess, images)]
    for a, b in zip(serial, threaded):
        assert torch.equal(a, b)
    batched = offline.embed_images(images)
    np.testing.assert_allclose(batched[0], batched[2], atol=1e-5)


def test_the_shipped_class_matrix_equals_what_the_code_computes(private_cache, monkeypatch):
    """The package's class-embeddings.npz is the default template's matrix for today's MiniLM and class
    names (else: run ``write_packaged_class_embeddings()``), and loading it encodes nothing."""
    import pictrieve.tools.models.embedders.offline as offline_module

    template = offline_module.OfflineRecipe().class_template
    shipped = offline_module._packaged_class_embeddings(template)
    assert shipped is not None, "class-embeddings.npz is stale: run write_packaged_class_embeddings()"
    np.testing.assert_allclose(shipped, offline_module.compute_class_embeddings(template, progress=False), atol=1e-5)
    forget_shared_models(lambda key: key[0].startswith("offline-"))
    monkeypatch.setattr(offline_module, "compute_class_embeddings", lambda *a, **k: pytest.fail("re-encoded"))
    np.testing.assert_array_equal(OfflineEmbedder(device="cpu").class_embeddings, shipped)
    assert not class_embeddings_cache_path(template).is_file()  # nothing written at first use


def test_class_embeddings_are_cached_on_disk_by_model_content(offline, private_cache, monkeypatch):
    import pictrieve.tools.models.embedders.offline as offline_module

    template = offline.recipe.class_template
    path = class_embeddings_cache_path(template)
    # Without the shipped matrix (another template, model or name list), it is computed and cached.
    monkeypatch.setattr(offline_module, "PACKAGED_CLASS_EMBEDDINGS", private_cache / "no-such.npz")
    forget_shared_models(lambda key: key[0].startswith("offline-"))
    computed = OfflineEmbedder(device="cpu").class_embeddings
    assert path.is_file() and path.is_relative_to(private_cache)
    # A new process (here: an empty model cache) reads the file instead of encoding 1,000 names.
    forget_shared_models(lambda key: key[0].startswith("offline-"))
    monkeypatch.setattr(type(offline.encoder), "encode_bulk", lambda *a, **k: pytest.fail("re-encoded"))
    np.testing.assert_array_equal(OfflineEmbedder(device="cpu").class_embeddings, computed)
    # A damaged file is recomputed, not trusted.
    monkeypatch.undo()
    monkeypatch.setenv("PICTRIEVE_CACHE", str(private_cache))
    monkeypatch.setattr(offline_module, "PACKAGED_CLASS_EMBEDDINGS", private_cache / "no-such.npz")
    path.write_bytes(b"not an array")
    forget_shared_models(lambda key: key[0].startswith("offline-"))
    np.testing.assert_allclose(OfflineEmbedder(device="cpu").class_embeddings, computed, atol=1e-5)
    assert np.load(path).shape == (1000, 384)
    # The key follows the sentence model's file content and the template.
    assert class_embeddings_cache_path("a picture of a {}.") != path
    from pictrieve.tools.models.sentence_encoder import minilm_model_dir

    copy = private_cache / "minilm-copy"
    copy.mkdir()
    for item in minilm_model_dir().iterdir():
        (copy / item.name).symlink_to(item)
    (copy / "README.md").unlink()
    (copy / "README.md").write_text("changed")
    monkeypatch.setattr(offline_module, "minilm_model_dir", lambda: copy)
    assert class_embeddings_cache_path(template) != path


def test_text_search_loads_no_vision_model(private_cache):
    """A text query needs only the sentence encoder: the vision side loads on first image."""
    from pictrieve.tools.models.embedders.backbone import TRUNK_QUANTIZE
    from pictrieve.tools.models.onnx_runtime import requested_quantization

    forget_shared_models(lambda key: key[0] in ("imagenet-classifier", "ssd-mobilenet-v2-coco",
                                                "efficientnet-lite0-trunk-onnx") or key[0].startswith("offline-"))
    trunk = [("imagenet-classifier", "cpu"),  # on torch, or on ONNX Runtime (the default on a CPU)
             ("efficientnet-lite0-trunk-onnx", requested_quantization(default=TRUNK_QUANTIZE))]
    embedder = create_embedder("offline-labels", device="cpu")
    assert embedder.embed_texts(["a dog"]).shape == (1, 384)
    assert not any(is_shared(key) for key in trunk)
    assert not is_shared(("offline-class-embeddings", embedder.recipe.class_template))
    embedder.embed_images([Image.new("RGB", (40, 30), "red")])
    assert any(is_shared(key) for key in trunk)  # the trunk on the runtime chosen here


def test_unknown_variant_names_the_known_ones():
    with pytest.raises(ValueError, match="offline-labels:detect"):
        create_embedder("offline-labels:nonsense")


def test_count_phrase_counts_and_orders():
    assert count_phrase(["person", "dog", "person"]) == "two people, a dog"
    assert count_phrase(["person"] * 7) == "a group of people"
    assert count_phrase(["elephant", "sports ball"]) == "an elephant, a ball"
    assert count_phrase([]) == ""


def test_detect_variant_sees_objects(offline_detect, photos):
    assert create_embedder(offline_detect.name).name == "offline-labels:detect"
    analysis = offline_detect.analyze(photos["cat"])
    cat = next(d for d in analysis.objects if d.label == "cat")
    assert cat.box[2] > 0.5 * photos["cat"].width  # boxes are in pixels, not 0..1
    assert "objects: a cat" in analysis.text()
    vectors = offline_detect.embed_images([photos["cat"], photos["coffee"]])
    assert vectors.shape == (2, 384)
    similarity = offline_detect.embed_texts(["a cat", "a cup of coffee"]) @ vectors.T
    assert similarity[0, 0] > similarity[0, 1] and similarity[1, 1] > similarity[1, 0]


def test_object_detector_boxes_are_in_image_pixels(offline_detect, photos):
    detector = offline_detect.detector
    image = photos["cat"]
    detections = detector.detect(image, min_score=0.5)
    assert detections and detections[0].label == "cat" and detections[0].score >= 0.5
    x0, y0, x1, y1 = detections[0].box
    assert 0 <= x0 < x1 <= image.width and 0 <= y0 < y1 <= image.height
    assert x1 - x0 > image.width / 2  # the cat fills most of the frame


def test_an_object_belongs_to_the_tiles_holding_most_of_it_or_that_it_fills():
    person = Detection("person", 0.9, (0.0, 0.0, 100.0, 200.0))  # the left half of a 200x200 photo
    ball = Detection("sports ball", 0.8, (90.0, 90.0, 130.0, 110.0))  # 3/4 of it right of x = 100
    left, right = (0, 0, 100, 200), (100, 0, 200, 200)
    assert objects_in_tile([person, ball], left) == [person]
    assert objects_in_tile([person, ball], right) == [ball]
    assert objects_in_tile([person], (0, 0, 100, 100)) == [person]  # half of it, and it fills the tile
    assert objects_in_tile([ball], (0, 0, 50, 50)) == []


def test_tiles_of_several_photos_share_one_detector_pass(offline_detect, photos, monkeypatch):
    """Issue 40: `tile` ran the SSD detector once per tile (most of its time); now once per photo, for every
    photo of a call at once, and each tile's vector is its own crops' with the photo's objects that lie in it."""
    from dataclasses import replace

    detector = offline_detect.detector
    calls: list[int] = []
    real = detector.detect_preprocessed

    def counting(arrays, min_score=0.5):
        calls.append(len(arrays))
        return real(arrays, min_score)

    cat, coffee = photos["cat"], photos["coffee"]
    cat_tiles = [(0, 0, cat.width // 2, cat.height), (cat.width // 2, 0, cat.width, cat.height)]
    coffee_tiles = [(0, 0, coffee.width, coffee.height // 2)]
    found = {name: detector.detect(photos[name], min_score=offline_detect.recipe.detector_min_score)
             for name in ("cat", "coffee")}
    monkeypatch.setattr(detector, "detect_preprocessed", counting)
    prepared = offline_detect.preprocess_tiles([(cat, cat_tiles), (coffee, coffee_tiles)])
    vectors = offline_detect.embed_preprocessed([item for tiles in prepared for item in tiles])
    assert calls == [2] and [len(tiles) for tiles in prepared] == [2, 1]
    expected = [replace(offline_detect.preprocess(photos[name].crop(box)), detector_pixels=None,
                        objects=objects_in_tile(found[name], box))
                for name, boxes in (("cat", cat_tiles), ("coffee", coffee_tiles)) for box in boxes]
    assert calls == [2]
    np.testing.assert_allclose(vectors, offline_detect.embed_preprocessed(expected), atol=1e-5)
    assert calls == [2]  # inputs that carry their objects are not detected again
    assert any(d.label == "cat" for item in expected for d in item.objects)


@pytest.mark.slow
def test_offline_labels_retrieves_flickr8k_captions(offline, flickr_dir):
    """Caption -> image on 500 photos / 2,500 captions with tie-aware ranks (measured 0.42)."""
    records = [json.loads(line) for line in (flickr_dir / "captions.jsonl").read_text().splitlines() if line]
    images = offline.embed_images([Image.open(flickr_dir / r["image"]).convert("RGB") for r in records])
    captions = [c for r in records for c in r["captions"]]
    targets = np.array([i for i, r in enumerate(records) for _ in r["captions"]])
    metrics = retrieval_metrics(offline.embed_texts(captions) @ images.T, targets)
    assert metrics["queries"] == 2500
    assert metrics["recall@10"] >= 0.35, metrics


def test_sentence_encoder_pads_without_changing_vectors():
    """A text's vector is the same alone and in a batch padded to a much longer text."""
    from pictrieve.tools.models.sentence_encoder import SentenceEncoder

    encoder = SentenceEncoder()
    short = "a dog runs on the grass"
    alone = encoder.encode([short])
    batched = encoder.encode(["two children play on the sandy beach near the blue ocean " * 5, short], batch_size=2)
    np.testing.assert_allclose(batched[1], alone[0], atol=2e-6)
    vectors = encoder.encode(["a dog runs on the grass", "a puppy running in a field", "stock market report"])
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_sentence_encoder_equals_sentence_transformers():
    """The numpy MiniLM gives sentence-transformers' vectors (float32 rounding), long texts too."""
    from sentence_transformers import SentenceTransformer

    from pictrieve.tools.models.sentence_encoder import SentenceEncoder, minilm_model_dir

    texts = ["a dog running on grass", "A photo of a golden retriever.", "x", "Über café naïve",
             "two children play on the sandy beach near the ocean while a man watches", "word " * 400]
    reference = SentenceTransformer(str(minilm_model_dir()), device="cpu", local_files_only=True)
    expected = reference.encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(SentenceEncoder().encode(texts, batch_size=4), expected, atol=1e-5)
