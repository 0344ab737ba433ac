"""Indexing image files into one or several embedders' collections of a gallery.

Built to lose nothing and to decode each image once: files are hashed, decoded and preprocessed for
every embedder that needs them in worker threads while the models embed the previous batch; each
batch is handed to one writer thread as soon as it is embedded, and written while the next batch embeds
(an interrupted run resumes where it stopped, and ids are path hashes, so a re-run never duplicates); unchanged files are skipped by size and modification
time, then by content hash; unreadable files and folders are reported, not fatal. A file whose content
(``sha256``) a stored record already has (a copy, or a file moved to a new path) gets that record's vector
copied instead of being embedded again (:attr:`IndexReport.copied`). Each record also keeps the photo's
perceptual hash (``phash``, :mod:`~pictrieve.tools.core.perceptual_hash`) for finding near-duplicates;
records stored before it existed gain it on the next run (the photo is decoded, not embedded again).
Writers to one embedded gallery take turns through the gallery's write lock (see :meth:`Gallery.writing`).

:meth:`Gallery.add` runs it all in this process (:func:`index_sources`). The steps are public, so a
run can be split across processes or machines writing to a ``chroma run`` server:

1. :func:`list_images` finds the files; :func:`start_index` (under ``with gallery.writing():``)
   records the default embedder, refreshes changed captions of unchanged files and returns an
   :class:`IndexPlan` (:func:`plan_index` alone only reads): the :class:`PlannedFile` s to embed, each
   with its id, captions and stored records, plus the counts of unchanged and unreadable files.
2. Anywhere, for any share of ``plan.todo``: :func:`prepare_file` hashes, decodes once and
   preprocesses a file for the embedders that need it (raising for an unreadable one, which
   :func:`failed_file` turns into the report's entry), and a
   :class:`BatchWriter` over views opened there (``Gallery.open(location, embedder, create=False)``;
   :meth:`Gallery.create` them first) embeds full batches and writes them with :meth:`Gallery.upsert`.
3. ``plan.report()`` plus the files embedded and failed is the run's :class:`IndexReport`.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from pictrieve.tools.core.images import (
    ImageDecodeError, file_sha256, iter_image_files, load_image, load_pixels, open_header,
)
from pictrieve.tools.core.perceptual_hash import perceptual_hash
from pictrieve.tools.core.photo_metadata import READER_VERSION, read_photo_metadata
from pictrieve.tools.models.photo_text import PHOTO_TEXT_KEY, ocr_installed, read_photo_text, require_ocr
from pictrieve.vectorstore import photo_evidence
from pictrieve.vectorstore.captions import CaptionIndex
from pictrieve.vectorstore.chroma_store import held_write_locks, path_id, sharing_write_locks
from pictrieve.vectorstore.core import ImageWriter

if TYPE_CHECKING:
    from PIL import Image, ImageFile

    from pictrieve.tools.models.embedders.base import Embedder
    from pictrieve.tools.core.time_budget import TimeBudget

logger = logging.getLogger(__name__)

DRAFT_SIZE = (1024, 1024)
"""JPEGs larger than this are decoded at a reduced scale (1/2, 1/4, 1/8), never below this size:
embedders look at a few hundred pixels, and full-size decoding of a 50 MP photo costs 150 MB."""

PHASH_DRAFT_SIZE = (256, 256)
"""The JPEG draft a photo is decoded at on the CPU only for its perceptual hash, when its model decodes it on a GPU
(:attr:`OpenCLIPEmbedder.decode_on_device`): the hash looks at 32x32 grey pixels, and a photo over twice this size
is decoded at 1/2 to 1/8 of it (as :data:`DRAFT_SIZE` does above 2048 pixels), a few bits of 64 apart at most."""

EMBED_PROGRESS_STEP = 8
"""While a batch embeds, the indexing bar moves every this many images at first: a batch of 32 on a CPU took
up to 13 s in one model call, a silent wait behind a bar that had already counted the batch's files."""
EMBED_QUICK_CALL_S = 1.0
"""A model call faster than this doubles the step, so that a GPU is not held to small calls for progress."""

WRITE_ROWS = 256
"""Embedded records gathered into one upsert where the store writes on a writer thread (a Chroma gallery): a
Chroma upsert has a large cost per call (``benchmarks/indexing_stages.py --arms write-only --write-rows N``, medians
at load 18 on 2 cores: 171 records/s and 1.0 ms of CPU a record in upserts of 32, 391 and 0.6 in 128, 710 and 0.6
in 500), so small model batches are written together. An interrupted run keeps what was embedded (:meth:`BatchWriter.__exit__`); a killed one embeds
the unwritten records again when resumed, never twice."""
WRITE_WAIT_S = 5.0
"""Embedded records are written once the oldest of them waited this long, however few: a slow model's records
are stored every few seconds, as before."""


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
    copied: int = 0
    """Of ``indexed``, files whose content a stored (or earlier embedded) record has: its vector was copied,
    not embedded again (exact copies, moved files)."""
    notes: list[str] = field(default_factory=list)
    """Metadata that was ignored (a corrupt EXIF block, a GPS of 0,0, a date in 1970): never a failure."""
    text_read: int = 0
    """Photos whose text was read (OCR, ``ocr=True``) in this run; the others kept the text stored for them."""
    objects_found: int = 0
    """Photos whose COCO objects the detector found in this run (``objects=True``, or as the gallery was told); the
    others kept the objects stored for their content."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Sources = str | os.PathLike | Iterable[str | os.PathLike]


@dataclass
class ImageListing:
    """The image files found under some sources, and the paths that could not be listed."""

    sources: list[str | os.PathLike]
    paths: list[Path]
    failed: list[FailedImage] = field(default_factory=list)
    resolved: bool = False
    """Whether ``paths`` are real paths already (links resolved), so that ids need no second resolve."""


def list_images(sources: Sources) -> ImageListing:
    """Find the image files of folders (recursive), globs and files; unreadable ones are reported."""
    sources = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    problems: list[tuple[str, str]] = []
    paths = list(iter_image_files(sources, problems=problems))
    return ImageListing(sources, paths, [FailedImage(path, error) for path, error in problems], resolved=True)


@dataclass
class PlannedFile:
    """A file some embedders must look at: new to them, or its size or modification time changed."""

    path: str
    id: str
    """Its record id, :func:`~pictrieve.vectorstore.chroma_store.path_id` of the path."""
    embedders: list[str]
    """The names of the embedders that need it."""
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per embedder that has a record of it, that record's metadata (its ``sha256`` tells a file that
    was only touched, whose vector stays, from a changed one)."""
    captions: list[str] = field(default_factory=list)
    """Its sidecar captions (``captions.jsonl`` or ``NAME.txt``)."""
    read_text: bool = False
    """Read the text in it (OCR) into ``photo_text`` unless a stored record of the same content has it."""
    find_objects: bool = False
    """Find its COCO objects (:mod:`~pictrieve.vectorstore.photo_evidence`) unless a stored record of the same
    content has them."""


@dataclass
class IndexPlan:
    """What indexing some sources into a gallery needs, found from the files and the stored records
    alone (no model, no write): what :func:`start_index` and the workers of a distributed run share."""

    embedders: list[str]
    todo: list[PlannedFile] = field(default_factory=list)
    unchanged: int = 0
    """Files every embedder has with the same size and modification time: nothing to embed."""
    failed: list[FailedImage] = field(default_factory=list)
    """Paths that could not be listed or read."""
    total: int = 0
    caption_updates: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    """Per embedder, ``(id, caption metadata)`` of unchanged files whose captions changed."""
    notes: list[str] = field(default_factory=list)
    """What the run will not do and why (text in photos asked for, and the ``ocr`` extra missing)."""

    def report(self) -> IndexReport:
        """The report of a run that has embedded nothing yet (add the files embedded to it)."""
        return IndexReport(unchanged=self.unchanged, failed=list(self.failed), total=self.total,
                           embedders=list(self.embedders), notes=list(self.notes))


def plan_index(views: Sequence["ImageWriter"], sources: Sources | ImageListing, *, ocr: bool = False,
               objects: bool = False) -> IndexPlan:
    """Which files of ``sources`` each gallery view (one per embedder, of one database) must embed.

    The skip rules of indexing: a file whose stored record has the same size and modification time (and
    the current reader's fields, ``phash`` among them) is unchanged (only its captions are refreshed when
    they changed); any other file is planned, with the records there are, and :func:`prepare_file` later
    compares content hashes. With ``ocr`` a record without ``photo_text`` is planned too (its vector stays:
    only the text is added); so is one without ``objects`` with ``objects``. Reads only.
    """
    listing = sources if isinstance(sources, ImageListing) else list_images(sources)
    plan = IndexPlan(embedders=[view.embedder_name for view in views], failed=list(listing.failed),
                     total=len(listing.paths) + len(listing.failed))
    if not listing.paths:
        return plan
    captions = CaptionIndex(listing.sources)
    ids = [path_id(path, resolve=not listing.resolved) for path in listing.paths]
    known = [view.metadata_of(ids) for view in views]
    for path, id_ in zip(listing.paths, ids):
        try:
            stat = path.stat()
        except OSError as exc:  # vanished or unreadable since the folder was listed
            plan.failed.append(FailedImage(str(path), f"{path}: {exc.strerror or exc}"))
            continue
        planned = PlannedFile(str(path), id_, [], captions=captions.captions_for(path), read_text=ocr,
                              find_objects=objects)
        for view, records in zip(views, known):
            record = records.get(id_)
            if (record and record.get("size") == stat.st_size and record.get("mtime_ns") == stat.st_mtime_ns
                    and record.get("reader") == READER_VERSION and record.get(PHASH_KEY)
                    and (not ocr or PHOTO_TEXT_KEY in record)
                    and (not objects or photo_evidence.has_objects(record))):
                wanted = caption_metadata(planned.captions)
                if wanted and wanted.get("captions") != record.get("captions"):
                    plan.caption_updates.setdefault(view.embedder_name, []).append((id_, wanted))
            else:
                planned.embedders.append(view.embedder_name)
                if record:
                    planned.stored[view.embedder_name] = record
        if planned.embedders:
            plan.todo.append(planned)
        else:
            plan.unchanged += 1
    return plan


def start_index(views: Sequence["ImageWriter"], sources: Sources | ImageListing, *,
                ocr: bool | None = None, objects: bool | None = None) -> IndexPlan:
    """The writes before embedding, then the plan: records the first view's embedder as the gallery's
    default unless one is recorded, records ``ocr`` and ``objects`` when given (``None``: read text in photos
    (:func:`text_reading`) and find their objects as the gallery was last told), and refreshes the captions of
    unchanged files. Call it holding the write lock (``with views[0].writing():``) so the plan stays true while you
    write."""
    views[0].set_default_embedder(keep_existing=True)
    read_text, note = text_reading(views[0], ocr)
    recorded = views[0].get_json(INDEXING_RECORD) or {}
    told = {key: bool(value) for key, value in (("ocr", ocr), (photo_evidence.RECORD_FLAG, objects))
            if value is not None and recorded.get(key) != bool(value)}
    if told:
        views[0].put_json(INDEXING_RECORD, {**recorded, **told})
    plan = plan_index(views, sources, ocr=read_text, objects=finds_objects(views[0], objects))
    if note:
        plan.notes.append(note)
    for view in views:
        updates = plan.caption_updates.get(view.embedder_name)
        if updates:
            view.update_metadata([id_ for id_, _ in updates], [meta for _, meta in updates])
    return plan


def index_sources(
    targets: Sequence["ImageWriter"],
    sources: Sources,
    *,
    batch_size: int = 32,
    workers: int = 2,
    progress: bool = True,
    max_pixels: int | None = None,
    budget: "TimeBudget | None" = None,
    ocr: bool | None = None,
    objects: bool | None = None,
) -> IndexReport:
    """Index images from folders, globs or files into every gallery view in ``targets``.

    ``targets`` are views of one database (one per embedder, see :meth:`Gallery.views`).
    ``budget`` (a :class:`~pictrieve.tools.core.time_budget.TimeBudget`) is checked after every file;
    when it says stop, the files embedded so far are written and ``report.stopped_early`` is set.
    ``ocr``: read the text in photos into ``photo_text`` (True), stop reading it (False), or do what the
    gallery was last told (None; off for a new one): see :func:`text_reading`. ``objects``: the same for the COCO
    objects of each photo (:mod:`~pictrieve.vectorstore.photo_evidence`).
    """
    if ocr:
        require_ocr()  # one line naming the extra, before anything is read or written
    listing = list_images(sources)
    if not listing.paths:
        return IndexPlan(embedders=[t.embedder_name for t in targets], failed=listing.failed,
                         total=len(listing.failed)).report()
    first = targets[0]
    if not first.exists():
        load_embedders(targets, progress)  # every model before anything is created on disk
    with first.writing():
        plan = start_index(targets, listing, ocr=ocr, objects=objects)
        report = plan.report()
        if plan.todo:
            embed_and_write(targets, plan.todo, report, batch_size, workers, progress, max_pixels, budget)
    return report


INDEXING_RECORD = "indexing"
"""The gallery's JSON record (:meth:`Gallery.get_json`) of how its photos are indexed: ``{"ocr": bool, "objects":
bool}``."""


def text_reading(gallery: "ImageWriter", ocr: bool | None) -> tuple[bool, str | None]:
    """Whether this run reads text in photos, and a note when it cannot: ``ocr`` when given, else the choice the
    gallery recorded when ``--ocr``/``--no-ocr`` was last given, so that a library indexed with ``--ocr`` keeps the
    text of new and changed photos current. A recorded ``--ocr`` without the extra installed is a note, not a
    failure (the photos are still indexed)."""
    wanted = bool((gallery.get_json(INDEXING_RECORD) or {}).get("ocr")) if ocr is None else ocr
    if wanted and not ocr_installed():
        return False, ("text in photos was not read: this gallery was indexed with --ocr, and the ocr extra is not "
                       "installed here (pip install 'pictrieve[ocr]'; --no-ocr stops asking)")
    return wanted, None


def finds_objects(gallery: "ImageWriter", objects: bool | None) -> bool:
    """Whether indexing into ``gallery`` finds its photos' objects: ``objects`` when given, else as it was last told
    (:data:`~pictrieve.vectorstore.photo_evidence.RECORD_FLAG`; off for a new gallery)."""
    if objects is not None:
        return objects
    return gallery.exists() and bool((gallery.get_json(INDEXING_RECORD) or {}).get(photo_evidence.RECORD_FLAG))


def load_embedders(targets: Sequence["ImageWriter"], progress: bool = True) -> None:
    """Make every view's embedder now, with a bar over the models still to load: a CLIP model takes
    tens of seconds to load on a CPU, which left the terminal silent before the first image."""
    from tqdm.auto import tqdm

    waiting = [target for target in targets if not target.embedder_loaded]
    if not waiting:
        return
    names = ", ".join(target.embedder_name for target in waiting)
    with tqdm(total=len(waiting), unit="model", desc=f"loading {names}", disable=not progress) as bar:
        for target in waiting:
            target.embedder
            bar.update(1)


@dataclass
class PreparedFile:
    """A planned file read once: its metadata (captions included) and, per embedder, what to write."""

    id: str
    path: str
    metadata: dict[str, Any]
    inputs: dict[str, Any] = field(default_factory=dict)
    """Per embedder whose vector must be made, the preprocessed image (``Embedder.preprocess``)."""
    touched: list[str] = field(default_factory=list)
    """Embedders whose stored vector still fits (same content hash): their metadata is refreshed."""
    copies: dict[str, str] = field(default_factory=dict)
    """Per embedder, the id of a stored record with the same content (an exact copy, a moved file), whose
    vector is copied instead of embedding this file (:class:`BatchWriter` copies it)."""
    notes: list[str] = field(default_factory=list)
    """The photo's metadata that was ignored, and why (:func:`read_photo_metadata`)."""
    text_read: bool = False
    """Whether its text was read now (OCR), rather than kept from a stored record of the same content."""
    objects_found: bool = False
    """Whether the detector looked at it now, rather than its objects kept from a record of the same content."""


CopyFinder = Callable[[str, str, str], "tuple[str, dict[str, Any]] | None"]
"""``find(embedder, sha256, id)``: a stored record of that embedder, other than ``id``, whose file had that
content and whose vector was made upright, as ``(id, metadata)``; ``None`` when there is none."""


def prepare_file(planned: PlannedFile, embedders: Mapping[str, "Embedder"],
                 max_pixels: int | None = None, find_copy: CopyFinder | None = None) -> PreparedFile:
    """Hash the file, decode it once (when some embedder needs a new vector, or to compute its
    perceptual hash) and preprocess it for each embedder in ``planned.embedders`` (``embedders`` maps
    their names to models). With ``find_copy`` (:meth:`BatchWriter.find_copy`) an embedder that has a
    stored record of the same content copies that vector (``copies``) instead: nothing to preprocess,
    and nothing to decode when that record holds the perceptual hash. Raises
    :class:`~pictrieve.tools.core.images.ImageDecodeError` or ``OSError`` for a file that cannot be read."""
    path = Path(planned.path)
    stat = path.stat()
    digest = file_sha256(path)
    header = open_header(path)  # read once, for the photo's metadata and for its decode; opened after the hash, as
    # the decode was before: a file replaced in between is recorded with its old size and time, so the next run
    # looks at it again
    try:
        return _prepare_file(planned, embedders, max_pixels, find_copy, path, stat, digest, header)
    finally:
        if header is not None:
            header.close()  # a decode closed it already; this is for a file nothing decoded


def _prepare_file(planned: PlannedFile, embedders: Mapping[str, "Embedder"], max_pixels: int | None,
                  find_copy: CopyFinder | None, path: Path, stat: os.stat_result, digest: str,
                  header: "ImageFile.ImageFile | None") -> PreparedFile:
    meta: dict[str, Any] = {
        "path": str(path),
        "name": path.name,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": digest,
    }
    photo = read_photo_metadata(path, header=header)
    meta.update(photo.fields)
    prepared = PreparedFile(planned.id, planned.path, meta, notes=photo.notes)
    decoded = _DecodedOnce(path, max_pixels, header)
    same_content = list(planned.stored.values())  # records whose photo_text may still hold (same sha256)
    for name in planned.embedders:
        stored = planned.stored.get(name)
        if _vector_fits(stored, digest, photo.orientation):
            prepared.touched.append(name)
            if stored and stored.get(PHASH_KEY):
                meta.setdefault(PHASH_KEY, stored[PHASH_KEY])
            continue
        copy = find_copy(name, digest, planned.id) if find_copy is not None else None
        if copy is not None:
            prepared.copies[name] = copy[0]
            same_content.append(copy[1])  # an exact copy or a moved file keeps the text read before
            if copy[1].get(PHASH_KEY):
                meta.setdefault(PHASH_KEY, copy[1][PHASH_KEY])
            continue
        encoded = getattr(embedders[name], "encoded_input", None)
        item = encoded(path, photo.orientation) if encoded is not None else None
        if item is not None:  # the model decodes this JPEG on its device (a GPU)
            prepared.inputs[name] = item
            continue
        from_pixels = getattr(embedders[name], "preprocess_pixels", None)
        prepared.inputs[name] = (from_pixels(decoded.pixels()) if from_pixels is not None
                                 else embedders[name].preprocess(decoded.image()))
    if PHASH_KEY not in meta:
        if not decoded.done and prepared.inputs:  # every model decodes it on its device: a small draft for the hash
            meta[PHASH_KEY] = perceptual_hash(load_image(path, max_pixels=max_pixels, draft_size=PHASH_DRAFT_SIZE,
                                                         header=decoded.take_header()))
        else:
            meta[PHASH_KEY] = perceptual_hash(decoded.either())
    meta.update(caption_metadata(planned.captions))
    text = _stored_text(same_content, digest)
    if text is None and planned.read_text:
        text, prepared.text_read = read_photo_text(decoded.image()), True
    if text is not None or any(PHOTO_TEXT_KEY in record for record in planned.stored.values()):
        meta[PHOTO_TEXT_KEY] = text  # None removes the text of content that changed (Chroma merges metadata)
    found, prepared.objects_found = photo_evidence.objects_for_file(
        path, digest, same_content, planned.stored.values(), wanted=planned.find_objects, max_pixels=max_pixels)
    meta.update(found)
    return prepared


class _DecodedOnce:
    """One photo decoded at most once (at :data:`DRAFT_SIZE`), handed out as its pixels or as a PIL image, whichever
    is asked for first; the other form is made from that (the same pixels). An embedder offering
    ``preprocess_pixels`` (the offline default on a GPU) gets the pixels, so a JPEG OpenCV decodes is not copied into a
    PIL image for it; the others (open_clip, the offline default on a CPU) and the text reader get the image, and the
    perceptual hash takes whichever is at hand. ``header``: the file opened for its metadata, which the decode reads
    on (:func:`~pictrieve.tools.core.images.open_header`)."""

    def __init__(self, path: Path, max_pixels: int | None, header: "ImageFile.ImageFile | None" = None) -> None:
        self.path = path
        self.max_pixels = max_pixels
        self._header = header
        self._pixels: np.ndarray | None = None
        self._image: "Image.Image | None" = None

    def take_header(self) -> "ImageFile.ImageFile | None":
        """The opened header, for the one decode that consumes it (``None`` after)."""
        header, self._header = self._header, None
        return header

    @property
    def done(self) -> bool:
        return self._pixels is not None or self._image is not None

    def pixels(self) -> np.ndarray:
        if self._pixels is None:
            self._pixels = (np.asarray(self._image) if self._image is not None
                            else load_pixels(self.path, max_pixels=self.max_pixels, draft_size=DRAFT_SIZE,
                                             header=self.take_header()))
        return self._pixels

    def image(self) -> "Image.Image":
        if self._image is None:
            if self._pixels is not None:
                from PIL import Image

                self._image = Image.fromarray(self._pixels)
            else:
                self._image = load_image(self.path, max_pixels=self.max_pixels, draft_size=DRAFT_SIZE,
                                         header=self.take_header())
        return self._image

    def either(self) -> "Image.Image | np.ndarray":
        """Whichever form is at hand (the pixels when neither is yet)."""
        return self._image if self._image is not None else self.pixels()


def _stored_text(records: Iterable[Mapping[str, Any]], digest: str) -> str | None:
    """The ``photo_text`` a stored record of the same content holds (``None``: none has it, or the file changed)."""
    for record in records:
        if record.get("sha256") == digest and PHOTO_TEXT_KEY in record:
            return str(record[PHOTO_TEXT_KEY])
    return None


class BatchWriter:
    """Embeds prepared files in batches, per embedder, and writes the embedded records (:meth:`Gallery.upsert`)
    once ``write_rows`` of them are gathered or the oldest waited :data:`WRITE_WAIT_S` (each batch at once by
    default), so an interrupted run keeps what it embedded; touched files' metadata is
    refreshed in batches too (:meth:`Gallery.update_metadata`: one call costs about as much for 32 records as
    for one). ``views`` are gallery views, one per embedder, each able to embed (``view.embedder``). Use it in a
    ``with`` block, or call :meth:`flush` (and :meth:`close`). ``on_embedded(n)``, when given, is called as each
    few images of a batch are embedded (progress).

    With ``background``, the writes (upserts, metadata refreshes, copies) go, in order, to one writer thread,
    while the caller embeds the next batch: at most one batch is in flight, so memory stays bounded. The writer
    thread writes under the write locks the caller's thread holds (see
    :func:`~pictrieve.vectorstore.chroma_store.sharing_write_locks`), so the caller must not release them before
    :meth:`flush` or :meth:`close` returns; both wait for the write in flight (an interrupted run keeps every batch
    handed to the writer), and :meth:`flush` raises its error.

    Exact copies are not embedded twice: a file whose content a stored record has (found by
    :func:`prepare_file` through :meth:`find_copy`, or here), or a file already queued in this run has,
    gets that record's vector, copied in batches once the source is written. :attr:`copied` counts them.
    """

    def __init__(self, views: Sequence["ImageWriter"], batch_size: int = 32,
                 on_embedded: Callable[[int], None] | None = None, *, background: bool = False,
                 write_rows: int | None = None) -> None:
        self.views = {view.embedder_name: view for view in views}
        self.batch_size = max(1, int(batch_size))
        self.write_rows = max(self.batch_size, int(write_rows or 0))
        """Embedded records gathered per upsert (:data:`WRITE_ROWS`; at least one model batch)."""
        self._unwritten: dict[str, list[tuple[str, np.ndarray, dict[str, Any]]]] = {name: [] for name in self.views}
        self._unwritten_since: dict[str, float] = {}
        self._write_failed = False
        self.on_embedded = on_embedded
        self._batches: dict[str, list[tuple[str, Any, dict[str, Any]]]] = {name: [] for name in self.views}
        self._copies: dict[str, list[tuple[str, str, dict[str, Any]]]] = {name: [] for name in self.views}
        self._touched: dict[str, list[tuple[str, dict[str, Any]]]] = {name: [] for name in self.views}
        self._background = background
        self._empty: frozenset[str] = frozenset()
        """Embedders whose collection held no record when :meth:`note_run` looked."""
        self._rewritten: dict[str, frozenset[str]] = {name: frozenset() for name in self.views}
        """Per embedder, the ids of stored records this run may write a new vector to (:meth:`note_run`)."""
        self._writes: ThreadPoolExecutor | None = None
        self._in_flight: Future | None = None
        self._seen: dict[str, dict[str, str]] = {name: {} for name in self.views}
        """Per embedder, content hash -> id of a file this run embeds or copies."""
        self.copied = 0

    def find_copy(self, embedder: str, digest: str, id_: str) -> tuple[str, dict[str, Any]] | None:
        """A stored record of ``embedder`` other than ``id_`` whose file had content ``digest`` and whose vector
        was made upright (it has ``reader``), as ``(id, metadata)`` (a :data:`CopyFinder`; reads only)."""
        if embedder in self._empty:
            return None
        found = self.views[embedder].find_content(digest, other_than=id_)
        if found is not None and found[0] in self._rewritten[embedder]:
            return None  # its vector may be replaced in this run before the copy reads it back: embed this file
        return found

    def note_run(self, todo: Sequence[PlannedFile] = (), *, rewritten: Mapping[str, Iterable[str]] | None = None,
                 check_empty: bool = True) -> None:
        """Look once which embedders' collections hold no record, so that :meth:`find_copy` answers ``None`` for
        them without a query per photo (about 1.5 ms each under load, in the decode threads), and note the files
        this run plans (``todo``): a stored record among them may get a new vector in this run (its file changed),
        so it is no source to copy from (a copy read back after that write took the changed photo's vector).
        Call it holding the write lock, before this writer writes: no other writer can store a record meanwhile,
        and a copy of a file written earlier in this run is found by :meth:`add` from the content hashes it has
        seen. A share of a larger run (a distributed worker's batch) passes the whole run's ``rewritten`` ids per
        embedder, and ``check_empty=False``: other workers write meanwhile."""
        if check_empty:
            self._empty = frozenset(name for name, view in self.views.items() if view.count() == 0)
        self._rewritten = {name: frozenset(planned.id for planned in todo if name in planned.stored)
                           | frozenset((rewritten or {}).get(name, ())) for name in self.views}

    def add(self, prepared: PreparedFile) -> bool:
        """Queue one file; ``True`` when some embedder stores a new vector for it, embedded or copied
        (``False``: metadata refresh only)."""
        for name in prepared.touched:  # same content: refresh metadata (mtime) only
            touched = self._touched[name]
            touched.append((prepared.id, dict(prepared.metadata)))
            if len(touched) >= self.batch_size:
                self._write_touched(name)
        digest = prepared.metadata.get("sha256")
        copied = False
        for name, source in prepared.copies.items():
            self._queue_copy(name, prepared.id, source, prepared.metadata)
            copied = True
        for name, tensor in prepared.inputs.items():
            source = self._seen[name].get(digest) if digest else None
            if source is not None and source != prepared.id:  # the same content earlier in this run
                self._queue_copy(name, prepared.id, source, prepared.metadata)
                copied = True
                continue
            if digest:
                self._seen[name][digest] = prepared.id
            batch = self._batches[name]
            batch.append((prepared.id, tensor, dict(prepared.metadata)))
            if len(batch) >= self.batch_size:
                self._write(name)
        embedded = any(self._seen[name].get(digest) == prepared.id for name in prepared.inputs) if digest \
            else bool(prepared.inputs)
        if copied and not embedded:
            self.copied += 1
        return copied or embedded

    def _queue_copy(self, name: str, id_: str, source: str, metadata: dict[str, Any]) -> None:
        queue = self._copies[name]
        queue.append((id_, source, dict(metadata)))
        if len(queue) >= self.batch_size:
            self._write_copies(name)

    def _write_copies(self, name: str) -> None:
        """Store the queued copies of ``name``: their sources' vectors, read back from the store (a source
        still waiting in this run's batch is embedded and written first)."""
        queue, self._copies[name] = self._copies[name], []
        if not queue:
            return
        waiting = {id_ for id_, _, _ in self._batches[name]}
        if any(source in waiting for _, source, _ in queue):
            self._write(name)
        self._store_embedded(name)
        self._submit(functools.partial(_copy_vectors, self.views[name], queue))  # after its sources' writes

    def _write_touched(self, name: str) -> None:
        """Refresh the metadata of the queued touched files of ``name`` in one call."""
        queue, self._touched[name] = self._touched[name], []
        if queue:
            self._submit(functools.partial(self.views[name].update_metadata, [id_ for id_, _ in queue],
                                           [meta for _, meta in queue]))

    def flush(self) -> None:
        """Embed and write every batch still queued, then the copies and the metadata refreshes; return once
        all is written (raising a background write's error)."""
        for name, batch in self._batches.items():
            if batch:
                self._write(name)
        for name in self._unwritten:
            self._store_embedded(name)
        for name in self._copies:
            self._write_copies(name)
        for name in self._touched:
            self._write_touched(name)
        self.wait()

    def _submit(self, write: Callable[[], Any]) -> None:
        """Run ``write`` now, or with ``background`` on the writer thread once the write before it is done."""
        if not self._background:
            write()
            return
        self.wait()  # at most one write in flight: a batch embeds while the one before it is written
        if self._writes is None:
            self._writes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pictrieve-write")
        self._in_flight = self._writes.submit(_write_with_locks, held_write_locks(), write)

    def wait(self) -> None:
        """Wait for the background write in flight, if any; raise its error."""
        future = self._in_flight
        if future is None:
            return
        try:
            future.result()
        except BaseException:
            self._write_failed = True
            raise
        finally:
            if future.done():
                self._in_flight = None

    def close(self) -> None:
        """Stop the writer thread once the write in flight is done (without raising: :meth:`flush` does). Call it
        before the write lock is released, on every way out (an interrupt included)."""
        future, self._in_flight = self._in_flight, None
        if self._writes is not None:
            self._writes.shutdown(wait=True)  # the batch handed to the writer is stored, even on an interrupt
            self._writes = None
        if future is not None and future.exception() is not None:
            logger.warning("a background write failed while indexing stopped: %s", future.exception())

    def _write(self, name: str) -> None:
        view, batch = self.views[name], self._batches[name]
        tensors = [tensor for _, tensor, _ in batch]
        if self.on_embedded is None:
            vectors = view.embedder.embed_preprocessed(tensors)
        else:  # a few images a call, so that a person sees a batch move (a CPU embeds ~2-20 a second);
            # calls that come back quickly (a GPU) double the step, so a fast device soon embeds whole batches
            parts, start, step = [], 0, EMBED_PROGRESS_STEP
            while start < len(tensors):
                began = time.perf_counter()
                parts.append(view.embedder.embed_preprocessed(tensors[start:start + step]))
                start += len(parts[-1])
                self.on_embedded(len(parts[-1]))
                if time.perf_counter() - began < EMBED_QUICK_CALL_S:
                    step *= 2
            vectors = np.concatenate(parts)
        self._batches[name] = []
        unwritten = self._unwritten[name]
        if not unwritten:
            self._unwritten_since[name] = time.monotonic()
        unwritten.extend((id_, vector, meta) for (id_, _, meta), vector in zip(batch, vectors))
        if len(unwritten) >= self.write_rows or time.monotonic() - self._unwritten_since[name] >= WRITE_WAIT_S:
            self._store_embedded(name)

    def _store_embedded(self, name: str) -> None:
        """Write the embedded records of ``name`` gathered so far, in one upsert."""
        rows, self._unwritten[name] = self._unwritten[name], []
        if rows:
            self._submit(functools.partial(self.views[name].upsert, [id_ for id_, _, _ in rows],
                                           np.stack([vector for _, vector, _ in rows]), [meta for _, _, meta in rows]))

    def __enter__(self) -> "BatchWriter":
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        try:
            if kind is None:
                self.flush()
            else:
                self._keep_embedded()
        finally:
            self.close()

    def _keep_embedded(self) -> None:
        """On the way out of an interrupted run, write the records already embedded (not the files still queued
        for the model): an interrupt loses no embedding that a gathered write (:data:`WRITE_ROWS`) held back.
        Not after a write failed (the store is what stopped the run), and never raising over the interrupt."""
        if self._write_failed:
            return
        try:
            self.wait()
            for name in self._unwritten:
                self._store_embedded(name)
            self.wait()
        except Exception as exc:  # noqa: BLE001 - the interrupt is what the caller must see
            logger.warning("the records embedded before indexing stopped were not all written: %s", exc)


def _copy_vectors(view: "ImageWriter", queue: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
    """Store ``(id, source id, metadata)`` records with their sources' stored vectors."""
    sources = list(dict.fromkeys(source for _, source, _ in queue))
    vectors = dict(zip(sources, view.embeddings(sources)))
    view.upsert([id_ for id_, _, _ in queue], np.stack([vectors[source] for _, source, _ in queue]),
                [meta for _, _, meta in queue])


def _write_with_locks(held: frozenset[str], write: Callable[[], Any]) -> Any:
    """``write()`` on the writer thread, under the write locks its caller's thread holds."""
    with sharing_write_locks(held):
        return write()


def embed_and_write(
    targets: Sequence["ImageWriter"],
    todo: list[PlannedFile],
    report: IndexReport,
    batch_size: int,
    workers: int,
    progress: bool,
    max_pixels: int | None,
    budget: "TimeBudget | None" = None,
) -> None:
    """Decode, embed and write the planned files ``todo`` into every view of ``targets`` (the step after
    :func:`start_index`, under the same write turn), counting into ``report``; ``index --watch`` uses it too."""
    from tqdm.auto import tqdm

    load_embedders(targets, progress)
    if any(planned.find_objects for planned in todo):
        photo_evidence.shared_detector()  # made (or fetched) once before any file, not failing each
    embedders = {target.embedder_name: target.embedder for target in targets}
    bar = tqdm(total=len(todo), unit="img", desc="indexing", disable=not progress)
    embedded = 0

    def show_embedded(count: int) -> None:  # the bar counts files read; its note, images embedded
        nonlocal embedded
        embedded += count
        bar.set_postfix_str(f"embedded {embedded}")

    # Writes overlap the next batch on a writer thread only where the store lets that thread share the caller's
    # write turn (a Gallery); the in-memory store's turn is this thread's lock, which a writer thread would wait on.
    background = all(getattr(target, "writes_from_another_thread", False) for target in targets)
    writer = BatchWriter(targets, batch_size, on_embedded=show_embedded if progress else None, background=background,
                         write_rows=WRITE_ROWS if background else None)
    writer.note_run(todo)  # a first index asks the store nothing per photo; a record being rewritten is no source
    with writer, ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="pictrieve-decode") as pool:
        prepare = functools.partial(prepare_file, embedders=embedders, max_pixels=max_pixels,
                                    find_copy=writer.find_copy)
        for seen, (planned, prepared) in enumerate(_prefetch(pool, todo, prepare, window=4 * batch_size), 1):
            bar.update(1)
            if isinstance(prepared, FailedImage):
                report.failed.append(prepared)
                continue
            report.notes.extend(prepared.notes)
            report.text_read += prepared.text_read
            report.objects_found += prepared.objects_found
            if writer.add(prepared):
                report.indexed += 1
            else:
                report.unchanged += 1
            if budget is not None:
                budget.progressed()  # written with its batch below, even when we stop now
                if budget.should_stop() and seen < len(todo):
                    report.stopped_early = True
                    break
    report.copied += writer.copied
    bar.close()


def failed_file(planned: PlannedFile, exc: Exception) -> FailedImage:
    """The report entry of a file :func:`prepare_file` could not read, worded as indexing words it."""
    message = str(exc) if isinstance(exc, ImageDecodeError) else f"{planned.path}: {exc}"
    logger.debug("skipped %s", message)
    return FailedImage(planned.path, message)


def _prefetch(
    pool: ThreadPoolExecutor, todo: Sequence[PlannedFile], prepare: Callable[[PlannedFile], PreparedFile],
    window: int,
) -> Iterator[tuple[PlannedFile, PreparedFile | FailedImage]]:
    """Yield ``(planned, prepare(planned) | its failure)`` in order, keeping ``window`` decodes in flight.

    Any ``Exception`` from a worker (decode errors, permission errors, a file vanishing) becomes a
    reported failure of that one file, never the end of the run.
    """
    pending: deque[tuple[PlannedFile, Future]] = deque()
    queue = iter(todo)
    for planned in queue:
        pending.append((planned, pool.submit(prepare, planned)))
        if len(pending) >= window:
            break
    while pending:
        planned, future = pending.popleft()
        following = next(queue, None)
        if following is not None:
            pending.append((following, pool.submit(prepare, following)))
        try:
            yield planned, future.result()
        except Exception as exc:  # noqa: BLE001 - one bad file must not stop the run
            yield planned, failed_file(planned, exc)


def _vector_fits(record: Mapping[str, Any] | None, digest: str, orientation: int) -> bool:
    """Whether a stored record's vector still stands for the file: same content, and embedded upright (a
    record without ``reader`` was embedded before the loader applied EXIF Orientation, so a photo whose
    Orientation is not 1 was embedded sideways; the others only gain the new fields)."""
    if not record or record.get("sha256") != digest:
        return False
    return record.get("reader") is not None or orientation == 1


PHASH_KEY = "phash"
"""The record field holding the photo's perceptual hash (:func:`~pictrieve.tools.core.perceptual_hash.perceptual_hash`)."""


def caption_metadata(captions: list[str]) -> dict[str, Any]:
    return {"captions": captions, "caption": captions[0]} if captions else {}
