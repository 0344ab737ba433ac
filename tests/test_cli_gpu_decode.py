"""``pictrieve index --gpu-decode``: the flag for decoding JPEGs on the GPU (issue 40), refused where no GPU decodes.

This machine has no GPU, so the flag's refusals are tested for real (a subprocess, one line, nothing written), and
that it reaches the models (the variable they read as they load, ``PICTRIEVE_GPU_DECODE``) with the CUDA check
stood in for. What a model does with it on the CPU is ``test_device_pixels.py``'s.
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from helpers import make_photo
from helpers.cli import one_clear_line, run
from pictrieve.tools.core import devices
from pictrieve.tools.core.devices import GPU_DECODE_ENV, DeviceUnavailableError


def test_gpu_decode_is_refused_in_one_line_without_cuda(tmp_path):
    make_photo(tmp_path / "photos" / "a.jpg", seed=1)
    done = run("index", str(tmp_path / "photos"), "--gallery", str(tmp_path / "g"), "--gpu-decode")
    assert done.returncode == 2, done.stderr
    line = one_clear_line(done)
    assert "--gpu-decode needs a CUDA GPU" in line and "leave it out" in line, line
    assert not (tmp_path / "g").exists()  # refused before anything is loaded or written


def test_gpu_decode_with_ray_asks_for_gpu_workers(tmp_path):
    from pictrieve.cli.main import cli

    out = CliRunner().invoke(cli, ["index", str(tmp_path), "--gallery", "http://127.0.0.1:9", "--engine", "ray",
                                   "--gpu-decode"])
    assert out.exit_code == 2
    assert "--gpu-decode with --engine ray needs GPU workers: give --gpus-per-worker" in out.output


def test_gpu_decode_reaches_the_embedders_as_they_load(tmp_path, tiny_clip_name, monkeypatch):
    """With CUDA stood in for, the flag sets the variable every open_clip model reads when it is made (here, in
    ``--watch`` and in a local Ray instance's workers), before the model is made."""
    from pictrieve.cli import gallery_commands
    from pictrieve.cli.main import cli
    from pictrieve.tools.models.embedders.open_clip import OpenCLIPEmbedder

    monkeypatch.setenv(GPU_DECODE_ENV, "")  # restored after the test: the command sets it in this process
    monkeypatch.setattr(gallery_commands, "require_cuda", lambda purpose: None)
    seen: list[str | None] = []
    made = OpenCLIPEmbedder.__init__

    def making(self, *args, **kwargs):
        seen.append(os.environ.get(GPU_DECODE_ENV))
        made(self, *args, **kwargs)

    monkeypatch.setattr(OpenCLIPEmbedder, "__init__", making)
    make_photo(tmp_path / "photos" / "a.jpg", seed=1)
    out = CliRunner().invoke(cli, ["index", str(tmp_path / "photos"), "--gallery", str(tmp_path / "g"),
                                   "--embedder", tiny_clip_name, "--gpu-decode", "--json"])
    assert out.exit_code == 0, out.output
    assert seen and set(seen) == {"1"}


def test_a_ray_worker_without_cuda_refuses_gpu_decode(tmp_path, tiny_clip_name, monkeypatch):
    from pictrieve.vectorstore.distributed.index_job import IndexWorker
    from pictrieve.vectorstore.gallery import Gallery

    monkeypatch.setenv(GPU_DECODE_ENV, "")  # restored after the test, whatever the worker sets
    gallery = Gallery.open(tmp_path / "g", tiny_clip_name)
    gallery.create()
    with pytest.raises(DeviceUnavailableError, match="--gpu-decode needs a CUDA GPU"):
        IndexWorker(str(tmp_path / "g"), [tiny_clip_name], gpu_decode=True)
    assert os.environ[GPU_DECODE_ENV] == ""
    monkeypatch.setattr("pictrieve.vectorstore.distributed.index_job.require_cuda", lambda purpose: None)
    IndexWorker(str(tmp_path / "g"), [tiny_clip_name], gpu_decode=True)  # a worker with a GPU
    assert os.environ[GPU_DECODE_ENV] == "1"


def test_require_cuda_asks_no_torch_without_a_driver(monkeypatch):
    monkeypatch.setattr(devices, "gpu_driver_present", lambda files=(): False)
    with pytest.raises(DeviceUnavailableError, match=r"^--gpu-decode needs a CUDA GPU[^\n]*$"):
        devices.require_cuda("--gpu-decode")
