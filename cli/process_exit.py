"""Ending a command's process without Python's teardown, where the teardown only makes a person wait.

After ``quality search`` printed its results, the process went on for 4-6 s without a word (BENCHMARKS.md, quality
search): Python's teardown frees the 3,000-odd modules that importing transformers and peft loads, one object at a
time. A command that has written everything it writes (and changes nothing on disk) calls :func:`no_teardown_needed`;
the console entry point (:func:`pictrieve.cli.main.main`) then ends the process with :func:`end_process`: the exit
handlers run (logging is flushed, temporary folders removed), the output is flushed, and the process ends at once.
Nothing is skipped while another thread still works (the normal exit then waits for it), and a command run in-process
(click's test runner, a notebook) never ends its caller's process: only the console entry point calls this.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

_skippable = False


def no_teardown_needed() -> None:
    """Say that the running command has written all its output and left nothing that Python's teardown must close."""
    global _skippable
    _skippable = True


def end_process(code: object) -> None:
    """End the process now with exit status ``code`` (an int or ``None``, as ``SystemExit`` carries it) when the command
    said :func:`no_teardown_needed` and no other non-daemon thread is alive; otherwise return (the normal exit runs)."""
    if not _skippable or not (code is None or isinstance(code, int)):
        return
    if any(thread.is_alive() and not thread.daemon and thread is not threading.main_thread()
           for thread in threading.enumerate()):
        return
    atexit._run_exitfuncs()  # noqa: SLF001 - the handlers the normal exit would run (CPython's atexit)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be written anyway
            pass
    os._exit(code or 0)
