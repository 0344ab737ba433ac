"""benchmarks/open_clip_runtimes.py, briefly, with the tiny random CLIP: every arm runs through pictrieve's own
embedder switched by the environment, the fp32 export matches torch, and int8 is a different model."""

from __future__ import annotations

import pytest

from helpers import make_photo
from helpers.benchmark_scripts import benchmark_script

pytest.importorskip("onnx", reason="exporting needs the onnx package (pip install 'pictrieve[onnx]')")

open_clip_runtimes = benchmark_script("open_clip_runtimes")


def test_the_five_arms_run_interleaved_and_are_compared_with_torch(tmp_path, tiny_clip_name, monkeypatch):
    for i in range(4):
        make_photo(tmp_path / "photos" / f"p{i}.jpg", seed=i, size=(64, 48))
    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PICTRIEVE_ONNX_CACHE", raising=False)  # the exports land in this cache's onnx/
    for name in ("PICTRIEVE_RUNTIME", "PICTRIEVE_QUANTIZE", "OMP_NUM_THREADS"):
        monkeypatch.setenv(name, "")  # the script sets them; monkeypatch puts them back
    results = open_clip_runtimes.main([str(tmp_path / "photos"), "--model", tiny_clip_name, "--batch", "2",
                                       "--rounds", "2", "--threads", "1", "--workers", "1"])
    arms = ["torch", "onnx-fp32", "onnx-int8", "onnx-fp32-unfused", "onnx-fp32-all-tokens"]
    for mode in ("model_images_per_s", "index_images_per_s"):
        assert sorted(results[mode]) == sorted(arms) and all(rate > 0 for rate in results[mode].values())
    prepare = results["prepare"]
    assert prepare["onnx-fp32"]["max_abs_diff_vs_torch"] <= 1e-4
    assert prepare["onnx-fp32-unfused"]["max_abs_diff_vs_torch"] <= 1e-4
    assert prepare["onnx-fp32-all-tokens"]["max_abs_diff_vs_torch"] <= 1e-4
    files = prepare["files"]  # each fp32 arm ran its own file: pictrieve's, the plain export, every token's
    assert "-unfused-" in files["onnx-fp32-unfused"] and "-unfused-" not in files["onnx-fp32"]
    assert "-all-tokens-" in files["onnx-fp32-all-tokens"] and "-all-tokens-" not in files["onnx-fp32"]
    assert "-int8-" in files["onnx-int8"]
    assert prepare["onnx-int8"]["max_abs_diff_vs_torch"] > 1e-5  # the quantised model ran, not the fp32 one
    assert prepare["onnx-int8"]["min_cosine_vs_torch"] > 0.99
    files = sorted(p.name.split("-")[-2] == "int8" for p in (tmp_path / "cache" / "onnx").glob("*.onnx"))
    assert files == [False, False, False, True]  # fused fp32, unfused fp32, all-tokens fp32, int8
