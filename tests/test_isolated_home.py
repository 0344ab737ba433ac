"""The test session's own home (tests/isolated_home.py): what it points where, and the check on the real home."""

from __future__ import annotations

import json
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


# --- the audit of our own writes (helpers/home_audit.py) -------------------------------------------------------


def test_a_write_of_this_process_under_a_watched_home_is_caught_and_a_read_is_not(tmp_path):
    from helpers import home_audit

    home, log = tmp_path / "home", tmp_path / "writes.log"
    (home / "old").mkdir(parents=True)
    (home / "old" / "read.txt").write_text("old")
    (home / "venv").mkdir()
    found = home_audit.watch(str(home), str(log), [str(home / "venv")])
    try:
        (home / "old" / "read.txt").read_text()
        (home / "venv" / "skipped.pyc").write_bytes(b"")
        (tmp_path / "outside.txt").write_text("not under the home")
        os.makedirs(home / ".config" / "tool")
        (home / ".config" / "tool" / "settings").write_text("new")
        os.replace(home / "old" / "read.txt", home / "old" / "renamed.txt")
        (tmp_path / "link").symlink_to(home / "old", target_is_directory=True)
        with open(tmp_path / "link" / "through-a-link.txt", "a") as appended:  # resolved: it lands in the home
            appended.write("x")
    finally:
        home_audit.unwatch(found)
    (home / "after.txt").write_text("no longer watched")
    seen = home_audit.written(str(log))
    assert {pid for pid, _event, _path in seen} == {os.getpid()}
    assert [(event, Path(path).relative_to(home).as_posix()) for _pid, event, path in seen] == [
        ("os.mkdir", ".config"), ("os.mkdir", ".config/tool"), ("open", ".config/tool/settings"),
        ("os.rename", "old/read.txt"), ("os.rename", "old/renamed.txt"), ("open", "old/through-a-link.txt")]


def test_a_python_process_the_tests_start_is_watched_and_another_program_is_not(tmp_path):
    """A child with the session's environment (its sitecustomize on PYTHONPATH) logs its write under the home;
    a program that is not ours (a plain environment, a shell) writes there too and is not blamed, though the
    walk of the home sees both."""
    from helpers import home_audit

    home, log = tmp_path / "home", tmp_path / "writes.log"
    home.mkdir()
    time.sleep(0.05)  # file times tick coarsely: the guard starts after the home was made
    walk = HomeGuard.start(home, tmp_path / "started")
    ours = {**os.environ, home_audit.ENV: json.dumps({"home": str(home), "log": str(log), "skip": []})}
    write = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('x')"
    child = subprocess.run([sys.executable, "-c", write, str(home / "ours.txt")], env=ours, capture_output=True,
                           text=True, check=True)
    assert child.stderr == ""
    plain = {"PATH": os.environ["PATH"], "HOME": str(home)}  # another program's environment
    subprocess.run([sys.executable, "-c", write, str(home / "theirs.txt")], env=plain, check=True)
    subprocess.run(["sh", "-c", f"echo x > '{home / 'shell.txt'}'"], env=plain, check=True)
    assert [(event, Path(path).name) for pid, event, path in home_audit.written(str(log))] == [("open", "ours.txt")]
    assert [Path(path).name for path in walk.changes()] == ["ours.txt", "shell.txt", "theirs.txt"]


def test_the_session_watches_the_real_home_in_itself_and_its_children():
    from conftest import HOME_WRITES
    from helpers import home_audit

    settings = json.loads(os.environ[home_audit.ENV])
    assert settings["home"] == str(REAL_HOME) and settings["log"] == str(HOME_WRITES)
    assert any(Path(watch.home) == REAL_HOME.resolve() for watch in home_audit._watches)
    probe = "import sys; print(getattr(sys, '_pictrieve_home_audit', False))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "True"
