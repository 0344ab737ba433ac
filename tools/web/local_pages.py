"""The offline search backend: a folder of pages (HTML, Markdown, text) searched like the web.

Pages are split into passages, embedded with all-MiniLM-L6-v2 (:class:`SentenceEncoder`, local
files only) and searched exactly (a matrix product: a folder of pages holds thousands of passages, not
millions, and an approximate index would only lose some). The passage vectors are kept in a file named
after the folder's content, so re-opening an unchanged folder re-uses them; the files live in the
pictrieve cache (or ``$PICTRIEVE_PAGES_DB``). A result's ``url`` is ``file://`` + the page's absolute
path, and its ``text`` is the page's readable text (no fetching needed).

No vector database here: Chroma is the galleries' store and stays behind ``vectorstore/`` (this module is
below it), and the pages' vectors are a cache, not a store.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.files import atomic_write_bytes
from pictrieve.tools.core.model_cache import shared_model
from pictrieve.tools.core.pypi_assets import cache_root
from pictrieve.tools.models.sentence_encoder import SentenceEncoder
from pictrieve.tools.web.fetch import extract_text
from pictrieve.tools.web.results import SearchResult

logger = logging.getLogger(__name__)

PAGE_SUFFIXES = {".html": "text/html", ".htm": "text/html", ".md": "text/markdown", ".markdown": "text/markdown",
                 ".txt": "text/plain"}
PASSAGE_CHARS = 600


class PageFolderError(PictrieveError, ValueError):
    """The local page folder is missing or holds no pages."""


class SerialEncoder:
    """A :class:`SentenceEncoder` used one call at a time, on one BLAS thread.

    Why: the Vision Search Assistant's searchers run in parallel threads, and each numpy matmul
    of the encoder starts OpenBLAS's own thread pool; on a busy 2-core machine this oversubscribes
    the cores and encoding ten sentences took 5 to 13 s instead of 0.3 s (measured). Small
    batches gain nothing from BLAS threads, so one thread at a time is also the fastest.
    """

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.dim = encoder.dim
        self._lock = threading.Lock()

    def encode(self, texts: Any, batch_size: int = 64) -> Any:
        from threadpoolctl import threadpool_limits

        with self._lock, threadpool_limits(limits=1, user_api="blas"):
            return self.encoder.encode(texts, batch_size=batch_size)


def shared_encoder() -> SerialEncoder:
    """The process's one all-MiniLM-L6-v2 encoder, used serially (see :class:`SerialEncoder`).

    It wraps the shared sentence encoder (the offline embedder's and the exemplar visualizer's), so
    the weights are loaded once per process whoever asks first.
    """
    return shared_model(("serial-sentence-encoder",), lambda: SerialEncoder(shared_model(("sentence-encoder",), SentenceEncoder)))


def _passages(text: str, size: int = PASSAGE_CHARS) -> list[str]:
    paragraphs = [p.strip() for p in text.split("\n") if p.strip()]
    out, current = [], ""
    for paragraph in paragraphs:
        if current and len(current) + len(paragraph) > size:
            out.append(current)
            current = ""
        current = f"{current}\n{paragraph}".strip()
    if current:
        out.append(current)
    return out


def page_folder(folder: str | Path) -> Path:
    """``folder`` resolved, or :class:`PageFolderError` when it is not a folder."""
    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        raise PageFolderError(f"no page folder at {path}; give local:DIR with a folder of .html/.md/.txt pages")
    return path


class LocalPages:
    """``search(query, k)`` over the pages in ``folder`` (see the module docstring)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = page_folder(folder)
        self.name = f"local:{self.folder}"
        self.pages: dict[str, tuple[str, str]] = {}
        for path in sorted(self.folder.rglob("*")):
            kind = PAGE_SUFFIXES.get(path.suffix.lower())
            if kind and path.is_file():
                title, text = extract_text(path.read_text(encoding="utf-8", errors="replace"), kind, path.as_uri())
                self.pages[path.as_uri()] = (title or path.stem, text)
        if not self.pages:
            raise PageFolderError(f"{self.folder} holds no .html, .md or .txt pages")
        digest = hashlib.sha1()
        for url, (title, text) in self.pages.items():
            digest.update(f"{url}\0{title}\0{text}\0".encode())
        self.urls: list[str] = []
        self.passages: list[str] = []
        for url, (_, text) in self.pages.items():
            for passage in _passages(text):
                self.urls.append(url)
                self.passages.append(passage)
        self.vectors = self._vectors(digest.hexdigest()[:16])

    def _vectors(self, key: str) -> np.ndarray:
        """The passages' unit vectors, read from the cache file of this content or embedded and kept there."""
        folder = Path(os.environ.get("PICTRIEVE_PAGES_DB") or cache_root() / "local-pages")
        path = folder / f"minilm-l6-{key}-{len(self.passages)}.npy"  # the encoder is fixed: all-MiniLM-L6-v2
        if path.is_file():
            try:
                vectors = np.load(path, allow_pickle=False)
                if vectors.shape[0] == len(self.passages):
                    return vectors
            except (OSError, ValueError) as error:
                logger.info("re-embedding the pages of %s: their cached vectors are unreadable (%s)", self.folder, error)
        logger.info("embedding %d passages of %d pages from %s", len(self.passages), len(self.pages), self.folder)
        vectors = np.asarray(shared_encoder().encode(self.passages), dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        buffer = io.BytesIO()
        np.save(buffer, vectors, allow_pickle=False)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buffer.getvalue())
        return vectors

    def search(self, query: str, *, k: int = 6) -> list[SearchResult]:
        """The ``k`` pages whose best passage is closest to ``query`` (best first)."""
        vector = np.asarray(shared_encoder().encode([query])[0], dtype=np.float32)
        scores = self.vectors @ (vector / max(float(np.linalg.norm(vector)), 1e-12))
        order = np.argsort(-scores, kind="stable")
        results: list[SearchResult] = []
        seen: set[str] = set()
        for i in order:
            url, passage = self.urls[i], self.passages[i]
            if url in seen:
                continue
            seen.add(url)
            title, text = self.pages[url]
            results.append(SearchResult(url=url, title=title, snippet=passage[:300], text=text, score=float(scores[i])))
            if len(results) == k:
                break
        return results
