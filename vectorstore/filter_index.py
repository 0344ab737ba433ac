"""The photos that pass a :class:`~pictrieve.vectorstore.photo_filter.PhotoFilter`, found in numpy columns.

Chroma answers a ``where`` from its SQLite metadata table before the vector search; at 100,000 records a date
range took seconds there (``$gte``/``$lt`` on an integer scan far more rows than they keep) and an equality on a
string about half a second (BENCHMARKS.md, filtered search). Here each process keeps the fields filters read
(:data:`NUMBER_KEYS`, :data:`TEXT_KEYS`) as numpy columns, tests a filter in a few milliseconds, and hands the
passing ids to Chroma's vector search (``query(ids=...)``, the same allow-list a ``where`` ends in). The columns
decide by :meth:`PhotoFilter.accepts`'s rule, which a ``where`` cannot state (text by word and case aside, countries by
name, dates on each photo's own clock): each distinct stored text is matched once per condition (remembered, so a
later search matches only texts written since) and looked up by code; dates compare ``taken_at_local_ts`` (read from
``taken_at`` for older records) or, for a time with a zone, ``taken_at_ts``; ``near``'s radius is checked exactly on
the box's photos.

The columns are read from the table Chroma answers a ``where`` from (:func:`~pictrieve.vectorstore.changes.read_fields`)
once (about 15 s at 100k records, BENCHMARKS.md; said at INFO with a progress bar), saved in the user's cache (never in
the gallery's folder), and kept up to date as the keyword index is: each filtered search first reads where the
collection's write sequence stands (one tiny query, moved by every writer) and, when it moved, reads the records
written since. Writers do the same at the end of each write turn (:func:`refresh_written`: indexing, a sync, any
write through :class:`~pictrieve.vectorstore.gallery.Gallery`), reading only what the turn wrote, so the first
filtered search of a new process loads saved columns (0.2 s at 100k) instead of reading every record. A ``chroma run`` server, an in-memory store, or a layout this
cannot read, gets ``None``: the store then applies :meth:`PhotoFilter.where` and checks :meth:`PhotoFilter.accepts` on
the candidates.

The columns also keep each record's vector (:mod:`~pictrieve.vectorstore.vector_column`), read from Chroma when they
are saved and saved beside them: up to :data:`COLUMN_EXACT_MAX` passing photos are scored exactly from those
(:func:`nearest_among`), so a new process's first filtered search never loads Chroma's vector index (about 0.6 s at
100k) and reads only the hits' records. A record written since is scored with its vector read from Chroma.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pictrieve.vectorstore.atomic_files import folder_lock, write_atomically
from pictrieve.vectorstore.changes import (
    PROGRESS_AT, cannot_save, embedded_location, index_folder, position, read_fields, snapshot)
from pictrieve.vectorstore.photo_filter import (
    CAMERA_FIELDS, FOLDER_FIELDS, PLACE_FIELDS, PhotoFilter, TextTerm, bound_seconds, distance_km, local_seconds)
from pictrieve.vectorstore.vector_column import VectorColumn

logger = logging.getLogger(__name__)

NUMBER_KEYS: tuple[str, ...] = ("taken_at_ts", "taken_at_local_ts", "gps_lat", "gps_lon")
"""Number columns; ``taken_at_local_ts`` holds :func:`~pictrieve.vectorstore.photo_filter.local_seconds` (read
from ``taken_at`` for a record indexed before the field was stored)."""
TEXT_KEYS: tuple[str, ...] = (*PLACE_FIELDS, *CAMERA_FIELDS, *FOLDER_FIELDS, "taken_at_source")
READ_KEYS: tuple[str, ...] = (*NUMBER_KEYS, *TEXT_KEYS, "taken_at")
"""The stored fields the columns are made from."""

MAX_CACHED = 4
"""Galleries whose columns a process keeps."""

EXACT_MAX = 1000
"""Up to this many passing photos, their vectors are read and scored exactly here: Chroma's search over a short
allow-list took 0.3-1.8 s at 100k records (reading 1,000 vectors: about 0.1 s); above it, Chroma searches them."""

COLUMN_EXACT_MAX = 20000
"""Up to this many passing photos whose vectors the columns hold (:mod:`~pictrieve.vectorstore.vector_column`; at most
:data:`EXACT_MAX` of them read from Chroma), they are scored exactly here: no vector index is loaded or searched
(a new process's first filtered search at 100k loaded Chroma's 170 MB index for it)."""

SAVE_AFTER = 1000
"""Records changed since the columns were last saved before they are saved again (a new process reads the saved
columns, then the records written since)."""

INDEX_KIND = "filters"
"""The kind of index (:func:`~pictrieve.vectorstore.changes.index_folder`) the filter columns are saved as, in the
user's cache."""


class FilterColumns:
    """The filter fields of a collection's records: a slot per record, numbers as float64 (NaN: missing), text as
    codes into one vocabulary (-1: missing)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._ids: list[str] = []
        self._slot: dict[str, int] | None = {}
        """Slot per id; ``None`` after :meth:`load` until a write needs it (a search never does: building it took a
        third of a 100k load)."""
        self._alive = np.zeros(0, bool)
        self._numbers = {key: np.zeros(0) for key in NUMBER_KEYS}
        self._codes = {key: np.zeros(0, np.int32) for key in TEXT_KEYS}
        self._vocab: dict[str, int] = {}
        self._vocab_list: list[str] = []
        self._field_codes: dict[str, dict[int, None]] = {key: {} for key in TEXT_KEYS}
        """Per text field, the codes it has held, in the order first seen (a term is matched against these only)."""
        self._matched: dict[tuple[TextTerm, str], tuple[int, list[int]]] = {}
        """Per (term, field): how many of the field's codes were matched, and those that matched."""
        self.vectors = VectorColumn()
        """Each slot's stored vector, while its record is unchanged (:meth:`nearest` scores with them)."""

    def __len__(self) -> int:
        return len(self._ids) if self._slot is None else len(self._slot)  # after load, every slot is alive

    @property
    def slots(self) -> dict[str, int]:
        if self._slot is None:
            alive = self._alive
            self._slot = {id_: slot for slot, id_ in enumerate(self._ids) if alive[slot]}
        return self._slot

    def save(self, path: Path, cursor: tuple[str, int]) -> None:
        """Write the columns of the records there are now, their vectors (a file beside, named in it), and
        ``cursor``, to ``path`` (each whole, then renamed; one saver at a time)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock, folder_lock(path.parent):
            rows = np.flatnonzero(self._alive[: len(self._ids)])
            arrays = {f"n_{key}": self._numbers[key][rows] for key in NUMBER_KEYS}
            arrays.update({f"t_{key}": self._codes[key][rows] for key in TEXT_KEYS})
            ids = np.asarray([self._ids[row] for row in rows], dtype=str)
            vocab = np.asarray(sorted(self._vocab, key=self._vocab.get), dtype=str)
            arrays.update(self.vectors.save(path, rows, VectorColumn.on_disk(path)))
            write_atomically(path, lambda handle: np.savez(
                handle, ids=ids, vocab=vocab, cursor=np.asarray(json.dumps([STATE_VERSION, *cursor])), **arrays))
            for stale in VectorColumn.stale_files(path, str(arrays["vectors_file"])):
                stale.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: Path) -> tuple["FilterColumns", tuple[str, int]] | None:
        """The columns :meth:`save` wrote and their cursor (``None``: none, or unreadable: read them again)."""
        try:
            with np.load(path, allow_pickle=False) as saved:
                version, collection_id, seq = json.loads(str(saved["cursor"]))
                if version != STATE_VERSION:
                    return None
                columns = cls()
                columns._ids = saved["ids"].tolist()
                columns._slot = None
                columns._alive = np.ones(len(columns._ids), bool)
                columns._numbers = {key: saved[f"n_{key}"].astype(np.float64) for key in NUMBER_KEYS}
                columns._codes = {key: saved[f"t_{key}"].astype(np.int32) for key in TEXT_KEYS}
                columns._vocab = {text: code for code, text in enumerate(saved["vocab"].tolist())}
                # the codes each field holds, in code order (a count per code, the missing code -1 shifted to 0:
                # linear, where np.unique sorted 100k codes per field)
                columns._field_codes = {
                    key: dict.fromkeys(np.flatnonzero(np.bincount(codes + 1, minlength=len(columns._vocab) + 1)[1:]).tolist())
                    for key, codes in columns._codes.items()}
                columns.vectors = VectorColumn.load(path, saved, len(columns._ids))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
            logger.warning("filter columns %s could not be read (%s); reading them again", path, exc)
            return None
        return columns, (str(collection_id), int(seq))

    def known_ids(self) -> set[str]:
        return set(self.slots)

    def _grow(self, size: int) -> None:
        if size <= len(self._alive):
            return
        capacity = max(size, 2 * len(self._alive), 1024)
        extra = capacity - len(self._alive)
        self._alive = np.concatenate([self._alive, np.zeros(extra, bool)])
        for key in NUMBER_KEYS:
            self._numbers[key] = np.concatenate([self._numbers[key], np.full(extra, np.nan)])
        for key in TEXT_KEYS:
            self._codes[key] = np.concatenate([self._codes[key], np.full(extra, -1, np.int32)])
        self.vectors.grow(capacity)

    def put(self, records: dict[str, tuple[int, dict[str, Any]]]) -> None:
        """Write ``{id: (row, fields)}`` in, replacing what each id had."""
        with self.lock:
            written = []
            for id_, (_, fields) in records.items():
                slot = self.slots.get(id_)
                if slot is None:
                    slot = len(self._ids)
                    self._grow(slot + 1)
                    self._ids.append(id_)
                    self._slot[id_] = slot
                self._alive[slot] = True
                written.append(slot)
                for key in NUMBER_KEYS:
                    value = local_seconds(fields) if key == "taken_at_local_ts" else fields.get(key)
                    number = isinstance(value, (int, float)) and not isinstance(value, bool)
                    self._numbers[key][slot] = float(value) if number else np.nan
                for key in TEXT_KEYS:
                    value = fields.get(key)
                    code = self._vocab.setdefault(value, len(self._vocab)) if isinstance(value, str) else -1
                    self._codes[key][slot] = code
                    if code >= 0:
                        self._field_codes[key].setdefault(code)
            self.vectors.forget(written)  # the vector may have changed too: read again when needed

    def remove(self, ids: Any) -> None:
        with self.lock:
            for id_ in ids:
                slot = self.slots.pop(id_, None)
                if slot is not None:
                    self._alive[slot] = False

    def passing(self, photo_filter: PhotoFilter) -> "Passing":
        """The ids of the records that pass ``photo_filter``: :meth:`PhotoFilter.accepts`'s rule, in columns."""
        with self.lock:
            rows = np.flatnonzero(self.mask(photo_filter))
            return Passing([self._ids[row] for row in rows], self, rows)

    def fill_vectors(self, read: "Callable[[list[str]], dict[str, np.ndarray]]", slots: np.ndarray | None = None) -> int:
        """Read the vectors the column lacks (of ``slots``, or of every record) with ``read`` (ids to vectors, as
        Chroma stores them; an id left out: not stored now) and keep them, unless a record changed meanwhile.
        Returns how many were missing."""
        with self.lock:
            slots = np.flatnonzero(self._alive[: len(self._ids)]) if slots is None else slots
            missing = self.vectors.missing(slots)
            ids = [self._ids[slot] for slot in missing]
            generation = self.vectors.generation
        if not ids:
            return 0
        found = read(ids)
        with self.lock:
            if self.vectors.generation == generation:  # else a record changed since: read again next time
                kept = [(slot, found[id_]) for slot, id_ in zip(missing, ids) if id_ in found]
                if kept:
                    self.vectors.put(np.asarray([slot for slot, _ in kept]), np.asarray([v for _, v in kept]))
        return len(ids)

    def nearest(self, rows: np.ndarray, vector: np.ndarray, n: int,
                read: "Callable[[list[str]], dict[str, np.ndarray]]") -> tuple[list[str], np.ndarray, np.ndarray]:
        """The ids, cosine distances and vectors of the ``n`` records at slots ``rows`` closest to ``vector``,
        best first, scored exactly from the vector column (the vectors it lacks read with ``read`` first)."""
        self.fill_vectors(read, rows)
        with self.lock:
            ids = [self._ids[row] for row in rows]
            vectors = None if len(self.vectors.missing(rows)) else self.vectors.rows(rows)
        if vectors is None:  # a record changed meanwhile, or the saved file failed its check: read them all
            found = read(ids)
            kept = [i for i, id_ in enumerate(ids) if id_ in found]
            ids = [ids[i] for i in kept]
            vectors = np.asarray([found[id_] for id_ in ids], dtype=np.float32).reshape(len(ids), -1)
        order, distances = closest(vectors, vector, n)
        return [ids[i] for i in order], distances, vectors[order]

    def mask(self, photo_filter: PhotoFilter) -> np.ndarray:
        """Per slot, whether its record passes ``photo_filter`` (a deleted slot never does)."""
        with self.lock:
            n = len(self._ids)
            mask = self._alive[:n].copy()
            for bound, later in ((photo_filter.after, True), (photo_filter.before, False)):
                if bound is not None:
                    local = bound.tzinfo is None
                    taken = self._numbers["taken_at_local_ts" if local else "taken_at_ts"][:n]
                    limit = bound_seconds(bound)
                    mask &= (taken >= limit) if later else (taken < limit)
            if photo_filter.exif_dates_only and (photo_filter.after or photo_filter.before):
                mask &= self._text_is("taken_at_source", "exif", n)
            if photo_filter.near:
                lat, lon = self._numbers["gps_lat"][:n], self._numbers["gps_lon"][:n]
                (south, north), (west, east) = photo_filter.box()
                mask &= (lat >= south) & (lat <= north)
                mask &= ((lon >= west) & (lon <= east)) if west <= east else ((lon >= west) | (lon <= east))
                near, radius = photo_filter.near, photo_filter.radius_km
                for row in np.flatnonzero(mask):
                    mask[row] = distance_km(near, (float(lat[row]), float(lon[row]))) <= radius
            for term in photo_filter.text_terms():
                mask &= self.term_mask(term, n)
            return mask

    def term_mask(self, term: TextTerm, n: int | None = None) -> np.ndarray:
        """Per slot, whether its record passes one text condition: the term is matched once per distinct text a
        field holds (a few hundred places, cameras, folders; remembered, so a later search matches only texts
        written since), then looked up by code, one array index per record."""
        with self.lock:
            n = len(self._ids) if n is None else n
            vocab = self.vocabulary()
            mask = np.zeros(n, bool)
            for key in term.fields:
                seen = list(self._field_codes[key])
                checked, hits = self._matched.get((term, key), (0, []))
                hits = hits + [code for code in seen[checked:] if term.matches(key, vocab[code])]
                if len(self._matched) > 4096:  # many different terms: start again
                    self._matched.clear()
                self._matched[(term, key)] = (len(seen), hits)
                if hits:
                    table = np.zeros(len(vocab) + 1, bool)  # the last entry answers the missing code, -1
                    table[hits] = True
                    mask |= table[self._codes[key][:n]]
            return mask

    def _text_is(self, key: str, value: str, n: int) -> np.ndarray:
        code = self._vocab.get(value)
        return np.zeros(n, bool) if code is None else self._codes[key][:n] == code

    def vocabulary(self) -> list[str]:
        """The stored texts by code."""
        with self.lock:
            if len(self._vocab_list) != len(self._vocab):
                self._vocab_list = sorted(self._vocab, key=self._vocab.__getitem__)
            return self._vocab_list

    def values(self, key: str, mask: np.ndarray | None = None) -> list[str | None]:
        """The stored text of ``key`` per live slot (``mask``: those slots only), ``None`` where missing."""
        with self.lock:
            n = len(self._ids)
            chosen = self._alive[:n] if mask is None else self._alive[:n] & mask
            vocab = self.vocabulary()
            return [vocab[code] if code >= 0 else None for code in self._codes[key][:n][chosen]]

    def numbers(self, key: str, mask: np.ndarray | None = None) -> np.ndarray:
        """The stored numbers of ``key`` per live slot (``mask``: those slots only), NaN where missing."""
        with self.lock:
            n = len(self._ids)
            chosen = self._alive[:n] if mask is None else self._alive[:n] & mask
            return self._numbers[key][:n][chosen].copy()

    @classmethod
    def of_records(cls, records: Any) -> "FilterColumns":
        """Columns for ``{id: metadata}`` (a store without saved columns: in-memory, a server)."""
        columns = cls()
        columns.put({id_: (0, dict(meta or {})) for id_, meta in records.items()})
        return columns


STATE_VERSION = 2
"""2: the local-time and date-source columns (issue 37); a file of version 2 may name a vector file (issue 40)."""


class Passing(list):
    """The ids of the records that pass a filter (a list), with the columns and slots they were found at, so that
    their vectors can be read from the columns (:func:`nearest_among`)."""

    def __init__(self, ids: list[str], columns: FilterColumns, rows: np.ndarray) -> None:
        super().__init__(ids)
        self.columns = columns
        self.rows = rows


def scored_here(among: Sequence[str]) -> bool:
    """Whether the nearest of the ids ``among`` are scored exactly here (:func:`nearest_among`) rather than searched
    by Chroma among them: up to :data:`EXACT_MAX` of them, or up to :data:`COLUMN_EXACT_MAX` when the filter columns
    hold the vectors of all but :data:`EXACT_MAX` at most."""
    if len(among) <= EXACT_MAX:
        return True
    if not isinstance(among, Passing) or len(among) > COLUMN_EXACT_MAX:
        return False
    with among.columns.lock:
        return len(among.columns.vectors.missing(among.rows)) <= EXACT_MAX


def closest(vectors: np.ndarray, vector: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``vectors`` of the ``n`` closest to ``vector`` by cosine, best first (ties in row order), and
    their cosine distances, as Chroma's cosine space gives them."""
    query = np.asarray(vector, dtype=np.float32).reshape(-1)
    norms = np.linalg.norm(vectors, axis=1) * np.linalg.norm(query)
    distances = 1.0 - (vectors @ query) / np.where(norms > 0, norms, 1.0)
    order = np.argsort(distances, kind="stable")[: int(n)]
    return order, distances[order]


def stored_vectors(collection: Any, ids: Sequence[str], step: int = 1000) -> dict[str, np.ndarray]:
    """The vectors Chroma stores for ``ids`` (those it holds), by id."""
    found: dict[str, np.ndarray] = {}
    for start in range(0, len(ids), step):
        got = collection.get(ids=list(ids[start : start + step]), include=["embeddings"])
        if not len(got["ids"]):
            continue
        found.update(zip(got["ids"], np.asarray(got["embeddings"], dtype=np.float32).reshape(len(got["ids"]), -1)))
    return found


def nearest_among(collection: Any, vector: np.ndarray, ids: Sequence[str], n: int, include: Sequence[str],
                  metadata_of: Callable[[list[str]], dict[str, Any] | None] | None = None) -> dict[str, Any]:
    """Chroma's ``query`` answer for the ``n`` records of ``ids`` closest to ``vector`` by cosine, scored exactly
    here (see :func:`scored_here`): from the filter columns' vectors when ``ids`` came from them (:class:`Passing`;
    those they lack read from Chroma), else from the vectors Chroma stores; then only the chosen records' metadata is
    read, with ``metadata_of`` when given (``None`` from it: ask Chroma). With every vector in the columns, Chroma's
    vector index is neither loaded nor searched."""
    if isinstance(ids, Passing):
        chosen, distances, vectors = ids.columns.nearest(ids.rows, vector, n, lambda some: stored_vectors(collection, some))
    else:
        found = stored_vectors(collection, ids) if len(ids) else {}
        listed = [id_ for id_ in ids if id_ in found]
        stored = np.asarray([found[id_] for id_ in listed], dtype=np.float32).reshape(len(listed), -1)
        order, distances = closest(stored, vector, n)
        chosen, vectors = [listed[i] for i in order], stored[order]
    if not chosen:
        return {"ids": [[]], "distances": [[]], "metadatas": [[]], "embeddings": [[]]}
    metadata = metadata_of(chosen) if metadata_of is not None else None
    if metadata is None:
        got = collection.get(ids=chosen, include=["metadatas"])
        metadata = dict(zip(got["ids"], got["metadatas"]))
    return {"ids": [chosen], "distances": [[float(d) for d in distances]],
            "metadatas": [[metadata.get(id_) for id_ in chosen]],
            "embeddings": [list(vectors)] if "embeddings" in include else None}


@dataclass
class _Cached:
    columns: FilterColumns
    cursor: tuple[str, int]
    unsaved: int = 0


_cache: "OrderedDict[tuple[str, str], _Cached]" = OrderedDict()
_cache_lock = threading.Lock()
_sync_locks: dict[tuple[str, str], threading.Lock] = {}


def passing_ids(gallery: Any, photo_filter: PhotoFilter) -> list[str] | None:
    """The ids of ``gallery``'s records (this embedder's collection) that pass ``photo_filter``, as of now; ``None``
    when the columns cannot be kept for this gallery (a server): filter in the store instead."""
    columns = filter_columns(gallery)
    return None if columns is None else columns.passing(photo_filter)


def filter_columns(gallery: Any) -> FilterColumns | None:
    """The filter columns of ``gallery``'s records, brought up to date with every write since they were read (by any
    writer: the collection's write sequence number in Chroma's file is checked first, one tiny query)."""
    location = embedded_location(gallery)
    if location is None:
        return None
    key = (location, gallery.collection_name)
    now = position(location, gallery.collection_name)
    if now is None:
        return None
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None and cached.cursor == now:
            _cache.move_to_end(key)
            return cached.columns
        lock = _sync_locks.setdefault(key, threading.Lock())
    with lock:
        with _cache_lock:
            cached = _cache.get(key)
        if cached is not None and cached.cursor[0] == now[0] and cached.cursor[1] >= now[1]:
            return cached.columns  # another thread brought them up to date meanwhile
        fresh = _brought_up_to_date(location, gallery.collection_name, cached, now, _vectors_reader(gallery))
        if fresh is None:
            return None
        with _cache_lock:
            _cache[key] = fresh
            _cache.move_to_end(key)
            while len(_cache) > MAX_CACHED:
                _cache.popitem(last=False)
        return fresh.columns


_written: dict[str, dict[str, Any]] = {}
"""Per gallery folder, the views (by collection) whose records this process changed in the write turn going on."""
_written_lock = threading.Lock()


def note_written(gallery: Any) -> None:
    """Remember that ``gallery``'s records changed in this write turn: :func:`refresh_written` at its end brings their
    filter columns up to date."""
    location = embedded_location(gallery)
    if location is not None:
        with _written_lock:
            _written.setdefault(location, {})[gallery.collection_name] = gallery


def refresh_written(gallery: Any) -> None:
    """At the end of a write turn in ``gallery``'s folder (indexing, sync, any write): bring the filter columns of every
    collection written in it up to date, reading only the records written since they were last brought up to date,
    and save them as :func:`filter_columns` does. The first filtered search of a new process then loads the saved
    columns and reads at most :data:`SAVE_AFTER` records, where it read every record before (about 15 s at 100k,
    BENCHMARKS.md). The write is done whatever happens here: a failure is logged, and the next search reads what it
    needs."""
    location = embedded_location(gallery)
    if location is None:
        return
    with _written_lock:
        views = list(_written.pop(location, {}).values())
    for view in views:
        try:
            filter_columns(view)
        except Exception as exc:  # noqa: BLE001 - the columns are a cache; the write stands
            logger.warning("the filter columns of %s were not brought up to date after a write (%s); the next "
                           "filtered search reads what changed", location, exc)


def _vectors_reader(gallery: Any) -> Callable[[list[str]], dict[str, np.ndarray]]:
    """Reads the stored vectors of ids from ``gallery`` (a record deleted meanwhile: none read this time)."""
    from pictrieve.vectorstore.errors import GalleryError

    def read(ids: list[str]) -> dict[str, np.ndarray]:
        if len(ids) >= PROGRESS_AT:
            logger.info("reading the vectors of %d photos of gallery %s for the filter columns (once; then kept "
                        "with them)", len(ids), gallery.location)
        try:
            return dict(zip(ids, gallery.embeddings(ids)))
        except GalleryError as exc:
            logger.debug("vectors of %s not read for the filter columns (%s)", gallery.location, exc)
            return {}

    return read


def _lacking_vectors(columns: FilterColumns) -> int:
    """How many records' vectors ``columns`` lack, when at least :data:`SAVE_AFTER` (columns saved before they kept
    vectors): reading them and saving them again pays once for every later process; else 0."""
    with columns.lock:
        lacking = len(columns.vectors.missing(np.flatnonzero(columns._alive[: len(columns._ids)])))
    return lacking if lacking >= SAVE_AFTER else 0


def columns_path(location: str, collection_name: str, collection_id: str) -> Path:
    """Where the filter columns of a collection are saved: in the user's cache, never in the gallery's folder."""
    return index_folder(location, collection_id, INDEX_KIND) / f"{re.sub(r'[^A-Za-z0-9_-]+', '-', collection_name)}.npz"


def _brought_up_to_date(location: str, collection_name: str, cached: _Cached | None, now: tuple[str, int],
                        read_vectors: Callable[[list[str]], dict[str, np.ndarray]]) -> _Cached | None:
    """The columns this process holds (or the saved ones, or new ones) with the records written since applied;
    ``now``: the collection's :func:`position` just read. Before they are saved, the vectors they lack are read
    with ``read_vectors`` (so that a new process scores from the saved ones)."""
    collection_id = now[0]
    path = columns_path(location, collection_name, collection_id)
    if cached is None or cached.cursor[0] != collection_id:
        loaded = FilterColumns.load(path)
        cached = _Cached(*loaded) if loaded is not None else None
        if cached is not None and cached.cursor == now and not _lacking_vectors(cached.columns):
            return cached  # saved at the last write (its turn's end): nothing to read
    seen = snapshot(location, collection_name, cached.cursor if cached else None)
    if seen is not None and cached is not None and seen.seq < cached.cursor[1]:
        # The database is older than the columns (a folder restored from a backup): read every record again.
        cached, seen = None, snapshot(location, collection_name)
    if seen is None:
        return None
    same = cached is not None and cached.cursor[0] == seen.collection_id
    columns = cached.columns if same else FilterColumns()
    unsaved = (cached.unsaved if same else 0) + len(seen.changed) + len(seen.deleted or ())
    keys = READ_KEYS
    if seen.deleted:
        columns.remove(seen.deleted)
    if seen.changed:
        fields = read_fields(location, collection_name, keys, [r for _, r in seen.changed] if len(columns) else None,
                             what="filter fields")
        if fields is None:
            return None
        columns.put(fields)
        columns.remove(id_ for id_, _ in seen.changed if id_ not in fields)
    if len(columns) != seen.count:  # records were deleted: keep those the collection holds
        everything = read_fields(location, collection_name, keys, what="filter fields")
        if everything is None:
            return None
        known = columns.known_ids()
        columns.remove(known - set(everything))
        columns.put({id_: value for id_, value in everything.items() if id_ not in known})
        unsaved += SAVE_AFTER
    cursor = (seen.collection_id, seen.seq)
    lacking = _lacking_vectors(columns)
    if unsaved >= SAVE_AFTER or not same or lacking:
        try:
            columns.fill_vectors(read_vectors)  # a new process then scores from the saved vectors
            columns.save(path, cursor)
            unsaved = 0
        except OSError as exc:  # a cache this user may not write: kept in memory only
            cannot_save("the filter columns", location, exc)
    return _Cached(columns, cursor, unsaved)
