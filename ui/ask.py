"""The Ask tab: the Vision Search Assistant graph run as a job, its updates turned into page steps.

The page gets the answer, the numbered sources (a ``href`` only for http/https URLs: a ``file://``
page of the offline ``local:`` search or a ``javascript:`` URL is shown as text, never a link) and
the detected regions as fractions of the photo's size, so boxes line up at any display size.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pictrieve.tools.images import load_image
from pictrieve.ui.jobs import Job


def safe_href(url: str) -> str | None:
    """``url`` when it is a web address the page may link to (http/https with a host), else None."""
    try:
        parts = urlsplit(str(url).strip())
    except ValueError:
        return None
    return str(url).strip() if parts.scheme in ("http", "https") and parts.netloc else None


def step_line(node: str, update: dict[str, Any]) -> str:
    """One line of progress for a streamed VSA update (what the page lists while it waits); "" for none."""
    if node == "retrieve":  # no hits: the photo was given, nothing was searched (no line)
        hits = update.get("hits") or []
        return f"found the photo in the gallery ({len(hits)} candidates)" if hits else ""
    if node == "regions":
        found = ", ".join(f"{r['label']} ({r['score']:.2f})" for r in update.get("regions") or [])
        return f"regions: {found or 'none'}"
    if node == "describe":
        return f"described {len(update.get('regions') or [])} region(s)"
    if node == "plan":
        turn = update.get("plan_turns")
        subs = [q for q in update.get("sub_questions") or [] if turn is None or q.get("turn", turn) == turn]
        if not subs:
            return "plan: no (more) searches"
        return f"plan turn {turn or 1} ({update.get('plan_mode')}): " + "; ".join(q["question"] for q in subs)
    if node == "search":
        finding = (update.get("searched") or [{}])[0]
        queries = " then ".join(repr(q) for q in finding.get("queries") or [finding.get("question", "")])
        extra = f" ({finding['error']})" if finding.get("error") else ""
        return f"searched {queries}: read {len(finding.get('sources') or [])} page(s){extra}"
    if node == "summarize":
        return f"collected {len(update.get('sources') or [])} source(s)"
    if node == "answer":
        dropped = (update.get("citations") or {}).get("dropped")
        how = f" ({update['answerer']})" if update.get("answerer") else ""
        return f"answered{how}" + (f"; removed citations of sources never read: {dropped}" if dropped else "")
    return node


def run_ask(job: Job, graph: Any, question: str, image: str | None, context: dict[str, Any]) -> dict[str, Any]:
    """Stream the graph for ``question`` (about ``image``, or a photo the gallery finds); the page's result."""
    inputs: dict[str, Any] = {"question": question, **({"image": image} if image else {})}
    state: dict[str, Any] = {}
    if image:
        _keep_photo(job, image)
    job.step("looking at the photo…")
    for update in job.stream(graph, inputs, context=context):
        for node, change in update.items():
            if not change:
                continue
            state.update({k: v for k, v in change.items() if k != "searched"})
            if node == "retrieve" and change.get("image"):
                _keep_photo(job, change["image"])
            line = step_line(node, change)
            if line:
                job.step(line)
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
