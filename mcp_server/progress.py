"""Progress of one MCP tool call: step lines with strictly increasing progress values.

MCP says a request's progress value "MUST increase with each notification"; a client may drop or
reject a notification whose value does not. Every tool that may load a model reports through one
:class:`StepProgress`, so its values only go up whichever thread reports (the worker running the
tool, or the heartbeat of a slow step), and :func:`loading` says what is loading and keeps saying it
while the load takes long: a first call that loads a CLIP model spends 20 s there, and a client that
hears nothing for that long cannot tell a slow server from a dead one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
"""Reports one step line (the values are the reporter's business)."""

HEARTBEAT_S = 5.0
"""How often :func:`loading` repeats its line while a load goes on."""


class StepProgress:
    """Sends ``(value, message)`` pairs whose values strictly increase: 1, 2, 3, ... by default.

    ``send(value, message)`` does the sending (an MCP progress notification). An explicit ``value``
    that does not exceed the last one sent is raised to one step above it (and logged): a value never
    repeats or goes down. Thread-safe, and sends in the order values were given out.
    """

    def __init__(self, send: Callable[[float, str], None]) -> None:
        self._send = send
        self._last = 0.0
        self._lock = threading.Lock()

    @property
    def last(self) -> float:
        """The last value sent (0 before the first)."""
        return self._last

    def __call__(self, message: str, value: float | None = None) -> None:
        with self._lock:  # held while sending: values reach the client in the order they were given
            if value is None:
                value = self._last + 1
            elif value <= self._last:
                log.debug("progress %s after %s raised to %s: progress only increases", value, self._last,
                          self._last + 1)
                value = self._last + 1
            self._last = float(value)
            self._send(self._last, message)


def no_progress(message: str) -> None:
    """A :data:`Progress` that reports nowhere."""


@contextmanager
def loading(progress: Progress, what: str, *, every: float = HEARTBEAT_S) -> Iterator[None]:
    """Report ``loading WHAT ...`` now and ``still loading WHAT (Ns)`` every ``every`` seconds until the
    block ends (a model's load is one call that says nothing while it runs)."""
    progress(f"loading {what} ...")
    if progress is no_progress:
        yield
        return
    done = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not done.wait(every):
            progress(f"still loading {what} ({time.monotonic() - start:.0f} s)")

    heart = threading.Thread(target=beat, name="mcp-progress", daemon=True)
    heart.start()
    try:
        yield
    finally:
        done.set()
        heart.join()
