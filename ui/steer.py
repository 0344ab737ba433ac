"""The Steer tab's route: ``POST /api/steer``, QC2 with relevance and quality levels."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from pictrieve.errors import PictrieveError
from pictrieve.ui.forms import UIError, k_value
from pictrieve.ui.state import PageState, posted

router = APIRouter()


@posted(router, "/api/steer")
def steer_now(page: PageState, body: dict[str, Any]) -> dict[str, Any]:
    query = str(body.get("query") or "").strip()
    if not query:
        raise UIError("type a short query to steer")
    levels = {axis: str(body[axis]) for axis in ("relevance", "quality") if body.get(axis)}
    try:
        qc2 = page.graph("qc2")
    except (PictrieveError, FileNotFoundError, OSError) as exc:
        raise UIError(f"QC2 needs a model trained for this gallery: run `pictrieve quality train "
                      f"--gallery {page.gallery.location}` first ({exc})") from exc
    result = qc2.invoke({"query": query, "levels": levels}, context={"k": k_value(body.get("k"), 24)})
    return {"completions": list(result.get("completions") or []),
            "levels": dict(result.get("resolved_levels") or {}),
            "hits": [h.to_json() for h in result.get("hits") or []]}
