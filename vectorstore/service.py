"""The store service: everything a gallery answers beyond its core, written once over any
:class:`~pictrieve.vectorstore.core.StoreCore`.

A backend (Chroma's :class:`~pictrieve.vectorstore.gallery.Gallery`, the in-memory
:class:`~pictrieve.vectorstore.memory_store.MemoryStore`, or a third one) subclasses :class:`StoreService` and
implements the core alone: write, delete, get with a ``where``, vector search with a ``where``, count, its JSON records
and its changes. This class adds, the same way for every backend (as LangChain's ``VectorStore`` builds its searches
on a few abstract methods):

- the view's embedder, made from its name on first use and checked against what is stored, and the other views;
- text, image and hybrid search (the query's vector fused with the photos' own words,
  :func:`~pictrieve.vectorstore.keywords.hybrid_search`), and the plain search every front end makes
  (:meth:`StoreService.search`, through :func:`~pictrieve.vectorstore.search_request.run_search`);
- photo filters (:class:`~pictrieve.vectorstore.photo_filter.PhotoFilter`: the core narrows by their ``where``, or by
  the ids the filter columns pass, and :meth:`~pictrieve.vectorstore.photo_filter.PhotoFilter.accepts` decides),
  relevance marks, folding near-duplicate photos into one hit;
- the default embedder and the small JSON records, reading by ids, indexing, sync.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from PIL import Image

from pictrieve.tools.core.images import load_image
from pictrieve.tools.models.embedders.base import Embedder
from pictrieve.tools.models.embedders.factory import check_embedder_name, create_embedder
from pictrieve.vectorstore.chroma_store import collection_name_for
from pictrieve.vectorstore.core import Candidate, StoreCore, Where
from pictrieve.vectorstore.errors import ImageNotFoundError, QueryError
from pictrieve.vectorstore.filter_index import passing_ids
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.indexing import PHASH_KEY, IndexPlan, IndexReport, Sources, index_sources, plan_index
from pictrieve.vectorstore.photo_filter import PhotoFilter
from pictrieve.vectorstore.reading import GalleryItem
from pictrieve.vectorstore.records import GALLERY_RECORD, USER_PREFIX
from pictrieve.vectorstore.relevance import RelevanceCutoff, cutoff_of
from pictrieve.vectorstore.relevance import mark as mark_relevance
from pictrieve.vectorstore.relevance import only_relevant as relevant_hits
from pictrieve.vectorstore.search_request import SearchAnswer, SearchRequest, run_search
from pictrieve.vectorstore.syncing import check_removal

CORE_MEMBERS = tuple(sorted(name for name, value in vars(StoreCore).items()
                            if not name.startswith("_") and (callable(value) or isinstance(value, property))))
"""The members a backend implements (:class:`~pictrieve.vectorstore.core.StoreCore`'s methods and properties)."""


class StoreService(StoreCore):
    """The searchable gallery (:class:`~pictrieve.vectorstore.store.ImageStore`) over a backend's core: subclass it
    and implement :class:`~pictrieve.vectorstore.core.StoreCore`; call :meth:`_start_view` last in ``__init__``.

    A subclass that leaves a core member out is refused when it is defined (``TypeError`` naming what is missing),
    not at its first search."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        missing = [name for name in CORE_MEMBERS if getattr(cls, name) is getattr(StoreCore, name)]
        if missing:
            raise TypeError(f"{cls.__name__} is a store core without {', '.join(missing)}: implement them "
                            "(see pictrieve.vectorstore.core.StoreCore)")

    writes_from_another_thread = False
    """See :attr:`~pictrieve.vectorstore.core.StoreCore.writes_from_another_thread`: off unless a backend's write
    turn can be shared with indexing's writer thread."""

    _embedder: Embedder | None

    def _start_view(self, embedder: Embedder | str) -> None:
        """Set this view's embedder (a name: the model is made on first use) and check a given model against
        what the gallery stores; the backend's own state is set before."""
        self._embedder = embedder if not isinstance(embedder, str) else None
        self.embedder_name = check_embedder_name(embedder) if isinstance(embedder, str) else embedder.name
        self.collection_name = collection_name_for(self.embedder_name)
        if self._embedder is not None:
            self.check_embedder(self._embedder)

    # ------------------------------------------------------------------ the embedder and the views

    @property
    def embedder(self) -> Embedder:
        """The embedder, created from its name on first use (and checked against what is stored)."""
        if self._embedder is None:
            embedder = create_embedder(self.embedder_name)
            self.check_embedder(embedder)
            self._embedder = embedder
        return self._embedder

    @property
    def embedder_loaded(self) -> bool:
        """Whether :attr:`embedder` is made already (reading it then costs nothing)."""
        return self._embedder is not None

    def views(self, embedders: Sequence[Embedder | str] | None = None) -> list[Any]:
        """This view, then a view through each other embedder in ``embedders`` (names or embedders, one view per
        name): the targets of :meth:`add` and :meth:`plan_index`. An :class:`Embedder` named like this view's
        embedder becomes this view's model."""
        targets: list[Any] = [self]
        for other in embedders or []:
            name = other if isinstance(other, str) else other.name
            if name == self.embedder_name or check_embedder_name(name) == self.embedder_name:
                if not isinstance(other, str):
                    self._embedder = self._embedder or other
                continue
            if name not in {t.embedder_name for t in targets}:
                targets.append(self.with_embedder(other))
        return targets

    @property
    def default_embedder(self) -> str | None:
        """The recorded default embedder's name (``None`` if none was recorded)."""
        return (self.read_record(GALLERY_RECORD) or {}).get("default_embedder")

    def set_default_embedder(self, name: str | None = None, *, keep_existing: bool = False) -> None:
        """Record the embedder used when none is named: ``name``, or this view's. With ``keep_existing`` only when
        none is recorded yet (what the first index does)."""
        name = self.embedder_name if name is None else check_embedder_name(name)
        with self.writing():
            record = self.read_record(GALLERY_RECORD) or {}
            recorded = record.get("default_embedder")
            if recorded != name and not (keep_existing and recorded):
                self.write_record(GALLERY_RECORD, {**record, "default_embedder": name})

    def get_json(self, key: str) -> dict[str, Any] | None:
        """A small JSON record kept with this gallery (``None`` if absent)."""
        return self.read_record(USER_PREFIX + key)

    def put_json(self, key: str, value: dict[str, Any]) -> None:
        """Keep a small JSON record (a dict: trust weights, settings) under ``key``, atomically."""
        if not isinstance(value, dict):
            raise TypeError(f"JSON records are dicts, got {type(value).__name__}")
        self.write_record(USER_PREFIX + key, value)

    # ------------------------------------------------------------------ reading

    def get(self, ids: Sequence[str]) -> list[GalleryItem]:
        """Items for ``ids``, in the same order; an unknown id raises
        :class:`~pictrieve.vectorstore.errors.ImageNotFoundError` (a ``KeyError``)."""
        found = self.get_where(None, ids=ids)
        missing = [id_ for id_ in ids if id_ not in found]
        if missing:
            raise ImageNotFoundError(f"not in gallery {self.location}: {missing[:5]}", location=str(self.location))
        return [GalleryItem(id=id_, path=str(found[id_].get("path", "")), metadata=found[id_]) for id_ in ids]

    def captions(self, id_: str) -> list[str]:
        return self.get([id_])[0].captions

    def metadata_of(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Stored metadata of those of ``ids`` this embedder has, by id (the others are left out)."""
        return self.get_where(None, ids=ids)

    def metadata_where(self, ids: Sequence[str], where: Where = None) -> dict[str, dict[str, Any]]:
        """Stored metadata of those of ``ids`` that pass ``where`` (a Chroma-style filter or a :class:`PhotoFilter`,
        its ``near`` radius checked exactly), by id: the same test a filtered search applies."""
        if not len(ids):
            return {}
        photo_filter = where if isinstance(where, PhotoFilter) else None
        found = self.get_where(photo_filter.where() if photo_filter is not None else where, ids=ids)
        if photo_filter is None:
            return found
        return {id_: meta for id_, meta in found.items() if photo_filter.accepts(meta)}

    def find_content(self, sha256: str, *, other_than: str | None = None) -> tuple[str, dict[str, Any]] | None:
        """A stored record (not ``other_than``) whose file had content ``sha256`` and whose vector was made upright
        (it has ``reader``), as ``(id, metadata)``; ``None`` when there is none. Exact copies and moved files reuse
        its vector (:class:`~pictrieve.vectorstore.indexing.BatchWriter`)."""
        found = self.get_where({"$and": [{"sha256": sha256}, {"reader": {"$gte": 1}}]}, limit=2)
        for other, meta in found.items():
            if other != other_than:
                return other, meta
        return None

    # ------------------------------------------------------------------ searching

    def search(self, query: str | None = None, **request: Any) -> SearchAnswer:
        """The plain search every front end makes (:class:`~pictrieve.vectorstore.search_request.SearchRequest`:
        ``query``, or ``image=``/``vector=``, ``k``, ``filters`` such as ``{"place": "Lisbon"}``, ``hybrid`` (on),
        ``collapse_duplicates``, ``only_relevant``; filters alone browse, newest first), answered as a
        :class:`~pictrieve.vectorstore.search_request.SearchAnswer`: ``.hits``, and ``.why`` when none came back.
        A bad value raises :class:`~pictrieve.vectorstore.search_request.SearchRequestError` naming it."""
        return run_search(self, SearchRequest.of(query=query, **request))

    def search_text(self, query: str, k: int = 10, where: Where = None, *, only_relevant: bool = False,
                    hybrid: bool = False, collapse_duplicates: bool = False) -> list[ImageHit]:
        """The ``k`` images closest to a text query, each marked ``relevant`` or not (see :meth:`search_vector`);
        with ``only_relevant`` the others are dropped. ``where``: a Chroma-style filter or a :class:`PhotoFilter`.

        ``hybrid``: rank by vectors *and* by the photos' own words (folder and file names, captions, place, photo
        text), fused (:func:`~pictrieve.vectorstore.keywords.hybrid_search`; what :meth:`search` and every front end
        do by default). Off here, so the methods that build on this call keep ranking by vectors alone."""
        if not query or not query.strip():
            raise QueryError("empty text query: describe the image you are looking for")
        check_k(k)
        vector = self.embedder.embed_texts([query])[0]
        if hybrid:
            from pictrieve.vectorstore.keywords import hybrid_search  # (keeps opening a gallery light)

            if collapse_duplicates:
                hits = collapsed(self, lambda depth: hybrid_search(self, query, vector, depth, where), int(k))
            else:
                hits = hybrid_search(self, query, vector, k, where)
            return relevant_hits(hits) if only_relevant else hits
        hits = mark_relevance(self.search_vector(vector, k, where, collapse_duplicates=collapse_duplicates),
                              self.relevance_cutoff(), vector, query)  # the query's words let stored objects speak
        return relevant_hits(hits) if only_relevant else hits

    def search_image(self, image: Image.Image | str | os.PathLike, k: int = 10, where: Where = None, *,
                     only_relevant: bool = False, collapse_duplicates: bool = False) -> list[ImageHit]:
        """The ``k`` images closest to a query image (a PIL image or a file path), marked as in
        :meth:`search_vector`."""
        check_k(k)
        if not isinstance(image, Image.Image):
            image = load_image(image)
        return self.search_vector(self.embedder.embed_images([image])[0], k, where, only_relevant=only_relevant,
                                  collapse_duplicates=collapse_duplicates)

    def search_vector(self, vector: np.ndarray | Sequence[float], k: int = 10, where: Where = None, *,
                      only_relevant: bool = False, collapse_duplicates: bool = False) -> list[ImageHit]:
        """The ``k`` images closest to a vector in this view's embedding space, each with ``relevant`` set by
        :meth:`relevance_cutoff`; with ``only_relevant`` those below it are dropped (maybe all).

        ``where`` is a Chroma-style filter or a :class:`PhotoFilter`: the photos passing a photo filter are found in
        numpy columns where the gallery has a change feed (:mod:`~pictrieve.vectorstore.filter_index`) and handed to
        the core's search; elsewhere the core narrows by the filter's ``where`` and :meth:`PhotoFilter.accepts`
        decides on the candidates, more being asked for until ``k`` pass.

        ``collapse_duplicates`` folds each group of near-identical photos (:mod:`~pictrieve.vectorstore.duplicates`:
        perceptual hashes within a few bits, embeddings confirming) into its best-ranked member, whose ``copies``
        lists the others; candidates are fetched until ``k`` distinct photos (and one more, so that the last one's
        copies are in) are found or the gallery has no more, so ``k`` hits come back when there are ``k``."""
        check_k(k)
        photo_filter = where if isinstance(where, PhotoFilter) else None
        allowed = None  # the ids passing a PhotoFilter, from the filter columns (None: the core's ``where`` narrows)
        if photo_filter is not None:
            allowed = None if photo_filter.is_empty else passing_ids(self, photo_filter)
            where = photo_filter.where() if allowed is None else None
        vector = np.asarray(vector, dtype=np.float32).reshape(-1)
        # ``where`` keeps more photos than pass (a box for ``near``, no text, widened local dates): ask for more.
        loose = photo_filter is not None and allowed is None and photo_filter.checked_after_where
        wanted = int(k) * 4 if loose else int(k)
        if collapse_duplicates:
            wanted = max(wanted, 2 * int(k) + 8)
        while True:
            found = self.nearest(vector, wanted, where, among=allowed, with_vectors=collapse_duplicates)
            kept = [row for row in found if photo_filter is None or photo_filter.accepts(row.metadata or {})]
            distinct = collapse(kept) if collapse_duplicates else [(row, []) for row in kept]
            if len(found) < wanted or len(distinct) >= k + int(collapse_duplicates):
                break
            wanted *= 4  # candidates ``where`` kept that fail the filter, or copies: ask for more
        hits = mark_relevance([
            ImageHit.from_record(id_, meta, score=1.0 - float(dist), rank=rank).model_copy(
                update={"copies": [str((other or {}).get("path", "")) for other in copies]} if copies else {})
            for rank, ((id_, meta, dist, _), copies) in enumerate(distinct[: int(k)], 1)
        ], self.relevance_cutoff(), vector)
        return relevant_hits(hits) if only_relevant else hits

    def relevance_cutoff(self) -> RelevanceCutoff:
        """The cutoff that marks this embedder's hits ``relevant``: the one ``pictrieve calibrate`` stored in this
        gallery, else the one shipped for the embedder, else the relative fallback (see
        :mod:`~pictrieve.vectorstore.relevance`). Read on every search (a small record), so a calibration made by
        another process applies at once."""
        return cutoff_of(self)

    # ------------------------------------------------------------------ indexing and sync

    def add(self, sources: Sources, *, embedders: Sequence[Embedder | str] | None = None, batch_size: int = 32,
            workers: int = 2, progress: bool = True, max_pixels: int | None = None, budget: Any = None,
            ocr: bool | None = None, objects: bool | None = None) -> IndexReport:
        """Index images from folders (recursive), globs or files; see :mod:`~pictrieve.vectorstore.indexing`.

        ``embedders`` indexes with several embedders at once (each image decoded once per batch); default: this
        view's embedder. The first index records this view's embedder as the default. ``max_pixels`` caps the size
        of images decoded (see :func:`~pictrieve.tools.core.images.load_image`). ``budget``: a
        :class:`~pictrieve.tools.core.time_budget.TimeBudget` that stops indexing part-way (``report.stopped_early``;
        a re-run goes on). ``ocr``: read the text in photos into each record's ``photo_text`` (the ``ocr`` extra;
        ``False`` stops it; ``None``: as this gallery was last told, off at first). Records of unchanged photos gain
        the text without being re-embedded. ``objects``: the same for the COCO objects of each photo (``objects``,
        :mod:`~pictrieve.vectorstore.photo_evidence`), which the relevance rule reads."""
        return index_sources(self.views(embedders), sources, batch_size=batch_size, workers=workers,
                             progress=progress, max_pixels=max_pixels, budget=budget, ocr=ocr, objects=objects)

    def plan_index(self, sources: Sources, *, embedders: Sequence[Embedder | str] | None = None) -> IndexPlan:
        """What :meth:`add` with these arguments would have to do, found without a model and without writing: the
        files to embed (with their ids, captions and stored records), the unchanged ones, the unreadable ones. See
        :func:`~pictrieve.vectorstore.indexing.plan_index`."""
        return plan_index(self.views(embedders), sources)

    def missing_files(self) -> list[GalleryItem]:
        """Stored images whose files no longer exist (what :meth:`sync` would remove)."""
        return [item for item in self.items() if not Path(item.path).exists()]

    def sync(self, *, dry_run: bool = False, allow_missing_folders: bool = False,
             allow_large: bool = False) -> list[str]:
        """Drop images whose files no longer exist; return the removed paths (with ``dry_run``: the paths that would
        be removed, removing nothing).

        Guarded, because a missing file may only be out of reach: refuses with
        :class:`~pictrieve.vectorstore.errors.MissingFoldersError` when a whole folder of the gallery is gone (an
        unplugged drive) unless ``allow_missing_folders``, and with
        :class:`~pictrieve.vectorstore.errors.LargeRemovalError` when more than
        :data:`~pictrieve.vectorstore.syncing.SYNC_CONFIRM_SHARE` of the gallery would go unless ``allow_large``
        (:func:`~pictrieve.vectorstore.syncing.check_removal`). A refusal removes nothing."""
        gone = self.missing_files()
        if not dry_run:
            check_removal([item.path for item in gone], self.count(),
                          allow_missing_folders=allow_missing_folders, allow_large=allow_large,
                          location=str(self.location))
            self.delete([item.id for item in gone])
        return [item.path for item in gone]


def check_k(k: int) -> None:
    """Refuse ``k`` below 1 with a :class:`QueryError`."""
    if int(k) < 1:
        raise QueryError(f"k must be at least 1 (the number of images to return), got {k}")


def collapsed(store: StoreCore, ranked: Callable[[int], list[ImageHit]], k: int) -> list[ImageHit]:
    """The first ``k`` distinct photos of ``ranked(depth)`` (a ranking function giving its best ``depth`` hits),
    each group of near-duplicates folded into its best member (``copies``), re-ranked 1..k: the depth grows
    until ``k`` distinct photos and one more are found, or the ranking has no more."""
    depth = 2 * k + 8
    while True:
        hits = ranked(depth)
        vectors = store.embeddings([hit.id for hit in hits]) if hits else np.zeros((0, 1), np.float32)
        # the "distance" carried is the hit's position, so each group's row says where its best copy ranked
        distinct = collapse([Candidate(hit.id, hit.metadata, float(at), vector)
                             for at, (hit, vector) in enumerate(zip(hits, vectors))])
        if len(hits) < depth or len(distinct) >= k + 1:
            break
        depth *= 4
    by_id = {hit.id: hit for hit in hits}
    out = []
    for rank, (row, copies) in enumerate(distinct[:k], 1):
        best = hits[int(row[2])]  # the group ranks, and is judged, as its best copy; the copy kept is shown
        out.append(by_id[row[0]].model_copy(update={"rank": rank, "score": best.score, "relevant": best.relevant,
                                                    "copies": [str((m or {}).get("path", "")) for m in copies]}))
    return out


def collapse(found: Sequence[Candidate]) -> list[tuple[Candidate, list[Any]]]:
    """Search candidates, best first, with each group of near-duplicates
    (:func:`~pictrieve.vectorstore.duplicates.confirmed_groups`) folded into one row: ``(row, the other members'
    metadata)`` per distinct photo, in rank order. A group stands where its best-ranked copy stood, with that
    copy's distance, and is shown as the copy the duplicates report keeps
    (:func:`~pictrieve.vectorstore.duplicates.keep_first`: the full-size one, not a half-size copy that happened
    to rank first)."""
    from pictrieve.vectorstore.duplicates import confirmed_groups, keep_first  # (keeps opening a gallery light)

    if len(found) < 2:
        return [(row, []) for row in found]
    vectors = np.asarray([row[3] for row in found], dtype=np.float32)
    groups = confirmed_groups([(row[1] or {}).get(PHASH_KEY) for row in found], vectors)
    leader = list(range(len(found)))
    for members, _, _ in groups:
        for member in members:
            leader[member] = min(members)
    members_of: dict[int, list[int]] = {}
    for index, head in enumerate(leader):
        members_of.setdefault(head, []).append(index)
    out = []
    for head in sorted(members_of):
        members = members_of[head]
        kept = min(members, key=lambda m: keep_first(found[m][1]))
        row = found[kept]
        out.append((Candidate(row[0], row[1], found[head][2], row[3]), [found[m][1] for m in members if m != kept]))
    return out
