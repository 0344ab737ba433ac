"""``pictrieve index DIR --watch`` run for real in a subprocess, and photos copied in for it to see."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from helpers.cli import CLI
from helpers.mcp import server_env
from pictrieve.vectorstore.chroma_store import path_id
from pictrieve.vectorstore.gallery import Gallery

WAIT = 180.0
"""Seconds a check waits for the gallery to show a change (the watcher reacts in a few; the machine may be busy)."""


class Watcher:
    """``pictrieve index FOLDER -g GALLERY -e EMBEDDER --watch`` in a subprocess, its output in files."""

    def __init__(self, folder: Path, gallery: Path, embedder: str, *extra: str) -> None:
        self.folder, self.gallery, self.embedder = folder, gallery, embedder
        logs = gallery.parent / "logs"
        logs.mkdir(exist_ok=True)
        stamp = f"{time.monotonic_ns()}"
        self.out_path, self.err_path = logs / f"watch-{stamp}.out", logs / f"watch-{stamp}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.process = subprocess.Popen([*CLI, "index", str(folder), "-g", str(gallery), "-e", embedder,
                                             "--watch", *extra], stdout=out, stderr=err, env=server_env())

    @property
    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def err(self) -> str:
        return self.err_path.read_text(errors="replace")

    def batches(self) -> list[str]:
        """The batch lines printed so far (after the catch-up)."""
        return [line for line in self.out.splitlines() if " added " in line and "catch-up" not in line]

    def wait_for(self, check: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
        """``check()``'s first truthy answer, looked at every 0.2 s; fails after ``timeout`` with the output."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        pytest.fail(f"{what}: not seen in {timeout:.0f} s (watcher exit {self.process.poll()})\n"
                    f"--- stdout\n{self.out}\n--- stderr\n{self.err[-4000:]}")

    def wait_ready(self) -> None:
        """Until the catch-up was printed: the watch is on."""
        self.wait_for(lambda: "catch-up:" in self.out, "the catch-up line")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def view(self) -> Gallery:
        return Gallery.open(self.gallery, self.embedder, create=False)

    def record(self, path: Path) -> dict[str, Any] | None:
        """The stored metadata of the file at ``path`` (``None``: no record)."""
        if not (self.gallery / "chroma.sqlite3").exists():
            return None
        return self.view().metadata_of([path_id(path)]).get(path_id(path))

    def vector(self, path: Path) -> np.ndarray:
        """The stored vector of ``path``. A record's metadata is seen in the shared database file as soon as
        it is written, its vector once the writer has marked the write done and this process reopened the
        index (it looks every 0.5 s, :class:`~pictrieve.vectorstore.chroma_store.Database`): until then Chroma
        says "Error finding id", so look again."""
        def read() -> np.ndarray | None:
            try:
                return self.view().embeddings([path_id(path)])[0]
            except Exception:  # noqa: BLE001 - the write is not marked done yet
                return None

        return self.wait_for(lambda: (found := read()) is not None and [found], f"the vector of {path}")[0]


def copy_photos(flickr_dir: Path, folder: Path, start: int, count: int) -> list[Path]:
    """Copy ``count`` flickr8k-dev photos (from the ``start``-th, by name) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    photos = sorted((flickr_dir / "images").iterdir())[start:start + count]
    return [Path(shutil.copy2(photo, folder / photo.name)) for photo in photos]


