"""The ``pictrieve`` command as a user runs it, in a subprocess of this Python, and what its errors must look like."""

from __future__ import annotations

import re
import subprocess
import sys

CLI = [sys.executable, "-m", "pictrieve.cli.main"]
PROGRESS_BAR = re.compile(r"\d+/\d+ \[\d")
"""A tqdm bar's counter and clock (``0/1 [00:01<?``): progress a command shows, not an error line."""


def run(*args: str, prefix: list[str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``pictrieve ARGS`` (after ``prefix``, e.g. a setpriv command), its output captured, ``stdin`` fed."""
    return subprocess.run([*(prefix or []), *CLI, *args], capture_output=True, text=True, timeout=600,
                          input=stdin if stdin is not None else "")


def one_clear_line(result: subprocess.CompletedProcess) -> str:
    """The one line a failed command printed (warnings and progress bars aside), asserting there is one
    and no traceback."""
    lines = [line for line in result.stderr.splitlines()
             if line.strip() and not line.startswith("WARNING ") and not PROGRESS_BAR.search(line)]
    assert "Traceback" not in result.stderr and len(lines) == 1, result.stderr
    return lines[0]


START_LINES = re.compile(r"^(\[ *\d+\.\ds\] )?(opening the gallery .* \.\.\.|loading (visret|needle) \.\.\.)$")
"""What ``search --method visret|needle``, ``quality search`` and ``tile`` (without a clock) say before they have
done any slow work (the gallery is opened lazily, the method's graph not yet imported): the only lines allowed
before a refusal at the start."""


def refused_at_the_start(result: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a command refused before any slow work: exit 2, no traceback, and before
    it only the start-up lines of :data:`START_LINES` (no model loading, ``  loading ... ...``, and no
    step of a run)."""
    lines = [line for line in result.stderr.splitlines()
             if line.strip() and not line.startswith("WARNING ") and not PROGRESS_BAR.search(line)]
    assert result.returncode == 2 and "Traceback" not in result.stderr and lines, result.stderr
    assert lines[-1].startswith("error: ") and all(START_LINES.match(line) for line in lines[:-1]), result.stderr
    return lines[-1]
