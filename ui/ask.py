"""The Ask tab: the Vision Search Assistant graph run as a job, its updates turned into page steps
(:mod:`pictrieve.agents.vsa.progress`, shared with ``pictrieve ask -v``).

The page gets the answer, the numbered sources (a ``href`` only for http/https URLs: a ``file://``
page of the offline ``local:`` search or a ``javascript:`` URL is shown as text, never a link) and
the detected regions as fractions of the photo's size, so boxes line up at any display size.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter

from pictrieve.agents.vsa.progress import follow_run, step_line
from pictrieve.tools.core.images import load_image
from pictrieve.ui.forms import UIError, is_upload, save_upload
from pictrieve.ui.jobs import Job
from pictrieve.ui.state import PageState, posted


def safe_href(url: str) -> str | None:
    """``url`` when it is a web address the page may link to (http/https with a host), else None."""
    try:
        parts = urlsplit(str(url).strip())
    except ValueError:
        return None
    return str(url).strip() if parts.scheme in ("http", "https") and parts.netloc else None


def run_ask(job: Job, graph: Any, question: str, image: str | None, context: dict[str, Any]) -> dict[str, Any]:
    """Stream the graph for ``question`` (about ``image``, or a photo the gallery finds); the page's result."""
    inputs: dict[str, Any] = {"question": question, **({"image": image} if image else {})}
    if image:
        _keep_photo(job, image)
    job.step("looking at the photo…")

    def show(node: str, change: dict[str, Any]) -> None:
        if node == "retrieve" and change.get("image"):
            _keep_photo(job, change["image"])
        line = step_line(node, change)
        if line:
            job.step(line)

    state = follow_run(job.stream(graph, inputs, context=context), show)
    photo = job.view()["images"]
    width, height = (photo[0]["width"] / photo[0]["scale"], photo[0]["height"] / photo[0]["scale"]) if photo else (1, 1)
    regions = [{"number": i, "label": str(r.get("label", "")), "score": float(r.get("score", 0.0)),
                "description": str(r.get("description", "")),
                "box": [r["box"][0] / width, r["box"][1] / height, r["box"][2] / width, r["box"][3] / height]}
               for i, r in enumerate(state.get("regions") or [], 1)]
    citations = state.get("citations")
    cited = set((citations or {}).get("cited") or [])
    sources = [{"number": int(s["number"]), "title": str(s.get("title") or s.get("url") or ""),
                "url": str(s.get("url") or ""), "href": safe_href(s.get("url") or ""),
                # Without the graph's citation check (older graphs), every source counts as cited.
                "cited": citations is None or int(s["number"]) in cited}
               for s in state.get("sources") or []]
    findings = [{"question": str(f.get("question", "")), "answer": str(f.get("answer", ""))}
                for f in state.get("findings") or []]
    return {"answer": str(state.get("answer", "")), "answerer": str(state.get("answerer", "")), "sources": sources, "regions": regions, "findings": findings,
            "photo": photo[0] if photo else None, "hits": [h.to_json() for h in state.get("hits") or []]}


def _keep_photo(job: Job, path: str) -> None:
    # Decoded as the graph decodes it (the guarded loader, no EXIF turn), so the detector's pixel boxes
    # match, and a bad photo is one readable line on the page.
    job.keep_image("photo", load_image(path))


# --- the route ----------------------------------------------------------------------------------------------

router = APIRouter()


@posted(router, "/api/ask")
def ask_now(page: PageState, form: dict[str, Any]) -> dict[str, Any]:
    """Start Ask as a job: about an uploaded photo, a gallery photo (``photo``: its id), or the photo the gallery
    finds for the question."""
    question = str(form.get("question") or "").strip()
    if not question:
        raise UIError("type a question about the photo")
    folder = tempfile.TemporaryDirectory(prefix="pictrieve-ask-")
    try:
        if is_upload(form.get("image")):
            image: str | None = str(save_upload(form["image"], page.max_upload_bytes, Path(folder.name)))
        elif form.get("photo"):
            image = page.gallery_photo(form["photo"], folder.name)
        else:
            image = None  # the graph finds the photo in the gallery (visual RAG)
    except BaseException:
        folder.cleanup()
        raise
    context = page.settings_of("vsa")
    job = page.jobs.start("ask", lambda job: run_ask(job, page.graph("vsa"), question, image, context),
                          cleanup=folder.cleanup)
    return job.view()
