"""Indexing image files into one or several embedders' collections of a gallery.

Built to lose nothing and to decode each image once: files are hashed, decoded and preprocessed for
every embedder that needs them in worker threads while the models embed the previous batch; each
batch is written as soon as it is embedded (an interrupted run resumes where it stopped, and ids are
path hashes, so a re-run never duplicates); unchanged files are skipped by size and modification
time, then by content hash; unreadable files and folders are reported, not fatal. Writers to one
embedded gallery take turns through the gallery's write lock (see :func:`.chroma_store.write_lock`).
"""

from __future__ import annotations

import logging
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from pictrieve.tools.images import ImageDecodeError, file_sha256, iter_image_files, load_image
from pictrieve.vectorstore.captions import CaptionIndex
from pictrieve.vectorstore.chroma_store import path_id

if TYPE_CHECKING:
    from pictrieve.tools.time_budget import TimeBudget
    from pictrieve.vectorstore.gallery import Gallery

logger = logging.getLogger(__name__)

DRAFT_SIZE = (1024, 1024)
"""JPEGs larger than this are decoded at a reduced scale (1/2, 1/4, 1/8), never below this size:
embedders look at a few hundred pixels, and full-size decoding of a 50 MP photo costs 150 MB."""


@dataclass
class FailedImage:
    path: str
    error: str


@dataclass
class IndexReport:
    """What one ``Gallery.add`` call did. ``indexed`` counts files embedded by at least one embedder;
    ``unchanged`` files needed no embedding; ``failed`` lists files and folders that were skipped."""

    indexed: int = 0
    unchanged: int = 0
    failed: list[FailedImage] = field(default_factory=list)
    total: int = 0
    embedders: list[str] = field(default_factory=list)
    stopped_early: bool = False  # a time budget ran out: what was embedded is stored, a re-run does the rest

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Sources = str | os.PathLike | Iterable[str | os.PathLike]


def index_sources(
    targets: Sequence["Gallery"],
    sources: Sources,
    *,
    batch_size: int = 32,
    workers: int = 2,
    progress: bool = True,
    max_pixels: int | None = None,
    budget: "TimeBudget | None" = None,
) -> IndexReport:
    """Index images from folders, globs or files into every gallery view in ``targets``.

    ``targets`` are views of one database (one per embedder, see :meth:`Gallery.with_embedder`).
    ``budget`` (a :class:`~pictrieve.tools.time_budget.TimeBudget`) is checked after every file;
    when it says stop, the files embedded so far are written and ``report.stopped_early`` is set.
    """
    from pictrieve.vectorstore.chroma_store import write_lock

    sources = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    problems: list[tuple[str, str]] = []
    paths = list(iter_image_files(sources, problems=problems))
    report = IndexReport(total=len(paths) + len(problems), embedders=[t.embedder_name for t in targets])
    report.failed.extend(FailedImage(path, error) for path, error in problems)
    if not paths:
        return report
    first = targets[0]
    if not first.exists():
        for target in targets:  # load every model before anything is created on disk
            target.embedder
    first._writable_client()
    with write_lock(first.location):
        first._record_default_embedder_if_unset()
        captions = CaptionIndex(sources)
        known = [target._known_files(paths) for target in targets]
        todo: list[tuple[Path, list[int]]] = []
        for path in paths:
            try:
                stat = path.stat()
            except OSError as exc:  # vanished or unreadable since the folder was listed
                report.failed.append(FailedImage(str(path), f"{path}: {exc.strerror or exc}"))
                continue
            needing = []
            for i, target in enumerate(targets):
                record = known[i].get(path_id(path))
                if record and record.get("size") == stat.st_size and record.get("mtime_ns") == stat.st_mtime_ns:
                    target._refresh_captions(path, record, captions)
                else:
                    needing.append(i)
            if needing:
                todo.append((path, needing))
            else:
                report.unchanged += 1
        if todo:
            _embed_and_write(targets, todo, known, captions, report, batch_size, workers, progress, max_pixels,
                             budget)
    return report


def _embed_and_write(
    targets: Sequence["Gallery"],
    todo: list[tuple[Path, list[int]]],
    known: list[dict[str, dict[str, Any]]],
    captions: CaptionIndex,
    report: IndexReport,
    batch_size: int,
    workers: int,
    progress: bool,
    max_pixels: int | None,
    budget: "TimeBudget | None" = None,
) -> None:
    from tqdm.auto import tqdm

    embedders = [target.embedder for target in targets]
    batches: list[list[tuple[Path, Any, dict[str, Any]]]] = [[] for _ in targets]

    def prepare(path: Path, needing: list[int]) -> tuple[dict[str, Any], dict[int, Any]]:
        records = {i: known[i].get(path_id(path)) for i in needing}
        return _prepare(path, records, embedders, max_pixels)

    bar = tqdm(total=len(todo), unit="img", desc="indexing", disable=not progress)
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="pictrieve-decode") as pool:
        for seen, (path, prepared) in enumerate(_prefetch(pool, todo, prepare, window=4 * batch_size), 1):
            bar.update(1)
            if isinstance(prepared, BaseException):
                report.failed.append(FailedImage(str(path), str(prepared)))
                continue
            meta, tensors = prepared
            meta.update(caption_metadata(captions.captions_for(path)))
            embedded = False
            for i, tensor in tensors.items():
                if tensor is None:  # touched but same content: refresh metadata (mtime) only
                    targets[i]._collection_for_write().update(ids=[path_id(path)], metadatas=[dict(meta)])
                    continue
                embedded = True
                batches[i].append((path, tensor, dict(meta)))
                if len(batches[i]) >= batch_size:
                    targets[i]._write_batch(batches[i])
                    batches[i] = []
            if embedded:
                report.indexed += 1
            else:
                report.unchanged += 1
            if budget is not None:
                budget.progressed()  # written with its batch below, even when we stop now
                if budget.should_stop() and seen < len(todo):
                    report.stopped_early = True
                    break
        for i, batch in enumerate(batches):
            if batch:
                targets[i]._write_batch(batch)
    bar.close()


def _prefetch(
    pool: ThreadPoolExecutor, todo: Sequence[tuple[Path, list[int]]], prepare: Any, window: int
) -> Iterator[tuple[Path, Any]]:
    """Yield ``(path, prepare(...) | exception)`` in order, keeping ``window`` decodes in flight.

    Any ``Exception`` from a worker (decode errors, permission errors, a file vanishing) becomes a
    reported failure of that one file, never the end of the run.
    """
    pending: deque[tuple[Path, Future]] = deque()
    queue = iter(todo)
    for path, needing in queue:
        pending.append((path, pool.submit(prepare, path, needing)))
        if len(pending) >= window:
            break
    while pending:
        path, future = pending.popleft()
        following = next(queue, None)
        if following is not None:
            pending.append((following[0], pool.submit(prepare, *following)))
        try:
            yield path, future.result()
        except Exception as exc:  # noqa: BLE001 - one bad file must not stop the run
            message = str(exc) if isinstance(exc, ImageDecodeError) else f"{path}: {exc}"
            logger.debug("skipped %s", message)
            yield path, type(exc)(message) if isinstance(exc, ImageDecodeError) else RuntimeError(message)


def _prepare(
    path: Path, records: dict[int, dict[str, Any] | None], embedders: Sequence[Any], max_pixels: int | None
) -> tuple[dict[str, Any], dict[int, Any]]:
    """Hash, decode once and preprocess for each embedder that needs it (``None``: content unchanged)."""
    stat = path.stat()
    digest = file_sha256(path)
    meta: dict[str, Any] = {
        "path": str(path),
        "name": path.name,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": digest,
    }
    tensors: dict[int, Any] = {}
    image = None
    for i, record in records.items():
        if record and record.get("sha256") == digest:
            tensors[i] = None
            meta.update({key: record[key] for key in ("width", "height") if key in record})
            continue
        if image is None:
            image = load_image(path, max_pixels=max_pixels, draft_size=DRAFT_SIZE)
            width, height = _original_size(path, image)
            meta.update(width=width, height=height)
        tensors[i] = embedders[i].preprocess(image)
    return meta, tensors


def _original_size(path: Path, image: Any) -> tuple[int, int]:
    """The file's own size (a draft-mode JPEG decodes smaller than the file says)."""
    from pictrieve.tools.images import image_size

    if image.width >= DRAFT_SIZE[0] or image.height >= DRAFT_SIZE[1]:
        return image_size(path)
    return image.width, image.height


def caption_metadata(captions: list[str]) -> dict[str, Any]:
    return {"captions": captions, "caption": captions[0]} if captions else {}
