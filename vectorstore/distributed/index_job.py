"""Indexing photos into a ``chroma run`` gallery with a Ray Data actor pool (``--engine ray``).

The driver (:func:`index_on_ray`) plans exactly as local indexing does, creates the collections, and
gives each worker (:class:`IndexWorker`) a share of the plan; a worker prepares each file once for
all embedders (:func:`~pictrieve.vectorstore.indexing.prepare_file`), embeds and writes the batch
(:class:`~pictrieve.vectorstore.indexing.BatchWriter`), and returns one status row per file, from
which the driver builds the usual :class:`~pictrieve.vectorstore.indexing.IndexReport`.

As locally, exact copies are not embedded twice and text in photos is read when asked (``ocr``):

- a worker looks each file's content hash up in the gallery (:meth:`BatchWriter.find_copy`), so a copy of a
  stored photo, or a moved one, gets that photo's vector;
- copies *within* the run (two new files with the same bytes) would land in different workers' batches at
  the same time, so the driver hashes the planned files that share a byte size with another one (a few:
  only equal sizes can be equal content), sends the first of each same-content group to the pool, and
  stores the rest itself afterwards, as copies of the one the pool wrote (:func:`_same_content_later`);
- with ``ocr`` the plan asks each worker to read the text into ``photo_text`` (the ``ocr`` extra must be
  installed on every worker machine; a worker without it stops the job in one line);
- with ``objects`` (or a gallery told ``index --objects``) each worker runs the offline detector on its files
  (:mod:`~pictrieve.vectorstore.photo_evidence`), the same call local indexing makes, so both store the same
  objects; copies and unchanged content keep the objects stored for them.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import stat
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
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
from pictrieve.vectorstore import photo_evidence
from pictrieve.vectorstore.errors import GalleryError
from pictrieve.tools.core.devices import GPU_DECODE_ENV, require_cuda
from pictrieve.tools.core.images import file_sha256
from pictrieve.tools.models.photo_text import require_ocr
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
COLUMNS = ("id", "path", "status", "error", "copied", "text_read", "objects_found", "notes")
"""A worker's result row: the file, what became of it, whether its vector was copied from a stored record of
the same content, whether its text was read (OCR), whether the detector looked at it, and the metadata notes (a JSON
list)."""


def set_torch_threads(threads: int) -> None:
    """Give torch in this worker process as many threads as Ray reserved CPUs for it."""
    import torch

    torch.set_num_threads(max(1, int(threads)))


class IndexWorker:
    """One actor of the pool: loads each embedder once, then embeds and writes batch after batch.

    Holds only the server's location, the embedder names and the batches it is given; each call
    returns the :data:`COLUMNS`, one row per file of the batch. ``ocr``: the plan asks for text in photos, so
    the ``ocr`` extra must be installed here (checked at once: one line, not a failure per photo). ``objects``: the
    plan asks for the photos' objects, so the detector is made here at once (and fetched, where not cached).
    """

    def __init__(self, location: str, embedders: Sequence[str], threads: int = 1,
                 max_pixels: int | None = None, ocr: bool = False,
                 rewritten: Mapping[str, Sequence[str]] | None = None, gpu_decode: bool = False,
                 objects: bool = False) -> None:
        from pictrieve.vectorstore.gallery import Gallery

        if ocr:
            require_ocr()
        if gpu_decode:  # `index --gpu-decode`: this worker's open_clip models decode JPEGs on its GPU
            require_cuda("--gpu-decode")
            os.environ[GPU_DECODE_ENV] = "1"  # read by the embedders as they load, just below
        set_torch_threads(threads)
        if objects:
            photo_evidence.shared_detector()
        self.views = [Gallery.open(location, name, create=False) for name in embedders]
        self.models: dict[str, "Embedder"] = {view.embedder_name: view.embedder for view in self.views}
        self.max_pixels = max_pixels
        self.rewritten = dict(rewritten or {})
        """Per embedder, the stored records the run may give a new vector (another worker's share among them): never
        a source to copy from (:meth:`BatchWriter.note_run`)."""
        self.decoders = ThreadPoolExecutor(max_workers=max(1, int(threads)), thread_name_prefix="pictrieve-decode")

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        planned = [PlannedFile(**json.loads(text)) for text in batch["job"]]
        rows: list[tuple[Any, ...]] = []
        writer = BatchWriter(self.views, batch_size=max(1, len(planned)))
        writer.note_run(planned, rewritten=self.rewritten, check_empty=False)
        prepare = functools.partial(self._prepare, find_copy=writer.find_copy)
        for item, prepared in zip(planned, self.decoders.map(prepare, planned)):
            if isinstance(prepared, FailedImage):
                rows.append((item.id, item.path, FAILED, prepared.error, 0, 0, 0, "[]"))
                continue
            copied_before = writer.copied
            status = INDEXED if writer.add(prepared) else UNCHANGED
            rows.append((item.id, item.path, status, "", writer.copied - copied_before, int(prepared.text_read),
                         int(prepared.objects_found), json.dumps(prepared.notes)))
        writer.flush()  # the whole batch is written before its rows are returned
        return {name: np.array([row[i] for row in rows], dtype=object) for i, name in enumerate(COLUMNS)}

    def _prepare(self, planned: PlannedFile, find_copy: Any = None) -> Any:
        try:
            return prepare_file(planned, self.models, max_pixels=self.max_pixels, find_copy=find_copy)
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
    ocr: bool | None = None,
    gpu_decode: bool = False,
    objects: bool | None = None,
) -> IndexReport:
    """Index ``sources`` into ``gallery`` (a ``chroma run`` server) with a Ray Data actor pool.

    The same files, ids, vectors, captions, photo text, objects and report as :meth:`Gallery.add` with these
    ``embedders``, ``ocr`` and ``objects`` (exact copies reused, ``report.copied``); ``say`` receives progress lines
    (cluster, pool). Raises :class:`GalleryError` for a gallery folder, :class:`~.cluster.RayUnavailableError`
    without Ray, :class:`~.cluster.RayClusterError` when the cluster cannot be joined or cannot hold the pool,
    :class:`~pictrieve.tools.models.photo_text.PhotoTextUnavailableError` for ``ocr`` without the extra.
    ``gpu_decode``: each worker's open_clip models decode the JPEGs on its GPU (``index --gpu-decode``; a worker that
    sees no CUDA GPU refuses at its start).
    """
    check_server_gallery(gallery.location)
    require_ray()
    if ocr:
        require_ocr()
    views = gallery.views(embedders)
    listing = list_images(sources)
    if not listing.paths:
        return IndexPlan(embedders=[view.embedder_name for view in views], failed=listing.failed,
                         total=len(listing.failed)).report()
    with views[0].writing():
        plan = start_index(views, listing, ocr=ocr, objects=objects)
    report = plan.report()
    if not plan.todo:
        return report
    pooled, later = _same_content_later(plan.todo)
    stored = set(gallery.embedder_names)
    # A new collection records its model's dimension and fingerprint, so the driver loads that model once.
    load_embedders([view for view in views if view.embedder_name not in stored], progress)
    finding = any(planned.find_objects for planned in pooled)
    if finding:
        photo_evidence.shared_detector()  # fetched once here, before the workers look for it
    for view in views:  # before any worker writes: no two workers race to create a collection
        view.create()
    with ray_cluster(options.address, say=say) as cluster:
        shape = worker_shape(options, cluster)
        if finding and shape.batch_size > photo_evidence.RAY_BATCH:  # a batch's rows come back once it is done
            shape = replace(shape, batch_size=photo_evidence.RAY_BATCH)
        say(f"embedding {len(pooled)} of {plan.total} files on {cluster.describe()}: {shape.describe()}"
            + ("; finding their objects too" if finding else ""))
        items = [{"id": planned.id, "job": json.dumps(asdict(planned))} for planned in pooled]
        worker_args = {"location": gallery.location, "embedders": report.embedders, "threads": shape.threads,
                       "max_pixels": max_pixels, "ocr": any(planned.read_text for planned in pooled),
                       "gpu_decode": gpu_decode,
                       "objects": finding,
                       "rewritten": {name: [planned.id for planned in plan.todo if name in planned.stored]
                                     for name in report.embedders}}
        failed_before = len(report.failed)
        notes: dict[str, list[str]] = {}
        try:
            _collect(run_pipeline(items, IndexWorker, worker_args, shape), report, len(items), progress, notes)
        except DistributedJobError as exc:
            raise _server_gone(gallery.location) or exc
    if later:
        _store_copies_here(views, later, report, notes, max_pixels)
    order = {planned.path: n for n, planned in enumerate(plan.todo)}  # batches finish in any order
    report.failed[failed_before:] = sorted(report.failed[failed_before:], key=lambda f: order.get(f.path, 0))
    report.notes += [note for path in sorted(notes, key=lambda p: order.get(p, 0)) for note in notes[path]]
    return report


def _same_content_later(todo: Sequence[PlannedFile]) -> tuple[list[PlannedFile], list[PlannedFile]]:
    """Split the plan into the files for the pool and the later files of each group with the same content (the
    driver stores those after the pool, as copies). Only files whose byte size another planned file has are
    hashed, and only regular non-empty files; one that cannot be read stays with the pool, which reports it as local
    indexing would."""
    sizes: dict[int, list[PlannedFile]] = {}
    for planned in todo:
        try:
            found = os.stat(planned.path)
        except OSError:
            continue
        if stat.S_ISREG(found.st_mode) and found.st_size:  # never read a pipe here (it would wait for a writer)
            sizes.setdefault(found.st_size, []).append(planned)
    later: set[str] = set()
    for same_size in (group for group in sizes.values() if len(group) > 1):
        first_of: dict[str, str] = {}
        for planned in same_size:
            try:
                digest = file_sha256(planned.path)
            except OSError:
                continue
            if digest in first_of:
                later.add(planned.id)
            else:
                first_of[digest] = planned.id
    return ([planned for planned in todo if planned.id not in later],
            [planned for planned in todo if planned.id in later])


class _LoadedWhenAsked(Mapping[str, "Embedder"]):
    """The views' embedders by name, each loaded only when a file needs a new vector (a copy needs none)."""

    def __init__(self, views: Sequence["Gallery"]) -> None:
        self.views = {view.embedder_name: view for view in views}

    def __getitem__(self, name: str) -> "Embedder":
        return self.views[name].embedder

    def __iter__(self) -> Iterator[str]:
        return iter(self.views)

    def __len__(self) -> int:
        return len(self.views)


def _store_copies_here(views: Sequence["Gallery"], later: Sequence[PlannedFile], report: IndexReport,
                       notes: dict[str, list[str]], max_pixels: int | None) -> None:
    """Store the files whose content the pool has just written (:func:`_same_content_later`) in this process,
    as local indexing stores an exact copy: the stored vector is copied; only a file whose twin failed in the
    pool is embedded here."""
    writer = BatchWriter(views)
    models = _LoadedWhenAsked(views)
    for planned in later:
        try:
            prepared = prepare_file(planned, models, max_pixels=max_pixels, find_copy=writer.find_copy)
        except Exception as exc:  # noqa: BLE001 - one bad file is reported, never the end of the run
            report.failed.append(failed_file(planned, exc))
            continue
        notes[planned.path] = list(prepared.notes)
        report.text_read += prepared.text_read
        report.objects_found += prepared.objects_found
        if writer.add(prepared):
            report.indexed += 1
        else:
            report.unchanged += 1
    writer.flush()
    report.copied += writer.copied


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


def _collect(rows: Any, report: IndexReport, total: int, progress: bool, notes: dict[str, list[str]]) -> None:
    from tqdm.auto import tqdm

    with tqdm(total=total, unit="img", desc="indexing (ray)", disable=not progress) as bar:
        for row in rows:
            if row["status"] == INDEXED:
                report.indexed += 1
            elif row["status"] == UNCHANGED:
                report.unchanged += 1
            else:
                report.failed.append(FailedImage(row["path"], row["error"]))
            report.copied += int(row["copied"])
            report.text_read += int(row["text_read"])
            report.objects_found += int(row["objects_found"])
            if row["notes"] and row["notes"] != "[]":
                notes[row["path"]] = json.loads(row["notes"])
            bar.update(1)
