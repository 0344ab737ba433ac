"""``pictrieve search QUERY --method visret|needle``: run a registered retrieval method instead of plain search."""

from __future__ import annotations

import json
from typing import Any

import click

from pictrieve.vectorstore.hits import ImageHit

METHOD_CHOICES = ("search", "visret", "needle")


def method_options(function: Any) -> Any:
    """The options ``pictrieve search`` gains for methods other than plain search."""
    options = [
        click.option("--method", "method", type=click.Choice(METHOD_CHOICES), default="search", show_default=True,
                     help="Retrieval method: plain search; visret (search with guide images of the query); "
                          "needle (guide images x every embedder of the gallery, fused with learned trust)."),
        click.option("--visualizer", "visualizers", multiple=True, metavar="NAME",
                     help="Where guide images come from (visret: one; needle: one or more), e.g. "
                          "exemplar:/path/to/captioned-folder (offline: finds matching photos, does not generate)."),
        click.option("--rank-with", "rank_with", multiple=True, metavar="EMBEDDER",
                     help="needle: embedders to rank with (repeatable; default: all the gallery holds)."),
        click.option("--guides", type=click.IntRange(min=1), default=None,
                     help="Guide images per visualizer (visret default 3, needle default 2)."),
        click.option("--tiles/--no-tiles", "tiles", default=None,
                     help="needle: rank by tiles (default: when `pictrieve tile` made them)."),
        click.option("--feedback", type=click.Choice(["off", "guides", "results", "both"]), default="off",
                     show_default=True,
                     help="needle: review the guide images before the search and/or mark irrelevant results "
                          "after it (teaches the embedders' trust weights, stored in the gallery)."),
        click.option("--topic", default=None, help="needle: topic whose trust weights to use and teach."),
        click.option("--llm", default=None, metavar="NAME",
                     help="visret/needle: a chat model that rewrites the query into a visualization prompt "
                          "first, e.g. openai:<model> (default: none, the query is visualized as written)."),
        click.option("--base-url", default=None, metavar="URL", help="OpenAI-compatible endpoint for --llm openai:..."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def run_method(store: Any, method: str, query: str | None, *, k: int, visualizers: tuple[str, ...] = (),
               rank_with: tuple[str, ...] = (), guides: int | None = None, tiles: bool | None = None,
               feedback: str = "off", topic: str | None = None, llm: str | None = None,
               base_url: str | None = None) -> list[ImageHit]:
    """Hits of ``method`` for a text ``query`` over the opened gallery ``store``."""
    if not query:
        raise click.UsageError(f"--method {method} searches with a text QUERY (not --image)")
    if not visualizers:
        raise click.UsageError(f"--method {method} needs --visualizer, e.g. exemplar:/path/to/captioned-folder")
    chat = None
    if llm:
        from pictrieve.tools.chat_models import create_chat_model

        chat = create_chat_model(llm, base_url=base_url)
    elif base_url:
        raise click.UsageError("--base-url needs --llm openai:<model>")
    if method == "visret":
        if len(visualizers) > 1:
            raise click.UsageError("--method visret takes one --visualizer (needle takes several)")
        from pictrieve.graphs.visret import build_visret_graph

        graph = build_visret_graph(store, visualizer=visualizers[0], llm=chat)
        context = {"k": k, **({"m": guides} if guides else {})}
        return graph.invoke({"query": query}, context=context)["hits"]
    if method == "needle":
        return _run_needle(store, query, k=k, visualizers=visualizers, rank_with=rank_with, guides=guides,
                           tiles=tiles, feedback=feedback, topic=topic, llm=chat)
    raise click.UsageError(f"unknown method {method!r}")


def _run_needle(store: Any, query: str, *, k: int, visualizers: tuple[str, ...], rank_with: tuple[str, ...],
                guides: int | None, tiles: bool | None, feedback: str, topic: str | None,
                llm: Any = None) -> list[ImageHit]:
    """NEEDLE, answering its review pauses at the terminal."""
    from langgraph.types import Command

    from pictrieve.graphs.checkpoints import memory_checkpointer
    from pictrieve.graphs.needle import build_needle_graph

    graph = build_needle_graph(store, visualizers=list(visualizers), llm=llm, checkpointer=memory_checkpointer())
    context: dict[str, Any] = {"k": k, "feedback": feedback, "tiles": tiles}
    if rank_with:
        context["embedders"] = list(rank_with)
    if guides:
        context["guides_per_visualizer"] = guides
    config = {"configurable": {"thread_id": "cli"}}
    result = graph.invoke({"query": query, **({"topic": topic} if topic else {})}, config, context=context)
    while result.get("__interrupt__"):
        request = result["__interrupt__"][0].value
        result = graph.invoke(Command(resume=_ask(request)), config, context=context)
    if result.get("weights"):
        click.echo("trust weights: " + json.dumps({n: round(w, 3) for n, w in result["weights"].items()}), err=True)
    return result["hits"]


def _ask(request: dict[str, Any]) -> dict[str, list[str]]:
    """Show a review request on the terminal and read the person's answer."""
    if request["kind"] == "guides":
        click.echo(f"Guide images for {request['prompt']!r}:", err=True)
        for guide in request["guides"]:
            kind = "generated" if guide["generated"] else "exemplar photo"
            click.echo(f"  {guide['id']}  {guide['path']}  ({kind}, {guide['visualizer']})", err=True)
        ids = {g["id"] for g in request["guides"]}
        return {"rejected": _read_ids("Reject which (ids separated by spaces, Enter for none)", ids)}
    click.echo("Results:", err=True)
    for hit in request["hits"]:
        caption = f"  {hit['captions'][0]}" if hit.get("captions") else ""
        click.echo(f"  {hit['rank']:3d}  {hit['path']}{caption}", err=True)
    by_rank = {str(hit["rank"]): hit["id"] for hit in request["hits"]}
    ranks = _read_ids("Which are NOT what you want (ranks separated by spaces, Enter for none)", set(by_rank))
    return {"irrelevant": [by_rank[r] for r in ranks]}


def _read_ids(prompt: str, allowed: set[str]) -> list[str]:
    while True:
        answer = click.prompt(prompt, default="", show_default=False, err=True)
        chosen = answer.replace(",", " ").split()
        unknown = [c for c in chosen if c not in allowed]
        if not unknown:
            return chosen
        click.echo(f"unknown: {' '.join(unknown)}; choose from {' '.join(sorted(allowed))}", err=True)
