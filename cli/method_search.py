"""``pictrieve search QUERY --method visret``: run a registered retrieval method instead of plain search."""

from __future__ import annotations

from typing import Any

import click

from pictrieve.vectorstore.hits import ImageHit

METHOD_CHOICES = ("search", "visret")


def method_options(function: Any) -> Any:
    """The options ``pictrieve search`` gains for methods other than plain search."""
    function = click.option("--visualizer", default=None, metavar="NAME",
                            help="Visualizer for --method visret, e.g. exemplar:/path/to/captioned-folder "
                                 "(offline: finds matching photos, does not generate).")(function)
    function = click.option("--method", "method", type=click.Choice(METHOD_CHOICES), default="search",
                            show_default=True,
                            help="Retrieval method: plain search, or visret (search with guide images of the query).")(function)
    return function


def run_method(store: Any, method: str, query: str | None, *, k: int, visualizer: str | None) -> list[ImageHit]:
    """Hits of ``method`` for a text ``query`` over the opened gallery ``store``."""
    if method == "visret":
        if not query:
            raise click.UsageError("--method visret searches with a text QUERY (not --image)")
        if not visualizer:
            raise click.UsageError("--method visret needs --visualizer, e.g. exemplar:/path/to/captioned-folder")
        from pictrieve.graphs.visret import build_visret_graph

        graph = build_visret_graph(store, visualizer=visualizer)
        return graph.invoke({"query": query}, context={"k": k})["hits"]
    raise click.UsageError(f"unknown method {method!r}")
