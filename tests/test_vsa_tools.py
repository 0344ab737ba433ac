"""LangChain's standard tool suites on the vsa tools, plus what they return."""

from __future__ import annotations

import json

import pytest
from langchain_tests.unit_tests import ToolsUnitTests
from PIL import Image

from pictrieve.graphs.vision_search_tools import ask_about_image_tool, ask_gallery_tool, image_search_tool
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


class _TextReader:
    """A text-only chat stand-in (control flow only): refuses pictures, answers from descriptions."""

    def __init__(self):
        self.prompts = []

    def invoke(self, messages):
        from langchain_core.messages import AIMessage

        from pictrieve.tools.chat_models import UnsupportedContentError

        if isinstance(messages[-1].content, list):
            raise UnsupportedContentError("text only")
        self.prompts.append(messages[-1].content)
        return AIMessage("### Reasoning: picture 1 says so\n### Answer: a dog, in picture 1")


class TestAskGalleryTool(ToolsUnitTests):
    @property
    def tool_constructor(self):
        return ask_gallery_tool(_Gallery(), reader=_TextReader())

    @property
    def tool_invoke_params_example(self):
        return {"question": "which photo shows a dog?", "k": 2}


def test_ask_gallery_answers_from_the_best_photos_with_the_visret_reader():
    reader = _TextReader()
    text = ask_gallery_tool(_Gallery(), reader=reader).invoke({"question": "which photo shows a dog?", "k": 2})
    assert text.startswith("a dog, in picture 1") and "Picture 2: /p/1.jpg" in text
    assert "which photo shows a dog?" in reader.prompts[0] and "Picture 2: a dog" in reader.prompts[0]


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
