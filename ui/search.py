"""The Search tab's route: ``POST /api/search`` (a text query, an uploaded picture, ``like``: a gallery id, "more
like this", or filters alone: browsing, newest first), with the filters and the hybrid switch.

The route reads the form into the search graph's input (the one
:class:`~pictrieve.vectorstore.search_request.SearchRequest`'s fields; the graph checks them and refuses a bad one
in words naming the field) and renders the graph's answer (:func:`search_body`)."""

from __future__ import annotations

import tempfile
from typing import Any

from fastapi import APIRouter

from pictrieve.ui.forms import UIError, checked, guarded_upload, is_upload, k_value, text
from pictrieve.ui.state import PageState, posted
from pictrieve.vectorstore.search_request import FILTER_FIELDS, PAGE_K, SearchAnswer

router = APIRouter()


@posted(router, "/api/search")
def search_now(page: PageState, form: dict[str, Any]) -> dict[str, Any]:
    context = {"k": k_value(form.get("k"), PAGE_K), "only_relevant": checked(form.get("only_relevant"))}
    search_graph = page.graph("search")
    state = search_options(form)
    if form.get("like"):
        with tempfile.TemporaryDirectory(prefix="pictrieve-like-") as folder:
            state["image"] = page.gallery_photo(form["like"], folder)
            return search_body(SearchAnswer.of_run(state, search_graph.invoke(state, context=context), **context))
    elif is_upload(form.get("image")):
        with guarded_upload(form["image"], page.max_upload_bytes) as path:
            state["image"] = str(path)
            return search_body(SearchAnswer.of_run(state, search_graph.invoke(state, context=context), **context))
    elif str(form.get("query") or "").strip():
        state["query"] = text(form["query"], "the description")
    elif not state.get("filters"):
        raise UIError("type what you are looking for, drop a picture, or fill in a filter to browse by")
    return search_body(SearchAnswer.of_run(state, search_graph.invoke(state, context=context), **context))


def search_options(form: dict[str, Any]) -> dict[str, Any]:
    """The search graph's ``filters``, ``hybrid`` and ``collapse_duplicates`` from the search form (a JSON body or
    a multipart upload's fields), as given: the graph checks them (one line naming the field when one is bad)."""
    filters: dict[str, Any] = {}
    for name in FILTER_FIELDS:
        value = form.get(name)
        if value in (None, "") or is_upload(value):
            continue
        filters[name] = text(value, name, 200) if isinstance(value, str) else value
    hybrid = form.get("hybrid", True)
    if not isinstance(hybrid, bool):
        hybrid = str(hybrid).strip().lower() not in {"0", "false", "off", "no"}
    collapse = {"collapse_duplicates": True} if checked(form.get("collapse_duplicates")) else {}  # one of each
    return {**({"filters": filters} if filters else {}), "hybrid": hybrid, **collapse}  # near-duplicate group


def search_body(answer: Any) -> dict[str, Any]:
    """``/api/search``'s answer (a :class:`~pictrieve.vectorstore.search_request.SearchAnswer`): the hits (each with
    ``relevant`` and ``matched_by``), ``notice`` (why nothing came back, or "no photo matches well; the closest
    are:" when none is relevant; else empty), ``why`` and ``summary``."""
    return answer.to_json()
