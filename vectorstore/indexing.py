"""Adding image files to a gallery, for one embedder or several at once, without losing anything.

Files are hashed, decoded and preprocessed in worker threads while the model embeds the previous
batch; each image is decoded once per run however many embedders need it. Each batch is written as
soon as it is embedded, so an interrupted run resumes where it stopped. A file is skipped for an
embedder when its size and modification time match what that embedder's collection stores, or,
failing that, its content hash (then only the metadata is refreshed). Unreadable files are
reported in the :class:`IndexReport`, never fatal.
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

if TYPE_CHECKING:  # pragma: no cover
    from pictrieve.vectorstore.gallery import Gallery

logger = logging.getLogger(__name__)


@dataclass
class FailedImage:
    path: str
    error: str


@dataclass
class IndexReport:
    """What one ``Gallery.add`` call did: images embedded (for at least one embedder), unchanged
    (nothing to embed for any embedder), failed (with the reason) and the total seen."""

    indexed: int = 0
    unchanged: int = 0
    failed: list[FailedImage] = field(default_factory=list)
    total: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Sources = str | os.PathLike | Iterable[str | os.PathLike]


def index_sources(
    views: Sequence["Gallery"],
    sources: Sources,
    *,
    batch_size: int = 32,
    workers: int = 2,
    progress: bool = True,
) -> IndexReport:
    """Index ``sources`` (folders, globs, files) into every gallery view in ``views`` (one per embedder,
    same database); see the module docstring."""
    from tqdm.auto import tqdm

    from pictrieve.vectorstore.gallery import path_id

    sources = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    paths = list(iter_image_files(sources))
    report = IndexReport(total=len(paths))
    captions = CaptionIndex(sources)
    known = [view._known_files(paths) for view in views]
    plans: list[tuple[Path, list[int]]] = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError as exc:  # vanished or unreadable since the folder was listed
            report.failed.append(FailedImage(str(path), f"{path}: {exc.strerror or exc}"))
            continue
        needed = []
        for i, view in enumerate(views):
            record = known[i].get(path_id(path))
            if record and record.get("size") == stat.st_size and record.get("mtime_ns") == stat.st_mtime_ns:
                view._refresh_captions(path, record, captions)
            else:
                needed.append(i)
        if needed:
            plans.append((path, needed))
        else:
            report.unchanged += 1
    if not plans:
        return report
    embedders = [view.embedder for view in views]
    batches: list[list[tuple[Path, Any, dict[str, Any]]]] = [[] for _ in views]
    bar = tqdm(total=len(plans), unit="img", desc="indexing", disable=not progress)
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="pictrieve-decode") as pool:
        for path, prepared in _prefetch(pool, plans, embedders, known, window=4 * batch_size):
            bar.update(1)
            if isinstance(prepared, Exception):
                report.failed.append(FailedImage(str(path), str(prepared)))
                logger.debug("skipped %s", prepared)  # listed once, in the report
                continue
            meta, tensors = prepared
            meta.update(caption_metadata(captions.captions_for(path)))
            embedded = False
            for i, tensor in tensors.items():
                if tensor is None:  # touched but same content: refresh metadata only
                    views[i].collection.update(ids=[path_id(path)], metadatas=[meta])
                    continue
                embedded = True
                batches[i].append((path, tensor, meta))
                if len(batches[i]) >= batch_size:
                    views[i]._write_batch(batches[i])
                    batches[i] = []
            report.indexed += embedded
            report.unchanged += not embedded
        for view, batch in zip(views, batches):
            if batch:
                view._write_batch(batch)
    bar.close()
    return report


def _prefetch(
    pool: ThreadPoolExecutor,
    plans: Sequence[tuple[Path, list[int]]],
    embedders: Sequence[Any],
    known: Sequence[dict[str, dict[str, Any]]],
    window: int,
) -> Iterator[tuple[Path, Any]]:
    """Yield ``(path, (metadata, {view: tensor | None}) | exception)`` in order, ``window`` in flight."""
    from pictrieve.vectorstore.gallery import path_id

    def submit(plan: tuple[Path, list[int]]) -> tuple[Path, Future]:
        path, needed = plan
        pid = path_id(path)
        return path, pool.submit(_prepare, path, {i: (embedders[i], known[i].get(pid)) for i in needed})

    pending: deque[tuple[Path, Future]] = deque()
    queue = iter(plans)
    for plan in queue:
        pending.append(submit(plan))
        if len(pending) >= window:
            break
    while pending:
        path, future = pending.popleft()
        following = next(queue, None)
        if following is not None:
            pending.append(submit(following))
        try:
            yield path, future.result()
        except (ImageDecodeError, OSError, RuntimeError) as exc:  # RuntimeError: e.g. a symlink loop
            yield path, exc


def _prepare(path: Path, needs: dict[int, tuple[Any, dict[str, Any] | None]]) -> tuple[dict[str, Any], dict[int, Any]]:
    """Hash, decode (once) and preprocess one file for each embedder that needs it, in a worker thread.

    A view whose stored record has the same content hash gets ``None``: only its metadata changes.
    """
    stat = path.stat()
    digest = file_sha256(path)
    meta: dict[str, Any] = {
        "path": str(path),
        "name": path.name,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": digest,
    }
    tensors: dict[int, Any] = {i: None for i, (_, record) in needs.items() if record and record.get("sha256") == digest}
    changed = [i for i in needs if i not in tensors]
    if changed:
        image = load_image(path)
        meta.update(width=image.width, height=image.height)
        for i in changed:
            tensors[i] = needs[i][0].preprocess(image)
    return meta, tensors


def caption_metadata(captions: list[str]) -> dict[str, Any]:
    return {"captions": captions, "caption": captions[0]} if captions else {}
