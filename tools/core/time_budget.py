"""A wall-clock budget for a whole command, checked inside the loops of its long steps.

``pictrieve quality train --max-minutes 5`` must stop at five minutes of everything it does (caching
the frozen layers, the per-epoch checks, the training steps), not at five minutes of training steps
only. The command creates one :class:`TimeBudget` when it starts and hands it down; every long loop
calls :meth:`TimeBudget.progressed` after each unit of work that a re-run keeps (a cached chunk, a
training step, a finished check) and stops when :meth:`TimeBudget.should_stop` says so.

A budget stops a run only once the run has made some progress: a budget smaller than one unit of
work (or 0) still moves a resumable job forward by one unit per run instead of never moving it.
"""

from __future__ import annotations

import time


class TimeBudget:
    """``seconds`` of wall-clock time from ``started`` (a :func:`time.perf_counter` value, default now).

    ``seconds=None`` never runs out.
    """

    def __init__(self, seconds: float | None, *, started: float | None = None) -> None:
        if seconds is not None and seconds < 0:
            raise ValueError(f"a time budget cannot be negative, got {seconds}")
        self.seconds = seconds
        self.started = time.perf_counter() if started is None else started
        self._progressed = False

    def elapsed(self) -> float:
        """Seconds since the budget started."""
        return time.perf_counter() - self.started

    def spent(self) -> bool:
        """Whether the time is up (whatever has been done)."""
        return self.seconds is not None and self.elapsed() >= self.seconds

    def progressed(self) -> None:
        """Record that a unit of work a re-run keeps is done."""
        self._progressed = True

    def should_stop(self) -> bool:
        """The time is up and this run has made progress: stop at this point, saving what is done."""
        return self._progressed and self.spent()

    def __repr__(self) -> str:
        limit = "unlimited" if self.seconds is None else f"{self.seconds:.0f} s"
        return f"TimeBudget({limit}, {self.elapsed():.0f} s elapsed)"
