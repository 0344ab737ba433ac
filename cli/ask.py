"""``pictrieve ask IMAGE "question"``: the Vision Search Assistant from the command line."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

import click


def _progress(node: str, update: dict[str, Any]) -> str:
    if node == "retrieve" and update.get("hits"):
        return f"retrieved {len(update['hits'])} photos from the gallery; asking about {update['image']}"
    if node == "regions":
        return "regions: " + ", ".join(f"{r['label']} ({r['score']:.2f})" for r in update.get("regions", []))
    if node == "describe":
        return "descriptions:\n" + "\n".join(f"  {i}. {r['label']}: {r['description']}"
                                             for i, r in enumerate(update.get("regions", []), 1))
    if node == "plan":
        subs = update.get("sub_questions") or []
        return f"plan ({update.get('plan_mode')}): " + ("; ".join(s["question"] for s in subs) or "no searches")
    if node == "search":
        finding = update["searched"][0]
        pages = ", ".join(s["title"] for s in finding["sources"]) or "no pages"
        return f"searched {finding['question']!r}: {pages}" + (f" ({finding['error']})" if finding["error"] else "")
    if node == "summarize":
        return f"summarised findings from {len(update.get('sources') or [])} sources"
    if node == "answer":
        return "answered"
    return node


@click.command("ask")
@click.argument("image", required=False, type=click.Path(exists=True, dir_okay=False))
@click.argument("question")
@click.option("--search", "search", default=None,
              help="Where to search: 'ddgs' (DuckDuckGo, needs internet) or local:DIR (a folder of pages). "
                   "Default: no search, the answer comes from the photo alone.")
@click.option("--llm", default="offline", show_default=True, help="Chat model: offline, local:DIR, openai:MODEL.")
@click.option("--base-url", default=None, help="OpenAI-compatible endpoint for openai: models.")
@click.option("--vlm", default="offline", show_default=True, help="Region describer: offline or openai:MODEL.")
@click.option("--vlm-base-url", default=None, help="OpenAI-compatible endpoint of the VLM.")
@click.option("--detector", default="ssd", show_default=True, help="ssd (offline COCO) or zeroshot:MODEL.")
@click.option("--gallery", default=None, help="Visual RAG: with no IMAGE, find the photo in this gallery.")
@click.option("-v", "--verbose", is_flag=True, help="Show progress per step.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
def ask(image: str | None, question: str, search: str | None, llm: str, base_url: str | None, vlm: str,
        vlm_base_url: str | None, detector: str, gallery: str | None, verbose: bool, as_json: bool) -> None:
    """Answer QUESTION about IMAGE from what the photo shows and what a search finds, with sources.

    \b
    Example (offline):
      pictrieve ask photo.jpg "how many teeth does this animal have?" --search local:examples/vsa-offline/pages -v
    """
    from pictrieve.graphs.vision_search import build_vision_search_graph
    from pictrieve.tools.chat_models import create_chat_model
    from pictrieve.tools.vlm import create_region_captioner

    index = None
    if image is None:
        if not gallery:
            raise click.UsageError("give an IMAGE, or --gallery to find the photo in a gallery")
        from pictrieve.vectorstore.gallery import Gallery

        index = Gallery.open(gallery)
    chat = create_chat_model(llm, base_url=base_url, **({"max_tokens": 160, "temperature": 0.0} if llm == "offline" else {}))
    graph = build_vision_search_graph(index, llm=chat, vlm=create_region_captioner(vlm, base_url=vlm_base_url),
                                      detector=detector, search=search)
    inputs: dict[str, Any] = {"question": question, **({"image": image} if image else {})}
    # A 135M local model cannot write JSON plans or useful rewrites; spare it those steps.
    context = {"correlate": False, "plan_with_llm": False, "summarize_regions": False} if llm == "offline" else {}
    start = time.perf_counter()
    state: dict[str, Any] = {}
    for update in graph.stream(inputs, context=context, stream_mode="updates"):
        for node, change in update.items():
            if not change:
                continue
            state.update({k: v for k, v in change.items() if k != "searched"})
            if verbose:
                click.echo(f"[{time.perf_counter() - start:6.1f}s] {_progress(node, change)}", err=True)
    if as_json:
        out = {k: v for k, v in state.items() if k != "timings"} | {"timings": state.get("timings")}
        out["hits"] = [h.to_json() for h in out.get("hits") or []]
        click.echo(json.dumps(out, indent=2, default=str))
        return
    click.echo(state.get("answer", ""))
    if state.get("sources"):
        click.echo("\nSources:")
        for source in state["sources"]:
            click.echo(f"  [{source['number']}] {source['title']} - {source['url']}")
