"""The Search tab's route: ``POST /api/search`` (a text query, an uploaded picture, or ``like``: a gallery id,
"more like this"), with the command line's filters and the hybrid switch."""

from __future__ import annotations

import tempfile
from typing import Any

from fastapi import APIRouter

from pictrieve.ui.forms import UIError, checked, guarded_upload, is_upload, k_value, text
from pictrieve.ui.state import PageState, posted

router = APIRouter()


@posted(router, "/api/search")
def search_now(page: PageState, form: dict[str, Any]) -> dict[str, Any]:
    k = k_value(form.get("k"), 24)
    search_graph = page.graph("search")
    options = search_options(form)
    if form.get("like"):
        with tempfile.TemporaryDirectory(prefix="pictrieve-like-") as folder:
            photo = page.gallery_photo(form["like"], folder)
            result = search_graph.invoke({"image": photo, **options}, context={"k": k})
    elif is_upload(form.get("image")):
        with guarded_upload(form["image"], page.max_upload_bytes) as path:
            result = search_graph.invoke({"image": str(path), **options}, context={"k": k})
    elif str(form.get("query") or "").strip():
        result = search_graph.invoke({"query": str(form["query"]), **options}, context={"k": k})
    else:
        raise UIError("type what you are looking for, or drop a picture")
    return search_body(result["hits"], only=checked(form.get("only_relevant")))


def search_options(form: dict[str, Any]) -> dict[str, Any]:
    """The search graph's ``filters``, ``hybrid`` and ``collapse_duplicates`` from the search form (a JSON body or
    a multipart upload's fields); the graph checks the filters and answers a bad one in one line."""
    from pictrieve.agents.search.nodes import FILTER_WORDS

    filters: dict[str, Any] = {}
    for name in sorted(FILTER_WORDS):
        value = form.get(name)
        if value in (None, "") or is_upload(value):
            continue
        given = text(value, name, 200)
        if name == "radius_km":
            try:
                filters[name] = float(given)
            except ValueError:
                raise UIError(f"the radius must be a number of kilometres, not {given!r}") from None
        elif given:
            filters[name] = given
    hybrid = form.get("hybrid", True)
    if not isinstance(hybrid, bool):
        hybrid = str(hybrid).strip().lower() not in {"0", "false", "off", "no"}
    collapse = {"collapse_duplicates": True} if checked(form.get("collapse_duplicates")) else {}  # one of each
    return {**({"filters": filters} if filters else {}), "hybrid": hybrid, **collapse}  # near-duplicate group


def search_body(hits: list[Any], *, only: bool = False) -> dict[str, Any]:
    """``/api/search``'s answer: the hits (each with ``relevant``; with ``only`` just those) and ``notice``,
    "no photo matches well; the closest are:" when none is relevant (else empty)."""
    from pictrieve.vectorstore.relevance import NO_MATCH_HEADER, none_relevant, only_relevant

    notice = NO_MATCH_HEADER if none_relevant(hits) else ""
    if notice and only:
        notice = "no photo matches well"
    return {"hits": [h.to_json() for h in (only_relevant(hits) if only else hits)], "notice": notice}
