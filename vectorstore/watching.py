"""Keeping a gallery in step with photo folders while they change (``pictrieve index DIR --watch``).

:class:`FolderWatch` first catches up (what ``index`` and ``sync`` would do, for the watched folders only),
then follows the folders' changes in batches:

- new and changed files are indexed (a changed file's metadata is read again and, when its content changed,
  it is embedded again; a file only touched keeps its vector);
- a moved or renamed file is followed by its content hash (``sha256``, which every record carries): the
  record under the new path gets the old vector and the new path, name and folder, nothing is embedded;
- files deleted are forgotten under the guard of ``pictrieve sync`` (:mod:`~pictrieve.vectorstore.syncing`):
  a whole folder gone or more than a fifth of the gallery at once is kept, with one line saying so (an
  unplugged drive looks exactly like deleted photos); a watched folder that disappears keeps its photos
  until it comes back, and then is caught up;
- a photo replaced by a link (at its path or along its folders) or by a file that is no image has its record
  dropped, with one line: records hold real paths (``index`` resolves links), and no server serves a gallery
  photo through a link (:mod:`~pictrieve.tools.core.gallery_photos`); the watch indexes only files inside the
  watched folders, never what a link leads to outside them;
- bursts are batched: a change is taken once the folders have been quiet for :data:`QUIET_SECONDS` (or a
  stream of changes has waited :data:`MAX_WAIT_SECONDS`), and a file only once its size and modification
  time stayed the same over :data:`SETTLE_SECONDS`, so a file still being copied is never read half-written;
- a stop (:meth:`FolderWatch.stop`; the command line's Ctrl-C or SIGTERM) ends the batch after the file in
  hand, writing what was embedded; what was left is found by the next start's catch-up.

Events come from ``watchdog``: inotify on Linux (FSEvents, kqueue, ReadDirectoryChangesW elsewhere), its
polling observer where the native one cannot start (inotify's watch limit, some network file systems) or
when asked (``poll``). Polling alone was measured and not kept as the default: it stats every file each pass, 1.7 CPU
seconds a minute for 6,215 photos at a 2 s interval (about 45% of a core at 100k), where inotify costs nothing until
a file changes (BENCHMARKS.md, ``benchmarks/watch_cost.py``). Events only say where to look: every batch compares the files with the stored
records, so a missed or repeated event costs at most a look, and the catch-up at start repairs anything
that happened while nothing watched.

NEEDLE's system (its ``backend/indexing/watchers``, also on watchdog) watches its image folders too; where
this differs: NEEDLE handles each event at once (one database session and a re-index request per file), we
batch; NEEDLE re-indexes on the first "modified" event, we wait until the file is stable; NEEDLE follows a
move only from watchdog's move event (both paths inside a watched folder), we match content hashes, so a
move seen as delete and create (polling, another file system, a restart in between) is followed too;
NEEDLE's hourly consistency check removes a directory that is missing from its database with all its
images, we keep them (the unplugged-drive guard); NEEDLE watches .png/.jpg/.jpeg, we index what
``index`` indexes.
"""

from __future__ import annotations

import logging
import os
from glob import escape as glob_escape
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from PIL import UnidentifiedImageError

from pictrieve.tools.core.images import ImageDecodeError, file_sha256, image_size, is_hidden_name, is_image_path
from pictrieve.vectorstore.chroma_store import path_id
from pictrieve.vectorstore.errors import MissingFoldersError, SyncRefusedError
from pictrieve.vectorstore.indexing import (
    BatchWriter,
    FailedImage,
    ImageListing,
    IndexReport,
    PlannedFile,
    embed_and_write,
    failed_file,
    list_images,
    load_embedders,
    prepare_file,
    start_index,
)
from pictrieve.vectorstore.core import ImageWriter
from pictrieve.vectorstore.syncing import check_removal

logger = logging.getLogger(__name__)

QUIET_SECONDS = 1.0
"""A batch starts once no change was seen for this long: a copy of 500 photos is one batch, not 500."""
MAX_WAIT_SECONDS = 10.0
"""...or once the oldest waiting change is this old, so a folder that never stops changing is still indexed."""
SETTLE_SECONDS = 1.0
"""A file is read once its size and modification time stayed the same over this long (not half-written)."""
TICK_SECONDS = 0.25
"""How often the watch looks at what waits (and whether a watched folder disappeared or came back)."""

_CHANGED_EVENTS = {"created", "modified", "closed"}
"""watchdog event types that may change a file's content or metadata. "opened" and "closed_no_write" are
left out: indexing opens the files itself, and must not see its own reads as changes."""


@dataclass
class WatchBatch:
    """What one batch of the watch did (the catch-up at start is one too, with ``catch_up``)."""

    added: int = 0
    updated: int = 0
    """Files already in the gallery whose content or metadata changed (read again; embedded again when the
    content changed)."""
    moved: int = 0
    """Records that followed their file to a new path (same content hash), without embedding."""
    forgotten: int = 0
    kept: int = 0
    """Records whose files are gone but which the guard kept (see ``refused``)."""
    refused: str = ""
    """Why the guard kept them (the one line of ``pictrieve sync``'s refusal)."""
    failed: list[FailedImage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    catch_up: bool = False
    stopped_early: bool = False
    """A stop came during the batch: what was done is stored, the next start's catch-up does the rest."""
    images: int = 0
    """How many images the gallery (the first embedder) holds after the batch."""
    objects_found: int = 0
    """Photos whose COCO objects the detector found in this batch (a gallery told ``--objects``)."""

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.moved or self.forgotten or self.kept or self.failed)

    def line(self) -> str:
        """The batch in one line, as the command prints it."""
        head = "catch-up: " if self.catch_up else ""
        text = (f"{head}added {self.added}, updated {self.updated}, moved {self.moved}, forgotten {self.forgotten}"
                + (f", failed {len(self.failed)}" if self.failed else "")
                + (f"; objects found in {self.objects_found}" if self.objects_found else "")
                + f"; gallery holds {self.images} images")
        if self.kept:
            text += f"; kept {self.kept} whose files are gone: {self.refused}"
        if self.stopped_early:
            text += "; stopped part-way (the next start goes on)"
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Stop:
    """What :func:`~pictrieve.vectorstore.indexing.embed_and_write` asks a time budget, answered by a stop event."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def progressed(self) -> None:
        pass

    def should_stop(self) -> bool:
        return self.event.is_set()


def _under(path: str, roots: Sequence[Path]) -> bool:
    return any(path == str(root) or path.startswith(str(root) + os.sep) for root in roots)


def _hidden(path: Path, roots: Sequence[Path]) -> bool:
    """Whether ``path`` is hidden below its watched folder (indexing skips those while walking: editors'
    and downloaders' temporary files are hidden, e.g. ``.photo.jpg.part``)."""
    for root in roots:
        try:
            parts = path.relative_to(root).parts
        except ValueError:
            continue
        return any(is_hidden_name(part) for part in parts)
    return True


def _replaced(path: str | os.PathLike) -> bool:
    """Whether the record of ``path`` no longer names a file of its own: a link now stands at it or along it
    (records hold real paths: ``index`` resolves links). Its record is dropped, never read through the link
    (a server would refuse to serve it anyway: :mod:`~pictrieve.tools.core.gallery_photos`)."""
    return os.path.lexists(path) and os.path.realpath(path) != os.path.normpath(path)


def _gone(path: str) -> bool:
    """Whether the file of the record of ``path`` is gone: deleted, or replaced by a link (:func:`_replaced`;
    :func:`update_folders` tells the two apart)."""
    return not os.path.lexists(path) or _replaced(path)


def _not_an_image(path: str) -> bool:
    """Whether the file at ``path`` is now something no image reader knows (not a file it cannot read now)."""
    try:
        image_size(path)
    except (ImageDecodeError, UnidentifiedImageError, SyntaxError, ValueError):
        return True
    except OSError:  # unreadable now (permissions, a disk error): kept, and reported as a failure
        return False
    return False


class _Models(Mapping[str, Any]):
    """The views' embedders by name, each loaded only when asked for: following a move needs no model unless
    an old vector no longer fits (a record embedded sideways before EXIF Orientation was applied)."""

    def __init__(self, views: dict[str, "ImageWriter"]) -> None:
        self.views = views

    def __getitem__(self, name: str) -> Any:
        return self.views[name].embedder

    def __iter__(self) -> Iterator[str]:
        return iter(self.views)

    def __len__(self) -> int:
        return len(self.views)


def update_folders(
    views: Sequence["ImageWriter"],
    roots: Sequence[Path],
    present: Iterable[Path],
    gone: Iterable[str],
    *,
    catch_up: bool = False,
    batch_size: int = 32,
    workers: int = 2,
    max_pixels: int | None = None,
    allow_missing_folders: bool = False,
    allow_large: bool = False,
    stop: threading.Event | None = None,
    progress: bool = False,
    ocr: bool | None = None,
    objects: bool | None = None,
) -> WatchBatch:
    """Bring the records of some paths under ``roots`` in step with the files, as one batch of the watch:
    ``present`` are files that may be new or changed, ``gone`` paths whose files may be gone (each is looked
    at again here). With every file and every record under the roots it is the catch-up (``index`` plus
    ``sync``, for those folders). Holds the gallery's write lock throughout, so the plan stays true.

    ``views`` are the gallery's views, one per embedder (:meth:`Gallery.views`); a ``stop`` event ends the
    batch after the file in hand (what was embedded is written; nothing is forgotten then). ``ocr``: read the
    text in photos, as ``index --ocr`` does (``None``: as the gallery was last told); ``objects``: find the COCO
    objects of new and changed photos, as ``index --objects`` does (``None``: as the gallery was last told).
    """
    batch = WatchBatch(catch_up=catch_up)
    present = {Path(path) for path in present}
    gone = [str(path) for path in gone]
    replaced = {path for path in [*map(str, present), *gone] if _replaced(path)}
    # only files of the watched folders themselves: a link found by the catch-up's walk that leads out of them
    # (index follows links, as its person asked) is not followed by the watch
    files = sorted(path for path in present if path.is_file() and str(path) not in replaced and _under(str(path), roots))
    gone_paths = sorted({path for path in gone if not os.path.lexists(path)})
    first = views[0]
    if files and not first.exists():
        load_embedders(views, progress)  # every model before anything is created on disk
    with first.writing():
        plan = start_index(views, ImageListing(list(roots), files), ocr=ocr, objects=objects)
        batch.failed.extend(plan.failed)
        batch.notes.extend(plan.notes)
        gone_records = _records_of(views, gone_paths)
        swapped = _records_of(views, sorted(replaced), resolve=False)
        batch.notes.extend(f"{path} was replaced by a link: its record is dropped (a link is never served)"
                           for path in sorted(replaced) if path_id(path, resolve=False) in swapped)
        by_name = {view.embedder_name: view for view in views}
        moves = _find_moves([planned for planned in plan.todo if not planned.stored], gone_records)
        todo = [planned for planned in plan.todo if planned.id not in moves]
        moved_away = _follow_moves(by_name, [p for p in plan.todo if p.id in moves], moves, gone_records, batch,
                                   batch_size, max_pixels)
        if todo:
            report = IndexReport(embedders=list(by_name))
            embed_and_write(views, todo, report, batch_size, workers, progress, max_pixels,
                             _Stop(stop) if stop is not None else None)
            batch.failed.extend(report.failed)
            batch.notes.extend(report.notes)
            batch.stopped_early = report.stopped_early
            batch.objects_found = report.objects_found
            _count_written(by_name, todo, batch)
            swapped.update(_no_longer_images(views, todo, report, batch))
        if swapped:  # files that are there but no photo of the folder now: no unplugged drive to guard against
            for view in views:
                view.delete(list(swapped))
            batch.forgotten += len(swapped)
        forget = {id_: records for id_, records in gone_records.items() if id_ not in moved_away}
        if forget and not batch.stopped_early:  # a stopped batch leaves them to the next start's catch-up
            _forget(views, forget, batch, allow_missing_folders=allow_missing_folders, allow_large=allow_large)
    batch.images = first.count()
    return batch


def _no_longer_images(views: Sequence["ImageWriter"], todo: Sequence[PlannedFile], report: IndexReport,
                      batch: WatchBatch) -> dict[str, dict[str, dict[str, Any]]]:
    """The records of files of ``todo`` that failed because they are no image any more (a photo overwritten by
    another kind of file): dropped with the gone ones, so the gallery never keeps serving what is not a photo."""
    failed = {entry.path for entry in report.failed}
    paths = [planned.path for planned in todo if planned.stored and planned.path in failed and _not_an_image(planned.path)]
    batch.notes.extend(f"{path} is no longer an image: its record is dropped" for path in paths)
    return _records_of(views, paths)


def _records_of(views: Sequence["ImageWriter"], paths: Sequence[str], *,
                resolve: bool = True) -> dict[str, dict[str, dict[str, Any]]]:
    """``{id: {embedder: stored metadata}}`` of the records of ``paths`` (those some embedder stores); with
    ``resolve=False`` the records stored under these very paths, whatever link stands there now."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    ids = [path_id(path, resolve=resolve) for path in paths]
    if ids:
        for view in views:
            for id_, meta in view.metadata_of(ids).items():
                found.setdefault(id_, {})[view.embedder_name] = meta
    return found


def _find_moves(new: Sequence[PlannedFile], gone: dict[str, dict[str, dict[str, Any]]]) -> dict[str, str]:
    """``{new file's id: gone record's id}`` for new files whose content is a gone record's: the file moved.
    Only files of a gone record's size are hashed (a hash reads the whole file)."""
    by_size: dict[int, list[tuple[str, str]]] = {}
    for id_, records in gone.items():
        record = next(iter(records.values()))
        if record.get("sha256") and record.get("size") is not None:
            by_size.setdefault(int(record["size"]), []).append((id_, str(record["sha256"])))
    moves: dict[str, str] = {}
    for planned in new:
        try:
            candidates = by_size.get(os.stat(planned.path).st_size)
            digest = file_sha256(planned.path) if candidates else None
        except OSError:
            continue  # vanished again: indexing reports it
        for gone_id, sha in candidates or ():
            if sha == digest and gone_id not in moves.values():
                moves[planned.id] = gone_id
                break
    return moves


def _follow_moves(
    views: dict[str, "ImageWriter"],
    planned_moves: Sequence[PlannedFile],
    moves: dict[str, str],
    gone: dict[str, dict[str, dict[str, Any]]],
    batch: WatchBatch,
    batch_size: int,
    max_pixels: int | None,
) -> set[str]:
    """Move each moved file's records to its new id: the old vector (per embedder whose vector still fits)
    with the metadata read from the file at its new place (captions found there, else the old ones), then
    drop the old record. An embedder without a fitting old vector embeds the file. Returns the old ids done.

    The new record is written before the old one is dropped, so an interruption leaves at worst an old
    record whose file is gone (the next catch-up forgets it), never a photo without a record."""
    done: set[str] = set()
    models = _Models(views)
    with BatchWriter(list(views.values()), batch_size) as writer:
        for planned in planned_moves:
            old_id = moves[planned.id]
            planned.stored = dict(gone[old_id])
            try:
                prepared = prepare_file(planned, models, max_pixels)
            except Exception as exc:  # noqa: BLE001 - one bad file must not stop the watch
                batch.failed.append(failed_file(planned, exc))
                continue
            for name in prepared.touched:
                view = views[name]
                view.upsert([planned.id], view.embeddings([old_id]), [{**gone[old_id][name], **prepared.metadata}])
            prepared.touched = []
            writer.add(prepared)  # the embedders whose old vector did not fit (none, mostly)
            for name in gone[old_id]:
                views[name].delete([old_id])
            batch.moved += 1
            batch.notes.extend(prepared.notes)
            done.add(old_id)
    return done


def _count_written(views: dict[str, "ImageWriter"], todo: Sequence[PlannedFile], batch: WatchBatch) -> None:
    """Count the files of ``todo`` whose records now match them as added or updated (exact after a stop, a
    failure, or a file changed again meanwhile)."""
    names = {planned.embedders[0] for planned in todo}
    stored = {name: views[name].metadata_of([p.id for p in todo if p.embedders[0] == name]) for name in names}
    for planned in todo:
        record = stored[planned.embedders[0]].get(planned.id)
        try:
            stat = os.stat(planned.path)
        except OSError:
            continue
        if record and record.get("size") == stat.st_size and record.get("mtime_ns") == stat.st_mtime_ns:
            if planned.stored:
                batch.updated += 1
            else:
                batch.added += 1


def _forget(views: Sequence["ImageWriter"], records: dict[str, dict[str, dict[str, Any]]], batch: WatchBatch, *,
            allow_missing_folders: bool, allow_large: bool) -> None:
    """Drop the records of gone files under the guard of ``sync``; a refusal keeps them all (``batch.kept``)."""
    paths = [str(next(iter(found.values())).get("path", "")) for found in records.values()]
    try:
        check_removal(paths, views[0].count(), allow_missing_folders=allow_missing_folders,
                      allow_large=allow_large, location=str(views[0].location))
    except SyncRefusedError as exc:
        flag = "--allow-missing-folders" if isinstance(exc, MissingFoldersError) else "--yes"
        batch.kept = len(paths)
        batch.refused = f"{exc.problem} (`pictrieve sync {flag}` forgets them once you are sure)"
        return
    for view in views:
        view.delete(list(records))
    batch.forgotten += len(records)


def stored_paths_under(views: Sequence["ImageWriter"], folders: Sequence[Path]) -> set[str]:
    """The paths of every record (of any embedder) under ``folders``: one scan of the stored metadata."""
    found: set[str] = set()
    for view in views:
        found.update(item.path for item in view.items() if _under(item.path, folders))
    return found


class FolderWatch:
    """Keeps a gallery in step with folders until :meth:`stop`: a catch-up, then batches of changes (see the
    module docstring). ``on_batch`` gets each batch that changed something (the catch-up always); ``on_note``
    one line for each thing a person should know (the watcher in use, a folder gone or back, stopping).

    ``views`` are the gallery's views, one per embedder; ``folders`` the folders watched (recursively).
    ``poll`` (seconds) watches by polling instead of inotify (network file systems). The other keyword
    arguments go to :func:`update_folders`.
    """

    def __init__(
        self,
        views: Sequence["ImageWriter"],
        folders: Sequence[str | os.PathLike],
        *,
        poll: float | None = None,
        on_batch: Callable[[WatchBatch], None] | None = None,
        on_note: Callable[[str], None] | None = None,
        quiet: float = QUIET_SECONDS,
        settle: float = SETTLE_SECONDS,
        max_wait: float = MAX_WAIT_SECONDS,
        **options: Any,
    ) -> None:
        self.views = list(views)
        self.roots = [Path(folder).expanduser().resolve() for folder in folders]
        self.poll, self.quiet, self.settle, self.max_wait = poll, quiet, settle, max_wait
        self.on_batch = on_batch or (lambda batch: logger.info("%s", batch.line()))
        self.on_note = on_note or (lambda line: logger.info("%s", line))
        self.options = options
        self.mode = ""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._changed: dict[str, float] = {}  # path -> when last seen changing (monotonic)
        self._gone: dict[str, float] = {}
        self._dirs_new: dict[str, float] = {}
        self._dirs_gone: dict[str, float] = {}
        self._looked: dict[str, tuple[int, int, float]] = {}  # path -> (size, mtime_ns, since when), settling
        self._last_event = 0.0
        self._lost: set[Path] = set()
        self._observer: Any = None
        self._watches: dict[Path, Any] = {}

    # ------------------------------------------------------------------ running

    def stop(self) -> None:
        """Ask the watch to end: the batch in hand stops after its current file, writing what was embedded."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        """Watch until :meth:`stop`: events are recorded from before the catch-up, so nothing that changes
        during it is missed."""
        self._start_observer()
        try:
            load_embedders(self.views, bool(self.options.get("progress")))  # before any photo waits on them
            self._catch_up([root for root in self.roots if root.is_dir()])
            while not self._stop.is_set():
                self._stop.wait(TICK_SECONDS)
                self._check_roots()
                if self._stop.is_set():
                    break
                taken = self._take()
                if taken is not None:
                    self._batch(*taken)
        finally:
            self._stop_observer()
        waiting = len(self._changed) + len(self._gone) + len(self._dirs_new) + len(self._dirs_gone)
        self.on_note("stopped" + (f"; {waiting} changes were left for the next start's catch-up" if waiting else ""))

    def _catch_up(self, roots: Sequence[Path]) -> None:
        if not roots:
            return
        listing = list_images(roots)
        gone = [path for path in stored_paths_under(self.views, roots) if _gone(path)]
        batch = update_folders(self.views, self.roots, listing.paths, gone, catch_up=True, stop=self._stop,
                               **self.options)
        batch.failed[:0] = listing.failed
        self.on_batch(batch)

    def _batch(self, present: list[Path], gone: list[str]) -> None:
        batch = update_folders(self.views, self.roots, present, gone, stop=self._stop, **self.options)
        if batch.changed or batch.stopped_early:
            self.on_batch(batch)

    # ------------------------------------------------------------------ events

    def _start_observer(self) -> None:
        from watchdog.observers import Observer
        from watchdog.observers.polling import PollingObserver

        if self.poll is None:
            try:
                self._observer = Observer()
                self._schedule_all()
                self._observer.start()
                self.mode = type(self._observer).__name__.replace("Observer", "").lower() or "native"
            except OSError as exc:  # inotify's watch or instance limit, a file system without events
                self._stop_observer()
                self.on_note(f"file system events unavailable ({exc.strerror or exc}); polling every 2 s instead")
                self.poll = 2.0
        if self.poll is not None:
            self._observer = PollingObserver(timeout=self.poll)
            self._schedule_all()
            self._observer.start()
            self.mode = f"polling every {self.poll:g} s"
        self.on_note(f"watching {', '.join(map(str, self.roots))} ({self.mode}); Ctrl-C stops")

    def _schedule_all(self) -> None:
        from watchdog.events import FileSystemEventHandler

        handler = FileSystemEventHandler()
        handler.on_any_event = self._record  # type: ignore[method-assign]
        self._handler = handler
        for root in self.roots:
            if root.is_dir():
                self._watches[root] = self._observer.schedule(handler, str(root), recursive=True)
            else:
                self._lose(root)

    def _stop_observer(self) -> None:
        if self._observer is not None:
            try:
                self._observer.stop()
                self._observer.join(timeout=10)
            except Exception:  # noqa: BLE001 - never started
                pass
            self._observer = None

    def _record(self, event: Any) -> None:
        """watchdog's callback (its thread): note where to look, and when."""
        kind = event.event_type
        src = os.fsdecode(event.src_path)
        dest = os.fsdecode(getattr(event, "dest_path", "") or "")
        now = time.monotonic()
        with self._lock:
            if event.is_directory:
                if kind == "created":
                    self._dirs_new[src] = now
                elif kind == "deleted":
                    self._dirs_gone[src] = now
                elif kind == "moved":
                    self._dirs_gone[src], self._dirs_new[dest] = now, now
                else:
                    return
            elif kind in _CHANGED_EVENTS:
                self._note_file(src, now)
            elif kind == "deleted":
                self._gone[src] = now
            elif kind == "moved":
                self._gone[src] = now
                self._note_file(dest, now)
            else:
                return
            self._last_event = now

    def _note_file(self, path: str, now: float) -> None:
        file = Path(path)
        if _hidden(file, self.roots):
            return
        if is_image_path(file):
            self._changed[path] = now
            self._look(path, now)
        elif file.name == "captions.jsonl":
            self._dirs_new[str(file.parent)] = now  # its folder's captions: look at the folder's photos
        elif file.suffix.lower() == ".txt":  # a photo's NAME.txt captions
            for sibling in file.parent.glob(glob_escape(file.stem) + ".*"):
                if is_image_path(sibling):
                    self._changed[str(sibling)] = now

    def _look(self, path: str, now: float) -> None:
        """Note a changed file's size and modification time as of its event (called holding the lock): it is
        ready once they stay the same for ``settle`` seconds, so a copy waits ``settle`` after its last write,
        not ``quiet`` and then ``settle``."""
        try:
            stat = os.stat(path)
        except OSError:
            self._looked.pop(path, None)
            return
        seen = (stat.st_size, stat.st_mtime_ns)
        if self._looked.get(path, (None, None))[:2] != seen:  # unchanged since the last look: still since then
            self._looked[path] = (*seen, now)

    def _take(self) -> tuple[list[Path], list[str]] | None:
        """What is due, or ``None``. Nothing until the folders were quiet for ``quiet`` seconds and every changed
        file stood still (same size and modification time) for ``settle`` seconds; then the changed files and
        the gone paths together, so that a move (its old path gone at once, its new file settling) is one
        batch. A stream of changes that never stops is taken every ``max_wait`` seconds: the files that stood
        still and the gone paths (the others wait on)."""
        now = time.monotonic()
        with self._lock:
            pending = [*self._changed.values(), *self._gone.values(), *self._dirs_new.values(),
                       *self._dirs_gone.values()]
            if not pending or (now - self._last_event < self.quiet and now - min(pending) < self.max_wait):
                return None
            overdue = now - min(pending) >= self.max_wait
            dirs_new = list(self._dirs_new)
            self._dirs_new.clear()
        for folder in dirs_new:  # a folder made or moved in: its files may have come before its watch
            if Path(folder).is_dir() and not _hidden(Path(folder), self.roots):
                found = list_images([folder]).paths
                with self._lock:
                    for path in found:
                        self._changed.setdefault(str(path), now)
        ready, settling = self._settled(now)
        if settling and not overdue:
            return None
        with self._lock:
            for path in ready:
                self._changed.pop(str(path), None)
                self._looked.pop(str(path), None)
            gone, dirs_gone = list(self._gone), list(self._dirs_gone)
            self._gone.clear(), self._dirs_gone.clear()
        if dirs_gone:
            gone.extend(stored_paths_under(self.views, [Path(folder) for folder in dirs_gone]))
        gone.extend(str(path) for path in ready if _gone(str(path)))
        gone = [path for path in gone if not any(_under(path, [root]) for root in self._lost)]
        if not ready and not gone:
            return None
        return ready, gone

    def _settled(self, now: float) -> tuple[list[Path], bool]:
        """The changed files that stood still for ``settle`` seconds (and those gone again since: their paths
        are looked at as gone ones), and whether others are still changing or waiting to be looked at again."""
        ready: list[Path] = []
        settling = False
        with self._lock:
            for path in list(self._changed):
                try:
                    stat = os.stat(path)
                except OSError:  # gone again (a temporary file renamed away, a deleted file)
                    ready.append(Path(path))
                    continue
                seen = (stat.st_size, stat.st_mtime_ns)
                looked = self._looked.get(path)
                if looked is None or looked[:2] != seen:
                    self._looked[path] = (*seen, now)
                    settling = True
                elif now - looked[2] >= self.settle:
                    ready.append(Path(path))
                else:
                    settling = True
        return ready, settling

    # ------------------------------------------------------------------ watched folders coming and going

    def _lose(self, root: Path) -> None:
        self._lost.add(root)
        held = len(stored_paths_under(self.views, [root]))
        self.on_note(f"watched folder {root} is gone (unplugged drive?): its {held} images stay in the gallery; "
                     "watching for it to come back")

    def _check_roots(self) -> None:
        """A watched folder that disappeared keeps its records (one line); one that came back is watched again
        and caught up."""
        for root in self.roots:
            present = root.is_dir()
            if not present and root not in self._lost:
                self._lose(root)
            elif present and root in self._lost:
                self._lost.discard(root)
                self.on_note(f"watched folder {root} is back; catching up")
                watch = self._watches.pop(root, None)
                if watch is not None:
                    try:
                        self._observer.unschedule(watch)
                    except Exception:  # noqa: BLE001 - its emitter already ended with the folder
                        pass
                self._watches[root] = self._observer.schedule(self._handler, str(root), recursive=True)
                self._catch_up([root])
