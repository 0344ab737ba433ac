"""ONNX Runtime for the image models: exported once and cached, torch's vectors, torch as the fallback.

The offline default's trunk (EfficientNet-Lite0) is exported for real into a temporary cache (once for
the module: about 15-30 s), then: its vectors equal torch's on real photos, a gallery indexed with one
runtime is searched and re-indexed with the other without new vectors, a second process opens the cached
file without importing torch, and exports that fail for real (a cache folder that cannot be made, an
operator the exporter refuses) leave torch running after one warning line.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pictrieve.tools.models.embedders.backbone import trunk_export
from pictrieve.tools.models.embedders.factory import create_embedder
from pictrieve.tools.models.onnx_runtime import (
    ONNX_CACHE_ENV, QUANTIZE_ENV, RUNTIME_ENV, OnnxExport, RuntimeSettingError, choose_runtime, requested_quantization,
    try_onnx_model,
)

pytest.importorskip("onnx", reason="exporting needs the onnx package (pip install 'pictrieve[onnx]')")
skimage_data = pytest.importorskip("skimage.data")

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "camera", "immunohistochemistry")


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory):
    """A cache of its own holding the exported trunk (exported here, for real, once)."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PICTRIEVE_CACHE", str(cache))
        patch.delenv(ONNX_CACHE_ENV, raising=False)  # not the session's shared folder: this module exports
        model = try_onnx_model(trunk_export())
    assert model is not None, "the trunk could not be exported"
    return cache


@pytest.fixture(autouse=True)
def own_cache(monkeypatch):
    """Every test here names its own cache folder; the session's shared ONNX folder is not used."""
    monkeypatch.delenv(ONNX_CACHE_ENV, raising=False)


@pytest.fixture
def in_cache(onnx_cache, monkeypatch):
    monkeypatch.setenv("PICTRIEVE_CACHE", str(onnx_cache))
    return onnx_cache


@pytest.fixture(scope="module")
def photos() -> list[Image.Image]:
    return [Image.fromarray(getattr(skimage_data, name)()).convert("RGB") for name in PHOTOS]


@pytest.fixture(scope="module")
def photo_dir(photos, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("real-photos")
    for name, photo in zip(PHOTOS, photos):
        photo.save(folder / f"{name}.jpg", quality=92)
    return folder


def test_settings_are_checked_and_auto_follows_the_measurement(monkeypatch):
    monkeypatch.delenv(RUNTIME_ENV, raising=False)
    monkeypatch.delenv(QUANTIZE_ENV, raising=False)
    assert choose_runtime("onnx", "cpu") == "onnx" and choose_runtime("torch", "cpu") == "torch"
    assert choose_runtime("onnx", "cuda:0") == "torch"  # ONNX Runtime runs on the CPU here
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    assert choose_runtime("onnx", "cpu") == "torch"
    assert choose_runtime("torch", "cpu", requested="onnx") == "onnx"
    monkeypatch.setenv(RUNTIME_ENV, "tensorflow")
    with pytest.raises(RuntimeSettingError, match="choose one of auto, torch, onnx"):
        choose_runtime("onnx", "cpu")
    assert requested_quantization() is None and requested_quantization(default="int8") == "int8"
    monkeypatch.setenv(QUANTIZE_ENV, "int8")
    assert requested_quantization() == "int8"
    monkeypatch.setenv(QUANTIZE_ENV, "int4")
    with pytest.raises(RuntimeSettingError, match="unknown quantization 'int4'"):
        requested_quantization()


def test_offline_vectors_equal_torchs_on_real_photos(in_cache, photos, monkeypatch):
    embedder = create_embedder("offline", device="cpu")
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    assert embedder.trunk_runtime is not None
    on_onnx = embedder.embed_images(photos)
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    assert embedder.trunk_runtime is None
    on_torch = embedder.embed_images(photos)
    assert on_onnx.shape == (len(photos), 384)
    np.testing.assert_allclose(on_onnx, on_torch, atol=1e-4, rtol=0)
    monkeypatch.delenv(RUNTIME_ENV)
    assert embedder.trunk_runtime is not None  # auto on a CPU: ONNX Runtime, as measured


@pytest.mark.parametrize("name", ["efficientnet-lite0", "offline-labels"])
def test_the_other_efficientnet_embedders_run_the_trunk_on_onnx_too(name, in_cache, photos, monkeypatch):
    """`tile` with efficientnet-lite0 and offline-labels spent half its time in the torch trunk: on a CPU they now
    run it where the offline default does, with torch's vectors, and never call the torch model."""
    from pictrieve.tools.models.embedders import backbone

    embedder = create_embedder(name, device="cpu")
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    on_torch = embedder.embed_images(photos)
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    monkeypatch.setattr(backbone, "pooled_features_and_logits",
                        lambda *a: pytest.fail("the torch trunk ran while ONNX Runtime was chosen"))
    monkeypatch.setattr(type(embedder.classifier), "logits",
                        lambda *a: pytest.fail("the torch classifier ran while ONNX Runtime was chosen"))
    on_onnx = embedder.embed_images(photos)
    assert on_onnx.shape == on_torch.shape == (len(photos), embedder.dim)
    np.testing.assert_allclose(on_onnx, on_torch, atol=1e-4, rtol=0)


def test_a_gallery_indexed_with_one_runtime_is_searched_and_updated_with_the_other(in_cache, photo_dir, monkeypatch):
    from pictrieve.vectorstore.gallery import Gallery

    location = in_cache.parent / "runtime-gallery"
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    report = Gallery.open(location, "offline").add([str(photo_dir)], progress=False)
    assert report.indexed == len(PHOTOS)
    monkeypatch.setenv(RUNTIME_ENV, "torch")
    store = Gallery.open(location, create=False)
    assert store.embedder.trunk_runtime is None
    for name in PHOTOS:  # each photo, embedded by torch, finds its ONNX-made vector first, at cosine ~1
        best = store.search_image(photo_dir / f"{name}.jpg", k=1)[0]
        assert Path(best.path).name == f"{name}.jpg" and best.score > 0.9999, (name, best)
    again = Gallery.open(location, create=False).add([str(photo_dir)], progress=False)
    assert (again.indexed, again.unchanged) == (0, len(PHOTOS))  # nothing re-indexed for the other runtime


def test_a_second_process_opens_the_cached_file_without_exporting(in_cache):
    files = sorted((in_cache / "onnx").glob("*.onnx"))
    assert len(files) == 1
    stamp = files[0].stat().st_mtime_ns
    code = (
        "import sys, numpy as np\n"
        "from pictrieve.tools.models.embedders.backbone import trunk_export\n"
        "from pictrieve.tools.models.onnx_runtime import onnx_model\n"
        "features, logits = onnx_model(trunk_export()).run(np.zeros((1, 3, 224, 224), np.float32))\n"
        "print(features.shape, logits.shape, 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PICTRIEVE_CACHE": str(in_cache)})  # own_cache unset the shared folder
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(1,", "1280)", "(1,", "1000)", "False"]  # torch never imported: no export
    assert files[0].stat().st_mtime_ns == stamp and sorted((in_cache / "onnx").glob("*")) == files


def _one_warning(caplog) -> str:
    """The one line that says torch runs instead (beside, at most, the notice that an export began)."""
    records = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("pictrieve")
               and "to ONNX Runtime once" not in r.getMessage()]
    assert len(records) == 1, [r.getMessage() for r in records]
    message = records[0].getMessage()
    assert "\n" not in message and "Traceback" not in message and "torch instead of ONNX Runtime" in message
    return message


def test_an_unwritable_cache_falls_back_to_torch_with_one_line(tmp_path, photos, monkeypatch, caplog):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "onnx").write_text("a file where the ONNX folder should be")
    monkeypatch.setenv("PICTRIEVE_CACHE", str(cache))
    monkeypatch.setenv(RUNTIME_ENV, "onnx")
    from pictrieve.tools.core.model_cache import forget_shared_models

    forget_shared_models(lambda key: key[0] == "efficientnet-lite0-trunk-onnx")
    embedder = create_embedder("offline", device="cpu")
    with caplog.at_level(logging.WARNING):
        assert embedder.trunk_runtime is None
        vectors = embedder.embed_images(photos[:2])
        embedder.embed_images(photos[2:3])  # no second line for the same model
    assert "cannot create the ONNX cache folder" in _one_warning(caplog)
    assert vectors.shape == (2, 384)
    forget_shared_models(lambda key: key[0] == "efficientnet-lite0-trunk-onnx")


def _svd_module():
    import torch

    class Refused(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.linalg.svd(x)[1]  # no ONNX operator for it: the exporter refuses

    return Refused()


def test_a_module_the_exporter_refuses_falls_back_with_one_line(tmp_path, monkeypatch, caplog, capfd):
    import torch

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path))
    export = OnnxExport(name="refused-svd", fingerprint="test", build=_svd_module,
                        example_inputs=lambda: (torch.ones(2, 3, 3),), input_names=("x",), output_names=("s",))
    with caplog.at_level(logging.WARNING):
        assert try_onnx_model(export) is None
    assert "torch.onnx.export refused refused-svd" in _one_warning(caplog)
    assert not list((tmp_path / "onnx").iterdir())  # no half-written file left behind
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "graph" not in out  # stdout carries --json and MCP's stdio protocol


def test_a_small_module_round_trips_with_its_outputs(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path))

    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.GELU())

    export = OnnxExport(name="tiny", fingerprint="seed0", build=build, example_inputs=lambda: (torch.randn(3, 5),),
                        input_names=("x",), output_names=("y",))
    model = try_onnx_model(export, threads=1)
    x = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)  # another batch size than the example
    with torch.inference_mode():
        expected = build()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model.run(x)[0], expected, atol=1e-5)
    assert export.path().is_file() and export.path().parent == tmp_path / "onnx"
    other = OnnxExport(name="tiny", fingerprint="seed1", build=build, example_inputs=export.example_inputs,
                       input_names=("x",), output_names=("y",))
    assert other.path() != export.path() and export.path("int8") != export.path()  # keyed by fingerprint and settings
    monkeypatch.setenv(ONNX_CACHE_ENV, str(tmp_path / "shared"))  # one folder for processes with other caches
    assert export.path() == tmp_path / "shared" / export.path().name


def test_any_export_failure_falls_back_with_one_line(tmp_path, monkeypatch, caplog):
    """Not only the exporter's own refusals: a module that cannot even be built (a missing weights file, a bug)
    leaves torch running too, after one line, instead of failing the index."""
    import torch

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path))

    def build():
        raise FileNotFoundError(2, "No such file or directory", "weights.pt")

    export = OnnxExport(name="unbuildable", fingerprint="test", build=build,
                        example_inputs=lambda: (torch.ones(1, 3),), input_names=("x",), output_names=("y",))
    with caplog.at_level(logging.WARNING):
        assert try_onnx_model(export) is None
    assert "weights.pt" in _one_warning(caplog)
    assert not export.path().exists()


def test_an_export_whose_difference_from_torch_is_nan_is_refused_and_not_cached(tmp_path, monkeypatch, caplog):
    """NaN compares false with everything: a check written ``difference > atol`` would let it through."""
    import torch

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path))

    class LogOfNegative(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.log(x - 10.0)  # NaN from torch and from ONNX Runtime alike: no difference measured

    export = OnnxExport(name="nan-out", fingerprint="test", build=LogOfNegative,
                        example_inputs=lambda: (torch.ones(2, 3),), input_names=("x",), output_names=("y",))
    with caplog.at_level(logging.WARNING):
        assert try_onnx_model(export) is None
    assert "differs from torch by nan" in _one_warning(caplog)
    assert not export.path().exists() and not list((tmp_path / "onnx").iterdir())


def test_the_int8_file_is_keyed_by_the_onnxruntime_version(monkeypatch):
    """A quantised file is made by ONNX Runtime's quantiser: another version must not read a stale one. The plain
    export (no fusion) is ONNX Runtime's input only, so its key does not follow that version."""
    import pictrieve.tools.models.onnx_runtime as onnx_runtime

    export = OnnxExport(name="tiny", fingerprint="test", build=lambda: None, example_inputs=lambda: (),
                        input_names=("x",), output_names=("y",))
    keys = {}
    for version in ("1.20.0", "1.21.0"):
        monkeypatch.setattr(onnx_runtime, "package_version", lambda name, v=version: v if name == "onnxruntime" else "2.0")
        keys[version] = (export.key(), export.key("int8"))
    assert keys["1.20.0"][0] == keys["1.21.0"][0]
    assert keys["1.20.0"][1] != keys["1.21.0"][1]
