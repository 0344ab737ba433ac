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
"""

from __future__ import annotations

import json
import logging
import re
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pictrieve.vectorstore.atomic_files import write_atomically
from pictrieve.vectorstore.changes import cannot_save, embedded_location, index_folder, position, read_fields, snapshot
from pictrieve.vectorstore.photo_filter import (
    CAMERA_FIELDS, FOLDER_FIELDS, PLACE_FIELDS, PhotoFilter, TextTerm, bound_seconds, distance_km, local_seconds)

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

    def __len__(self) -> int:
        return len(self._ids) if self._slot is None else len(self._slot)  # after load, every slot is alive

    @property
    def slots(self) -> dict[str, int]:
        if self._slot is None:
            alive = self._alive
            self._slot = {id_: slot for slot, id_ in enumerate(self._ids) if alive[slot]}
        return self._slot

    def save(self, path: Path, cursor: tuple[str, int]) -> None:
        """Write the columns of the records there are now, and ``cursor``, to ``path`` (whole, then renamed)."""
        with self.lock:
            rows = np.flatnonzero(self._alive[: len(self._ids)])
            arrays = {f"n_{key}": self._numbers[key][rows] for key in NUMBER_KEYS}
            arrays.update({f"t_{key}": self._codes[key][rows] for key in TEXT_KEYS})
            ids = np.asarray([self._ids[row] for row in rows], dtype=str)
            vocab = np.asarray(sorted(self._vocab, key=self._vocab.get), dtype=str)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, lambda handle: np.savez(
            handle, ids=ids, vocab=vocab, cursor=np.asarray(json.dumps([STATE_VERSION, *cursor])), **arrays))

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

    def put(self, records: dict[str, tuple[int, dict[str, Any]]]) -> None:
        """Write ``{id: (row, fields)}`` in, replacing what each id had."""
        with self.lock:
            for id_, (_, fields) in records.items():
                slot = self.slots.get(id_)
                if slot is None:
                    slot = len(self._ids)
                    self._grow(slot + 1)
                    self._ids.append(id_)
                    self._slot[id_] = slot
                self._alive[slot] = True
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

    def remove(self, ids: Any) -> None:
        with self.lock:
            for id_ in ids:
                slot = self.slots.pop(id_, None)
                if slot is not None:
                    self._alive[slot] = False

    def passing(self, photo_filter: PhotoFilter) -> list[str]:
        """The ids of the records that pass ``photo_filter``: :meth:`PhotoFilter.accepts`'s rule, in columns."""
        with self.lock:
            rows = np.flatnonzero(self.mask(photo_filter))
            return [self._ids[row] for row in rows]

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
"""2: the local-time and date-source columns (issue 37)."""


def nearest_among(collection: Any, vector: np.ndarray, ids: Sequence[str], n: int, include: Sequence[str]) -> dict[str, Any]:
    """Chroma's ``query`` answer for the ``n`` records of ``ids`` closest to ``vector`` by cosine, scored exactly
    here from their stored vectors (for short lists: see :data:`EXACT_MAX`)."""
    got = collection.get(ids=list(ids), include=["embeddings"]) if len(ids) else {"ids": []}
    if not len(got["ids"]):
        return {"ids": [[]], "distances": [[]], "metadatas": [[]], "embeddings": [[]]}
    vectors = np.asarray(got["embeddings"], dtype=np.float32)
    query = np.asarray(vector, dtype=np.float32).reshape(-1)
    norms = np.linalg.norm(vectors, axis=1) * np.linalg.norm(query)
    distances = 1.0 - (vectors @ query) / np.where(norms > 0, norms, 1.0)
    order = np.argsort(distances, kind="stable")[: int(n)]
    chosen = [got["ids"][i] for i in order]
    metadata = dict(zip(*(lambda found: (found["ids"], found["metadatas"]))(
        collection.get(ids=chosen, include=["metadatas"])))) if chosen else {}
    return {"ids": [chosen], "distances": [[float(distances[i]) for i in order]],
            "metadatas": [[metadata.get(id_) for id_ in chosen]],
            "embeddings": [[vectors[i] for i in order]] if "embeddings" in include else None}


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
        fresh = _brought_up_to_date(location, gallery.collection_name, cached, now)
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


def columns_path(location: str, collection_name: str, collection_id: str) -> Path:
    """Where the filter columns of a collection are saved: in the user's cache, never in the gallery's folder."""
    return index_folder(location, collection_id, INDEX_KIND) / f"{re.sub(r'[^A-Za-z0-9_-]+', '-', collection_name)}.npz"


def _brought_up_to_date(location: str, collection_name: str, cached: _Cached | None,
                        now: tuple[str, int]) -> _Cached | None:
    """The columns this process holds (or the saved ones, or new ones) with the records written since applied;
    ``now``: the collection's :func:`position` just read."""
    collection_id = now[0]
    path = columns_path(location, collection_name, collection_id)
    if cached is None or cached.cursor[0] != collection_id:
        loaded = FilterColumns.load(path)
        cached = _Cached(*loaded) if loaded is not None else None
        if cached is not None and cached.cursor == now:  # saved at the last write (its turn's end): nothing to read
            return cached
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
    if unsaved >= SAVE_AFTER or not same:
        try:
            columns.save(path, cursor)
            unsaved = 0
        except OSError as exc:  # a cache this user may not write: kept in memory only
            cannot_save("the filter columns", location, exc)
    return _Cached(columns, cursor, unsaved)
