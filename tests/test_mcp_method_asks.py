"""A plugin method that asks the person a question works over MCP with no edit of the server: ``start_method`` shows
the question the toy declares (tests/data/toy_asking_method: its text, choices, the photos shown with it and the
reply's fields) and ``answer_method`` takes the reply, checked against that declaration. A real MCP client (the
``mcp`` SDK) starts ``pictrieve mcp`` over stdio with the toy installed the way pip would. The page and the
command line: test_method_asks.py."""

from __future__ import annotations

import pytest

from helpers.method_plugins import asking_toy_gallery, install_asking_toy, plugin_env

pytestmark = pytest.mark.server
QUERY = "a red square"


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    return install_asking_toy(tmp_path_factory.mktemp("asking-plugins"))


@pytest.fixture(scope="module")
def gallery(tmp_path_factory, tiny_clip_name):
    return asking_toy_gallery(tmp_path_factory.mktemp("asking-gallery"), tiny_clip_name)


async def test_mcp_asks_the_plugins_question_and_takes_the_reply(plugins, gallery, tmp_path):
    from helpers.mcp import server_env, stdio_session

    args = ["-g", str(gallery.location), "--state-dir", str(tmp_path / "state")]
    async with stdio_session(args, env=plugin_env(plugins, server_env())) as session:
        (tool,) = [t for t in (await session.list_tools()).tools if t.name == "start_method"]
        assert {"toy_ask", "plugir", "needle"} <= set(tool.inputSchema["properties"]["method"]["enum"])
        # the caller chooses inputs and bounded settings, never a need (which model, where it reaches)
        for settings, said in (({"k": 10**9}, "k"), ({"llm": "openai:x"}, "unknown setting 'llm'")):
            refused = await session.call_tool("start_method", {"method": "toy_ask", "text": QUERY, "settings": settings})
            assert refused.isError and said in refused.content[0].text, refused.content
        too_long = await session.call_tool("start_method", {"method": "toy_ask", "text": "x" * 2001})
        assert too_long.isError, too_long.content
        started = await session.call_tool("start_method", {"method": "toy_ask", "text": QUERY, "settings": {"k": 3}})
        assert not started.isError, started.content
        asked = started.structuredContent
        assert not asked["done"] and asked["question"]["options"] == ["best first", "worst first"]
        assert "answer_method(session=" in started.content[1].text
        assert [block.type for block in started.content].count("image") == 3  # the photos shown with the question
        shown = [item["id"] for item in asked["question"]["shown"]]
        bad = await session.call_tool("answer_method", {"session": asked["session"], "reply": {"order": "best first"}})
        assert bad.isError and "the reply needs drop" in bad.content[0].text
        foreign = await session.call_tool("answer_method", {"session": asked["session"],
                                                            "reply": {"order": "worst first", "drop": ["not-shown"]}})
        assert foreign.isError, foreign.content  # only ids shown with the question
        done = await session.call_tool("answer_method", {"session": asked["session"],
                                                         "reply": {"order": "worst first", "drop": [shown[0]]}})
        assert not done.isError, done.content
        ranked = [hit.id for hit in gallery.search_text(QUERY, k=3)]
        assert done.structuredContent["done"] and [h["id"] for h in done.structuredContent["hits"]] == ranked[1:][::-1]
        assert done.structuredContent["output"] == {"note": "asked once: worst first, 1 dropped"}
        # search_images offers it too (its input takes a query), and says where its question is answered
        searched = await session.call_tool("search_images", {"query": QUERY, "method": "toy_ask"})
        assert searched.isError and "use start_method" in searched.content[0].text
