"""The offline search backend: a folder of pages (HTML, Markdown, text) searched like the web.

Pages are split into passages, embedded with all-MiniLM-L6-v2 (:class:`SentenceEncoder`, local
files only) and stored in a Chroma collection named after the folder's content, so re-opening an
unchanged folder re-uses the index. By default the collection lives in a Chroma database in the
pictrieve cache (or ``$PICTRIEVE_PAGES_DB``); pass ``client=gallery.client`` to keep it in the same database as a gallery.
A result's ``url`` is ``file://`` + the page's absolute path, and its ``text`` is the page's
readable text (no fetching needed).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import Any

from pictrieve.errors import PictrieveError
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

    def __init__(self, folder: str | Path, *, client: Any = None) -> None:
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
        self._client = client or self._default_client()
        self.collection = self._client.get_or_create_collection(
            f"pictrieve-pages-{digest.hexdigest()[:16]}", metadata={"hnsw:space": "cosine"}
        )
        if self.collection.count() == 0:
            self._index()

    @staticmethod
    def _default_client() -> Any:
        import chromadb

        path = Path(os.environ.get("PICTRIEVE_PAGES_DB") or cache_root() / "local-pages")
        path.mkdir(parents=True, exist_ok=True)
        return chromadb.PersistentClient(path=str(path))

    def _index(self) -> None:
        ids, docs, metas = [], [], []
        for url, (title, text) in self.pages.items():
            for number, passage in enumerate(_passages(text)):
                ids.append(f"{url}#{number}")
                docs.append(passage)
                metas.append({"url": url, "title": title})
        logger.info("indexing %d passages of %d pages from %s", len(ids), len(self.pages), self.folder)
        vectors = shared_encoder().encode(docs)
        self.collection.add(ids=ids, documents=docs, metadatas=metas, embeddings=vectors.tolist())

    def search(self, query: str, *, k: int = 6) -> list[SearchResult]:
        """The ``k`` pages whose best passage is closest to ``query`` (best first)."""
        vector = shared_encoder().encode([query])[0].tolist()
        found = self.collection.query(query_embeddings=[vector], n_results=min(self.collection.count(), 4 * k))
        results: list[SearchResult] = []
        seen: set[str] = set()
        for passage, meta, distance in zip(found["documents"][0], found["metadatas"][0], found["distances"][0]):
            url = str(meta["url"])
            if url in seen:
                continue
            seen.add(url)
            title, text = self.pages[url]
            results.append(SearchResult(url=url, title=title, snippet=passage[:300], text=text, score=1.0 - float(distance)))
            if len(results) == k:
                break
        return results
