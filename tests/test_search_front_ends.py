"""One front door: every front end asks for a plain search the same way and gets the same answer.

For each request of a table (a text query with hybrid on and off, filters, filters alone, only_relevant), every
front end returns the same ids in the same order: ``pictrieve search --json`` (a subprocess), the page's
``/api/search`` (the app in-process), MCP's ``search_images`` (``pictrieve mcp`` over stdio with the official
client), the LangChain ``image_search`` tool, :class:`GalleryRetriever`, the search graph, the served search graph
(the real ``langgraph dev`` over the same gallery, asked with the LangGraph SDK) and ``Gallery.search``.
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

    state, context = graph_input(request)
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


def graph_input(request: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A request as the search graph takes it: the input (what is asked) and the run's context (its settings)."""
    state = {key: request[key] for key in ("query", "filters", "hybrid") if key in request}
    return state, {"k": request["k"], "only_relevant": request.get("only_relevant", False)}


def by_served_graph(request: dict[str, Any], url: str) -> dict[str, Any]:
    """The served search graph's output for ``request`` (``langgraph dev``, through the LangGraph SDK)."""
    from langgraph_sdk import get_sync_client

    state, context = graph_input(request)
    return get_sync_client(url=url).runs.wait(None, "search", input=state, context=context)


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
    """``pictrieve search ... --json`` in this process (click's runner: the command's own code, its exit status)."""
    from click.testing import CliRunner

    from pictrieve.cli.main import cli

    done = CliRunner().invoke(cli, cli_args(library, request))
    assert done.exit_code == (0 if json.loads(done.stdout)["hits"] else 1), done.output
    return [hit["id"] for hit in json.loads(done.stdout)["hits"]]


def mcp_arguments(request: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in request.items() if key != "filters"} | request.get("filters", {})


async def by_mcp(library, calls: list[dict[str, Any]]) -> list[Any]:
    """Each call's result (``search_images`` with those arguments) from one ``pictrieve mcp`` over stdio."""
    out = []
    async with stdio_session(["-g", str(library.root / "gallery"), "--state-dir", str(library.root / "state")]) \
            as session:
        for arguments in calls:
            out.append(await session.call_tool("search_images", arguments))
    return out


def empty_requests(library) -> list[tuple[dict[str, Any], list[str]]]:
    """Requests that find nothing, each with what the ``why`` of every front end must say: the filter that left
    nothing, and what the gallery has instead."""
    photos = library.root / "photos"
    return [
        ({"query": "a dog", "k": 3, "filters": {"folder": str(photos / "nope")}},
         ["0 photos pass folder", "folders here: ", f"{photos / 'home'} (8)", f"{photos / 'tokyo'} (5)",
          f"{photos / 'lisbon'} (3)"]),
        ({"k": 3, "filters": {"folder": str(photos / "lisbon"), "before": "2001-01-01"}},
         ["0 photos pass ", "before 2001-01-01", "photos here were taken "]),
    ]


def says(why: str, words: list[str]) -> bool:
    return why.startswith(words[0]) and all(part in why for part in words)


BAD = ({"query": "a dog", "k": 3, "filters": {"after": "last june"}},
       "after: 'last june' is not accepted; it takes a date as YYYY-MM-DD")


@pytest.fixture(scope="module")
def mcp_results(library):
    calls = [mcp_arguments(request) for request in table(library)]
    calls += [mcp_arguments(request) for request, _ in empty_requests(library)] + [mcp_arguments(BAD[0])]
    calls.append({"query": "a dog", "near": "38.7,-9.1", "radius_km": -1})
    return anyio.run(by_mcp, library, calls)


@pytest.fixture(scope="module")
def served(library, tmp_path_factory):
    """The URL of the real ``langgraph dev`` serving the repository's langgraph.json over the library's gallery."""
    from helpers.langgraph_dev import serve_repository, stop

    process, url = serve_repository(tmp_path_factory.mktemp("served"), library.root / "gallery")
    yield url
    stop(process)


@pytest.fixture(scope="module")
def page(library, tmp_path_factory):
    from helpers.web_page import page_client
    from pictrieve.ui.app import create_app

    return page_client(create_app(library.gallery, state_dir=tmp_path_factory.mktemp("page-state")),
                       raise_server_exceptions=False)


def test_every_front_end_returns_the_same_ids_in_the_same_order(library, page, mcp_results, served):
    requests = table(library)
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
            "langgraph dev": [hit["id"] for hit in by_served_graph(request, served)["hits"]],
        }
        differing = {name: ids for name, ids in shown.items() if ids is not None and ids != expected}
        assert not differing, f"{request}: Gallery.search gives {expected}, but {differing}"
    # Issue 39's case: the photos' words find the three lisbon/ photos, on every front end (hybrid by default).
    assert {library.folder_of[id_] for id_ in by_tool(library, requests[0])} == {"lisbon"}
    assert [library.folder_of[id_] for id_ in by_gallery(library, requests[-1])] == ["lisbon"] * 3
    # Each hit says why it is there: the photo's words, its vector, both; browsing: the filters.
    hits = library.gallery.search("lisbon", k=6).hits
    assert [hit.matched_by in ("words", "both") for hit in hits] == [True] * 3 + [False] * 3
    assert {hit.matched_by for hit in hits[3:]} == {"vector"}
    assert {hit.matched_by for hit in library.gallery.search("lisbon", k=6, hybrid=False).hits} == {"vector"}
    assert {h.matched_by for h in library.gallery.search(k=3, filters={"folder": "lisbon"}).hits} == {"filters"}
    assert [h["matched_by"] for h in mcp_results[0].structuredContent["hits"]] == [h.matched_by for h in hits[:3]]


def test_an_empty_answer_says_why_on_every_front_end(library, page, mcp_results, served):
    from click.testing import CliRunner
    from langchain_core.messages import ToolCall

    from pictrieve.cli.main import cli
    from pictrieve.graphs.search import build_search_graph
    from pictrieve.integrations.langchain_tools import image_search_tool

    tool = image_search_tool(library.gallery, pictures=False)
    offset = len(table(library))
    for n, (request, why) in enumerate(empty_requests(library)):
        fields = dict(request)
        expected = library.gallery.search(fields.pop("query", None), **fields).why
        assert says(expected, why), expected
        state = {key: request[key] for key in ("query", "filters") if key in request}
        assert build_search_graph(library.gallery).invoke(state, context={"k": 3})["why"] == expected
        assert by_served_graph(request, served)["why"] == expected
        body = page.post("/api/search", json=mcp_arguments(request)).json()
        assert body["hits"] == [] and body["why"] == expected and body["notice"] == "nothing found: " + expected
        message = tool.invoke(ToolCall(name=tool.name, args=dict(request), id="1", type="tool_call"))
        assert message.artifact == [] and expected in message.content[1]["text"]
        # MCP: the filter is named, not the query blamed
        result = mcp_results[offset + n]
        assert not result.isError and result.structuredContent["why"] == expected
        assert result.structuredContent["summary"] == f"No photo shown for {'the filters' if 'query' not in request else repr(request['query'])}: {result.structuredContent['why']}."
        # The command line: the reason, exit status 1, and --json still one valid object
        done = CliRunner().invoke(cli, cli_args(library, request))
        assert done.exit_code == 1 and json.loads(done.stdout)["why"] == expected
        text = [arg for arg in cli_args(library, request) if arg != "--json"]
        done = CliRunner().invoke(cli, text)
        assert done.exit_code == 1 and done.stdout.splitlines() == ["nothing found: " + expected], done.output
    # a real process's exit status
    done = run(*cli_args(library, empty_requests(library)[0][0]))
    assert done.returncode == 1 and says(json.loads(done.stdout)["why"], empty_requests(library)[0][1])


def test_a_bad_filter_value_is_worded_alike_on_every_front_end(library, page, mcp_results):
    from click.testing import CliRunner
    from langchain_core.messages import ToolCall

    from pictrieve.cli.main import cli
    from pictrieve.graphs.search import build_search_graph
    from pictrieve.integrations.langchain_tools import image_search_tool
    from pictrieve.vectorstore.search_request import SearchRequestError

    request, words = BAD
    with pytest.raises(SearchRequestError, match=f"^{words}"):
        library.gallery.search(request["query"], k=3, filters=request["filters"])
    with pytest.raises(Exception, match=f"^{words}"):
        build_search_graph(library.gallery).invoke({"query": "a dog", "filters": request["filters"]})
    refused = page.post("/api/search", json=mcp_arguments(request))
    assert refused.status_code == 400 and refused.json()["error"].startswith(words)
    tool = image_search_tool(library.gallery, pictures=False)
    message = tool.invoke(ToolCall(name=tool.name, args=dict(request), id="1", type="tool_call"))
    assert message.status == "error" and message.content.startswith(words)
    result = mcp_results[len(table(library)) + len(empty_requests(library))]
    assert result.isError and result.content[0].text.startswith(words)
    radius = mcp_results[-1]
    assert radius.isError and radius.content[0].text.startswith("radius_km: -1.0 is not accepted; it takes a number "
                                                                "of kilometres above 0")
    # The command line names its option instead of the field (a page user never sees an option).
    done = CliRunner().invoke(cli, cli_args(library, request))
    assert done.exit_code == 2 and "--after: 'last june' is not accepted; it takes a date as YYYY-MM-DD" in done.output
    done = CliRunner().invoke(cli, [*cli_args(library, {"query": "a dog", "k": 3}), "--near", "38.7,-9.1",
                                    "--radius", "nan"])
    assert done.exit_code == 2 and "--radius: nan is not accepted; it takes a number of kilometres above 0" in done.output


def test_a_search_without_k_asks_for_the_default_of_search_request():
    """One default, ``DEFAULT_K``, for every front end but the two with a stated reason (``MODEL_K``: photos go
    back to a model as pictures; ``PAGE_K``: the page's grid)."""
    from pictrieve.cli.main import cli
    from pictrieve.graphs.registry import available_methods, get_method
    from pictrieve.integrations.langchain_tools import ImageSearchArgs
    from pictrieve.vectorstore.retriever import GalleryRetriever
    from pictrieve.vectorstore.search_request import DEFAULT_K, MODEL_K, PAGE_K, SearchRequest

    assert SearchRequest.of(query="x").k == DEFAULT_K
    assert GalleryRetriever.model_fields["k"].default == DEFAULT_K
    search = next(p for p in cli.get_command(None, "search").params if p.name == "k")
    assert search.default == DEFAULT_K
    for name in available_methods():
        settings = get_method(name).settings_class()
        if "k" in settings.names():
            assert settings().k == DEFAULT_K, name
    assert ImageSearchArgs.model_fields["k"].default == MODEL_K
    assert (DEFAULT_K, MODEL_K, PAGE_K) == (10, 5, 24)  # what README and docs/architecture.md say


def test_the_page_asks_for_page_k_when_the_form_does_not_say(library, page):
    from pictrieve.vectorstore.search_request import PAGE_K

    assert len(library.gallery.ids()) < PAGE_K
    assert len(page.post("/api/search", json={"query": "a dog"}).json()["hits"]) == len(library.gallery.ids())
