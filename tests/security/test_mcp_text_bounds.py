"""MCP tool text arguments are bounded as the page's are (issue 38, Why 4: a 20 MiB query took 41.8 s and 2.8 GB,
``answer_question`` took a 100,000-character answer): the real MCP server object (FastMCP and pictrieve's tools,
its argument validation and its one-line errors) with the official MCP client, connected in memory."""

from __future__ import annotations

import pytest

from helpers import make_photo

TOO_LONG = {
    "search_images": {"query": "{text}"},
    "ask_gallery": {"question": "{text}"},
    "find_photo": {"description": "{text}"},
    "answer_question": {"session": "s1", "answer": "{text}"},
    "ask_about_image": {"image": "0" * 24, "question": "{text}"},
}


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory, tiny_clip_name):
    from pictrieve.mcp_server.server import create_server
    from pictrieve.mcp_server.service import PictrieveService, ServerSettings
    from pictrieve.vectorstore.gallery import Gallery

    root = tmp_path_factory.mktemp("mcp-bounds")
    for i in range(3):
        make_photo(root / "photos" / f"{i}.png", seed=i)
    gallery = Gallery.open(root / "gallery", tiny_clip_name)
    gallery.add(root / "photos", progress=False)
    return create_server(PictrieveService(gallery, ServerSettings(state_dir=root / "state")))


async def _call(server, tool: str, arguments: dict):
    from mcp.shared.memory import create_connected_server_and_client_session

    async with create_connected_server_and_client_session(server._mcp_server) as client:
        return await client.call_tool(tool, arguments)


def _error(result) -> str:
    assert result.isError, result
    return result.content[0].text


@pytest.mark.parametrize("tool", TOO_LONG)
@pytest.mark.parametrize("size", [2001, 20 * 2**20])
async def test_text_past_the_bound_is_refused_in_one_line_before_any_work(mcp_server, tool, size):
    from pictrieve.agents.settings import MAX_TEXT

    arguments = {k: ("q" * size if v == "{text}" else v) for k, v in TOO_LONG[tool].items()}
    text = _error(await _call(mcp_server, tool, arguments))
    field = next(k for k, v in TOO_LONG[tool].items() if v == "{text}")
    assert text.startswith(f"{field}: ") and f"at most {MAX_TEXT} characters" in text and "\n" not in text
    assert len(text) <= 400


@pytest.mark.parametrize("name", ["after", "before", "near", "place", "camera", "folder"])
async def test_filter_text_past_the_bound_is_refused(mcp_server, name):
    text = _error(await _call(mcp_server, "search_images", {"query": "a", name: "x" * 2001}))
    assert text.startswith(f"{name}: ") and "at most 2000 characters" in text


async def test_a_query_at_the_bound_is_searched(mcp_server):
    from pictrieve.agents.settings import MAX_TEXT

    result = await _call(mcp_server, "search_images", {"query": "a" * MAX_TEXT, "k": 2})
    assert not result.isError, result
    assert len(result.structuredContent["hits"]) == 2


async def test_the_tools_schemas_say_the_bound_to_the_model(mcp_server):
    from mcp.shared.memory import create_connected_server_and_client_session

    async with create_connected_server_and_client_session(mcp_server._mcp_server) as client:
        listed = {tool.name: tool.inputSchema["properties"] for tool in (await client.list_tools()).tools}
    assert listed["search_images"]["query"]["maxLength"] == 2000 and listed["search_images"]["query"]["description"]
    assert listed["answer_question"]["answer"]["maxLength"] == 2000 and listed["answer_question"]["answer"]["description"]
    assert {"maxLength": 2000, "type": "string"} in listed["search_images"]["place"]["anyOf"]
    assert listed["search_images"]["place"]["description"]


@pytest.mark.parametrize("reply", ["a" * 2001, "a" * 2**20])
async def test_a_persons_answer_through_elicitation_is_bounded_too(mcp_server, reply):
    """find_photo asks the person through the client (MCP elicitation): the form says the bound, and an answer
    past it (a client need not keep the form's maxLength) is not read into the session; the question stays open
    for answer_question."""
    from mcp.shared.memory import create_connected_server_and_client_session
    from mcp.types import ElicitResult

    from pictrieve.agents.settings import MAX_TEXT

    asked = []

    async def person(context, params):
        asked.append(params.requestedSchema)
        return ElicitResult(action="accept", content={"answer": reply})

    async with create_connected_server_and_client_session(mcp_server._mcp_server, elicitation_callback=person) as client:
        result = await client.call_tool("find_photo", {"description": "a red square", "ask_person": True})
        view = result.structuredContent
        assert not result.isError, result
        assert len(asked) == 1 and asked[0]["properties"]["answer"]["maxLength"] == MAX_TEXT
        assert not view["done"] and view["round"] == 1 and f"at most {MAX_TEXT} characters" in view["note"], view
        # The same question is still open: a short answer goes on from there.
        answered = await client.call_tool("answer_question", {"session": view["session"], "answer": "no"})
        assert not answered.isError, answered.content


def test_the_service_refuses_an_answer_past_the_bound_whoever_calls_it(mcp_server):
    """Every text the service takes passes one check (a Python caller of PictrieveService has no MCP schema in
    front of it)."""
    from pictrieve.agents.settings import MAX_TEXT
    from pictrieve.mcp_server.service import ToolInputError, _text

    assert _text("a" * MAX_TEXT, "the answer", "") == "a" * MAX_TEXT
    with pytest.raises(ToolInputError, match=f"the answer is longer than {MAX_TEXT} characters"):
        _text("a" * (MAX_TEXT + 1), "the answer", "")
