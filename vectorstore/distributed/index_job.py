"""Indexing photos into a ``chroma run`` gallery with a Ray Data actor pool (``--engine ray``).

The driver (:func:`index_on_ray`) plans exactly as local indexing does, creates the collections, and
gives each worker (:class:`IndexWorker`) a share of the plan; a worker prepares each file once for
all embedders (:func:`~pictrieve.vectorstore.indexing.prepare_file`), embeds and writes the batch
(:class:`~pictrieve.vectorstore.indexing.BatchWriter`), and returns one status row per file, from
which the driver builds the usual :class:`~pictrieve.vectorstore.indexing.IndexReport`.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from pictrieve.vectorstore.distributed.cluster import (
    RayOptions,
    check_server_gallery,
    ray_cluster,
    require_ray,
    worker_shape,
)
from pictrieve.vectorstore.chroma_store import connect
from pictrieve.vectorstore.distributed.pipeline import DistributedJobError, run_pipeline
from pictrieve.vectorstore.errors import GalleryError
from pictrieve.vectorstore.indexing import (
    BatchWriter,
    FailedImage,
    IndexPlan,
    IndexReport,
    PlannedFile,
    Sources,
    failed_file,
    list_images,
    load_embedders,
    prepare_file,
    start_index,
)

if TYPE_CHECKING:
    from pictrieve.tools.models.embedders.base import Embedder
    from pictrieve.vectorstore.gallery import Gallery

logger = logging.getLogger(__name__)

INDEXED, UNCHANGED, FAILED = "indexed", "unchanged", "failed"


def set_torch_threads(threads: int) -> None:
    """Give torch in this worker process as many threads as Ray reserved CPUs for it."""
    import torch

    torch.set_num_threads(max(1, int(threads)))


class IndexWorker:
    """One actor of the pool: loads each embedder once, then embeds and writes batch after batch.

    Holds only the server's location, the embedder names and the batches it is given; each call
    returns ``{"id", "path", "status", "error"}`` columns, one row per file of the batch.
    """

    def __init__(self, location: str, embedders: Sequence[str], threads: int = 1,
                 max_pixels: int | None = None) -> None:
        from pictrieve.vectorstore.gallery import Gallery

        set_torch_threads(threads)
        self.views = [Gallery.open(location, name, create=False) for name in embedders]
        self.models: dict[str, "Embedder"] = {view.embedder_name: view.embedder for view in self.views}
        self.max_pixels = max_pixels
        self.decoders = ThreadPoolExecutor(max_workers=max(1, int(threads)), thread_name_prefix="pictrieve-decode")

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        planned = [PlannedFile(**json.loads(text)) for text in batch["job"]]
        rows: list[tuple[str, str, str, str]] = []
        writer = BatchWriter(self.views, batch_size=max(1, len(planned)))
        for item, prepared in zip(planned, self.decoders.map(self._prepare, planned)):
            if isinstance(prepared, FailedImage):
                rows.append((item.id, item.path, FAILED, prepared.error))
            else:
                rows.append((item.id, item.path, INDEXED if writer.add(prepared) else UNCHANGED, ""))
        writer.flush()  # the whole batch is written before its rows are returned
        return {name: np.array([row[i] for row in rows], dtype=object)
                for i, name in enumerate(("id", "path", "status", "error"))}

    def _prepare(self, planned: PlannedFile) -> Any:
        try:
            return prepare_file(planned, self.models, max_pixels=self.max_pixels)
        except Exception as exc:  # noqa: BLE001 - one bad file is reported, never the end of the run
            return failed_file(planned, exc)


def index_on_ray(
    gallery: "Gallery",
    sources: Sources,
    options: RayOptions = RayOptions(),
    *,
    embedders: Sequence[str] | None = None,
    max_pixels: int | None = None,
    progress: bool = True,
    say: Callable[[str], None] = logger.info,
) -> IndexReport:
    """Index ``sources`` into ``gallery`` (a ``chroma run`` server) with a Ray Data actor pool.

    The same files, ids, vectors, captions and report as :meth:`Gallery.add` with these
    ``embedders``; ``say`` receives progress lines (cluster, pool). Raises :class:`GalleryError` for a
    gallery folder, :class:`~.cluster.RayUnavailableError` without Ray, :class:`~.cluster.RayClusterError`
    when the cluster cannot be joined or cannot hold the pool.
    """
    check_server_gallery(gallery.location)
    require_ray()
    views = gallery.views(embedders)
    listing = list_images(sources)
    if not listing.paths:
        return IndexPlan(embedders=[view.embedder_name for view in views], failed=listing.failed,
                         total=len(listing.failed)).report()
    with views[0].writing():
        plan = start_index(views, listing)
    report = plan.report()
    if not plan.todo:
        return report
    stored = set(gallery.embedder_names)
    # A new collection records its model's dimension and fingerprint, so the driver loads that model once.
    load_embedders([view for view in views if view.embedder_name not in stored], progress)
    for view in views:  # before any worker writes: no two workers race to create a collection
        view.create()
    with ray_cluster(options.address, say=say) as cluster:
        shape = worker_shape(options, cluster)
        say(f"embedding {len(plan.todo)} of {plan.total} files on {cluster.describe()}: {shape.describe()}")
        items = [{"id": planned.id, "job": json.dumps(asdict(planned))} for planned in plan.todo]
        worker_args = {"location": gallery.location, "embedders": report.embedders, "threads": shape.threads,
                       "max_pixels": max_pixels}
        failed_before = len(report.failed)
        try:
            _collect(run_pipeline(items, IndexWorker, worker_args, shape), report, len(items), progress)
        except DistributedJobError as exc:
            raise _server_gone(gallery.location) or exc
    order = {planned.path: n for n, planned in enumerate(plan.todo)}  # batches finish in any order
    report.failed[failed_before:] = sorted(report.failed[failed_before:], key=lambda f: order.get(f.path, 0))
    return report


def _server_gone(location: str) -> GalleryError | None:
    """When a job stopped because the gallery's Chroma server went away (Ray reports only that a worker's
    stream ended), the error that names the server; ``None`` while the server still answers."""
    try:
        connect(location, create=False)
    except GalleryError:
        return GalleryError(
            f"the Chroma server at {location} stopped answering during the Ray job; nothing is lost",
            fix="start the server again and run the same command: every batch finished before it stopped is "
            "stored, and the job goes on from there",
            location=location,
        )
    return None


def _collect(rows: Any, report: IndexReport, total: int, progress: bool) -> None:
    from tqdm.auto import tqdm

    with tqdm(total=total, unit="img", desc="indexing (ray)", disable=not progress) as bar:
        for row in rows:
            if row["status"] == INDEXED:
                report.indexed += 1
            elif row["status"] == UNCHANGED:
                report.unchanged += 1
            else:
                report.failed.append(FailedImage(row["path"], row["error"]))
            bar.update(1)
