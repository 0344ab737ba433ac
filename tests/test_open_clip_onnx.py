"""open_clip image towers on ONNX Runtime (issue 31): exported at first use with the real exporter, cached by the
model's fingerprint, the same vectors as torch to 1e-4, torch with one warning line when the export cannot be
made, int8 only when asked. The tiny random CLIP of tests/data stands in for ViT-B-32 (same code path)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from helpers import make_photo

pytest.importorskip("onnx", reason="exporting needs the onnx package (pip install 'pictrieve[onnx]')")

from pictrieve.tools.models.embedders import open_clip as open_clip_embedders  # noqa: E402
from pictrieve.tools.models.embedders.factory import create_embedder  # noqa: E402
from pictrieve.tools.models.onnx_runtime import QUANTIZE_ENV, RUNTIME_ENV  # noqa: E402


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("PICTRIEVE_CACHE", str(folder))
    monkeypatch.delenv("PICTRIEVE_ONNX_CACHE", raising=False)  # this cache's own onnx/, not the session's shared one
    monkeypatch.delenv(QUANTIZE_ENV, raising=False)
    return folder


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    from PIL import Image

    folder = tmp_path_factory.mktemp("onnx-clip-photos")
    return [Image.open(make_photo(folder / f"p{i}.png", seed=i, size=(64, 48))).convert("RGB") for i in range(6)]


def exports(cache):
    return sorted((cache / "onnx").glob("*.onnx")) if (cache / "onnx").is_dir() else []


def test_onnx_vectors_equal_torchs_and_the_export_is_reused(cache, tiny_clip_name, photos, monkeypatch, caplog):
    embedder = create_embedder(tiny_clip_name, device="cpu")
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    assert embedder.image_runtime is None
    on_torch = embedder.embed_images(photos)
    monkeypatch.setenv(RUNTIME_ENV, "auto")  # the default on a CPU: ONNX Runtime, as measured
    with caplog.at_level(logging.INFO, logger="pictrieve"):
        on_onnx = embedder.embed_images(photos)
    assert embedder.image_runtime is not None
    np.testing.assert_allclose(on_onnx, on_torch, atol=1e-4, rtol=0)
    [exported] = exports(cache)
    assert exported.name.startswith("open_clip-pictrieve-tiny-clip-image-")
    assert sum("exporting open_clip-pictrieve-tiny-clip-image" in r.getMessage() for r in caplog.records) == 1

    stamp = exported.stat().st_mtime_ns
    caplog.clear()
    again = create_embedder(tiny_clip_name, device="cpu")  # a new model object, as a new process makes
    with caplog.at_level(logging.INFO, logger="pictrieve"):
        np.testing.assert_allclose(again.embed_images(photos), on_torch, atol=1e-4, rtol=0)
    assert not [r for r in caplog.records if "exporting" in r.getMessage()]
    assert exports(cache) == [exported] and exported.stat().st_mtime_ns == stamp


def test_the_fingerprint_follows_the_weights_and_the_architecture(tmp_path):
    fingerprint = open_clip_embedders.image_tower_fingerprint
    for folder, content in (("a", b"weights one"), ("b", b"weights one"), ("c", b"weights two")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "model.bin").write_bytes(content)
    same = fingerprint("ViT-B-32", str(tmp_path / "a" / "model.bin"))
    assert same == fingerprint("ViT-B-32", str(tmp_path / "b" / "model.bin"))  # the content counts, not where
    assert same != fingerprint("ViT-B-32", str(tmp_path / "c" / "model.bin"))
    assert same != fingerprint("ViT-B-16", str(tmp_path / "a" / "model.bin"))
    assert fingerprint("ViT-B-32", "laion2b_s34b_b79k") != fingerprint("ViT-B-32", "openai")
    assert fingerprint("ViT-B-32", None) == fingerprint("ViT-B-32", None)  # seeded random weights


def test_a_gallery_indexed_on_onnx_is_searched_on_torch(cache, tiny_clip_name, tmp_path, monkeypatch):
    from pictrieve.vectorstore.gallery import Gallery

    paths = [make_photo(tmp_path / "photos" / f"p{i}.jpg", seed=10 + i, size=(64, 48)) for i in range(4)]
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    gallery = Gallery.open(tmp_path / "gallery", tiny_clip_name)
    assert gallery.add(paths, progress=False).indexed == 4
    assert gallery.embedder.image_runtime is not None
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    reopened = Gallery.open(tmp_path / "gallery", tiny_clip_name, create=False)
    for path in paths:
        [top] = reopened.search_image(path, k=1)
        assert top.path == str(path.resolve()) and top.score == pytest.approx(1.0, abs=1e-4)


def test_an_export_that_fails_falls_back_to_torch_with_one_line(tmp_path, tiny_clip_name, photos, monkeypatch, caplog):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "onnx").write_text("a file where the ONNX folder should be")
    monkeypatch.setenv("PICTRIEVE_CACHE", str(cache))
    monkeypatch.delenv("PICTRIEVE_ONNX_CACHE", raising=False)
    embedder = create_embedder(tiny_clip_name, device="cpu")
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    on_torch = embedder.embed_images(photos)
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    with caplog.at_level(logging.INFO, logger="pictrieve"):
        fallen_back = embedder.embed_images(photos)
        embedder.embed_images(photos)  # tried once per embedder, said once
    np.testing.assert_array_equal(fallen_back, on_torch)
    assert embedder.image_runtime is None
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "ONNX" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert "running it with torch instead of ONNX Runtime" in message and "\n" not in message
    assert warnings[0].exc_info is None  # one line, no traceback


def test_int8_is_opt_in(cache, tiny_clip_name, photos, monkeypatch):
    embedder = create_embedder(tiny_clip_name, device="cpu")
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    fp32 = embedder.embed_images(photos)
    assert [p.name for p in exports(cache) if "-int8-" in p.name] == []  # not the default
    monkeypatch.setenv(QUANTIZE_ENV, "int8")
    int8 = embedder.embed_images(photos)
    assert len([p for p in exports(cache) if "-int8-" in p.name]) == 1
    assert not np.allclose(int8, fp32, atol=1e-6)  # a different model ran
    assert (int8 * fp32).sum(axis=1).min() > 0.99


def test_a_single_image_never_waits_for_an_export_but_uses_one_that_exists(cache, tiny_clip_name, photos, monkeypatch):
    """A query's one image runs on torch rather than start the one-time export (tens of seconds for ViT-B-32);
    once indexing has exported the tower, a single image runs on it too."""
    embedder = create_embedder(tiny_clip_name, device="cpu")
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    on_torch = embedder.embed_images(photos)
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    np.testing.assert_allclose(embedder.embed_images(photos[:1]), on_torch[:1], atol=1e-4, rtol=0)
    assert exports(cache) == [] and not embedder._towers  # torch ran it; nothing was exported
    embedder.embed_images(photos[:2])  # a batch: exports
    assert len(exports(cache)) == 1
    fresh = create_embedder(tiny_clip_name, device="cpu")
    single = fresh.embed_images(photos[2:3])
    assert fresh._towers  # the existing file was opened for one image
    np.testing.assert_allclose(single, on_torch[2:3], atol=1e-4, rtol=0)


def op_types(path):
    import onnx

    return {node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node}


def test_the_exported_tower_is_fused_by_onnx_runtimes_transformer_optimizer(cache, tiny_clip_name, photos, monkeypatch):
    """Each block's attention, residual + LayerNorm and bias + GELU become one operator each (ViT-B-32: 184 nodes
    instead of 1,546, ``benchmarks/onnx_node_counts.py``), with torch's vectors."""
    embedder = create_embedder(tiny_clip_name, device="cpu")
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    on_torch = embedder.embed_images(photos)
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    np.testing.assert_allclose(embedder.embed_images(photos), on_torch, atol=1e-4, rtol=0)
    [exported] = exports(cache)
    ops = op_types(exported)
    assert {"Attention", "SkipLayerNormalization"} <= ops and "Softmax" not in ops, sorted(ops)
    assert embedder.image_export().fusion.num_heads == 2  # read from the config (tests/data: width 32, head 16)
    assert open_clip_embedders.model_tower_fusion(embedder.model) == embedder.image_export().fusion  # as the model says


def test_an_optimizer_failure_keeps_the_plain_export_with_one_line(cache, tiny_clip_name, photos, monkeypatch, caplog):
    from pictrieve.tools.models.onnx_runtime import TransformerFusion

    monkeypatch.setattr(open_clip_embedders, "tower_fusion", lambda config: TransformerFusion("no-such-model", 2, 32))
    embedder = create_embedder(tiny_clip_name, device="cpu")
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    on_torch = embedder.embed_images(photos)
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    with caplog.at_level(logging.INFO, logger="pictrieve"):
        on_plain = embedder.embed_images(photos)
    assert embedder.image_runtime is not None  # ONNX Runtime runs, on the plain export
    np.testing.assert_allclose(on_plain, on_torch, atol=1e-4, rtol=0)
    [exported] = exports(cache)
    assert "Attention" not in op_types(exported) and "Softmax" in op_types(exported)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "transformer optimizer" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    message = warnings[0].getMessage()
    assert "kept the plain ONNX export" in message and "no-such-model" in message and "\n" not in message
    assert warnings[0].exc_info is None


def test_the_optimizers_prints_stay_off_stdout_but_another_threads_do_not(cache, tiny_clip_name, photos, monkeypatch,
                                                                         capfd):
    """ONNX Runtime's transformer optimizer prints ("Removed N initializers ..."): what it prints is kept off
    stdout (where ``--json`` answers and MCP's stdio go), while what another thread prints meanwhile is not lost,
    and the real stdout is back afterwards. The real optimizer runs; the wrapper around it only prints, from
    its own thread and from another one it waits for, before handing over."""
    import sys
    import threading

    from onnxruntime.transformers import optimizer

    real = optimizer.optimize_model

    def chatty(*args, **kwargs):
        print("the optimizer's own chatter")
        other = threading.Thread(target=lambda: print("another thread's output"))
        other.start()
        other.join()
        return real(*args, **kwargs)

    monkeypatch.setattr(optimizer, "optimize_model", chatty)
    before = sys.stdout
    embedder = create_embedder(tiny_clip_name, device="cpu")
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    embedder.embed_images(photos)
    [exported] = exports(cache)
    assert "Attention" in op_types(exported)  # the optimizer ran (through the wrapper)
    assert sys.stdout is before
    out = capfd.readouterr().out
    assert "another thread's output" in out and "chatter" not in out, out


NEW_PROCESS = """
import json, sys
from PIL import Image
from pictrieve.tools.models.embedders.factory import create_embedder
embedder = create_embedder(sys.argv[1], device="cpu")
vectors = embedder.embed_images([Image.open(path) for path in sys.argv[2:]])
heavy = ("torch", "open_clip", "torchvision")
print(json.dumps({"vectors": vectors.tolist(), "imported": [m for m in heavy if m in sys.modules]}))
"""


def embed_in_a_new_process(name, paths):
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", NEW_PROCESS, name, *map(str, paths)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return np.asarray(answer["vectors"], dtype=np.float32), answer["imported"]


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_once_exported_a_new_process_embeds_images_without_torch(cache, tiny_clip_name, tmp_path, monkeypatch,
                                                                quantize):
    """The exported file carries its input recipe, so a new process (an indexing run, an image query) opens it and
    runs without importing torch, torchvision or open_clip (about 4 s of ViT-B-32's cold start), with the same
    vectors; before any export it still runs torch (and imports it)."""
    from PIL import Image

    paths = [make_photo(tmp_path / "photos" / f"p{i}.jpg", seed=20 + i, size=size)
             for i, size in enumerate([(64, 48), (48, 64), (20, 30)])]
    monkeypatch.setenv(QUANTIZE_ENV, quantize)
    embedder = create_embedder(tiny_clip_name, device="cpu")
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    on_torch = embedder.embed_images([Image.open(p) for p in paths])
    monkeypatch.delenv(RUNTIME_ENV)  # auto: ONNX Runtime on a CPU

    before, imported = embed_in_a_new_process(tiny_clip_name, paths[:1])  # one image: never exports
    assert "torch" in imported and exports(cache) == []
    np.testing.assert_allclose(before, on_torch[:1], atol=1e-4, rtol=0)

    on_onnx = embedder.embed_images([Image.open(p) for p in paths])  # a batch: exports (and quantises)
    assert len(exports(cache)) == (2 if quantize == "int8" else 1)
    vectors, imported = embed_in_a_new_process(tiny_clip_name, paths)
    assert imported == [], imported
    np.testing.assert_allclose(vectors, on_onnx, atol=1e-5, rtol=0)
    if quantize == "none":
        np.testing.assert_allclose(vectors, on_torch, atol=1e-4, rtol=0)


def test_the_last_block_runs_for_the_class_token_alone_with_the_same_vectors(cache, tmp_path, photos, monkeypatch):
    """A tower that pools its class token exports its last block for that token alone (about 6.6% of ViT-B-32's
    work saved); the earlier blocks still fuse, and the vectors are torch's."""
    import json

    import torch

    config = json.loads((Path(__file__).parent / "data" / "pictrieve-tiny-clip.json").read_text())
    config["vision_cfg"]["layers"] = 3
    path = tmp_path / "pictrieve-tiny-clip-3.json"
    path.write_text(json.dumps(config))
    name = f"open_clip:{path}/random"
    embedder = create_embedder(name, device="cpu")
    visual = open_clip_embedders.export_tower(embedder.model).visual
    blocks = list(visual.transformer.resblocks)
    assert [type(b).__name__ for b in blocks] == ["ResidualAttentionBlock"] * 2 + ["_FirstTokenBlock"]
    tokens = torch.randn(4, 5, 32, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        np.testing.assert_allclose(blocks[-1](tokens).numpy(), embedder.model.visual.transformer.resblocks[-1](
            tokens)[:, :1].numpy(), atol=1e-6, rtol=0)

    monkeypatch.setenv(RUNTIME_ENV, "torch")
    on_torch = embedder.embed_images(photos)
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    np.testing.assert_allclose(embedder.embed_images(photos), on_torch, atol=1e-4, rtol=0)
    import onnx

    [exported] = exports(cache)
    nodes = [node.op_type for node in onnx.load(str(exported)).graph.node]
    assert nodes.count("Attention") == 2 and "Softmax" in nodes, nodes  # two fused blocks, one class-token block


def torch_vectors_then_export(cache, name, photos, monkeypatch):
    """``photos``' vectors on torch, then the tower exported (ONNX Runtime on for the rest of the test): the vectors
    and the exported file."""
    embedder = create_embedder(name, device="cpu")
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    on_torch = embedder.embed_images(photos)
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    embedder.embed_images(photos)  # exports
    [exported] = exports(cache)
    return on_torch, exported


def test_an_export_without_a_recipe_builds_the_torch_model_at_once(cache, tiny_clip_name, photos, monkeypatch):
    """Where the transform cannot be reproduced without torch, the exported file keeps no recipe: a new embedder then
    builds the torch model at once, as before (a wrong name or missing weights fail at the start, not per photo),
    and runs open_clip's transform into the exported tower."""
    monkeypatch.setattr(open_clip_embedders, "checked_recipe", lambda model, preprocess, size: None)
    on_torch, exported = torch_vectors_then_export(cache, tiny_clip_name, photos, monkeypatch)
    assert "pixel_recipe" not in exported.with_suffix(".json").read_text()
    reads = []
    real = open_clip_embedders.cached_metadata
    monkeypatch.setattr(open_clip_embedders, "cached_metadata", lambda path: reads.append(path) or real(path))
    again = create_embedder(tiny_clip_name, device="cpu")
    assert again._torch is not None  # built in __init__
    np.testing.assert_allclose(again.embed_images(photos), on_torch, atol=1e-4, rtol=0)
    assert again.image_runtime is not None
    assert len(reads) == 1, reads  # read once, not once per photo: the file exists, so its answer is final


def test_a_damaged_recipe_is_ignored_with_one_line(cache, tiny_clip_name, photos, monkeypatch, caplog):
    on_torch, exported = torch_vectors_then_export(cache, tiny_clip_name, photos, monkeypatch)
    exported.with_suffix(".json").write_text('{"pixel_recipe": "{\\"size\\": \\"big\\"}"}')
    open_clip_embedders._parsed_recipe.cache_clear()
    with caplog.at_level(logging.WARNING, logger="pictrieve"):
        again = create_embedder(tiny_clip_name, device="cpu")
        np.testing.assert_allclose(again.embed_images(photos), on_torch, atol=1e-4, rtol=0)
    assert again._torch is not None
    said = [r.getMessage() for r in caplog.records if "stored open_clip input recipe" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0], said


def test_the_torch_runtime_keeps_open_clips_transform(cache, tiny_clip_name, photos, monkeypatch):
    """With an export (and its recipe) on disk, ``--runtime torch`` still prepares images with open_clip's own
    transform: the torch path is torch as before."""
    import torch

    embedder = create_embedder(tiny_clip_name, device="cpu")
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    embedder.embed_images(photos)  # exports
    assert isinstance(embedder.preprocess(photos[0]), np.ndarray)
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    assert isinstance(embedder.preprocess(photos[0]), torch.Tensor)
