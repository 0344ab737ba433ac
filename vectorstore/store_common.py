"""What every :class:`~pictrieve.vectorstore.store.ImageStore` implementation shares, written once over the
protocol: the checks on a request, text and image search on top of the store's own ``search_vector`` (hybrid
keyword fusion included), folding near-duplicate photos into one hit, the views of a gallery, and sync."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image

from pictrieve.tools.core.images import load_image
from pictrieve.tools.models.embedders.factory import check_embedder_name
from pictrieve.vectorstore.errors import QueryError
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.indexing import PHASH_KEY
from pictrieve.vectorstore.relevance import mark as mark_relevance
from pictrieve.vectorstore.relevance import only_relevant as relevant_hits
from pictrieve.vectorstore.syncing import check_removal


def views_of(store: Any, embedders: Sequence[Any] | None, adopt: Callable[[Any], None]) -> list[Any]:
    """``store``, then a view through each other embedder in ``embedders`` (names or embedders, one view
    per name): the targets of indexing. An :class:`Embedder` named like ``store``'s own is handed to ``adopt`` (it
    becomes that view's model)."""
    targets = [store]
    for other in embedders or []:
        name = other if isinstance(other, str) else other.name
        if name == store.embedder_name or check_embedder_name(name) == store.embedder_name:
            if not isinstance(other, str):
                adopt(other)
            continue
        if name not in {t.embedder_name for t in targets}:
            targets.append(store.with_embedder(other))
    return targets


def missing_files(store: Any) -> list[Any]:
    """``store``'s items whose files no longer exist (what :func:`sync_store` would remove)."""
    return [item for item in store.items() if not Path(item.path).exists()]


def sync_store(store: Any, *, dry_run: bool, allow_missing_folders: bool, allow_large: bool) -> list[str]:
    """:meth:`ImageStore.sync <pictrieve.vectorstore.store.ImageStore.sync>`: drop the images whose files no longer
    exist, behind the guard of :func:`~pictrieve.vectorstore.syncing.check_removal` (a refusal removes nothing);
    return their paths (with ``dry_run``: the paths that would go, removing nothing)."""
    gone = missing_files(store)
    if not dry_run:
        check_removal([item.path for item in gone], store.count(), allow_missing_folders=allow_missing_folders,
                      allow_large=allow_large, location=str(store.location))
        store.delete([item.id for item in gone])
    return [item.path for item in gone]


def check_k(k: int) -> None:
    """Refuse ``k`` below 1 with a :class:`QueryError`."""
    if int(k) < 1:
        raise QueryError(f"k must be at least 1 (the number of images to return), got {k}")


def text_search(store: Any, query: str, k: int, where: Any, *, only_relevant: bool, hybrid: bool,
                collapse_duplicates: bool) -> list[ImageHit]:
    """:meth:`ImageStore.search_text <pictrieve.vectorstore.store.ImageStore.search_text>` over ``store``'s
    ``search_vector``: the query embedded by the store's embedder, with ``hybrid`` fused with the photos' own
    words (:func:`~pictrieve.vectorstore.keywords.hybrid_search`)."""
    if not query or not query.strip():
        raise QueryError("empty text query: describe the image you are looking for")
    check_k(k)
    vector = store.embedder.embed_texts([query])[0]
    if hybrid:
        from pictrieve.vectorstore.keywords import hybrid_search

        if collapse_duplicates:
            hits = collapsed(store, lambda depth: hybrid_search(store, query, vector, depth, where), int(k))
        else:
            hits = hybrid_search(store, query, vector, k, where)
        return relevant_hits(hits) if only_relevant else hits
    hits = mark_relevance(store.search_vector(vector, k, where, collapse_duplicates=collapse_duplicates),
                          store.relevance_cutoff(), vector, query)  # the query's words let stored objects speak
    return relevant_hits(hits) if only_relevant else hits


def image_search(store: Any, image: Image.Image | str | os.PathLike, k: int, where: Any, *, only_relevant: bool,
                 collapse_duplicates: bool) -> list[ImageHit]:
    """:meth:`ImageStore.search_image <pictrieve.vectorstore.store.ImageStore.search_image>` over ``store``'s
    ``search_vector``: the image (a PIL image or a file path) embedded by the store's embedder."""
    check_k(k)
    if not isinstance(image, Image.Image):
        image = load_image(image)
    return store.search_vector(store.embedder.embed_images([image])[0], k, where, only_relevant=only_relevant,
                               collapse_duplicates=collapse_duplicates)


def collapsed(store: Any, ranked: Callable[[int], list[ImageHit]], k: int) -> list[ImageHit]:
    """The first ``k`` distinct photos of ``ranked(depth)`` (a ranking function giving its best ``depth`` hits),
    each group of near-duplicates folded into its best member (``copies``), re-ranked 1..k: the depth grows
    until ``k`` distinct photos and one more are found, or the ranking has no more."""
    depth = 2 * k + 8
    while True:
        hits = ranked(depth)
        vectors = store.embeddings([hit.id for hit in hits]) if hits else np.zeros((0, 1), np.float32)
        # the "distance" carried is the hit's position, so each group's row says where its best copy ranked
        distinct = collapse([(hit.id, hit.metadata, float(at), vector)
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


def collapse(found: list[tuple[str, Any, float, Any]]) -> list[tuple[tuple[str, Any, float, Any], list[Any]]]:
    """Search candidates ``(id, metadata, distance, vector)``, best first, with each group of near-duplicates
    (:func:`~pictrieve.vectorstore.duplicates.confirmed_groups`) folded into one row: ``(row, the other members'
    metadata)`` per distinct photo, in rank order. A group stands where its best-ranked copy stood, with that
    copy's distance, and is shown as the copy the duplicates report keeps
    (:func:`~pictrieve.vectorstore.duplicates.keep_first`: the full-size one, not a half-size copy that happened
    to rank first)."""
    from pictrieve.vectorstore.duplicates import confirmed_groups, keep_first

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
        out.append(((row[0], row[1], found[head][2], row[3]), [found[m][1] for m in members if m != kept]))
    return out
