"""The stored vectors of a gallery's records, kept beside its filter columns, so that a filtered search scores the
photos that pass exactly without Chroma loading its vector index.

A new process's first filtered search at 100k records loaded Chroma's HNSW index (about 170 MB) and searched it,
when the filter had already chosen a few thousand photos (BENCHMARKS.md, first filtered search). The filter columns
(:mod:`~pictrieve.vectorstore.filter_index`) now keep, slot by slot, each record's vector as Chroma's ``get`` returns
it, saved with them in a file of raw float32 rows that a new process maps into memory (reading only the rows a search
scores). A save appends the vectors read since the last one to that file (a 100k gallery's file is 154 MB: rewriting
it at every write turn would cost more than the turn) and the columns' file, written whole and renamed, names the
row of each record; rows no record names any more are left until they are half the file, which is then written anew.
Rows past the length the columns' file records (an append cut short by a crash) are never read and are overwritten
by the next append. A slot's vector is trusted only while its record is unchanged: every record the change feed
reports as written since is forgotten here and read again from Chroma when a search or a save needs it. Each saved
row carries a checksum, checked on every row a search reads: a file changed, cut short or replaced on disk is never
used (the vectors are read from Chroma instead, and written anew at the next save).
"""

from __future__ import annotations

import logging
import os
import uuid
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from pictrieve.vectorstore.atomic_files import write_atomically

logger = logging.getLogger(__name__)


def row_checksums(vectors: np.ndarray) -> np.ndarray:
    """Per row, the sum of its 32-bit words (uint64): cheap enough to check on every row a search reads."""
    words = np.ascontiguousarray(vectors, dtype=np.float32).view(np.uint32)
    return np.add.reduce(words, axis=1, dtype=np.uint64) if words.ndim == 2 else np.zeros(0, np.uint64)


class VectorColumn:
    """A vector per slot of :class:`~pictrieve.vectorstore.filter_index.FilterColumns`, or none (not read since its
    record last changed): a row of the saved file, or a row in memory read since. The caller holds the columns' lock
    (and, to save, the folder's lock)."""

    def __init__(self) -> None:
        self._file: np.ndarray | None = None
        """The saved rows, mapped read-only (``(length, dim)``), and the file's name."""
        self._file_name = ""
        self._file_row = np.zeros(0, np.int64)
        """Per slot, its row in the saved file (-1: none, or its vector is in memory)."""
        self._memory: np.ndarray | None = None
        """``(capacity, dim)``: the vectors read since the file was saved, by slot."""
        self._have = np.zeros(0, bool)
        self._check = np.zeros(0, np.uint64)
        self.generation = 0
        """Moved by every :meth:`forget`: vectors read from Chroma before a record changed are not put back."""

    @property
    def dim(self) -> int | None:
        source = self._file if self._file is not None else self._memory
        return None if source is None else int(source.shape[1])

    def grow(self, capacity: int) -> None:
        extra = capacity - len(self._have)
        if extra > 0:
            self._have = np.concatenate([self._have, np.zeros(extra, bool)])
            self._check = np.concatenate([self._check, np.zeros(extra, np.uint64)])
            self._file_row = np.concatenate([self._file_row, np.full(extra, -1, np.int64)])

    def forget(self, slots: Any) -> None:
        """The records at ``slots`` changed: their vectors are read again when needed."""
        slots = np.asarray(slots, dtype=np.int64)
        self._have[slots] = False
        self._file_row[slots] = -1
        self.generation += 1

    def forget_all(self) -> None:
        self._have[:] = False
        self._file_row[:] = -1
        self._file, self._file_name, self._memory = None, "", None
        self.generation += 1

    def put(self, slots: np.ndarray, vectors: np.ndarray) -> None:
        """Keep ``vectors`` (as Chroma returned them) for ``slots``."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if not len(slots):
            return
        if self.dim is not None and self.dim != vectors.shape[1]:
            self.forget_all()
        capacity = len(self._have)
        if self._memory is None or len(self._memory) < capacity:
            grown = np.zeros((capacity, vectors.shape[1]), np.float32)
            if self._memory is not None:
                grown[: len(self._memory)] = self._memory
            self._memory = grown
        self._memory[slots] = vectors
        self._check[slots] = row_checksums(vectors)
        self._file_row[slots] = -1
        self._have[slots] = True

    def missing(self, slots: np.ndarray) -> np.ndarray:
        """Those of ``slots`` without a vector here."""
        return slots[~self._have[slots]]

    def rows(self, slots: np.ndarray) -> np.ndarray | None:
        """The vectors of ``slots`` (each must have one), checked against their checksums; ``None`` when a row does
        not match (the file changed under us): every vector is then forgotten, never trusted."""
        dim = self.dim
        if dim is None:
            return None
        vectors = np.empty((len(slots), dim), np.float32)
        in_file = self._file_row[slots] >= 0
        if in_file.any():
            vectors[in_file] = self._file[self._file_row[slots[in_file]]]
        if not in_file.all():
            vectors[~in_file] = self._memory[slots[~in_file]]
        if not np.array_equal(row_checksums(vectors), self._check[slots]):
            logger.warning("the saved vectors beside the filter columns do not match their checksums; reading the "
                           "vectors from the gallery instead (they are written anew at the next save)")
            self.forget_all()
            return None
        return vectors

    def save(self, path: Path, rows: np.ndarray, saved: dict[str, Any]) -> dict[str, np.ndarray]:
        """Write the vectors of ``rows`` (the saved slots, in order) beside ``path``: appended to the vector file the
        columns' file on disk names (``saved``: its ``vectors_file`` and ``vectors_length``), or a new file when that
        is not the one this process maps or would be half rows no record names; returns what the columns' file
        records of them (the file's name and trusted length, each saved slot's row, checksums)."""
        have = self._have[rows]
        dim = self.dim
        if dim is None or not have.any():
            return {"vectors_file": np.asarray(""), "vectors_rows": np.full(len(rows), -1, np.int64)}
        length = int(saved.get("vectors_length", 0)) if saved.get("vectors_file") == self._file_name else -1
        live = int((self._file_row[rows] >= 0).sum())
        fresh = (self._file is None or length < len(self._file) or int(saved.get("vectors_dim", dim)) != dim
                 or live < length // 2)
        if fresh:
            name, start = f"{path.stem}.vectors-{uuid.uuid4().hex[:12]}.f32", 0
            chosen = rows[have]
            data = self.rows(chosen)
            if data is None:
                return self.save(path, rows, saved)
            write_atomically(path.with_name(name), lambda handle: handle.write(data.tobytes()))
            self._file_row[chosen] = np.arange(len(chosen))
        else:
            name, start = self._file_name, length
            chosen = rows[have & (self._file_row[rows] < 0)]  # read since the file was written
            if len(chosen):
                data = np.ascontiguousarray(self._memory[chosen])
                with open(path.with_name(name), "r+b") as handle:
                    handle.truncate(start * dim * 4)  # rows past the recorded length: an append cut short
                    handle.seek(start * dim * 4)
                    handle.write(data.tobytes())
                    handle.flush()
                    os.fsync(handle.fileno())
                self._file_row[chosen] = start + np.arange(len(chosen))
        total = start + len(chosen)
        self._file_name = name
        self._file = np.memmap(path.with_name(name), dtype=np.float32, mode="r", shape=(total, dim)) if total else None
        return {"vectors_file": np.asarray(name), "vectors_length": np.asarray(total), "vectors_dim": np.asarray(dim),
                "vectors_rows": self._file_row[rows].copy(), "vectors_check": self._check[rows]}

    @staticmethod
    def on_disk(path: Path) -> dict[str, Any]:
        """The vector file the columns' file at ``path`` names now, and its recorded length (empty: none)."""
        try:
            with np.load(path, allow_pickle=False) as saved:
                if "vectors_file" in saved.files and "vectors_length" in saved.files:
                    return {"vectors_file": str(saved["vectors_file"]), "vectors_length": int(saved["vectors_length"]),
                            "vectors_dim": int(saved["vectors_dim"])}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            pass
        return {}

    @staticmethod
    def stale_files(path: Path, keep: str) -> list[Path]:
        """The vector files of ``path``'s columns other than ``keep`` (left by earlier saves)."""
        return [p for p in path.parent.glob(f"{path.stem}.vectors-*") if p.name != keep and not p.name.startswith(".")]

    @classmethod
    def load(cls, path: Path, saved: Any, n: int) -> "VectorColumn":
        """The vectors the columns' file ``saved`` (at ``path``, ``n`` slots) names; none when it names none, or
        when their file is missing, shorter than recorded or unreadable (read from the gallery instead)."""
        column = cls()
        column.grow(n)
        if "vectors_file" not in saved.files or not str(saved["vectors_file"]):
            return column
        name = str(saved["vectors_file"])
        try:
            length, dim = int(saved["vectors_length"]), int(saved["vectors_dim"])
            file_row = saved["vectors_rows"].astype(np.int64)
            check = saved["vectors_check"].astype(np.uint64)
            if len(file_row) != n or len(check) != n or (len(file_row) and int(file_row.max()) >= length):
                raise ValueError(f"{len(file_row)} rows recorded for {n} records")
            mapped = np.memmap(path.with_name(name), dtype=np.float32, mode="r", shape=(length, dim)) if length else None
        except FileNotFoundError:
            return column  # another process wrote a new file meanwhile and removed this one
        except (OSError, ValueError, KeyError) as exc:
            logger.warning("saved vectors %s could not be used (%s); reading them from the gallery", name, exc)
            return column
        column._file, column._file_name = mapped, name
        column._file_row, column._have, column._check = file_row, file_row >= 0, check
        return column
