"""Background jobs for the page's long work (Chat, Ask, Visualize): run in a thread, polled for progress.

A request that may take minutes (a language model answering, guide images being made) starts a
:class:`Job` and returns its id at once, so the server's event loop never waits on it and other
visitors are served meanwhile; the page polls ``GET /api/jobs/{id}`` and shows each step as the graph
streams it, then the result or one readable error line. Images a job makes (the asked photo, guide
images) are kept in memory as PNG bytes and served by job id and image name, never by a path from the
request.

At most :data:`MAX_RUNNING` jobs run at once; past that a new one is refused with :class:`JobsBusy` (the page
answers ``429`` and says to wait), rather than queued: a queued job would hold its request's data and leave
its page waiting with no step to show, while the refusal tells the person at once.

A job stops when nobody wants it any more: the page cancels its jobs when it goes away
(``POST /api/jobs/{id}/cancel``, sent as a beacon on ``pagehide``), and a job nobody has polled for
:data:`ABANDON_AFTER` seconds is cancelled too (a closed laptop sends no beacon). Work streams its graph
through :meth:`Job.stream`, which stops between graph steps once the job is cancelled; a step already
running (one model call) finishes first.
"""

from __future__ import annotations

import io
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from pictrieve.errors import PictrieveError
from pictrieve.ui.forms import page_message

log = logging.getLogger(__name__)

MAX_JOBS = 32
"""Finished jobs kept (oldest dropped first); a job's images go with it."""
MAX_RUNNING = 4
"""Jobs running at once (each is a thread doing model work); a new one past this is refused."""
IMAGE_SIDE = 768
"""Images kept by a job are shrunk to fit this many pixels per side (boxes are scaled with ``scale``)."""
ABANDON_AFTER = 120.0
"""Seconds without a poll after which a running job is cancelled. The page polls every 0.6 s; a browser
slows the timers of a hidden tab (Chromium: to once a minute after five minutes hidden), hence the margin."""


class JobsBusy(PictrieveError):
    """Too many jobs are running to start another (the page answers ``429``)."""


class JobCancelled(PictrieveError):
    """The job was cancelled (the page went away, or nobody polled it); it stopped between graph steps."""


@dataclass
class Job:
    """One long request: its steps so far, its images, and then its result or error."""

    id: str
    kind: str
    steps: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None
    error: str = ""
    done: bool = False
    started: float = field(default_factory=time.time)
    images: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancelled: bool = False
    abandon_after: float = ABANDON_AFTER
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    """The clock of :attr:`polled` and of the abandon check (``time.monotonic``; tests step their own)."""
    polled: float = field(default=float("nan"))
    """When the page last asked about this job (by :attr:`clock`); set when the job is made."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    finished: threading.Event = field(default_factory=threading.Event, repr=False)
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        if self.polled != self.polled:  # NaN: not given
            self.polled = self.clock()

    def touch(self) -> None:
        """The page asked about this job: it is wanted for another :attr:`abandon_after` seconds."""
        self.polled = self.clock()

    def step(self, text: str) -> None:
        with self.lock:
            self.steps.append(text)

    def cancel(self) -> None:
        """Ask the job to stop at its next check (between graph steps)."""
        self._cancel.set()

    def check(self) -> None:
        """Raise :class:`JobCancelled` if the job was cancelled or nobody polled it for too long."""
        if not self._cancel.is_set() and self.clock() - self.polled > self.abandon_after:
            log.info("ui %s job %s: nobody asked about it for %.0f s; stopping it", self.kind, self.id, self.abandon_after)
            self._cancel.set()
        if self._cancel.is_set():
            raise JobCancelled("stopped: the page that asked for this went away")

    def stream(self, graph: Any, inputs: Any, config: Any = None, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """``graph.stream(inputs, config, stream_mode="updates", **kwargs)``, checked between steps.

        The graph computes its next step only when the next update is asked for, so a cancelled job
        stops there; with a checkpointer the thread keeps every step finished before it.
        """
        self.check()
        with closing(graph.stream(inputs, config, stream_mode="updates", **kwargs)) as updates:
            for update in updates:
                yield update
                self.check()

    def keep_image(self, name: str, image: Any, **info: Any) -> dict[str, Any]:
        """Keep a PIL image (shrunk to :data:`IMAGE_SIDE`) under ``name``; returns its public record.

        ``scale`` in the record is shown pixels per original pixel, so boxes drawn on it line up.
        """
        shown = image.convert("RGB")
        scale = min(1.0, IMAGE_SIDE / max(shown.size))
        if scale < 1.0:
            shown = shown.resize((max(1, round(shown.width * scale)), max(1, round(shown.height * scale))))
        buffer = io.BytesIO()
        shown.save(buffer, format="PNG")
        record = {"name": name, "url": f"/api/jobs/{self.id}/image/{name}", "width": shown.width,
                  "height": shown.height, "scale": scale, **info}
        with self.lock:
            self.images[name] = {"bytes": buffer.getvalue(), "record": record}
        return record

    def view(self) -> dict[str, Any]:
        with self.lock:
            return {"id": self.id, "kind": self.kind, "steps": list(self.steps), "done": self.done,
                    "error": self.error, "cancelled": self.cancelled, "result": self.result, "elapsed": round(time.time() - self.started, 1),
                    "images": [entry["record"] for entry in self.images.values()]}


class Jobs:
    """The jobs of one app: start one in a thread, look one up by id."""

    def __init__(self, limit: int = MAX_JOBS, abandon_after: float = ABANDON_AFTER, running: int = MAX_RUNNING,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.abandon_after = abandon_after
        self.running = running
        self.clock = clock
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, kind: str, work: Callable[[Job], dict[str, Any]], *, cleanup: Callable[[], None] | None = None) -> Job:
        """Run ``work(job)`` in a daemon thread; its return value becomes ``job.result``.

        With :attr:`running` jobs not yet done, raises :class:`JobsBusy` instead (after ``cleanup``)."""
        job = Job(id=uuid.uuid4().hex, kind=kind, abandon_after=self.abandon_after, clock=self.clock)
        with self._lock:
            busy = sum(not j.done for j in self._jobs.values())
            if busy >= self.running:
                if cleanup is not None:
                    cleanup()
                raise JobsBusy(f"the server is already running {busy} jobs, its most at once; wait for one to "
                               "finish (or stop one by leaving its page) and try again")
            self._jobs[job.id] = job
            while len(self._jobs) > self.limit:
                oldest = next((k for k, j in self._jobs.items() if j.done), None)
                if oldest is None:
                    break
                del self._jobs[oldest]

        def run() -> None:
            try:
                result = work(job)
                with job.lock:
                    job.result = result
            except JobCancelled as exc:
                log.info("ui %s job %s %s", kind, job.id, exc)
                with job.lock:
                    job.cancelled, job.error = True, str(exc)
            except (PictrieveError, KeyError, ValueError) as exc:
                with job.lock:
                    job.error = page_message(exc)  # a library's "--llm" advice in words a visitor can act on
            except Exception as exc:  # noqa: BLE001  (the page gets one line; the log gets the trace)
                log.exception("ui %s job failed", kind)
                with job.lock:
                    job.error = f"internal error ({type(exc).__name__}); see the server log"
            finally:
                try:
                    if cleanup is not None:  # before "done": a page that sees done may act on it at once
                        cleanup()
                finally:
                    with job.lock:
                        job.done = True
                    job.finished.set()

        threading.Thread(target=run, name=f"pictrieve-ui-{kind}", daemon=True).start()
        return job

    def __len__(self) -> int:
        """Jobs kept (running and finished)."""
        with self._lock:
            return len(self._jobs)

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(str(job_id))

    def poll(self, job_id: str) -> Job | None:
        """The job, for the page that follows it: polling keeps a job from being abandoned."""
        job = self.get(job_id)
        if job is not None:
            job.touch()
        return job

    def cancel(self, job_id: str) -> bool:
        """Cancel a job (it stops between graph steps); False for an unknown id."""
        job = self.get(job_id)
        if job is None:
            return False
        job.cancel()
        return True
