"""The visualizer factory and the offline exemplar visualizer (real MiniLM, real photos)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pictrieve.tools.models.visualizers import (
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
        from helpers import make_photo

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


class SpyEncoder:
    """The real MiniLM, counting what it encodes. ``flip`` makes another encoder (another identity,
    other vectors: each vector negated), as an upgraded model would be."""

    def __init__(self, flip: bool = False):
        from pictrieve.tools.models.sentence_encoder import SentenceEncoder

        self.base, self.flip, self.encoded = SentenceEncoder(), flip, 0
        self.fingerprint = ("flipped/" if flip else "") + self.base.fingerprint

    def encode(self, texts, batch_size=64):
        self.encoded += len(texts)
        vectors = self.base.encode(texts, batch_size=batch_size)
        return -vectors if self.flip else vectors


def test_caption_matrix_is_cached_per_folder_content_and_encoder(tmp_path):
    from pictrieve.tools.models.visualizers import ExemplarVisualizer

    root, cache = _reference(tmp_path), tmp_path / "cache"
    first = SpyEncoder()
    built = ExemplarVisualizer(root, encoder=first, cache_dir=cache, progress=False)
    assert first.encoded == 6 and built.cache_path(cache).is_file()
    again = ExemplarVisualizer(root, encoder=first, cache_dir=cache, progress=False)
    assert first.encoded == 6 and np.array_equal(again.caption_vectors, built.caption_vectors)
    # another encoder never reads this one's vectors
    other = SpyEncoder(flip=True)
    flipped = ExemplarVisualizer(root, encoder=other, cache_dir=cache, progress=False)
    assert other.encoded == 6 and np.allclose(flipped.caption_vectors, -built.caption_vectors)
    # a changed folder (one more caption) is encoded again
    index = root / "captions.jsonl"
    index.write_text(index.read_text().replace('"a plain red square"', '"a plain red square", "a scarlet tile"'))
    changed = ExemplarVisualizer(root, encoder=first, cache_dir=cache, progress=False)
    assert first.encoded == 6 + 7 and changed.caption_vectors.shape == (7, 384)
    assert len(list(cache.glob("captions-*.npy"))) == 3 and not list(cache.glob(".*part"))


def test_a_damaged_cache_file_is_encoded_again_and_replaced(tmp_path):
    from pictrieve.tools.models.visualizers import ExemplarVisualizer

    root, cache = _reference(tmp_path), tmp_path / "cache"
    spy = SpyEncoder()
    good = ExemplarVisualizer(root, encoder=spy, cache_dir=cache, progress=False).caption_vectors
    path = ExemplarVisualizer(root, encoder=spy, cache_dir=cache, progress=False).cache_path(cache)
    path.write_bytes(path.read_bytes()[:100])  # a half-written file, as a killed writer without rename leaves
    rebuilt = ExemplarVisualizer(root, encoder=spy, cache_dir=cache, progress=False)
    assert spy.encoded == 12 and np.array_equal(rebuilt.caption_vectors, good)
    assert np.array_equal(np.load(path), good)


class _StopAfter(Exception):
    """Stands for a person pressing Ctrl-C during a first use."""


class BulkSpy(SpyEncoder):
    """The real MiniLM through its bulk path, counting what it encodes; ``stop_after`` raises once that
    many captions have been encoded, as a stopped first use would."""

    def __init__(self, stop_after: int | None = None):
        super().__init__()
        self.stop_after = stop_after

    def encode_bulk(self, texts, on_batch=None):
        if self.stop_after is not None and self.encoded + len(texts) > self.stop_after:
            raise _StopAfter()
        self.encoded += len(texts)
        return self.base.encode_bulk(texts, batch_size=2, threads=1, on_batch=on_batch)


def test_a_stopped_first_use_resumes_from_its_checkpoints(tmp_path, monkeypatch):
    """A first use stopped part-way keeps its finished checkpoints, never a whole-matrix file; the next
    use encodes only what is left, gets the same matrix as an uninterrupted run, and drops the parts."""
    from pictrieve.tools.models import visualizers
    from pictrieve.tools.models.visualizers import ExemplarVisualizer

    monkeypatch.setattr(visualizers, "CHECKPOINT_CHUNK", 2)
    root, cache = _reference(tmp_path), tmp_path / "cache"
    stopped = BulkSpy(stop_after=4)
    with pytest.raises(_StopAfter):
        ExemplarVisualizer(root, encoder=stopped, cache_dir=cache, progress=False)
    assert stopped.encoded == 4 and not list(cache.glob("captions-*.npy"))
    assert len(list(cache.glob("captions-*.parts/*.npy"))) == 2
    resumed_by = BulkSpy()
    resumed = ExemplarVisualizer(root, encoder=resumed_by, cache_dir=cache, progress=False)
    assert resumed_by.encoded == 2  # only the last checkpoint's captions
    fresh = ExemplarVisualizer(root, encoder=SpyEncoder(), cache_dir=tmp_path / "other", progress=False)
    np.testing.assert_allclose(resumed.caption_vectors, fresh.caption_vectors, atol=1e-5)
    assert resumed.cache_path(cache).is_file() and not list(cache.glob("*.parts"))


def test_bulk_encoding_equals_the_query_encoder():
    """The shared bulk path (batched PyTorch) stores the vectors the numpy query encoder makes."""
    from pictrieve.tools.models.sentence_encoder import SentenceEncoder

    encoder = SentenceEncoder()
    texts = ["a dog", "two children play on a sandy beach next to the sea under a cloudy sky",
             "A man in a red jacket climbs a rock wall .", "x", "a black dog and a brown dog run through grass"] * 3
    calls: list[int] = []
    bulk = encoder.encode_bulk(texts, batch_size=4, threads=2, on_batch=calls.append)
    np.testing.assert_allclose(bulk, encoder.encode(texts), atol=1e-5)
    assert sum(calls) == len(texts) and max(calls) <= 4


class _CountingEncoder:
    """Control flow only: one fixed unit vector per text, and the size of every call."""

    fingerprint = None  # nothing cached on disk

    def __init__(self):
        self.calls: list[int] = []

    def encode(self, texts):
        self.calls.append(len(texts))
        return np.tile(np.eye(1, 8, dtype=np.float32), (len(texts), 1))


def test_first_use_progress_moves_every_few_captions(tmp_path, capfd):
    """The progress bar moves at least every 128 captions: with 1,024 per update, flickr8k-train's first
    use went 18 s between updates on a loaded machine."""
    from pictrieve.tools.models.visualizers import ExemplarVisualizer

    root = tmp_path / "reference"
    root.mkdir()
    rows = [{"image": f"{i}.png", "captions": [f"photo {i} caption {j}" for j in range(100)]} for i in range(6)]
    (root / "captions.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    encoder = _CountingEncoder()
    ExemplarVisualizer(root, encoder=encoder, progress=True)
    assert "600/600" in capfd.readouterr().err  # the bar, updated after each call
    assert sum(encoder.calls) == 600 and max(encoder.calls) <= 128, encoder.calls


def test_first_use_shows_progress_and_a_second_process_reads_the_cache(tmp_path):
    """Two real processes: the first encodes with a progress bar and log lines on stderr, the second
    (same folder, same model) only reads the matrix from disk."""
    import os
    import subprocess
    import sys

    root = _reference(tmp_path)
    child = ("import logging, sys; logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s');"
             "from pictrieve.tools.models.visualizers import create_visualizer;"
             "v = create_visualizer('exemplar:' + sys.argv[1]); print(v.best_matches('a dog in a park', 1)[0][0].name)")
    env = {**os.environ, "PICTRIEVE_CACHE": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", child, str(root)], env=env, capture_output=True, text=True,
                           timeout=300, check=True) for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["dog.png", "dog.png"]
    first, second = runs[0].stderr, runs[1].stderr
    assert "encoding reference captions" in first and "6/6" in first, first  # the tqdm bar
    assert "WARNING encoding the 6 reference captions" in first and "INFO encoded 6 of 6" in first, first
    assert "encoding" not in second and "encoded" not in second, second
    assert len(list((tmp_path / "cache" / "exemplar").glob("captions-*.npy"))) == 1


def test_errors_are_clear(tmp_path, monkeypatch):
    with pytest.raises(UnknownVisualizerError, match="exemplar"):
        create_visualizer("dall-e-9000")
    with pytest.raises(VisualizerUnavailableError, match="could not load the diffusers pipeline"):
        create_visualizer(f"diffusers:{tmp_path / 'no-such-pipeline'}").visualize("a dog")
    with pytest.raises(VisualizerUnavailableError, match="name the pipeline"):
        create_visualizer("diffusers")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(VisualizerUnavailableError, match="OPENAI_API_KEY"):
        create_visualizer("openai:gpt-image-1")
    with pytest.raises(VisualizerUnavailableError, match="captions.jsonl"):
        create_visualizer(f"exemplar:{tmp_path}")
    with pytest.raises(VisualizerUnavailableError, match="reference collection"):
        create_visualizer("exemplar")
    assert "exemplar" in VISUALIZERS.families()


# ---------------------------------------------------------------------- text-to-image backends


@pytest.fixture(scope="module")
def tiny_pipeline_folder(tmp_path_factory):
    """The tiny random Stable Diffusion pipeline saved as a local folder, as a user's model would be."""
    from pictrieve.tools.models.text_to_image import tiny_random_pipeline

    folder = tmp_path_factory.mktemp("tiny-sd")
    tiny_random_pipeline().save_pretrained(folder)
    return folder


def test_tiny_random_runs_the_real_diffusers_code_path_reproducibly():
    visualizer = create_visualizer("tiny-random")
    first = visualizer.visualize("a red kite over a beach", n=2, seed=7)
    again = visualizer.visualize("a red kite over a beach", n=2, seed=7)
    other = visualizer.visualize("a red kite over a beach", n=1, seed=8)
    assert [image.size for image in first] == [(32, 32), (32, 32)] and visualizer.generates
    assert np.array_equal(np.asarray(first[0]), np.asarray(again[0]))
    assert not np.array_equal(np.asarray(first[0]), np.asarray(other[0]))


def test_tiny_random_weights_come_from_the_seed_and_leave_the_callers_generator_alone():
    import torch

    from pictrieve.tools.models.text_to_image import tiny_random_pipeline

    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    first = tiny_random_pipeline(seed=0)
    assert torch.equal(torch.rand(4), expected)  # building it did not reseed the process
    again, other = tiny_random_pipeline(seed=0), tiny_random_pipeline(seed=1)
    weights = [next(p.unet.parameters()).detach() for p in (first, again, other)]
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[0], weights[2])


def test_diffusers_loads_a_local_pipeline_folder_through_autopipeline(tiny_pipeline_folder, tmp_path):
    from pictrieve.tools.models.guide_images import guide_paths

    visualizer = create_visualizer(f"diffusers:{tiny_pipeline_folder}", steps=2, size=32)
    assert type(visualizer.pipeline).__name__ == "StableDiffusionPipeline"
    paths = guide_paths(visualizer, "a dog", 2, seed=1, cache_dir=tmp_path)
    assert len(paths) == 2 and all(Image.open(p).size == (32, 32) for p in paths)
    calls = []
    visualizer.visualize = lambda *a, **k: calls.append(a) or []  # a repeat must come from the disk cache
    assert guide_paths(visualizer, "a dog", 2, seed=1, cache_dir=tmp_path) == paths and not calls


def test_turbo_models_get_few_steps_and_no_guidance():
    from pictrieve.tools.models.text_to_image import DiffusersVisualizer

    turbo = DiffusersVisualizer("stabilityai/sdxl-turbo", pipeline=object())
    assert (turbo.steps, turbo.guidance) == (2, 0.0)
    plain = DiffusersVisualizer("runwayml/stable-diffusion-v1-5", pipeline=object())
    assert (plain.steps, plain.guidance) == (None, None)


def test_openai_images_through_the_real_client_against_a_local_fake():
    from helpers.openai_fake import OpenAIFake

    with OpenAIFake(lambda messages: "") as fake:
        visualizer = create_visualizer("openai:gpt-image-1", base_url=fake.base_url, size="256x256")
        images = visualizer.visualize("a lighthouse at dusk", n=3, seed=1)
        dalle = create_visualizer("openai:dall-e-3", base_url=fake.base_url)
        assert len(dalle.visualize("a lighthouse", n=2)) == 2
    assert len(images) == 3 and all(image.size == (32, 32) for image in images)
    first = fake.requests[0]
    assert first["path"].endswith("/images/generations")
    assert first["body"]["prompt"] == "a lighthouse at dusk" and first["body"]["n"] == 3
    assert first["body"]["size"] == "256x256" and "response_format" not in first["body"]
    # DALL-E 3 makes one picture per call and must be asked for base64.
    assert [r["body"]["n"] for r in fake.requests[1:]] == [1, 1]
    assert fake.requests[1]["body"]["response_format"] == "b64_json"
