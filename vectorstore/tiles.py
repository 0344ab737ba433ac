"""Smart tiling (NEEDLE, Algorithm 1): index regions of each image, so a small object can match.

A guide image of "a kite" resembles the part of a beach photo where the kite flies far more than the
whole photo. NEEDLE therefore splits every gallery image into tiles at index time, embeds each tile,
and scores an image as its best tile; the whole image is always one of its tiles.

The split (:func:`smart_tiles`) follows the paper's recursion: a region becomes a tile when it holds
at most ``max_objects`` objects or cannot be split further; otherwise it is halved, vertically or
horizontally, whichever divides its objects more evenly, provided both halves keep a sane aspect
ratio and are at least ``min_fraction`` of the image's short side. The paper finds "objects" with
Canny edge detection but leaves the details open; our choices (documented defaults): Canny on a
grey copy whose long side is ``edge_side`` pixels, edges dilated and grouped into connected
components, components smaller than ``min_object_area`` of the image dropped as texture, and an
object counted in a region when its box centre lies inside it. (The authors' research code does no
edge detection at all but tiles a multi-scale grid; their product does not tile.)

Storage: one extra Chroma collection per embedder, ``tiles__...`` beside the gallery's
``images__...`` collection, holding ``{image id}#{n}`` records (``#0`` is the whole image, copied
from the image collection) with the parent id and the box in their metadata. Images whose tiles are
stored are skipped when indexing again, so an interrupted run resumes.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import numpy as np
from PIL import Image

from pictrieve.vectorstore.chroma_store import COLLECTION_PREFIX, Database, existing_client
from pictrieve.vectorstore.errors import GalleryError

if TYPE_CHECKING:
    from pictrieve.vectorstore.store import ImageStore

    class Gallery(ImageStore, Protocol):
        """A view of a Chroma gallery (:class:`~pictrieve.vectorstore.gallery.Gallery`) as the tiles use it: its
        database and HNSW options besides the store's own calls (this module stays below ``gallery.py``)."""

        hnsw: dict[str, Any]

        @property
        def database(self) -> Database: ...

logger = logging.getLogger(__name__)

TILE_PREFIX = "tiles__"
Box = tuple[int, int, int, int]
"""``(left, top, right, bottom)`` in pixels of the original image."""


@dataclass(frozen=True)
class TilingSettings:
    """Parameters of :func:`smart_tiles` (the paper leaves them to the implementer)."""

    max_objects: int = 3
    """A region holding at most this many objects is not split (the paper's ``d``)."""
    min_fraction: float = 0.4
    """A tile's sides are at least this fraction of the image's short side (the paper's ``min_size``)."""
    max_aspect: float = 2.5
    """Longest / shortest side allowed for a tile."""
    edge_side: int = 384
    """Edges are found on a copy whose long side has this many pixels."""
    canny_sigma: float = 2.0
    min_object_area: float = 0.002
    """Edge components covering less than this fraction of the image are texture, not objects."""

    def __post_init__(self) -> None:
        if self.max_objects < 1:
            raise ValueError(f"max_objects must be >= 1, got {self.max_objects}")
        if not 0 < self.min_fraction <= 1:
            raise ValueError(f"min_fraction must be in (0, 1], got {self.min_fraction}")
        if self.max_aspect < 1:
            raise ValueError(f"max_aspect must be >= 1, got {self.max_aspect}")


def edge_objects(image: Image.Image, settings: TilingSettings = TilingSettings()) -> list[Box]:
    """Boxes (in pixels of ``image``) of the connected groups of Canny edges: the "objects"."""
    from scipy import ndimage
    from skimage.feature import canny

    width, height = image.size
    scale = min(1.0, settings.edge_side / max(width, height))
    small = image.convert("L").resize((max(1, round(width * scale)), max(1, round(height * scale))), Image.BILINEAR)
    edges = canny(np.asarray(small, dtype=np.float32) / 255.0, sigma=settings.canny_sigma)
    edges = ndimage.binary_dilation(edges, iterations=2)
    labels, count = ndimage.label(edges)
    if not count:
        return []
    min_pixels = settings.min_object_area * small.width * small.height
    boxes = []
    for index, found in enumerate(ndimage.find_objects(labels), start=1):
        if found is None:
            continue
        rows, cols = found
        area = (rows.stop - rows.start) * (cols.stop - cols.start)
        if area < min_pixels:
            continue
        boxes.append((
            int(cols.start / scale), int(rows.start / scale),
            min(width, int(np.ceil(cols.stop / scale))), min(height, int(np.ceil(rows.stop / scale))),
        ))
    return boxes


def smart_tiles(
    image: Image.Image, settings: TilingSettings = TilingSettings(), objects: Sequence[Box] | None = None
) -> list[Box]:
    """The leaf tiles of ``image`` (Algorithm 1); ``[whole image]`` when it needs no split.

    ``objects`` (boxes in pixels) replaces the Canny objects, e.g. detector boxes.
    """
    width, height = image.size
    boxes = list(edge_objects(image, settings) if objects is None else objects)
    centres = np.array([((b[0] + b[2]) / 2, (b[1] + b[3]) / 2) for b in boxes], dtype=np.float64).reshape(-1, 2)
    min_side = max(1.0, settings.min_fraction * min(width, height))

    def count(x0: float, y0: float, x1: float, y1: float) -> int:
        inside = (centres[:, 0] >= x0) & (centres[:, 0] < x1) & (centres[:, 1] >= y0) & (centres[:, 1] < y1)
        return int(inside.sum())

    def fits(w: float, h: float) -> bool:
        return min(w, h) >= min_side and max(w, h) / min(w, h) <= settings.max_aspect

    tiles: list[Box] = []

    def split(x0: float, y0: float, x1: float, y1: float) -> None:
        w, h = x1 - x0, y1 - y0
        if count(x0, y0, x1, y1) <= settings.max_objects:
            tiles.append((round(x0), round(y0), round(x1), round(y1)))
            return
        xm, ym = x0 + w / 2, y0 + h / 2
        options = []  # (imbalance, prefer the longer side, kind)
        if fits(w / 2, h):
            options.append((abs(count(x0, y0, xm, y1) - count(xm, y0, x1, y1)), -w, "vertical"))
        if fits(w, h / 2):
            options.append((abs(count(x0, y0, x1, ym) - count(x0, ym, x1, y1)), -h, "horizontal"))
        if not options:
            tiles.append((round(x0), round(y0), round(x1), round(y1)))
            return
        kind = min(options)[2]
        if kind == "vertical":
            split(x0, y0, xm, y1)
            split(xm, y0, x1, y1)
        else:
            split(x0, y0, x1, ym)
            split(x0, ym, x1, y1)

    split(0.0, 0.0, float(width), float(height))
    return tiles


# ---------------------------------------------------------------------------------------- storage


def tile_collection_name(image_collection: str) -> str:
    """``tiles__...`` for the image collection ``images__...`` of the same embedder."""
    return TILE_PREFIX + image_collection.removeprefix(COLLECTION_PREFIX)


def parent_of(tile_id: str) -> str:
    """The image id of a tile record id ``{image id}#{n}``."""
    return tile_id.split("#", 1)[0]


class TileSettingsMismatchError(GalleryError):
    """Tiles were stored with other tiling settings than the ones asked for."""


@dataclass
class TileReport:
    """What :func:`index_tiles` did, per embedder."""

    images: int = 0
    tiled: dict[str, int] = field(default_factory=dict)
    """Images newly tiled, per embedder."""
    tiles: dict[str, int] = field(default_factory=dict)
    """Tile records written (whole images included), per embedder."""
    skipped: int = 0
    """Images whose tiles were already stored."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """``(path, reason)`` of images that could not be read."""


class TileIndex:
    """The tiles of one gallery view (one embedder): search them, see what is stored."""

    def __init__(self, gallery: "Gallery") -> None:
        self.gallery = gallery
        self.name = tile_collection_name(gallery.collection_name)
        self._collection: Any = None

    def collection(self, *, create: bool = False, settings: TilingSettings | None = None) -> Any:
        """The tile collection. Reading creates nothing (``None`` when there is none); with ``create``
        a missing one is made (with the database), recording ``settings``."""
        if self._collection is None:
            if not create:
                return self._existing() if self.gallery.exists() else None
            with self.gallery.writing():
                if self._existing() is None:
                    hnsw = {"ef_search": 200, **self.gallery.hnsw, "space": "cosine"}
                    self._collection = existing_client(self.gallery.database).create_collection(
                        self.name, embedding_function=None, configuration={"hnsw": hnsw},
                        metadata={"embedder": self.gallery.embedder_name, "tiling": _settings_key(settings)},
                    )
        return self._collection

    def _existing(self) -> Any:
        client = existing_client(self.gallery.database)
        if self.name in {c.name for c in client.list_collections()}:
            self._collection = client.get_collection(self.name, embedding_function=None)
        return self._collection

    def exists(self) -> bool:
        """Whether tiles were made for this embedder (no ``count()``: it costs ~60 ms at 1M records)."""
        return self.collection() is not None

    def settings_key(self) -> str | None:
        collection = self.collection()
        return None if collection is None else (collection.metadata or {}).get("tiling")

    def tiled_ids(self) -> set[str]:
        """Image ids whose tiles are stored (their whole-image record ``#0`` is)."""
        collection = self.collection()
        if collection is None:
            return set()
        found: set[str] = set()
        offset, page = 0, 5000
        while True:
            batch = collection.get(where={"tile": 0}, limit=page, offset=offset, include=[])
            found.update(parent_of(id_) for id_ in batch["ids"])
            if len(batch["ids"]) < page:
                return found
            offset += page

    def rank_ids(self, vectors: np.ndarray, k: int, tiles_per_image: int = 4) -> list[list[tuple[str, float]]]:
        """For each row of ``vectors``, up to ``k`` images as ``(id, best tile cosine)``, best first.

        Asks for ``k * tiles_per_image`` tiles per vector (the authors' code asks for 4x), so fewer
        than ``k`` images come back when a few images own many of the best tiles.
        """
        collection = self.collection()
        if collection is None:
            raise GalleryError(f"gallery {self.gallery.location} has no tiles for {self.gallery.embedder_name!r}; "
                               "make them with `pictrieve tile GALLERY` (vectorstore.tiles.index_tiles)")
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) == 0:
            return []
        result = collection.query(query_embeddings=vectors.tolist(), n_results=int(k * tiles_per_image),
                                  include=["distances"])
        rankings = []
        for ids, distances in zip(result["ids"], result["distances"]):
            best: dict[str, float] = {}
            for id_, distance in zip(ids, distances):  # best first: an image's first tile is its best
                best.setdefault(parent_of(id_), 1.0 - float(distance))
            rankings.append(list(best.items())[:k])
        return rankings


def _settings_key(settings: TilingSettings | None) -> str:
    values = asdict(settings or TilingSettings())
    return ",".join(f"{key}={values[key]}" for key in sorted(values))


@dataclass
class TileTarget:
    """An image that some embedders hold no tiles of yet: what a tiling worker (a thread here, or a
    process on another machine) needs to know about it. Picklable."""

    id: str
    path: str
    embedders: list[str]
    """Names of the embedders that still need its tiles."""


@dataclass
class TilePlan:
    """What :func:`index_tiles` must do, found without a model and without writing."""

    embedders: list[str]
    settings: TilingSettings
    todo: list[TileTarget] = field(default_factory=list)
    images: int = 0
    skipped: int = 0
    """Images whose tiles every embedder has."""

    def report(self) -> TileReport:
        """The report of a run that has tiled nothing yet (merge the tiled batches into it)."""
        return TileReport(images=self.images, skipped=self.skipped)


def plan_tiles(
    gallery: "Gallery", embedders: Sequence[str] | None = None, settings: TilingSettings | None = None,
    *, limit: int | None = None,
) -> TilePlan:
    """Which images of ``gallery`` (the first ``limit``) each embedder (default: every embedder the
    gallery holds) still needs tiles of. Raises :class:`TileSettingsMismatchError` when tiles were
    stored with other settings. Reads only."""
    settings = settings or TilingSettings()
    names = list(embedders or gallery.embedder_names)
    if not names:
        raise GalleryError(f"gallery {gallery.location} has no images yet; index some before tiling")
    indexes = [TileIndex(gallery.with_embedder(name)) for name in names]
    for index in indexes:
        stored = index.settings_key()
        if stored is not None and stored != _settings_key(settings):
            raise TileSettingsMismatchError(
                f"tiles of {index.gallery.embedder_name!r} in {gallery.location} were made with other settings "
                f"({stored}); keep those settings, or delete collection {index.name!r} to tile again"
            )
    items = list(indexes[0].gallery.items())[:limit]
    done = [index.tiled_ids() for index in indexes]
    plan = TilePlan(embedders=names, settings=settings, images=len(items))
    for item in items:
        missing = [name for name, tiled in zip(names, done) if item.id not in tiled]
        if missing:
            plan.todo.append(TileTarget(item.id, item.path, missing))
    plan.skipped = len(items) - len(plan.todo)
    return plan


def create_tile_collections(gallery: "Gallery", plan: TilePlan) -> list[Any]:
    """The tile collection of each embedder of ``plan``, created (with its settings) where missing:
    the driver of a distributed run calls it before its workers start writing."""
    with gallery.writing():
        return [TileIndex(gallery.with_embedder(name)).collection(create=True, settings=plan.settings)
                for name in plan.embedders]


EMBED_CHUNK = 4
"""Tiles embedded per call: each call is followed by a progress note, so a slow embedder is never silent for long
(about a second a tile with `offline-labels:detect` on a loaded 2-core machine). Calls take tiles across photos;
larger ones measured no faster per tile on ONNX Runtime's CPU trunk (BENCHMARKS.md, `pictrieve tile`)."""

PREPARED_AHEAD = 4
"""Embedder calls whose inputs are prepared ahead of the model (a few: the crops of a call are a few MB)."""

SPLIT_AHEAD = 2
"""Batches of photos loaded and split ahead of the slowest embedder: enough that no embedder waits for the splitter,
few enough that a large gallery's pixels are never all held at once."""


@dataclass
class _Photo:
    """A photo being tiled: its target, pixels, and the boxes of its tiles other than the whole photo."""

    target: TileTarget
    image: Image.Image
    boxes: list[Box]


@dataclass
class _Batch:
    """Photos written together: each embedder writes a batch's tiles in one upsert, its whole-image rows last."""

    targets: list[TileTarget]
    photos: list[_Photo] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    split: bool = False
    """Every photo of the batch is loaded and split (or reported unreadable)."""
    done: int = 0
    """Embedders that have handed over this batch's tiles."""


def prepare_tiles(embedder: Any, photos: Sequence[tuple[Image.Image, Sequence[Box]]]) -> list[list[Any]]:
    """Each photo's tiles (``(photo, boxes)``) made ready for ``embedder.embed_preprocessed``: by the embedder's
    ``preprocess_tiles`` when it has one (it shares work between the tiles of a photo, e.g. ``offline-labels:detect``
    finds objects once per photo), else by ``preprocess`` of each cropped tile."""
    shared = getattr(embedder, "preprocess_tiles", None)
    if shared is not None:
        return shared(photos)
    return [[embedder.preprocess(image.crop(box)) for box in boxes] for image, boxes in photos]


class _Stopped(Exception):
    """Another thread of the run failed: this one ends without finishing its work."""


class _TilingRun:
    """The threads of one :func:`tile_images` call and what they share.

    One thread loads and splits the photos, batch after batch, at most :data:`SPLIT_AHEAD` batches ahead of the
    slowest embedder. Each embedder has two threads: one prepares the inputs of its calls (crops; the objects of
    ``offline-labels:detect``), the other runs its model on them, in the same calls and order as one thread would
    (so the same vectors), and hands each batch's vectors to the calling thread, which alone talks to Chroma (it
    reads the whole-image vectors and writes each batch) and reports progress. So the embedders, and each one's
    preparing and model, run at once: the models release the GIL (ONNX Runtime, OpenCV, numpy), so a machine's
    cores are all used even when each model call keeps to one thread (``OMP_NUM_THREADS=1``)."""

    def __init__(self, views: Sequence["Gallery"], targets: Sequence[TileTarget], settings: TilingSettings,
                 batch_size: int) -> None:
        self.views = list(views)
        self.settings = settings
        self.batches = [_Batch(list(targets[i : i + batch_size])) for i in range(0, len(targets), batch_size)]
        self.total = len(targets)
        self.events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.changed = threading.Condition()
        self.working = [0] * len(self.views)
        """The batch each embedder thread is on (the splitter keeps within :data:`SPLIT_AHEAD` of the lowest)."""
        self.prepared: list[queue.Queue[dict[int, list[Any]]]] = [queue.Queue(PREPARED_AHEAD) for _ in self.views]
        """Per embedder, the prepared inputs of its next calls (see :meth:`prepare`)."""
        self.stopped = False
        self._embedders: dict[int, Any] = {}
        self._embedder_lock = threading.Lock()

    def embedder(self, slot: int) -> Any:
        """Embedder ``slot``'s model, made once for both its threads."""
        with self._embedder_lock:
            if slot not in self._embedders:
                self._embedders[slot] = self.views[slot].embedder
            return self._embedders[slot]

    def _wait(self, ready: Callable[[], bool]) -> None:
        with self.changed:
            self.changed.wait_for(lambda: ready() or self.stopped)
            if self.stopped:
                raise _Stopped

    def stop(self) -> None:
        with self.changed:
            self.stopped = True
            self.changed.notify_all()

    def guarded(self, work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except _Stopped:
                pass
            except BaseException as exc:  # handed to the calling thread, which raises it
                self.events.put(("error", exc))
            finally:
                self.events.put(("exit", None))

        return run

    def split_photos(self) -> None:
        from pictrieve.tools.core.images import ImageDecodeError, load_image

        number = 0
        for index, batch in enumerate(self.batches):
            self._wait(lambda: index <= min(self.working, default=index) + SPLIT_AHEAD)
            for target in batch.targets:
                number += 1
                try:
                    image = load_image(target.path)
                except (ImageDecodeError, OSError) as exc:
                    batch.failed.append((target.path, str(exc)))
                    continue
                boxes = [b for b in smart_tiles(image, self.settings) if b != (0, 0, *image.size)]
                batch.photos.append(_Photo(target, image, boxes))
                self.events.put(("note", f"split {number}/{self.total} photos into tiles"))
            with self.changed:
                batch.split = True
                self.changed.notify_all()

    def chunks(self, slot: int, index: int) -> tuple[list[_Photo], list[tuple[int, int]], list[list[tuple[int, int]]]]:
        """Batch ``index`` as embedder ``slot`` takes it: the photos that need its tiles, their tiles ``(photo, n)``
        and those in calls of :data:`EMBED_CHUNK`, across photos (the same calls however the threads run)."""
        batch = self.batches[index]
        self._wait(lambda: batch.split)
        name = self.views[slot].embedder_name
        whole = [photo for photo in batch.photos if name in photo.target.embedders]
        tiles = [(i, n) for i, photo in enumerate(whole) for n in range(1, len(photo.boxes) + 1)]
        return whole, tiles, [tiles[start : start + EMBED_CHUNK] for start in range(0, len(tiles), EMBED_CHUNK)]

    def prepare(self, slot: int) -> None:
        """Embedder ``slot``'s first thread: the inputs of each call, prepared for the photos the call starts
        (:func:`prepare_tiles`, one call for those photos, so a photo's shared work, such as finding its objects,
        is done once), up to :data:`PREPARED_AHEAD` calls ahead of its model."""
        embedder = self.embedder(slot)
        for index in range(len(self.batches)):
            whole, _, chunks = self.chunks(slot, index)
            started: set[int] = set()
            for chunk in chunks:
                starting = sorted({i for i, _ in chunk} - started)
                started.update(starting)
                ready = prepare_tiles(embedder, [(whole[i].image, whole[i].boxes) for i in starting])
                self._put(self.prepared[slot], dict(zip(starting, ready)))

    def embed(self, slot: int) -> None:
        """Embedder ``slot``'s second thread: each call's tiles through the model, a note after each call, and each
        batch's vectors handed to the calling thread to write."""
        name = self.views[slot].embedder_name
        embedder = self.embedder(slot)
        for index in range(len(self.batches)):
            with self.changed:
                self.working[slot] = index
                self.changed.notify_all()
            whole, tiles, chunks = self.chunks(slot, index)
            vectors = []
            prepared: dict[int, list[Any]] = {}
            done = 0
            for chunk in chunks:
                prepared.update(self._get(self.prepared[slot]))
                vectors.append(embedder.embed_preprocessed([prepared[i][n - 1] for i, n in chunk]))
                for i in {i for i, n in chunk if n == len(whole[i].boxes)}:
                    del prepared[i]  # its last tile is embedded
                done += len(chunk)
                self.events.put(("note", f"{name}: embedded {done}/{len(tiles)} tiles"))
            self.events.put(("write", (slot, index, whole, tiles, vectors)))
        with self.changed:
            self.working[slot] = len(self.batches)
            self.changed.notify_all()

    def _put(self, line: "queue.Queue[Any]", item: Any) -> None:
        while not self.stopped:
            try:
                return line.put(item, timeout=0.1)
            except queue.Full:
                continue
        raise _Stopped

    def _get(self, line: "queue.Queue[Any]") -> Any:
        while not self.stopped:
            try:
                return line.get(timeout=0.1)
            except queue.Empty:
                continue
        raise _Stopped


def tile_images(
    views: Sequence["Gallery"], collections: Sequence[Any], targets: Sequence[TileTarget], settings: TilingSettings,
    *, batch_size: int | None = None, on_progress: Callable[[str], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> TileReport:
    """Tile ``targets`` once and, for each view (one per embedder) that needs an image's tiles, embed
    its tiles and write them to that view's tile ``collections`` entry; return what was done (only
    ``tiled``, ``tiles`` and ``failed`` are filled). Unreadable images are reported, not fatal.

    The targets are written ``batch_size`` at a time (default: all at once), each embedder's batch in one upsert
    whose whole-image rows go in last (they mark an image as tiled, so a killed run tiles the batch again).
    ``on_progress(note)`` hears each image split and each :data:`EMBED_CHUNK` tiles an embedder embedded, and
    ``on_batch(n)`` each batch of ``n`` targets that every embedder has written. The embedders run at once, in
    threads (:class:`_TilingRun`); the callbacks, and every read and write of Chroma, happen in the calling thread.
    """
    from pictrieve.tools.core.model_cache import announcing_model_loads
    from pictrieve.tools.models.embedders.trunk_sharing import sharing_trunk_rows

    note = on_progress or (lambda text: None)
    report = TileReport()
    run = _TilingRun(views, targets, settings, max(1, batch_size or len(targets)))
    workers = [threading.Thread(target=run.guarded(run.split_photos), name="tiles-split", daemon=True)] + [
        threading.Thread(target=run.guarded(lambda slot=slot, stage=stage: stage(slot)),
                         name=f"tiles-{stage.__name__}-{view.embedder_name}", daemon=True)
        for slot, view in enumerate(views) for stage in (run.prepare, run.embed)
    ]
    # efficientnet-lite0 and offline-labels put each tile's centre crop through the same trunk: computed once
    with announcing_model_loads(lambda label: run.events.put(("note", f"loading {label}"))), sharing_trunk_rows():
        for worker in workers:
            worker.start()
        try:
            failure = _serve(run, views, collections, len(workers), note, on_batch, report)
        except BaseException:  # Ctrl-C, or a callback's error: the threads end after their current call
            run.stop()
            raise
    for worker in workers:
        worker.join()
    if failure is not None:
        raise failure
    for batch in run.batches:
        report.failed.extend(batch.failed)
    return report


def _serve(run: _TilingRun, views: Sequence["Gallery"], collections: Sequence[Any], running: int,
           note: Callable[[str], None], on_batch: Callable[[int], None] | None, report: TileReport) -> BaseException | None:
    """The calling thread's part of :func:`tile_images`: pass the notes on, write each batch an embedder hands over,
    count the batches every embedder has written, until every thread has ended; the first error of any of them."""
    failure: BaseException | None = None
    while running:
        kind, payload = run.events.get()
        if kind == "exit":
            running -= 1
        elif kind == "error":
            failure = failure or payload
            run.stop()
        elif kind == "note" and failure is None:
            note(payload)
        elif kind == "write" and failure is None:
            slot, index, whole, tiles, vectors = payload
            try:
                _write_tiles(views[slot], collections[slot], whole, tiles, vectors, report)
            except Exception as exc:
                failure = exc
                run.stop()
                continue
            batch = run.batches[index]
            batch.done += 1
            if batch.done == len(views):
                batch.photos = []  # every embedder is past it: its pixels can go
                if on_batch is not None:
                    on_batch(len(batch.targets))
    return failure


def _write_tiles(view: "Gallery", collection: Any, whole: list[_Photo], tiles: list[tuple[int, int]],
                 vectors: list[np.ndarray], report: TileReport) -> None:
    """Upsert one embedder's tiles of one batch: the whole photos' rows (their stored vectors) after the tiles'."""
    if not whole:
        return
    name = view.embedder_name
    ids = [f"{photo.target.id}#0" for photo in whole] + [f"{whole[i].target.id}#{n}" for i, n in tiles]
    metadatas = [{"parent": photo.target.id, "tile": 0, "box": ""} for photo in whole] + [
        {"parent": whole[i].target.id, "tile": n, "box": ",".join(map(str, whole[i].boxes[n - 1]))}
        for i, n in tiles
    ]
    # Tile rows go in before the whole-image rows that mark an image as done.
    order = list(range(len(whole), len(ids))) + list(range(len(whole)))
    stacked = np.concatenate([view.embeddings([photo.target.id for photo in whole]), *vectors])
    collection.upsert(ids=[ids[i] for i in order], embeddings=stacked[order], metadatas=[metadatas[i] for i in order])
    report.tiled[name] = report.tiled.get(name, 0) + len(whole)
    report.tiles[name] = report.tiles.get(name, 0) + len(ids)


def merge_tile_reports(total: TileReport, part: TileReport) -> None:
    """Add the per-embedder counts and failures of ``part`` (one batch) to ``total``."""
    for name, count in part.tiled.items():
        total.tiled[name] = total.tiled.get(name, 0) + count
    for name, count in part.tiles.items():
        total.tiles[name] = total.tiles.get(name, 0) + count
    total.failed.extend(part.failed)


def index_tiles(
    gallery: "Gallery",
    embedders: Sequence[str] | None = None,
    settings: TilingSettings | None = None,
    *,
    batch_size: int = 16,
    progress: bool = True,
    limit: int | None = None,
) -> TileReport:
    """Tile every image of ``gallery`` and embed the tiles with each of ``embedders`` (default: every
    embedder the gallery holds). Resumable: images already tiled for an embedder are skipped.

    In steps (what a distributed run shares out): :func:`plan_tiles`, :func:`create_tile_collections`,
    then :func:`tile_images` on any share of ``plan.todo``, with :func:`merge_tile_reports`.
    """
    from tqdm.auto import tqdm

    plan = plan_tiles(gallery, embedders, settings, limit=limit)
    report = plan.report()
    views = [gallery.with_embedder(name) for name in plan.embedders]
    with gallery.writing():
        collections = create_tile_collections(gallery, plan)
        # one bar over the photos, its note moved on by every photo split and every few tiles embedded (a batch of
        # photos with three embedders took most of a minute, silent, when the bar counted batches); the embedders
        # run at once, so the note shows where each of them is
        with tqdm(total=len(plan.todo), desc="tiling", unit="photo", disable=not progress) as bar:
            status = ProgressNotes()
            part = tile_images(views, collections, plan.todo, plan.settings, batch_size=batch_size,
                               on_progress=lambda text: bar.set_postfix_str(status.line(text), refresh=True),
                               on_batch=bar.update)
        merge_tile_reports(report, part)
    return report


class ProgressNotes:
    """:func:`tile_images`'s notes as one short line that shows where the splitter and each embedder are (they run
    at once): ``split 40/66, offline 12/53, efficientnet-lite0 8/53, offline-labels:detect 4/53 tiles``, with
    ``loading ...`` in front until the next tiles are embedded."""

    def __init__(self) -> None:
        self.latest: dict[str, str] = {}
        self.loading = ""

    def line(self, note: str) -> str:
        if note.startswith("loading "):
            self.loading = note
        elif ": embedded " in note:
            name, _, rest = note.partition(": embedded ")
            self.latest[name] = f"{name} {rest.split()[0]}"
            self.loading = ""
        else:  # "split 3/66 photos into tiles"
            self.latest[""] = " ".join(note.split()[:2])
        parts = [self.latest[key] for key in sorted(self.latest)]
        line = ", ".join(parts) + (" tiles" if len(parts) > 1 else "")
        return f"{self.loading}; {line}" if self.loading else line
