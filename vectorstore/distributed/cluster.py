"""Joining a Ray cluster, or starting a local Ray instance, and sizing the worker pool on it.

Ray is optional (``pip install "pictrieve[scale]"``) and imported here only, when a job runs.

- No address: a local Ray instance sized to this machine (every core, no dashboard, no usage
  statistics, its session files under the system's temp folder, never in the home folder), shut
  down when the job ends. ``RAY_ADDRESS`` in the environment is ignored then: asking for a local
  run gets one.
- An address (``HOST:PORT`` of a head started with ``ray start --head``, or ``auto`` for a cluster
  started on this machine): the cluster is joined and left as it was.

Authentication is Ray's own (https://docs.ray.io/en/latest/ray-security/token-auth.html): a cluster
that requires a token is joined with ``RAY_AUTH_MODE=token`` and its token in ``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``, which Ray itself reads; a new local instance gets
the token Ray generates. pictrieve never reads, passes on or logs the token.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

from pictrieve.errors import PictrieveError
from pictrieve.vectorstore.chroma_store import is_server
from pictrieve.vectorstore.errors import GalleryError

logger = logging.getLogger(__name__)

INSTALL = 'pip install "pictrieve[scale]"'
LOCAL_OBJECT_STORE_BYTES = 256 * 1024**2
"""Object store of a local instance: only file lists and status rows travel through it (photos are
read and decoded inside the workers), so Ray's default of 30% of the machine's memory is not reserved."""


class RayUnavailableError(PictrieveError, ImportError):
    """``--engine ray`` was asked for, but Ray Data is not installed here."""


class RayClusterError(PictrieveError, RuntimeError):
    """The Ray cluster cannot be joined or started, or cannot hold the worker pool asked for."""


def require_ray() -> ModuleType:
    """The ``ray`` module with Ray Data, or a one-line error saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401 - the extra that provides it is what we ask for
    except ImportError as exc:
        raise RayUnavailableError(
            f"the ray engine needs Ray Data, which is not installed ({exc}); install it with {INSTALL}"
        ) from exc
    return ray


def check_server_gallery(location: str) -> None:
    """Refuse a gallery folder: only a ``chroma run`` server can take writes from other machines."""
    if not is_server(location):
        raise GalleryError(
            f"the ray engine needs a gallery on a Chroma server (--gallery http://HOST:PORT of `chroma run`), "
            f"not the folder {location}: Ray workers on other machines cannot write into a local folder"
        )


@dataclass(frozen=True)
class RayOptions:
    """What a distributed job asks of Ray; ``None`` means "fit the cluster" (see :func:`worker_shape`)."""

    address: str | None = None
    """``HOST:PORT`` or ``auto`` to join a cluster; ``None`` starts a local instance."""
    workers: int | None = None
    """Actors in the pool, each holding the models once."""
    cpus_per_worker: float | None = None
    """CPUs Ray reserves per worker; torch in it uses that many threads."""
    gpus_per_worker: float = 0.0
    """GPUs per worker (fractions share a GPU); 0 embeds on CPU."""
    batch_size: int = 32
    """Files per batch: per model call, per write to the server, and per retried unit of work."""


@dataclass(frozen=True)
class ClusterInfo:
    """The cluster a job runs on: its address as shown to people, and its total resources."""

    address: str
    local: bool
    cpus: float
    gpus: float
    nodes: int

    def describe(self) -> str:
        where = "a local Ray instance" if self.local else f"the Ray cluster at {self.address}"
        return f"{where} ({self.nodes} node{'s' if self.nodes != 1 else ''}, {self.cpus:g} CPUs, {self.gpus:g} GPUs)"


@dataclass(frozen=True)
class WorkerShape:
    """The actor pool a job runs: how many workers, and what each reserves and uses."""

    workers: int
    cpus: float
    gpus: float
    threads: int
    batch_size: int

    def describe(self) -> str:
        gpus = f", {self.gpus:g} GPU" if self.gpus else ""
        return (f"{self.workers} worker{'s' if self.workers != 1 else ''} x ({self.cpus:g} CPU{gpus}, "
                f"{self.threads} torch thread{'s' if self.threads != 1 else ''}), batches of {self.batch_size}")


def worker_shape(options: RayOptions, cluster: ClusterInfo) -> WorkerShape:
    """Size the pool: given numbers are kept; missing ones fill the cluster.

    Without ``workers``: as many as the cluster's GPUs hold at ``gpus_per_worker``, or on CPU as many as
    its CPUs hold at ``cpus_per_worker``. Without ``cpus_per_worker``: 1, except on a local instance
    with ``workers`` given, where the machine's cores are split between them. A pool the cluster cannot
    hold is refused here, since Ray would otherwise wait for it without end.
    """
    gpus = float(options.gpus_per_worker or 0.0)
    if gpus < 0 or (options.cpus_per_worker is not None and options.cpus_per_worker <= 0):
        raise RayClusterError("CPUs per worker must be above 0 and GPUs per worker at least 0")
    if gpus and cluster.gpus < gpus:
        raise RayClusterError(
            f"each worker asks for {gpus:g} GPU but {cluster.describe()} has {cluster.gpus:g}; "
            "start the Ray nodes on GPU machines, or embed on CPU (no --gpus-per-worker)"
        )
    cpus = options.cpus_per_worker
    if cpus is None:
        split = cluster.local and options.workers and not gpus
        cpus = max(1, math.floor(cluster.cpus / options.workers)) if split else 1
    workers = options.workers or max(1, math.floor(cluster.gpus / gpus) if gpus else math.floor(cluster.cpus / cpus))
    if workers * cpus > cluster.cpus + 1e-9 or workers * gpus > cluster.gpus + 1e-9:
        raise RayClusterError(
            f"{workers} workers x {cpus:g} CPU{f' and {gpus:g} GPU' if gpus else ''} do not fit {cluster.describe()}; "
            "ask for fewer workers, or fewer CPUs or GPUs per worker, or add nodes"
        )
    return WorkerShape(workers=int(workers), cpus=float(cpus), gpus=gpus, threads=max(1, int(cpus)),
                       batch_size=max(1, int(options.batch_size)))


def local_temp_dir() -> str:
    """Where a local instance keeps its session files and sockets: ``RAY_TMPDIR`` when set (as for Ray
    itself), else a short per-user folder under the system's temp folder (Ray's sockets need a short
    path), never the home folder."""
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return os.environ.get("RAY_TMPDIR") or str(Path(tempfile.gettempdir()) / f"pictrieve-ray-{user}")


@contextlib.contextmanager
def ray_cluster(address: str | None = None, *, say: Callable[[str], None] = logger.info) -> Iterator[ClusterInfo]:
    """Join the cluster at ``address`` or start a local instance for the block; ``say`` gets progress lines.

    A process already connected to Ray (a notebook, a test) keeps its connection, and it is left open.
    """
    ray = require_ray()
    # Ray prints its workers' and raylets' lines on the driver's stdout; they go to stderr, so that a
    # command's stdout (``--json``) holds its result only.
    with contextlib.redirect_stdout(sys.stderr):
        yield from _connected(ray, address, say)


def _connected(ray: ModuleType, address: str | None, say: Callable[[str], None]) -> Iterator[ClusterInfo]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    owned = not ray.is_initialized()
    started = time.monotonic()
    if owned:
        if address:
            say(f"joining the Ray cluster at {address} ...")
            try:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
            except Exception as exc:  # noqa: BLE001 - Ray raises several kinds; one line says what to check
                raise RayClusterError(
                    f"cannot join the Ray cluster at {address}: {_first_line(exc)}; check the address (the head's "
                    "`ray status` prints it) and, if the cluster requires a token, set RAY_AUTH_MODE=token with its "
                    "token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token (Ray's token authentication)"
                ) from exc
        else:
            say(f"starting a local Ray instance ({os.cpu_count()} CPUs) ...")
            ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
                     object_store_memory=LOCAL_OBJECT_STORE_BYTES, logging_level=logging.WARNING,
                     log_to_driver=True, _temp_dir=local_temp_dir())
        say(f"Ray ready in {time.monotonic() - started:.1f} s")
    _quiet_ray_data()
    try:
        resources = ray.cluster_resources()
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        yield ClusterInfo(address=address or "local", local=not address,
                          cpus=float(resources.get("CPU", 0.0)), gpus=float(resources.get("GPU", 0.0)), nodes=nodes)
    finally:
        if owned:
            ray.shutdown()


def _quiet_ray_data() -> None:
    """Ray Data's own progress bars and per-dataset INFO lines off: the job shows one progress bar."""
    import ray.data
    from ray.util.debug import log_once

    log_once("ray_data_progress_manager_disabled")  # Ray Data's "Progress bars disabled" line: we show ours
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    if hasattr(context, "enable_operator_progress_bars"):
        context.enable_operator_progress_bars = False
    logging.getLogger("ray.data").setLevel(max(logging.WARNING, logging.getLogger().getEffectiveLevel()))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
