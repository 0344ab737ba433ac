"""The test session's own home (tests/isolated_home.py): what it points where, and the check on the real home."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import REAL_HOME, SESSION_DIR
from helpers.isolated_home import HomeGuard


def test_the_session_and_the_processes_it_starts_write_into_the_session_folder():
    script = ("import os, pathlib; from pictrieve.tools.core.pypi_assets import cache_root; "
              "print(pathlib.Path.home(), cache_root(), os.environ['XDG_CACHE_HOME'], os.environ['MPLCONFIGDIR'])")
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    for where in child.stdout.split():
        assert Path(where).is_relative_to(SESSION_DIR) and not Path(where).is_relative_to(REAL_HOME), where
    assert Path.home() != REAL_HOME


def test_the_guard_lists_what_changed_under_a_home_and_nothing_else(tmp_path):
    home = tmp_path / "home"
    (home / "kept").mkdir(parents=True)
    (home / "kept" / "read.txt").write_text("old")
    (home / "gone").mkdir()
    (home / "gone" / "deleted.txt").write_text("old")
    (home / "venv").mkdir()
    time.sleep(0.05)  # file times tick coarsely: the session starts after the files above were written
    guard = HomeGuard.start(home, tmp_path / "started", skip=[home / "venv"])
    assert guard.changes() == []
    (home / "kept" / "read.txt").read_text()
    (home / "venv" / "written-by-python.pyc").write_text("skipped")
    assert guard.changes() == []
    (home / ".config" / "tool").mkdir(parents=True)
    (home / ".config" / "tool" / "settings").write_text("new")
    (home / "gone" / "deleted.txt").unlink()
    with open(home / "kept" / "read.txt", "a") as appended:
        appended.write(" and new")
    assert guard.changes() == [str(home / ".config" / "tool" / "settings"), str(home / "gone"),
                               str(home / "kept" / "read.txt")]
    assert HomeGuard.start(Path("/"), tmp_path / "again") is None


def test_the_guard_sees_a_change_of_mode_or_name_alone(tmp_path):
    """chmod and rename leave a file's contents and mtime alone and change only its ctime: both count."""
    home = tmp_path / "home"
    (home / "keys").mkdir(parents=True)
    (home / "keys" / "secret").write_text("old")
    os.chmod(home / "keys" / "secret", 0o644)
    (home / "notes").mkdir()
    (home / "notes" / "before.txt").write_text("old")
    time.sleep(0.05)  # file times tick coarsely: the session starts after the files above were written
    guard = HomeGuard.start(home, tmp_path / "started")
    assert guard.changes() == []
    os.chmod(home / "keys" / "secret", 0o600)
    (home / "notes" / "before.txt").rename(home / "notes" / "after.txt")
    assert guard.changes() == [str(home / "keys" / "secret"), str(home / "notes" / "after.txt")]
