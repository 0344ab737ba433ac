"""What PlugIR's nodes read about a gallery's candidate images: stored vectors, captions, caption vectors.

The gallery is a seam (:class:`GalleryLike`). Three per-graph helpers keep what does not change between
rounds, each created by the graph's builder and passed to the nodes that use it:

- :class:`CandidateVectors`: the stored vectors of a round's candidates, fetched once and shared by RCE
  and the filter;
- :class:`CandidateCaptions`: a caption for every candidate (stored, else the captioner's, remembered
  per image in a :class:`DescriptionMemo`, else the file name);
- :class:`CaptionVectors`: caption texts embedded once (candidates of one round are mostly the next's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from pictrieve.vectorstore.hits import ImageHit


class GalleryLike(Protocol):
    """The part of :class:`~pictrieve.vectorstore.store.ImageStore` PlugIR uses (its tests bring a hand-made one)."""

    embedder: Any  # .embed_texts(list[str]) -> (n, dim) float32 unit rows

    def search_vector(self, vector: np.ndarray, k: int = 10) -> list[ImageHit]: ...

    def embeddings(self, ids: Sequence[str] | None = None) -> np.ndarray: ...

    def count(self) -> int: ...


Captioner = Callable[[Sequence[str]], list[str]]
"""``captions = captioner(image_paths)``: for candidates without a stored caption."""


def resolve_captioner(choice: Captioner | str | None, gallery: GalleryLike) -> Captioner | None:
    """The captioner PlugIR uses for candidates without a stored caption.

    ``None`` or ``"none"``: none (file names stand in); ``"auto"``: zero-shot tags in the gallery's
    own text-image space (``tags``, :mod:`pictrieve.tools.models.image_tags`), read from the candidates'
    stored vectors; any other string: a captioner name for
    :func:`pictrieve.tools.models.captioners.create_captioner` (``"tags"``, ``"offline"``, ``"blip:<model>"``);
    a callable (paths -> captions) is used as is. A captioner with ``describe_vectors`` is given the
    stored image vectors instead of the files.
    """
    if choice is None or callable(choice):
        return choice
    if choice == "none":
        return None
    from pictrieve.tools.models.captioners import caption_files, create_captioner

    captioner = create_captioner("tags" if choice == "auto" else choice, embedder=gallery.embedder)
    return captioner if hasattr(captioner, "describe_vectors") else caption_files(captioner)


class CandidateVectors:
    """Stored vectors of a round's candidates, fetched once and shared by RCE and the filter.

    Keyed by the candidates' ids, so concurrent sessions never see each other's rows; only the last
    few rounds are kept.
    """

    def __init__(self, gallery: GalleryLike, keep: int = 8) -> None:
        self.gallery = gallery
        self.keep = keep
        self._rows: dict[tuple[str, ...], np.ndarray] = {}

    def __call__(self, candidates: Sequence[ImageHit]) -> np.ndarray:
        key = tuple(c.id for c in candidates)
        rows = self._rows.get(key)
        if rows is None:
            rows = self.gallery.embeddings(list(key))
            self._rows[key] = rows
            while len(self._rows) > self.keep:
                self._rows.pop(next(iter(self._rows)))
        return rows


class CaptionVectors:
    """Caption texts embedded by ``embedder``, each once: candidates of one round are mostly the next
    round's too, so their caption vectors are kept (per text) instead of re-embedded every round."""

    def __init__(self, embedder: Any, keep: int = 50_000) -> None:
        self.embedder = embedder
        self.keep = keep
        self._vectors: dict[str, np.ndarray] = {}

    def __call__(self, texts: list[str]) -> np.ndarray:
        if len(self._vectors) > self.keep:  # bounded for long-lived served graphs
            self._vectors.clear()
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            self._vectors.update(zip(missing, np.asarray(self.embedder.embed_texts(missing))))
        return np.stack([self._vectors[t] for t in texts])


class DescriptionMemo(dict):
    """Captioner output by image id, the oldest forgotten past ``keep`` entries."""

    def __init__(self, keep: int = 20_000) -> None:
        super().__init__()
        self.keep = keep

    def remember(self, id_: str, text: str) -> None:
        self[id_] = text
        while len(self) > self.keep:
            del self[next(iter(self))]


def fill_captions(candidates: Sequence[ImageHit], captioner: Captioner | None,
                  vectors_of: Callable[[Sequence[ImageHit]], np.ndarray] | None = None,
                  memo: DescriptionMemo | None = None) -> tuple[list[str], list[int]]:
    """Captions for every candidate, and the indices whose caption describes the image.

    Stored captions come first, then the captioner's (from the stored vectors when it has
    ``describe_vectors``, else from the files; remembered in ``memo`` by image id); file names fill
    the rest but are not used as RCE probes (those candidates are probed with their image vector).
    """
    captions = [c.caption or (memo or {}).get(c.id, "") for c in candidates]
    missing = [i for i, c in enumerate(captions) if not c]
    if missing and captioner is not None:
        if hasattr(captioner, "describe_vectors") and vectors_of is not None:
            texts = captioner.describe_vectors(vectors_of(candidates)[missing])
        else:
            texts = captioner([candidates[i].path for i in missing])
        for i, text in zip(missing, texts):
            captions[i] = text
            if memo is not None and text:
                memo.remember(candidates[i].id, text)
    described = [i for i, text in enumerate(captions) if text]
    for i in missing:
        if not captions[i]:
            # Deliberate difference: without a captioner we describe the image by its file name.
            captions[i] = Path(candidates[i].path or candidates[i].id).stem.replace("_", " ")
    return captions, described


class CandidateCaptions:
    """:func:`fill_captions` with one graph's captioner, stored vectors and memo: a photo's description
    does not change, so each is described once per compiled graph, not in every node and round that
    reads it (the offline questioner reads them twice a round)."""

    def __init__(self, captioner: Captioner | None, vectors_of: CandidateVectors,
                 memo: DescriptionMemo | None = None) -> None:
        self.captioner = captioner
        self.vectors_of = vectors_of
        self.memo = DescriptionMemo() if memo is None else memo

    @property
    def reads_vectors(self) -> bool:
        """Whether the captioner describes stored vectors (cheap, as tags do) rather than files."""
        return self.captioner is not None and hasattr(self.captioner, "describe_vectors")

    def __call__(self, candidates: Sequence[ImageHit], *, caption: bool = True) -> tuple[list[str], list[int]]:
        """``(captions, described)`` of :func:`fill_captions`; ``caption=False``: stored and remembered
        descriptions only (file names for the rest), the captioner is not run."""
        return fill_captions(candidates, self.captioner if caption else None, self.vectors_of, self.memo)


def score_spread(scores: np.ndarray) -> float:
    """The standard deviation of the candidates' scores (the unit of the offline questioner's weights
    and temperature); a small floor keeps it positive when they are all alike."""
    return max(float(np.std(scores)), 1e-4) if len(scores) else 1.0
