"""Background jobs for the page's long work (Ask, Visualize): run in a thread, polled for progress.

A request that may take minutes (a language model answering, guide images being made) starts a
:class:`Job` and returns its id at once; the page polls ``GET /api/jobs/{id}`` and shows each step as
the graph streams it, then the result or one readable error line. Images a job makes (the asked
photo, guide images) are kept in memory as PNG bytes and served by job id and image name, never by
a path from the request.
"""

from __future__ import annotations

import io
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pictrieve.errors import PictrieveError

log = logging.getLogger(__name__)

MAX_JOBS = 32
"""Finished jobs kept (oldest dropped first); a job's images go with it."""
IMAGE_SIDE = 768
"""Images kept by a job are shrunk to fit this many pixels per side (boxes are scaled with ``scale``)."""


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
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def step(self, text: str) -> None:
        with self.lock:
            self.steps.append(text)

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
                    "error": self.error, "result": self.result, "elapsed": round(time.time() - self.started, 1),
                    "images": [entry["record"] for entry in self.images.values()]}


class Jobs:
    """The jobs of one app: start one in a thread, look one up by id."""

    def __init__(self, limit: int = MAX_JOBS) -> None:
        self.limit = limit
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, kind: str, work: Callable[[Job], dict[str, Any]], *, cleanup: Callable[[], None] | None = None) -> Job:
        """Run ``work(job)`` in a daemon thread; its return value becomes ``job.result``."""
        job = Job(id=uuid.uuid4().hex, kind=kind)
        with self._lock:
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
            except (PictrieveError, KeyError, ValueError) as exc:
                message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
                with job.lock:
                    job.error = message or type(exc).__name__
            except Exception as exc:  # noqa: BLE001  (the page gets one line; the log gets the trace)
                log.exception("ui %s job failed", kind)
                with job.lock:
                    job.error = f"internal error ({type(exc).__name__}); see the server log"
            finally:
                with job.lock:
                    job.done = True
                if cleanup is not None:
                    cleanup()

        threading.Thread(target=run, name=f"pictrieve-ui-{kind}", daemon=True).start()
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(str(job_id))
