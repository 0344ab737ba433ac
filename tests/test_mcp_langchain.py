"""``langchain-mcp-adapters`` loads ``pictrieve mcp``'s tools into a LangChain agent (``create_agent``, a
LangGraph graph), which runs end to end against the real server over stdio.

The chat model is scripted (LangChain's fake chat model, taught to accept tools): it calls
``search_images`` with an out-of-range ``k``, then correctly, then answers. What is checked is what the agent
received from the server: a one-line tool error it can recover from, then the hits and the photos as
LangChain image blocks, the structured result as the artifact. A control-flow test: the fake model makes no
quality claim.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from PIL import Image

from helpers.mcp import MCP_COMMAND, TOOLS, mean_colour, served, server_env  # noqa: F401  (fixture: served)

pytestmark = pytest.mark.server


class ScriptedToolCaller(GenericFakeChatModel):
    """LangChain's fake chat model, its replies scripted, accepting tools (it calls only the scripted ones)
    and keeping what it was sent."""

    seen: list = []

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


async def test_a_langgraph_agent_uses_the_servers_tools(served):  # noqa: F811
    from langchain.agents import create_agent
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_mcp_adapters.tools import load_mcp_tools

    client = MultiServerMCPClient({"pictrieve": {"transport": "stdio", "command": MCP_COMMAND[0],
                                                 "args": [*MCP_COMMAND[1:], *served.args], "env": server_env()}})
    model = ScriptedToolCaller(seen=[], messages=iter([
        AIMessage(content="", tool_calls=[{"name": "search_images", "args": {"query": "a red square", "k": 99},
                                           "id": "call-1"}]),
        AIMessage(content="", tool_calls=[{"name": "search_images", "args": {"query": "a red square", "k": 2},
                                           "id": "call-2"}]),
        AIMessage(content="Your red square is photo 1."),
    ]))
    async with client.session("pictrieve") as session:  # one server for the whole run
        tools = await load_mcp_tools(session)
        assert {tool.name for tool in tools} == TOOLS
        agent = create_agent(model, tools)
        out = await agent.ainvoke({"messages": [HumanMessage("Find my photo of a red square.")]})

    assert out["messages"][-1].content == "Your red square is photo 1."
    failed, answered = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert failed.status == "error" and failed.tool_call_id == "call-1"
    assert "k: Input should be less than or equal to 20" in str(failed.content)
    assert answered.status == "success" and answered.tool_call_id == "call-2" and answered.name == "search_images"
    hits = answered.artifact["structured_content"]["hits"]
    assert [h["id"] for h in hits] == [h.id for h in served.gallery.search_text("a red square", k=2, hybrid=True)]
    images = [block for block in answered.content if block["type"] == "image"]
    assert len(images) == 2 and all(block["mime_type"] == "image/jpeg" for block in images)
    for hit, block in zip(hits, images):
        picture = Image.open(io.BytesIO(base64.b64decode(block["base64"])))
        assert picture.format == "JPEG" and picture.size == (512, 384)
        assert np.abs(mean_colour(picture) - served.colour_of[hit["id"]]).sum() < 30  # the hit's own photo
    # the model's last call was sent the photos: the tool message with its image blocks is in its input
    sent = [m for m in model.seen[-1] if isinstance(m, ToolMessage) and m.tool_call_id == "call-2"]
    assert sent and sum(block["type"] == "image" for block in sent[0].content) == 2
