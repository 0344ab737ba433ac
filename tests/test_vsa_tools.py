"""LangChain's standard tool suites on the vsa tools, plus what they return."""

from __future__ import annotations

import json

import pytest
from langchain_tests.unit_tests import ToolsUnitTests
from PIL import Image

from pictrieve.graphs.vision_search_tools import ask_about_image_tool, image_search_tool
from pictrieve.vectorstore.hits import ImageHit


class _Gallery:
    def search_text(self, query, k=5):
        return [ImageHit(id=f"i{i}", path=f"/p/{i}.jpg", score=1.0 - i / 10, rank=i + 1, captions=["a dog"])
                for i in range(k)]


class _Graph:
    def invoke(self, inputs):
        return {"answer": f"about {inputs['image']}: yes [1]", "sources": [{"number": 1, "title": "T", "url": "u"}]}


class TestImageSearchTool(ToolsUnitTests):
    @property
    def tool_constructor(self):
        return image_search_tool(_Gallery())

    @property
    def tool_invoke_params_example(self):
        return {"query": "a dog", "k": 2}


class TestAskAboutImageTool(ToolsUnitTests):
    @property
    def tool_constructor(self):
        return ask_about_image_tool(_Graph())

    @property
    def tool_invoke_params_example(self):
        return {"image": "photo.jpg", "question": "what is it?"}


def test_image_search_returns_json_hits():
    rows = json.loads(image_search_tool(_Gallery()).invoke({"query": "dog", "k": 3}))
    assert [r["rank"] for r in rows] == [1, 2, 3] and rows[0]["path"] == "/p/0.jpg"


def test_ask_about_image_runs_the_real_graph(tmp_path):
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda
    from test_vsa import _WholeImage, _Words

    path = tmp_path / "x.png"
    Image.new("RGB", (8, 8)).save(path)
    tool = ask_about_image_tool(llm=RunnableLambda(lambda m: AIMessage(content="A brown horse.")), vlm=_Words(),
                                detector=_WholeImage(), search=None)
    text = tool.invoke({"image": str(path), "question": "what animal?"})
    assert text.startswith("A brown horse.") and "found nothing" in text
