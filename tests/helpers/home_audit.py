"""Which writes under the real home the test processes make: an audit hook (PEP 578) in each of them.

The walk of :class:`~helpers.isolated_home.HomeGuard` sees every change under the home, whoever made it: a
browser, onnxruntime's telemetry or Ray of another program running meanwhile turned a person's run red. This
hook sees only the writes of the processes it runs in, and says which: the test session itself (installed by
``conftest.py``) and every Python process it starts that inherits its environment (``pictrieve`` commands,
``chroma run``, ``langgraph dev``, uvicorn, MCP servers), where this file is loaded as ``sitecustomize`` from a
folder that :func:`environment` puts first on ``PYTHONPATH`` (the ``sitecustomize`` it hides, if any, is loaded
after it). So the session fails for our writes and for nobody else's.

What it sees: Python-level writes, each an audit event: ``open`` for writing (``open()``, ``os.open``, ``io``),
``os.mkdir``, ``os.rename``/``os.replace``, ``os.remove``, ``os.rmdir``, ``os.symlink``, ``os.link``,
``os.chmod``, ``os.chown``, ``os.truncate``, ``os.utime``, ``shutil.rmtree``, ``sqlite3.connect`` (not read-only).
Paths are resolved first (so a write through a link into the home counts). What it cannot see: writes made by
native code without Python's calls (a C++ library's own files, Chroma's Rust core), and processes that are not
Python (Chromium, node) or that start without ``sitecustomize`` (``-S``, ``-I``, an environment of their own
without the session's ``PYTHONPATH``). Those still have the session's ``HOME`` and XDG folders, so what they
write by the rules lands in the session folder; what the hook cannot see is listed by the walk, as a note.

Each write is one line appended to the log file (``pid<TAB>event<TAB>path``); the session reads it at its end.
"""

from __future__ import annotations

import json
import os
import sys
import threading

ENV = "PICTRIEVE_TESTS_HOME_AUDIT"
"""JSON ``{"home": ..., "log": ..., "skip": [...]}``: what a process of the session watches and where it writes."""

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {"os.mkdir": 0, "os.remove": 0, "os.rmdir": 0, "os.chmod": 0, "os.chown": 0, "os.truncate": 0,
                "os.utime": 0, "os.chflags": 0, "os.setxattr": 0, "os.removexattr": 0, "shutil.rmtree": 0,
                "os.rename": 1, "os.symlink": 1, "os.link": 1}
"""Events whose argument at this index is a path written (``os.rename``: its destination; its source is
``os.remove``-like and checked too)."""


class Watch:
    """One watched home: writes under ``home`` (and not under a ``skip`` path) are appended to ``log``."""

    def __init__(self, home: str, log: str, skip: list[str] | tuple[str, ...] = ()) -> None:
        self.home = os.path.realpath(home)
        self.log = log
        self.skip = tuple(os.path.realpath(path) for path in skip)

    def covers(self, path: str) -> bool:
        return _within(path, self.home) and not any(_within(path, skipped) for skipped in self.skip)

    def record(self, event: str, path: str) -> None:
        line = f"{os.getpid()}\t{event}\t{path}\n".encode("utf-8", "replace")
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


_watches: list[Watch] = []
_busy = threading.local()


def watch(home: str, log: str, skip: list[str] | tuple[str, ...] = ()) -> Watch:
    """Start watching ``home`` in this process (the hook is added once); :func:`unwatch` ends it."""
    found = Watch(home, log, skip)
    _install()
    _watches.append(found)
    return found


def unwatch(found: Watch) -> None:
    if found in _watches:
        _watches.remove(found)


def environment(folder: str, home: str, log: str, skip: list[str]) -> dict[str, str]:
    """The variables that make every Python process started with them watch ``home`` too: this file copied into
    ``folder`` as ``sitecustomize.py``, ``folder`` first on ``PYTHONPATH``, and :data:`ENV`."""
    import shutil

    os.makedirs(folder, exist_ok=True)
    shutil.copyfile(__file__, os.path.join(folder, "sitecustomize.py"))
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": folder + (os.pathsep + path if path else ""),
            ENV: json.dumps({"home": home, "log": log, "skip": skip})}


def written(log: str) -> list[tuple[int, str, str]]:
    """The writes ``log`` holds: ``(pid, event, path)``, in the order made."""
    try:
        with open(log, encoding="utf-8", errors="replace") as lines:
            return [(int(pid), event, path) for pid, event, path in
                    (line.rstrip("\n").split("\t", 2) for line in lines if line.count("\t") >= 2)]
    except FileNotFoundError:
        return []


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _install() -> None:
    if not getattr(sys, "_pictrieve_home_audit", False):
        sys._pictrieve_home_audit = True  # type: ignore[attr-defined]
        sys.addaudithook(_hook)


def _written_paths(event: str, args: tuple) -> list[object]:
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS)
        return [path] if writes else []
    if event == "sqlite3.connect":
        database = args[0] if args else None
        text = os.fsdecode(database) if isinstance(database, (str, bytes, os.PathLike)) else ""
        if not text or text == ":memory:" or "mode=ro" in text or "immutable=1" in text:
            return []
        return [text[5:].split("?", 1)[0] if text.startswith("file:") else text]
    index = _PATH_EVENTS.get(event)
    if index is None or len(args) <= index:
        return []
    return [args[0], args[1]] if event == "os.rename" else [args[index]]


def _hook(event: str, args: tuple) -> None:
    if not _watches or getattr(_busy, "on", False):
        return
    if event != "open" and event != "sqlite3.connect" and event not in _PATH_EVENTS:
        return
    _busy.on = True
    try:
        for raw in _written_paths(event, args):
            if isinstance(raw, int) or raw is None:  # a descriptor: its path was checked when it was opened
                continue
            path = os.path.realpath(os.path.abspath(os.fsdecode(raw)))
            for found in list(_watches):
                if found.covers(path):
                    found.record(event, path)
    except Exception:  # noqa: BLE001 - an audit hook must never break the call it watches (nor a shutdown)
        pass
    finally:
        _busy.on = False


def _chain_hidden_sitecustomize() -> None:
    """Load the ``sitecustomize`` this file hides (a distribution's own), as Python would have."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None and spec.origin != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # loaded by a process the session started
    try:
        _settings = json.loads(os.environ.get(ENV, "") or "null")
        if _settings:
            watch(_settings["home"], _settings["log"], _settings.get("skip", ()))
    except Exception:  # noqa: BLE001 - never stop a process from starting
        pass
    try:
        _chain_hidden_sitecustomize()
    except Exception:  # noqa: BLE001
        pass
