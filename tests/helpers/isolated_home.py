"""Tests never write into the user's home: a session home and cache, and a check that the real one is unchanged.

:func:`isolate` points ``HOME``, the XDG folders, ``PICTRIEVE_CACHE`` and the caches of the libraries
we load (matplotlib, Hugging Face, torch, npm) at a temporary folder for the whole test session.
Every process a test starts (``chroma run``, ``langgraph dev``, Chromium, uvicorn, the CLI) inherits
that environment. The model files that ``pictrieve fetch-models`` put into the user's cache are linked
into the session cache (read, never written), and so are the models it exported for ONNX Runtime; the one
derived cache that costs seconds to rebuild (the offline embedder's class-name vectors) is copied.

What wrote into the home before this existed (the whole suite run with a scratch ``HOME``):
matplotlib's font list (``~/.cache/matplotlib``), Chromium's crash-report settings and dconf
(``~/.config/chromium``, ``~/.cache/dconf``), onnxruntime's telemetry on import (chromadb depends
on it: ``~/.cache/Microsoft/DeveloperTools/.onnxruntime``), and, where it was missing, our own
cache's class-name vectors (``~/.cache/pictrieve/offline-embedder``).

:class:`HomeGuard` lists what changed under the real home during the session, whoever changed it; the
session fails only for writes its own processes made (:mod:`helpers.home_audit`, an audit hook), and shows the
rest as a note, so another program writing into the home meanwhile (a browser, telemetry) is not blamed.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

IGNORE_ENV = "PICTRIEVE_TESTS_HOME_IGNORE"
"""Extra paths (``os.pathsep``-separated) the home check skips: for machines where other programs
write into the home while the tests run."""


def isolate(user_cache: Path) -> Path:
    """Point the session's home and caches at a new temporary folder, and return that folder.

    ``user_cache`` is where ``pictrieve fetch-models`` put the packaged models (read before this call).
    """
    from pictrieve.tools.core.pypi_assets import PACKAGED_ASSETS
    from pictrieve.tools.models.causal_lm import OFFLINE_DEFAULT_LM

    session = Path(tempfile.mkdtemp(prefix="pictrieve-tests-"))
    atexit.register(shutil.rmtree, session, ignore_errors=True)
    home, cache = session / "home", session / "cache"
    home.mkdir()
    cache.mkdir()
    os.environ.update({
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "PICTRIEVE_CACHE": str(cache),
        "MPLCONFIGDIR": str(home / ".config" / "matplotlib"),
        "HF_HOME": str(home / ".cache" / "huggingface"),
        "TORCH_HOME": str(home / ".cache" / "torch"),
        "npm_config_cache": str(home / ".npm"),
    })
    for asset in PACKAGED_ASSETS:  # the fetched model files, linked one by one (never written through)
        for name in asset.members:
            if (user_cache / asset.key / name).is_file():
                (cache / asset.key).mkdir(exist_ok=True)
                (cache / asset.key / name).symlink_to(user_cache / asset.key / name)
    converted = user_cache / "transformers" / OFFLINE_DEFAULT_LM  # SmolLM2 converted from GGUF once: only read
    if (converted / "config.json").is_file():
        (cache / "transformers").mkdir()
        (cache / "transformers" / OFFLINE_DEFAULT_LM).symlink_to(converted, target_is_directory=True)
    # Models exported for ONNX Runtime (by fetch-models; 15-60 s each to export again) are linked, only read, into
    # one folder that every process of the session uses, even a test's own PICTRIEVE_CACHE.
    (cache / "onnx").mkdir()
    os.environ["PICTRIEVE_ONNX_CACHE"] = str(cache / "onnx")
    for path in sorted((user_cache / "onnx").glob("*.onnx")):
        (cache / "onnx" / path.name).symlink_to(path)
    vectors = sorted((user_cache / "offline-embedder").glob("class-embeddings-*.npy"))
    if vectors:  # ~10 s of CPU to rebuild: copied, so a test that rewrites it cannot touch the user's
        (cache / "offline-embedder").mkdir()
        for path in vectors:
            shutil.copyfile(path, cache / "offline-embedder" / path.name)
    return session


@dataclass(frozen=True)
class HomeGuard:
    """Lists what changed under the real home since the session began.

    One walk at the end: a path whose modification or status-change time is at or after the
    session's start was written, created, renamed or re-permissioned during the session (a deleted
    file shows as its folder changed). The start is the time stamp of a file written then, so both
    sides come from the same file-system clock. Reading leaves these times alone, so the models the
    tests read from the user's cache never count.
    """

    root: Path
    skipped: frozenset[str]
    since_ns: int

    @classmethod
    def start(cls, home: Path, marker: Path, skip: Iterable[str | os.PathLike] = ()) -> "HomeGuard | None":
        """Guard ``home`` from now on, except the paths in ``skip`` and ``$PICTRIEVE_TESTS_HOME_IGNORE``
        (``None`` when there is no home to guard); ``marker`` is a new file outside the home."""
        if not home.is_dir() or home.resolve() == Path("/"):
            return None
        skip = skipped_paths(skip)
        marker.write_bytes(b"")
        return cls(Path(os.path.realpath(home)), frozenset(os.path.realpath(p) for p in skip),
                   marker.stat().st_mtime_ns)

    def changes(self) -> list[str]:
        """The changed paths under the home, sorted; a folder only when no changed entry of it is listed
        (a file was deleted from it). Folders on other file systems are not entered."""
        changed: list[str] = []
        device = os.stat(self.root).st_dev
        stack = [str(self.root)]  # resolved, so every path below is real: links are looked at, not followed
        while stack:
            folder = stack.pop()
            try:
                with os.scandir(folder) as listing:
                    found = list(listing)
            except OSError:  # unreadable here: nothing of ours writes there either
                continue
            for entry in found:
                if entry.path in self.skipped:
                    continue
                try:
                    stat = entry.stat(follow_symlinks=False)
                except OSError:  # gone while we looked
                    continue
                if max(stat.st_mtime_ns, stat.st_ctime_ns) >= self.since_ns:
                    changed.append(entry.path)
                if entry.is_dir(follow_symlinks=False) and stat.st_dev == device:
                    stack.append(entry.path)
        explained = {os.path.dirname(path) for path in changed}  # a folder changed because of a listed entry
        return sorted(path for path in changed if path not in explained)


def skipped_paths(skip: Iterable[str | os.PathLike] = ()) -> list[str]:
    """``skip`` and the paths of ``$PICTRIEVE_TESTS_HOME_IGNORE``: what neither home check looks at."""
    return [*map(os.fspath, skip), *(p for p in os.environ.get(IGNORE_ENV, "").split(os.pathsep) if p)]


def not_written_by_tests(repo_root: Path) -> list[str]:
    """Places a test session writes to on purpose even when they lie in the home: the Python environment
    running it (its ``__pycache__``), the repository (``.pytest_cache``) and the temporary folder."""
    return [sys.prefix, sys.base_prefix, str(repo_root), tempfile.gettempdir()]
