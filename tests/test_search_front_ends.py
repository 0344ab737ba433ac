"""One front door: every front end asks for a plain search the same way and gets the same answer.

For each request of a table (a text query with hybrid on and off, filters, filters alone, only_relevant), every
front end returns the same ids in the same order: ``pictrieve search --json`` (a subprocess), the page's
``/api/search`` (the app in-process), MCP's ``search_images`` (``pictrieve mcp`` over stdio with the official
client), the LangChain ``image_search`` tool, :class:`GalleryRetriever`, the search graph and ``Gallery.search``.
An empty answer says why on each of them, and a bad filter value is refused in the same words.

The gallery: 16 random photos indexed with the tiny random CLIP, 3 of them under ``lisbon/`` (issue 39's case:
"lisbon" k=3 must find those 3 everywhere, which only the photos' own words can do with random weights).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from helpers import make_photo
from helpers.cli import run
from helpers.mcp import stdio_session
from pictrieve.vectorstore.gallery import Gallery

pytest.importorskip("fastapi", reason="the page needs the 'ui' extra")
pytest.importorskip("mcp", reason="MCP needs the 'mcp' extra")
pytestmark = pytest.mark.server

FOLDERS = {"lisbon": 3, "tokyo": 5, "home": 8}


@pytest.fixture(scope="module")
def library(tmp_path_factory, tiny_clip_name):
    root = tmp_path_factory.mktemp("front-doors")
    seed = 0
    for folder, count in FOLDERS.items():
        for n in range(count):
            make_photo(root / "photos" / folder / f"{folder[0]}{n}.png", seed=seed)
            seed += 1
    gallery = Gallery.open(root / "gallery", tiny_clip_name)
    gallery.add(root / "photos", progress=False)
    folder_of = {item.id: Path(item.path).parent.name for item in gallery.items()}
    return SimpleNamespace(root=root, gallery=gallery, folder_of=folder_of, name=tiny_clip_name)


def table(library) -> list[dict[str, Any]]:
    """The requests, as plain fields (query, k, filters, hybrid, only_relevant)."""
    photos = library.root / "photos"
    return [
        {"query": "lisbon", "k": 3},
        {"query": "lisbon", "k": 3, "hybrid": False},
        {"query": "a dog on a beach", "k": 6},
        {"query": "tokyo lisbon", "k": 5, "filters": {"folder": str(photos / "home")}},
        {"query": "a dog", "k": 4, "filters": {"folder": str(photos / "tokyo")}, "hybrid": False},
        {"query": "lisbon", "k": 4, "only_relevant": True},
        {"k": 10, "filters": {"folder": str(photos / "lisbon")}},  # filters alone: browsing, newest first
    ]


# --- each front end: a request's fields in, the ids it shows out -------------------------------------------

def by_gallery(library, request: dict[str, Any]) -> list[str]:
    fields = dict(request)
    return library.gallery.search(fields.pop("query", None), **fields).ids


def by_graph(library, request: dict[str, Any]) -> list[str]:
    from pictrieve.graphs.search import build_search_graph

    state = {key: request[key] for key in ("query", "filters", "hybrid") if key in request}
    context = {"k": request["k"], "only_relevant": request.get("only_relevant", False)}
    return [hit.id for hit in build_search_graph(library.gallery).invoke(state, context=context)["hits"]]


def by_retriever(library, request: dict[str, Any]) -> list[str] | None:
    from pictrieve.vectorstore.retriever import GalleryRetriever
    from pictrieve.vectorstore.search_request import parse_filters

    if "query" not in request:
        return None  # a retriever is asked with words
    retriever = GalleryRetriever(gallery=library.gallery, k=request["k"], where=parse_filters(request.get("filters")),
                                 hybrid=request.get("hybrid", True), only_relevant=request.get("only_relevant", False))
    return [doc.id for doc in retriever.invoke(request["query"])]


def by_tool(library, request: dict[str, Any]) -> list[str]:
    from langchain_core.messages import ToolCall

    from pictrieve.integrations.langchain_tools import image_search_tool

    tool = image_search_tool(library.gallery, pictures=False)
    message = tool.invoke(ToolCall(name=tool.name, args=dict(request), id="1", type="tool_call"))
    return [row["id"] for row in message.artifact]


def by_page(library, request: dict[str, Any], client: Any) -> list[str]:
    body = {key: value for key, value in request.items() if key != "filters"} | request.get("filters", {})
    response = client.post("/api/search", json=body)
    assert response.status_code == 200, response.text
    return [hit["id"] for hit in response.json()["hits"]]


def cli_args(library, request: dict[str, Any]) -> list[str]:
    args = ["search", *([request["query"]] if "query" in request else []), "-g", str(library.root / "gallery"),
            "-k", str(request["k"]), "--json"]
    for name, value in request.get("filters", {}).items():
        args += [f"--{name}", str(value)]
    if request.get("hybrid") is False:
        args.append("--no-hybrid")
    if request.get("only_relevant"):
        args.append("--only-relevant")
    return args


def by_cli(library, request: dict[str, Any]) -> list[str]:
    done = run(*cli_args(library, request))
    assert done.returncode in (0, 1), done.stderr
    return [hit["id"] for hit in json.loads(done.stdout)["hits"]]


def mcp_arguments(request: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in request.items() if key != "filters"} | request.get("filters", {})


async def by_mcp(library, requests: list[dict[str, Any]]) -> list[Any]:
    """Each request's structured result from one ``pictrieve mcp`` over stdio."""
    out = []
    async with stdio_session(["-g", str(library.root / "gallery"), "--state-dir", str(library.root / "state")]) \
            as session:
        for request in requests:
            result = await session.call_tool("search_images", mcp_arguments(request))
            out.append(result)
    return out


@pytest.fixture(scope="module")
def page(library, tmp_path_factory):
    from helpers.web_page import page_client
    from pictrieve.ui.app import create_app

    return page_client(create_app(library.gallery, state_dir=tmp_path_factory.mktemp("page-state")),
                       raise_server_exceptions=False)


def test_every_front_end_returns_the_same_ids_in_the_same_order(library, page):
    requests = table(library)
    mcp_results = anyio.run(by_mcp, library, requests)
    for request, mcp_result in zip(requests, mcp_results):
        expected = by_gallery(library, request)
        assert expected, request
        assert not mcp_result.isError, mcp_result.content
        shown = {
            "cli": by_cli(library, request),
            "page": by_page(library, request, page),
            "mcp": [hit["id"] for hit in mcp_result.structuredContent["hits"]],
            "langchain tool": by_tool(library, request),
            "retriever": by_retriever(library, request),
            "search graph": by_graph(library, request),
        }
        differing = {name: ids for name, ids in shown.items() if ids is not None and ids != expected}
        assert not differing, f"{request}: Gallery.search gives {expected}, but {differing}"
    # Issue 39's case: the photos' words find the three lisbon/ photos, on every front end (hybrid by default).
    assert {library.folder_of[id_] for id_ in by_tool(library, requests[0])} == {"lisbon"}
    assert [library.folder_of[id_] for id_ in by_gallery(library, requests[-1])] == ["lisbon"] * 3
