"""A `pictrieve index` process held after its first write, until the test lets it go: a fault (a killed
server, ``kill -9``) then lands at a known point in the middle of a run, however fast or slow the machine is
(a test that polled for progress could see the run end first on a quick one, or too late on a loaded one).

The hold is a ``sitecustomize`` module in a folder of its own, put on ``PYTHONPATH`` just after the home audit's
wherever that is (:mod:`helpers.home_audit` loads the ``sitecustomize`` it hides, so both run; alone, this one is
found first). It wraps :meth:`Gallery.upsert`: the first call writes, then touches ``written`` and waits for
``release`` to exist (at most 10 minutes).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import home_audit

HOOK = '''
import os
import time


def _hold_after_the_first_write():
    from pictrieve.vectorstore import gallery, indexing

    rows = os.environ.get("PICTRIEVE_TEST_WRITE_ROWS")
    if rows:
        indexing.WRITE_ROWS = int(rows)
    real_upsert = gallery.Gallery.upsert
    held = []

    def upsert(self, *args, **kwargs):
        written = real_upsert(self, *args, **kwargs)
        if not held:
            held.append(True)
            open(os.environ["PICTRIEVE_TEST_WRITTEN"], "w").close()
            deadline = time.monotonic() + 600
            while not os.path.exists(os.environ["PICTRIEVE_TEST_RELEASE"]) and time.monotonic() < deadline:
                time.sleep(0.05)
        return written

    gallery.Gallery.upsert = upsert


_hold_after_the_first_write()
'''


@dataclass
class Hold:
    """Where a held indexer says it wrote once (``written``) and waits to be let go (``release``)."""

    written: Path
    release: Path
    env: dict[str, str]

    def wait_for_the_first_write(self, process: subprocess.Popen, seconds: float = 300) -> None:
        """Return once the process has written its first rows and is held; fail if it ended or took too long."""
        deadline = time.monotonic() + seconds
        while not self.written.exists():
            if process.poll() is not None:
                pytest.fail(f"the indexer ended (exit {process.returncode}) before its first write was held")
            if time.monotonic() > deadline:
                pytest.fail(f"the indexer wrote nothing in {seconds:.0f} s")
            time.sleep(0.05)

    def let_go(self) -> None:
        """Let the held indexer go on (after the test's fault: a killed server's next write fails)."""
        self.release.touch()


def _is_home_audit(file: Path) -> bool:
    """Whether ``file`` is the home audit's copy of itself (:func:`helpers.home_audit.environment`)."""
    try:
        return file.read_bytes() == Path(home_audit.__file__).read_bytes()
    except OSError:
        return False


def held_after_first_write(folder: Path, env: dict[str, str], write_rows: int | None = None) -> Hold:
    """``env`` for a `pictrieve index` that holds after its first write (``write_rows``: rows gathered per write,
    default the indexer's), and the :class:`Hold` that watches and releases it."""
    hook = folder / "hold-hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    entries = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    # Python loads the first sitecustomize on the path: the home audit's, which then loads the next one (this
    # hook) if it comes before any other; without the audit, this hook is first and loaded directly. The hook does
    # not chain on (no other sitecustomize is on the tests' path).
    audit = next((i for i, entry in enumerate(entries) if _is_home_audit(Path(entry) / "sitecustomize.py")), -1)
    path = [*entries[:audit + 1], str(hook), *entries[audit + 1:]]
    written, release = folder / "hold-written", folder / "hold-release"
    held_env = {**env, "PYTHONPATH": os.pathsep.join(path), "PICTRIEVE_TEST_WRITTEN": str(written),
                "PICTRIEVE_TEST_RELEASE": str(release)}
    if write_rows is not None:
        held_env["PICTRIEVE_TEST_WRITE_ROWS"] = str(write_rows)
    return Hold(written, release, held_env)
