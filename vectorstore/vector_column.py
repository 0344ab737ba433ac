"""The stored vectors of a gallery's records, kept beside its filter columns, so that a filtered search scores the
photos that pass exactly without Chroma loading its vector index.

A new process's first filtered search at 100k records loaded Chroma's HNSW index (about 170 MB) and searched it,
when the filter had already chosen a few thousand photos (BENCHMARKS.md, first filtered search). The filter columns
(:mod:`~pictrieve.vectorstore.filter_index`) now keep, slot by slot, each record's vector as Chroma's ``get`` returns
it, saved with them as a float32 ``.npy`` file that a new process maps into memory (reading only the rows a search
scores). A slot's vector is trusted only while its record is unchanged: every record the change feed reports as
written since is forgotten here and read again from Chroma when a search or a save needs it. Each saved row carries a
checksum, checked on every row a search reads: a file torn, cut short or changed on disk is never used (the vectors
are read from Chroma instead, and saved again at the next save).
"""

from __future__ import annotations

import logging
import uuid
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
    record last changed). The caller holds the columns' lock."""

    def __init__(self) -> None:
        self._data: np.ndarray | None = None
        """``(capacity, dim)`` float32; a copy-on-write map of the saved file after :meth:`load`."""
        self._have = np.zeros(0, bool)
        self._check = np.zeros(0, np.uint64)
        self.generation = 0
        """Moved by every :meth:`forget`: vectors read from Chroma before a record changed are not put back."""

    def grow(self, capacity: int) -> None:
        extra = capacity - len(self._have)
        if extra > 0:
            self._have = np.concatenate([self._have, np.zeros(extra, bool)])
            self._check = np.concatenate([self._check, np.zeros(extra, np.uint64)])

    def forget(self, slots: Any) -> None:
        """The records at ``slots`` changed: their vectors are read again when needed."""
        self._have[np.asarray(slots, dtype=np.int64)] = False
        self.generation += 1

    def forget_all(self) -> None:
        self._have[:] = False
        self._data = None
        self.generation += 1

    def put(self, slots: np.ndarray, vectors: np.ndarray) -> None:
        """Keep ``vectors`` (as Chroma returned them) for ``slots``."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if not len(slots):
            return
        capacity = len(self._have)
        if self._data is not None and (self._data.shape[1] != vectors.shape[1] or len(self._data) < capacity):
            if self._data.shape[1] != vectors.shape[1]:
                self.forget_all()
            else:  # the columns grew: a larger copy (a mapped file becomes memory here)
                grown = np.zeros((capacity, self._data.shape[1]), np.float32)
                grown[: len(self._data)] = self._data
                self._data = grown
        if self._data is None:
            self._data = np.zeros((capacity, vectors.shape[1]), np.float32)
        self._data[slots] = vectors
        self._check[slots] = row_checksums(vectors)
        self._have[slots] = True

    def missing(self, slots: np.ndarray) -> np.ndarray:
        """Those of ``slots`` without a vector here."""
        return slots[~self._have[slots]]

    def rows(self, slots: np.ndarray) -> np.ndarray | None:
        """The vectors of ``slots`` (each must have one), checked against their checksums; ``None`` when a row does
        not match (the file changed under us): every vector is then forgotten, never trusted."""
        if self._data is None:
            return None
        vectors = np.asarray(self._data[slots], dtype=np.float32)
        if not np.array_equal(row_checksums(vectors), self._check[slots]):
            logger.warning("the saved vectors beside the filter columns do not match their checksums; reading the "
                           "vectors from the gallery instead (they are saved again at the next save)")
            self.forget_all()
            return None
        return vectors

    def save(self, path: Path, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Write the vectors of ``rows`` (the saved slots, in order) to a new file beside ``path`` (whole, then
        renamed) and return what the columns' file records of it (its name, which rows have a vector, checksums)."""
        have = self._have[rows]
        if self._data is None or not have.any():
            return {"vectors_file": np.asarray(""), "vectors_have": np.zeros(len(rows), bool)}
        data = np.zeros((len(rows), self._data.shape[1]), np.float32)
        data[have] = self._data[rows[have]]
        name = f"{path.stem}.vectors-{uuid.uuid4().hex[:12]}.npy"
        write_atomically(path.with_name(name), lambda handle: np.save(handle, data, allow_pickle=False))
        return {"vectors_file": np.asarray(name), "vectors_have": have, "vectors_check": self._check[rows]}

    @staticmethod
    def stale_files(path: Path, keep: str) -> list[Path]:
        """The vector files of ``path``'s columns other than ``keep`` (left by earlier saves)."""
        return [p for p in path.parent.glob(f"{path.stem}.vectors-*.npy") if p.name != keep]

    @classmethod
    def load(cls, path: Path, saved: Any, n: int) -> "VectorColumn":
        """The vectors the columns' file ``saved`` (at ``path``, ``n`` slots) names; none when it names none, or
        when their file is missing, unreadable or not the shape recorded (read from the gallery instead)."""
        column = cls()
        column.grow(n)
        if "vectors_file" not in saved.files or not str(saved["vectors_file"]):
            return column
        file = path.with_name(str(saved["vectors_file"]))
        try:
            have = saved["vectors_have"].astype(bool)
            check = saved["vectors_check"].astype(np.uint64)
            data = np.load(file, mmap_mode="c", allow_pickle=False)
            if data.dtype != np.float32 or data.ndim != 2 or len(data) != n or len(have) != n or len(check) != n:
                raise ValueError(f"{data.shape} {data.dtype}, {n} rows recorded")
        except FileNotFoundError:
            return column  # another process saved newer columns meanwhile and removed this file
        except (OSError, ValueError, KeyError) as exc:
            logger.warning("saved vectors %s could not be used (%s); reading them from the gallery", file, exc)
            return column
        column._data, column._have, column._check = data, have, check
        return column
